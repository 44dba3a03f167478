"""DP fine-tuning end to end on the smoke config (docs/finetune.md): the two domains, public pretraining,
the fine-tuning grid and law, its validation and bundle, and one private_model budget fine-tuned privately
from its pretrained checkpoint (finding:finetune, which also needs the from-scratch grid, is tested on
synthetic laws in tests/test_finetune_findings.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

import dpscaling
from conftest import REPO, run_snakemake
from dpscaling.data.documents import CorpusSpec, documents_of_split, load_documents
from dpscaling.data.floor import unigram_floor
from dpscaling.data.wordpiece import train_wordpiece

CONFIGS = REPO / "tests" / "configs"
FINETUNE = yaml.safe_load((CONFIGS / "smoke-finetune.yaml").read_text())

pytestmark = pytest.mark.slow(minutes=3)


@pytest.fixture(scope="module")
def finetune_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("finetune")
    # Not finding:finetune (its from-scratch grid would double the training; tests/test_finetune_findings.py).
    run_snakemake("data", "finetune_law_bundle", "table_pretraining", "private_model", "--cores", "2", "--configfile", str(CONFIGS / "smoke.yaml"),
                  str(CONFIGS / "smoke-finetune.yaml"), cwd=workdir, timeout=1200)
    return workdir / "results" / "smoke-finetune"


def test_the_vocabulary_sees_only_the_public_train_split_and_the_floor_is_private(finetune_run: Path) -> None:
    data = finetune_run / "data"
    public, private = pd.read_parquet(data / "public" / "documents.parquet"), pd.read_parquet(data / "documents.parquet")
    corpus = REPO / "resources" / "corpus" / "core.txt.xz"
    # each domain holds exactly its sources' documents (the first max_documents of them)
    for frame, names in ((public, FINETUNE["data"]["public_sources"]), (private, FINETUNE["data"]["sources"])):
        expected = load_documents(CorpusSpec(paths=(str(corpus),), sources=tuple(names), max_documents=40))
        assert sorted(frame["text"]) == sorted(expected)
    assert not set(public["text"]) & set(private["text"])
    # the shared vocabulary is the one trained on the public train split, not on any private text
    vocab = (data / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab == train_wordpiece(documents_of_split(public, "train"), 512)
    assert vocab != train_wordpiece(documents_of_split(private, "train"), 512)
    metas = {name: json.loads((path / "meta.json").read_text()) for name, path in
             (("public", data / "public" / "packed" / "seq=64"), ("private", data / "packed" / "seq=64"))}
    assert metas["public"]["vocab_sha256"] == metas["private"]["vocab_sha256"]
    assert metas["private"]["source"]["sources"] == FINETUNE["data"]["sources"]
    assert metas["public"]["source"]["sources"] == FINETUNE["data"]["public_sources"]
    # the floor to beat is the private domain's held-out unigram entropy
    floor = json.loads((data / "unigram_floor.json").read_text())
    assert floor == unigram_floor(data / "packed" / "seq=64").to_dict()
    assert floor != unigram_floor(data / "public" / "packed" / "seq=64").to_dict()


def test_every_model_is_pretrained_publicly_then_fine_tuned_from_its_checkpoint(finetune_run: Path) -> None:
    pretrained = {}
    for path in sorted((finetune_run / "pretrain" / "runs").rglob("metrics.parquet")):
        curve = pd.read_parquet(path)
        assert (curve["noise_batch_ratio"] == 0).all() and curve["clipping"].iloc[0] == "none"
        # it started at the public unigram (output_bias: public_unigram), far below a random start (≈ ln V)
        assert curve["loss"].iloc[-1] < math.log(FINETUNE["data"]["vocab_size"]) - 0.3
        pretrained[curve["model"].iloc[0]] = curve
    assert set(pretrained) == {"BertNano", "BertMicro"}
    tuned = [pd.read_parquet(path) for path in sorted((finetune_run / "finetune" / "runs").rglob("metrics.parquet"))]
    assert len(tuned) == 2 * 3 * 1  # models x sigma-bar x the fine-tuning rates
    for curve in tuned:
        model = curve["model"].iloc[0]
        assert f"pretrain/checkpoints/mech=dpsgd/model={model}/" in curve["init_checkpoint"].iloc[0]
        # pretrained on the other domain, it starts the private one far below a random start (≈ ln V; the
        # pretraining itself started at the public unigram, output_bias: public_unigram)
        assert curve["loss"].iloc[0] < math.log(FINETUNE["data"]["vocab_size"]) - 0.3
        assert set(pretrained[model]["output_bias"]) == {"public_unigram"} and "output_bias" not in curve.columns


def test_the_fine_tuning_law_is_validated_bundled_and_answers_from_a_checkpoint(finetune_run: Path) -> None:
    assert (finetune_run / "finetune" / "validate" / "calibration.json").is_file()
    assert (finetune_run / "finetune" / "validate" / "validation.csv").is_file()
    law = dpscaling.load_law(finetune_run / "finetune" / "law" / "bundle")
    provenance = law.info()["provenance"]
    assert provenance["regime"] == "fine-tuning" and provenance["private_sources"] == ["moby_dick", "jane_austen"]
    assert set(provenance["pretrained"]) == {"BertNano", "BertMicro"}
    answer = law.query(1e10, 16.0, users=1000)
    assert answer.runnable.init_checkpoint == provenance["pretrained"][answer.runnable.model.name]


def test_the_pretraining_table_reports_what_each_model_cost(finetune_run: Path) -> None:
    pretraining = pd.read_csv(finetune_run / "tables" / "table-pretraining.csv")
    assert list(pretraining["Model"]) == ["BertNano", "BertMicro"]
    assert (pretraining["Compute"] == 6.0 * pretraining["Model Size"] * 8 * 64 * 40).all()


def test_a_pretrained_budget_is_fine_tuned_privately_with_the_private_n(finetune_run: Path) -> None:
    (budget,) = [path for path in (finetune_run / "private_model").iterdir() if path.is_dir()]
    assert budget.name.endswith("_pretrained")
    plan = json.loads((budget / "plan.json").read_text())
    curve = pd.read_parquet(budget / "metrics.parquet")
    last = curve.iloc[-1]
    assert plan["budget"]["pretrained"] is True
    assert f"pretrain/checkpoints/mech=dpsgd/model={plan['model']}/" in last["init_checkpoint"]
    assert last["dataset_size"] == 1000 and last["sampler"] == "truncated_poisson" and last["epsilon"] <= 16.0 + 1e-9
    report = pd.read_csv(finetune_run / "finetune" / "private_model" / "table.csv")
    assert len(report) == 1 and report["model"].item() == plan["model"]
    assert not (finetune_run / "private_model" / "table.csv").exists()  # no from-scratch budget here
