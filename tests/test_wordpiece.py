"""The data stage's trained WordPiece vocabulary (data.tokenizer: train)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from dpscaling.data.documents import CorpusSpec
from dpscaling.data.floor import unigram_floor
from dpscaling.data.packing import SPECIAL_TOKENS, load_vocabulary
from dpscaling.data.shards import load_meta
from dpscaling.data.stage import prepare_documents, train_vocabulary
from dpscaling.data.wordpiece import train_wordpiece
from dpscaling.core.errors import UserError
from dpscaling.config.checks import check_config, vocab_path
from dpscaling.config.schema import validate_config

CORPUS = REPO / "resources" / "corpus" / "core.txt.xz"
SLICE = CorpusSpec(source="core", paths=(str(CORPUS),), max_documents=40)
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
MARKER = "qxzvbk"  # a made-up word, frequent enough to become one vocabulary entry if trained on


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("docs") / "documents.parquet"
    prepare_documents(SLICE, heldout_fraction=0.1, seed=0, output=path)
    return path


def with_marker_in(documents: Path, split: str, output: Path) -> Path:
    """``documents`` plus one document of ``split`` that repeats MARKER 2,000 times."""
    frame = pd.read_parquet(documents)
    extra = pd.DataFrame({"doc_id": [frame.doc_id.max() + 1], "split": [split],
                          "text": [" ".join([MARKER] * 2000)]}).astype(frame.dtypes.to_dict())
    pd.concat([frame, extra], ignore_index=True).to_parquet(output, index=False)
    return output


def test_two_builds_give_the_same_file_of_the_asked_size(documents: Path, tmp_path: Path) -> None:
    first = train_vocabulary(documents, 512, tmp_path / "a" / "vocab.txt")
    second = train_vocabulary(documents, 512, tmp_path / "b" / "vocab.txt")
    assert (tmp_path / "a" / "vocab.txt").read_bytes() == (tmp_path / "b" / "vocab.txt").read_bytes()
    assert first.sha256 == second.sha256 and first.size == 512
    tokens = (tmp_path / "a" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert tuple(tokens[:5]) == SPECIAL_TOKENS and len(set(tokens)) == 512
    assert (first.pad_id, first.unk_id, first.cls_id, first.sep_id, first.mask_id) == (0, 1, 2, 3, 4)
    assert any(token.startswith("##") and len(token) > 3 for token in tokens)  # merged pieces, not just chars


def test_trained_on_the_train_split_only(documents: Path, tmp_path: Path) -> None:
    in_heldout = train_vocabulary(with_marker_in(documents, "heldout", tmp_path / "h.parquet"), 512, tmp_path / "h.txt")
    in_train = train_vocabulary(with_marker_in(documents, "train", tmp_path / "t.parquet"), 512, tmp_path / "t.txt")
    assert MARKER in in_train.path.read_text(encoding="utf-8").splitlines()  # the check can fail
    assert not any(MARKER[:4] in token for token in in_heldout.path.read_text(encoding="utf-8").splitlines())


def test_unreachable_size_names_the_key(documents: Path) -> None:
    texts = pd.read_parquet(documents).text.tolist()
    with pytest.raises(UserError, match="data.vocab_size"):
        train_wordpiece(texts, 64)  # below the alphabet
    with pytest.raises(UserError, match="data.vocab_size"):
        train_wordpiece(["a b c a b c"], 300)  # too few pieces to merge
    with pytest.raises(UserError, match="data.vocab_size"):
        train_wordpiece(texts, 0)


def default_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.mark.parametrize(
    "data",
    [{"tokenizer": "train", "vocab_size": 100}, {"tokenizer": "train", "vocab_size": "1k"},
     {"tokenizer": "train", "vocab_size": 10**6}],
)
def test_schema_rejects_bad_sizes_by_name(data: dict) -> None:
    config = default_config()
    config["data"].update(data)
    with pytest.raises(UserError, match="data.vocab_size"):
        validate_config(copy.deepcopy(config), SCHEMA)


@pytest.mark.parametrize(
    "data", [{"tokenizer": "train", "vocab_size": None}, {"tokenizer": "wordpiece-core-8192", "vocab_size": 1024}]
)
def test_vocab_size_goes_with_tokenizer_train(data: dict) -> None:
    config = default_config()
    config["data"].update(data)
    validate_config(config, SCHEMA)
    with pytest.raises(UserError, match="data.vocab_size"):
        check_config(config)


def test_data_target_trains_packs_and_floors_under_the_trained_vocabulary(tmp_path: Path) -> None:
    layer = tmp_path / "trained.yaml"
    layer.write_text(yaml.safe_dump({"run_name": "trained", "data": {"tokenizer": "train", "vocab_size": 512}}))
    smoke = REPO / "tests" / "configs" / "smoke.yaml"
    run_snakemake("data", "--cores", "2", "--configfile", str(smoke), str(layer), cwd=tmp_path)
    data = tmp_path / "results" / "trained" / "data"
    config = {**yaml.safe_load(smoke.read_text()), "run_name": "trained"}
    config = {**config, "data": {**config["data"], "tokenizer": "train", "vocab_size": 512}}
    validate_config(config, SCHEMA)
    assert vocab_path(config) == "results/trained/data/vocab.txt"
    vocabulary = load_vocabulary(data / "vocab.txt")
    meta = load_meta(data / "packed" / "seq=64")
    assert meta.vocab_size == vocabulary.size == 512 and meta.vocab_sha256 == vocabulary.sha256
    assert meta.tokenizer == "train"
    floor = json.loads((data / "unigram_floor.json").read_text())
    assert floor == unigram_floor(data / "packed" / "seq=64").to_dict() and floor["support"] == 512 - len(SPECIAL_TOKENS)


def test_job_sizing_reads_the_trained_size() -> None:
    from dpscaling.workflow.cluster import grid_work, sized_resources
    from dpscaling.config.blocks import load_config

    config = validate_default()
    run = load_config(config)
    assert run.data.model_vocab_size() == 1024
    small = sized_resources(run, grid_work(run, "BertSlim"))
    config["data"]["vocab_size"] = 65536  # a larger vocabulary sizes the job up
    larger = load_config(config)
    assert sized_resources(larger, grid_work(larger, "BertSlim"))["mem_mb"] > small["mem_mb"]


def validate_default() -> dict:
    config = default_config()
    validate_config(config, SCHEMA)
    return config
