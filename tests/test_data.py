"""The data stage on a slice of the real corpus."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from dpscaling.data.documents import (
    CorpusSpec, load_documents, read_blank_line_documents, source_of_documents, split_documents)
from dpscaling.data.floor import unigram_floor
from dpscaling.data.packing import load_vocabulary, make_tokenizer, pack_sequences
from dpscaling.data.shards import load_meta, load_split
from dpscaling.data.stage import pack_documents, prepare_documents
from dpscaling.core.errors import UserError

CORPUS = REPO / "resources" / "corpus" / "core.txt.xz"
VOCABS = {
    "bert-base-uncased": REPO / "resources" / "vocab" / "bert-base-uncased" / "vocab.txt",
    "wordpiece-core-8192": REPO / "resources" / "vocab" / "wordpiece-core-8192" / "vocab.txt",
}
SLICE = CorpusSpec(source="core", paths=(str(CORPUS),), max_documents=30)


@pytest.fixture(scope="module")
def documents() -> list[str]:
    return load_documents(SLICE)


@pytest.mark.parametrize("name", sorted(VOCABS))
def test_tokenizer_round_trip(name: str, documents: list[str]) -> None:
    tokenizer = make_tokenizer(load_vocabulary(VOCABS[name]))
    paragraph = next(p for d in documents for p in d.split("\n") if len(p.split()) > 20)
    ids = tokenizer.encode(paragraph, add_special_tokens=False).ids
    decoded = tokenizer.decode(ids)
    # BERT-uncased: lower-cased, accents stripped, punctuation split off; decoding
    # joins word pieces back, so comparing without spaces checks every character.
    normalised = tokenizer.normalizer.normalize_str(paragraph)
    assert decoded.replace(" ", "") == normalised.replace(" ", "")
    unknown = load_vocabulary(VOCABS[name]).unk_id
    assert sum(i == unknown for i in ids) <= len(ids) // 100  # real English is covered


def test_bert_vocab_has_the_paper_size() -> None:
    vocabulary = load_vocabulary(VOCABS["bert-base-uncased"])
    assert vocabulary.size == 30522
    assert (vocabulary.pad_id, vocabulary.unk_id, vocabulary.cls_id, vocabulary.sep_id, vocabulary.mask_id) == (
        0,
        100,
        101,
        102,
        103,
    )


def test_documents_are_blank_line_separated(tmp_path: Path) -> None:
    path = tmp_path / "two.txt"
    path.write_text("first para\nsecond para\n\n\nother doc\n")
    assert list(read_blank_line_documents(path)) == ["first para\nsecond para", "other doc"]


# --- a source that cannot be read fails with a UserError naming the config key and the file ---


def _binary(path: Path) -> Path:
    path.write_bytes(b"document one\n\n" + bytes(range(128, 256)) * 8 + b"\nmore\n")
    return path


def _documents_error(spec: CorpusSpec) -> str:
    with pytest.raises(UserError) as caught:
        load_documents(spec)
    return str(caught.value)


def test_undecodable_text_names_data_paths_and_the_file(tmp_path: Path) -> None:
    path = _binary(tmp_path / "corpus.txt")
    text = _documents_error(CorpusSpec(source="text", paths=(str(path),)))
    assert text.startswith(f"data.paths: {str(path)!r} is not UTF-8 text (byte 0x80: invalid start byte)")


def test_damaged_compressed_text_names_data_paths_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt.xz"
    path.write_bytes(CORPUS.read_bytes()[:2000])  # truncated .xz
    text = _documents_error(CorpusSpec(source="text", paths=(str(path),)))
    assert text.startswith(f"data.paths: {str(path)!r} cannot be read as .xz text (EOFError")


def test_unreadable_parquet_names_data_paths_and_the_file(tmp_path: Path) -> None:
    not_parquet = _binary(tmp_path / "corpus.parquet")
    text = _documents_error(CorpusSpec(source="parquet", paths=(str(not_parquet),)))
    assert text.startswith(f"data.paths: {str(not_parquet)!r} is not a readable Parquet file")
    good = tmp_path / "good.parquet"
    pd.DataFrame({"text": ["one doc", "another doc"] * 50}).to_parquet(good)
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(good.read_bytes()[:-40])
    text = _documents_error(CorpusSpec(source="parquet", paths=(str(good), str(truncated))))
    assert text.startswith(f"data.paths: {str(truncated)!r} is not a readable Parquet file")


@pytest.mark.parametrize("frame, fragment", [
    (pd.DataFrame({"body": ["a", "b"]}), "is not a column of"),
    (pd.DataFrame({"text": [1, 2]}), "that holds int64, not text"),
])
def test_parquet_without_a_text_column_names_data_text_column_and_the_file(tmp_path, frame, fragment) -> None:
    path = tmp_path / "corpus.parquet"
    frame.to_parquet(path)
    text = _documents_error(CorpusSpec(source="parquet", paths=(str(path),)))
    assert text.startswith("data.text_column: 'text'") and str(path) in text and fragment in text


class _Split(list):
    """What ``datasets.load_dataset(..., split=...)`` returns: iterable rows with ``column_names``."""

    column_names = ["text"]


@pytest.mark.parametrize("rows, key", [([], "data.hf_split"), ([{"text": "  "}], "data.hf_split")])
def test_empty_huggingface_split_names_the_split(monkeypatch, rows, key) -> None:
    # The optional `datasets` package is not installed here (and needs the network): a stand-in
    # with its load_dataset signature returns an empty split.
    fake = type(sys)("datasets")
    fake.load_dataset = lambda name, config, split: _Split(rows)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    spec = CorpusSpec(source="huggingface", hf_dataset="user/corpus", hf_split="validation")
    text = _documents_error(spec)
    assert text.startswith(f"{key}: dataset 'user/corpus' (config None, split 'validation') has no non-empty")


def test_split_is_disjoint_deterministic_and_covers_every_document(documents: list[str]) -> None:
    frame = split_documents(documents, heldout_fraction=0.2, seed=7)
    again = split_documents(documents, heldout_fraction=0.2, seed=7)
    pd.testing.assert_frame_equal(frame, again)
    train = set(frame.loc[frame.split == "train", "doc_id"])
    heldout = set(frame.loc[frame.split == "heldout", "doc_id"])
    assert not train & heldout
    assert train | heldout == set(range(len(documents)))
    assert len(heldout) == 6
    other = split_documents(documents, heldout_fraction=0.2, seed=8)
    assert set(other.loc[other.split == "heldout", "doc_id"]) != heldout


def test_pack_sequences_layout() -> None:
    docs = [np.arange(10, 20, dtype=np.int32), np.arange(30, 35, dtype=np.int32)]
    rows = pack_sequences(docs, seq_len=8, cls_id=2, sep_id=3)
    # stream: 10..19, SEP, 30..34 = 16 tokens -> 2 rows of 6 body tokens, 4 dropped
    assert rows.shape == (2, 8)
    assert rows[:, 0].tolist() == [2, 2] and rows[:, -1].tolist() == [3, 3]
    assert rows[0, 1:-1].tolist() == [10, 11, 12, 13, 14, 15]
    assert rows[1, 1:-1].tolist() == [16, 17, 18, 19, 3, 30]


def test_stage_end_to_end_on_a_slice(tmp_path: Path) -> None:
    frame = prepare_documents(SLICE, heldout_fraction=0.1, seed=0, output=tmp_path / "documents.parquet")
    meta = pack_documents(
        tmp_path / "documents.parquet",
        VOCABS["wordpiece-core-8192"],
        "wordpiece-core-8192",
        seq_len=64,
        shard_rows=100,
        output_dir=tmp_path / "packed",
    )
    assert meta == load_meta(tmp_path / "packed")
    train, heldout = load_split(tmp_path / "packed", "train"), load_split(tmp_path / "packed", "heldout")
    assert train.shape == (meta.n_train, 64) and heldout.shape == (meta.n_heldout, 64)
    assert train.dtype == np.int32
    assert len(list((tmp_path / "packed" / "train").glob("part-*.parquet"))) == -(-meta.n_train // 100)
    assert (train[:, 0] == meta.cls_id).all() and (train[:, -1] == meta.sep_id).all()
    assert 0 <= train.min() and train.max() < meta.vocab_size
    # split disjointness at the sequence level: no held-out row appears in train
    train_rows = {row.tobytes() for row in train}
    assert not any(row.tobytes() in train_rows for row in heldout)
    # the tokens are the documents' own: the first train row decodes to text of a train document
    tokenizer = make_tokenizer(load_vocabulary(VOCABS["wordpiece-core-8192"]))
    first_words = tokenizer.decode(train[0, 1:9].tolist()).split()[:3]
    train_text = " ".join(frame.loc[frame.split == "train", "text"]).lower()
    assert all(word.replace("##", "") in train_text for word in first_words)


def test_too_long_sequences_fail_clearly(tmp_path: Path) -> None:
    tiny = CorpusSpec(source="core", paths=(str(CORPUS),), max_documents=2)
    prepare_documents(tiny, heldout_fraction=0.5, seed=0, output=tmp_path / "documents.parquet")
    with pytest.raises(UserError, match="data.seq_len"):
        pack_documents(tmp_path / "documents.parquet", VOCABS["wordpiece-core-8192"], "x", 10**7, 10, tmp_path / "p")


def test_data_target_through_snakemake(tmp_path: Path) -> None:
    run_snakemake("data", "--cores", "2", "--configfile", str(REPO / "tests" / "configs" / "smoke.yaml"), cwd=tmp_path)
    packed = tmp_path / "results" / "smoke" / "data" / "packed" / "seq=64"  # one set of shards per length
    meta = json.loads((packed / "meta.json").read_text())
    vocab_size = yaml.safe_load((REPO / "tests" / "configs" / "smoke.yaml").read_text())["data"]["vocab_size"]
    assert meta["seq_len"] == 64 and meta["vocab_size"] == vocab_size  # trained on the public domain
    assert meta["source"]["max_documents"] == 40
    assert load_split(packed, "train").shape == (meta["n_train"], 64)
    assert (tmp_path / "results" / "smoke" / "logs" / "data" / "pack_sequences" / "seq=64.log").read_text().strip()
    # the floor to beat is a data-stage output, computed from these shards
    floor = json.loads((tmp_path / "results" / "smoke" / "data" / "unigram_floor.json").read_text())
    assert floor == unigram_floor(packed).to_dict() and 0 < floor["nats"] < np.log(vocab_size)
    # a second run has nothing to do
    rerun = run_snakemake("data", "--cores", "2", "--configfile", str(REPO / "tests" / "configs" / "smoke.yaml"), cwd=tmp_path)
    assert "Nothing to be done" in rerun.stdout + rerun.stderr


def test_sources_keep_the_documents_of_the_named_sources_of_the_vendored_corpus() -> None:
    corpus = CORPUS
    stats = json.loads((corpus.parent / "stats.json").read_text())
    counts = {entry["source"]: entry["docs"] for entry in stats["sources"]}
    fiction = load_documents(CorpusSpec(paths=(str(corpus),), sources=("moby_dick", "jane_austen")))
    assert len(fiction) == counts["moby_dick"] + counts["jane_austen"]
    everything = load_documents(CorpusSpec(paths=(str(corpus),)))
    first = counts["wikipedia_sample"] + counts["cia_factbook"] + counts["sotu"]
    assert fiction[0] == everything[first] and fiction[-1] == everything[-1]
    assert "whale" in fiction[0].lower() or "moby" in fiction[0].lower()
    owner = source_of_documents(corpus, ("cia_factbook",))
    assert min(owner) == counts["wikipedia_sample"] and len(owner) == counts["cia_factbook"]
    with pytest.raises(UserError, match=r"data\.sources: \['poetry'\] not among the corpus's sources \['wikipedia"):
        load_documents(CorpusSpec(paths=(str(corpus),), sources=("poetry",)))
    with pytest.raises(UserError, match=r"data\.sources: only used with data\.source 'core'"):
        CorpusSpec(source="text", paths=("x.txt",), sources=("sotu",))


def test_the_spec_record_leaves_sources_and_the_user_column_out_when_unset() -> None:
    spec = CorpusSpec(paths=("a.txt.xz",))
    assert spec.record() == {key: value for key, value in asdict(spec).items() if key not in ("sources", "user_column")}
    chosen = CorpusSpec(paths=("a.txt.xz",), sources=("sotu",))
    assert chosen.record()["sources"] == ("sotu",)
    assert CorpusSpec.from_record(json.loads(json.dumps(chosen.record()))) == chosen
    assert CorpusSpec.from_record(spec.record()) == spec
    users = CorpusSpec(source="parquet", paths=("a.parquet",), user_column="author")
    assert users.record()["user_column"] == "author" and CorpusSpec.from_record(users.record()) == users
