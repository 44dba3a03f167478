"""DP fine-tuning's two data domains (docs/finetune.md): a public domain that trains the one shared
vocabulary, and the private domain where the privacy unit, the held-out set and the floor live."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO
from dpscaling.config.blocks import config_yaml, load_config
from dpscaling.config.checks import check_config, corpus_spec, public_corpus_spec
from dpscaling.data.documents import CorpusSpec
from dpscaling.core.errors import UserError
from test_config_schema import validated

CONFIGS = REPO / "tests" / "configs"
SMOKE = yaml.safe_load((CONFIGS / "smoke.yaml").read_text())
FINETUNE = yaml.safe_load((CONFIGS / "smoke-finetune.yaml").read_text())


def _config(finetune=None, **data):
    config = {**SMOKE, "data": {**SMOKE["data"], **FINETUNE["data"], **data}}
    if finetune is not None:
        config["finetune"] = finetune
    return validated(config)


def test_the_two_domains_are_checked_when_the_workflow_loads() -> None:
    public = public_corpus_spec(_config(FINETUNE["finetune"]), REPO)
    assert public.sources == ("wikipedia_sample", "cia_factbook", "sotu")
    private = corpus_spec(_config(), REPO)
    assert public == CorpusSpec(**{**private.__dict__, "sources": public.sources})
    with pytest.raises(UserError, match=r"data.public_sources: \['sotu'\] are also in data.sources"):
        public_corpus_spec(_config(public_sources=["wikipedia_sample", "sotu"], sources=["sotu", "moby_dick"]), REPO)
    with pytest.raises(UserError, match=r"data.public_sources: needs data.source 'core' and data.sources naming"):
        public_corpus_spec(_config(FINETUNE["finetune"], sources=None), REPO)
    with pytest.raises(UserError, match=r"data.sources: \['poetry'\] not among the corpus's sources"):
        public_corpus_spec(_config(public_sources=["poetry"]), REPO)
    # the stages that read the public domain are refused without one, naming the key
    with pytest.raises(UserError, match=r"finetune: pretrains on the public domain; name it in data.public_sources"):
        public_corpus_spec(_config(FINETUNE["finetune"], public_sources=None), REPO)
    # without the block and the sources nothing of it exists: the run's config (and every result) is as before
    plain = validated({**SMOKE, "data": {key: value for key, value in SMOKE["data"].items()
                                         if key not in ("sources", "public_sources")}})
    assert public_corpus_spec(plain, REPO) is None and load_config(plain).finetune is None
    assert "finetune" not in config_yaml(plain)


def test_the_public_sources_moved_out_of_the_finetune_block() -> None:
    old = {**SMOKE, "finetune": {**FINETUNE["finetune"], "public_sources": ["wikipedia_sample"]}}
    with pytest.raises(UserError, match=r"config key 'finetune.public_sources': moved to 'data.public_sources'"):
        validated(old)


def test_pretraining_and_the_fine_tuning_grid() -> None:
    from dpscaling.workflow.grid import finetune_grid, pretrain_grid
    from dpscaling.train.config import job_train_config
    from dpscaling.workflow.params import finetune_training, pretrain_training

    config = _config(FINETUNE["finetune"])
    # every model pretrained once, without noise, at the pretraining batch and rate
    assert [(p.model, p.batch, p.noise_batch_ratio, p.learning_rate) for p in pretrain_grid(config)] == [
        ("BertNano", 8, 0.0, 0.0078125), ("BertMicro", 8, 0.0, 0.0078125)]
    # model x sigma-bar x the fine-tuning rates, at the grid's batch and seed
    grid = finetune_grid(config)
    assert len(grid) == 2 * 3 * 1 and {p.learning_rate for p in grid} == {0.001953125}
    assert {p.noise_batch_ratio for p in grid} == set(SMOKE["training"]["noise_batch_ratios"])
    point = pretrain_grid(config)[0]
    pretrain = job_train_config("BertNano", pretrain_training(config), point.wildcards, 64)
    assert (pretrain.clipping, pretrain.noise_batch_ratio, pretrain.num_steps, pretrain.decay_steps) == ("none", 0.0, 40, 40)
    assert pretrain.init_checkpoint is None and not pretrain.sampler.private
    tuned = job_train_config("BertNano", finetune_training(config, "results/x/pretrain/checkpoints/m"),
                             grid[1].wildcards, 64)
    assert tuned.init_checkpoint == "results/x/pretrain/checkpoints/m" and tuned.clipping == "vmap"
    assert tuned.num_steps == SMOKE["training"]["steps"] and tuned.noise_batch_ratio == grid[1].noise_batch_ratio
    # a model pointed at an existing checkpoint is not pretrained
    given = _config({**FINETUNE["finetune"], "checkpoints": {"BertMicro": "elsewhere/checkpoints/m"}})
    assert [p.model for p in pretrain_grid(given)] == ["BertNano"]
    assert pretrain_grid(_config()) == [] and finetune_grid(_config()) == []
    with pytest.raises(UserError, match=r"finetune.checkpoints: \['GPT2Small'\] are not in models.names"):
        check_config(_config({**FINETUNE["finetune"], "checkpoints": {"GPT2Small": "x"}}))
    with pytest.raises(UserError, match=r"finetune: not with results_csv"):
        check_config({**_config(FINETUNE["finetune"]), "results_csv": "results.csv"})


def test_the_pretraining_table_reports_each_models_public_compute(tmp_path: Path) -> None:
    from dpscaling.report.tables.pretraining import pretraining_table, pretraining_tokens

    paths = []
    for model, n_params in (("BertMicro", 141_824), ("BertNano", 32_864)):
        curve = pd.DataFrame({"step": [20, 40], "loss": [6.1, 5.7], "model": model, "n_params": n_params,
                              "batch_size": 8, "seq_len": 64})
        paths.append(tmp_path / f"{model}.parquet")
        curve.to_parquet(paths[-1])
    table = pretraining_table(paths)
    assert list(table["Model"]) == ["BertNano", "BertMicro"]  # smallest first
    assert table["Compute"].tolist() == [6.0 * 32_864 * 8 * 64 * 40, 6.0 * 141_824 * 8 * 64 * 40]
    assert table["Iterations"].tolist() == [40, 40] and table["Final Loss"].tolist() == [5.7, 5.7]
    assert pretraining_tokens(paths) == {"BertNano": 8 * 64 * 40, "BertMicro": 8 * 64 * 40}
    assert pretraining_tokens([]) == {}


def test_a_pretrained_private_budget_needs_the_fine_tuning_stage_and_a_pretrained_model() -> None:
    from dpscaling.private.model import budgets

    entry = {"epsilon": 16.0, "data_budget": 1000, "compute": 1e10, "pretrained": True}
    with_budget = {"budgets": [entry], "evaluation": SMOKE["private_model"]["evaluation"]}
    with pytest.raises(UserError, match=r"private_model.budgets\[0\].pretrained: needs a finetune block"):
        check_config(validated({**_config(), "private_model": with_budget}))
    fixed = {**entry, "configuration": {"model": "DecoderNano", "batch_size": 8, "iterations": 10}}
    with pytest.raises(UserError, match=r"budgets\[0\].configuration.model: 'DecoderNano' has no pretrained checkpoint"):
        check_config(validated({**_config(FINETUNE["finetune"]), "private_model": {**with_budget, "budgets": [fixed]}}))
    check_config(validated({**_config(FINETUNE["finetune"]), "private_model": with_budget}))
    # its own label (a directory apart from the same budget from scratch), kept through the plan's JSON
    (tuned,), (scratch,) = budgets(with_budget, 1e-8), budgets({"budgets": [{**entry, "pretrained": False}]}, 1e-8)
    assert tuned.label == f"{scratch.label}_pretrained" and "pretrained" not in scratch.to_json()
    assert type(tuned).from_json(tuned.to_json()) == tuned
