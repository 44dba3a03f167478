"""Users in the data (dpscaling.data.users): each train sequence's user, the contributions, the cap k."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, run_snakemake
from dpscaling.data.documents import CorpusSpec
from dpscaling.data.packing import load_vocabulary, make_tokenizer, pack_sequences, tokenize_documents
from dpscaling.data.shards import load_meta, load_split, load_users
from dpscaling.data.stage import pack_documents, prepare_documents
from dpscaling.data.users import (
    UserSpec, cap_examples, heldout_users, subset_of_users, synthetic_contributions, user_keys,
    users_of_contributions)
from dpscaling.core.errors import UserError
from dpscaling.core.streams import Stream

CORPUS = REPO / "resources" / "corpus" / "core.txt.xz"
VOCAB = REPO / "resources" / "vocab" / "wordpiece-core-8192" / "vocab.txt"
SAMPLE = REPO / "resources" / "samples" / "sotu_users.parquet"  # State of the Union addresses, user = president


def test_synthetic_contributions_cover_the_rows_with_the_asked_mean_and_a_heavy_tail() -> None:
    light = synthetic_contributions(200_000, UserSpec("synthetic", mean_examples=8, tail_index=4.0))
    assert light.sum() == 200_000 and light.min() >= 1
    assert light.mean() == pytest.approx(8, rel=0.1)  # 1 + floor(lambda X) is a little under 1 + lambda E[X]
    heavy = synthetic_contributions(200_000, UserSpec("synthetic", mean_examples=8, tail_index=1.5))
    assert heavy.sum() == 200_000 and np.median(heavy) < 8 < heavy.max() / 50  # most users few, some very many
    constant = synthetic_contributions(1003, UserSpec("synthetic", distribution="constant", mean_examples=10))
    assert constant.sum() == 1003 and (constant[:-1] == 10).all() and constant[-1] == 3
    again = synthetic_contributions(200_000, UserSpec("synthetic", mean_examples=8, tail_index=1.5))
    assert np.array_equal(heavy, again)  # seeded
    assert not np.array_equal(heavy[:500], synthetic_contributions(
        200_000, UserSpec("synthetic", mean_examples=8, tail_index=1.5, seed=1))[:500])


def _rows_of(contributions, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Users of ``contributions`` sequences each, every row its own random text (8 tokens)."""
    users = users_of_contributions(contributions)
    return np.random.default_rng(seed).integers(5, 8192, (len(users), 8), dtype=np.int32), users


def _kept_by_user(rows: np.ndarray, users: np.ndarray, kept: np.ndarray) -> dict[bytes, set[bytes]]:
    """Each user's kept rows, the user named by its content (all its rows), not by its id."""
    named = {user: b"".join(row.tobytes() for row in rows[users == user]) for user in np.unique(users)}
    return {named[user]: {row.tobytes() for row in rows[kept][users[kept] == user]} for user in named}


def test_the_cap_keeps_a_uniform_k_of_a_larger_users_rows_and_every_row_of_the_others() -> None:
    rows, users = _rows_of([3, 12, 1, 40, 5])
    kept = cap_examples(rows, users, 5, seed=0)
    assert np.all(np.diff(kept) > 0)  # stream order
    counts = np.bincount(users[kept])
    assert counts.tolist() == [3, 5, 1, 5, 5]
    # the kept rows of the user of 40 are 5 of its own; another seed keeps others; no cap keeps all
    assert set(kept[users[kept] == 3]) <= set(np.flatnonzero(users == 3))
    assert not np.array_equal(kept, cap_examples(rows, users, 5, seed=1))
    assert np.array_equal(cap_examples(rows, users, None, 0), np.arange(len(users)))
    # uniform: over many seeds each of the user's 40 rows is kept about 5/40 of the time
    hits = np.zeros(len(users))
    for seed in range(2000):
        hits[cap_examples(rows, users, 5, seed)] += 1
    np.testing.assert_allclose(hits[users == 3] / 2000, 5 / 40, atol=0.03)


def test_a_users_kept_sequences_depend_on_its_own_rows_alone() -> None:
    """Adding one user (2 sequences) anywhere, which shifts the ids of every user after it, changes no other user's
    kept sequences: each user's subset is drawn by a key of its own rows (so neighbouring raw data stay neighbours
    once capped). Renumbering the users (another order of the same users) keeps each one's subset too."""
    contributions = [3, 12, 1, 40, 5, 9, 30]
    rows, users = _rows_of(contributions)
    before = _kept_by_user(rows, users, cap_examples(rows, users, 5, seed=0))
    extra = np.random.default_rng(99).integers(5, 8192, (2, 8), dtype=np.int32)
    for position in (0, 3, len(contributions)):  # first, between users, last
        at = int(np.sum(contributions[:position]))
        grown_rows = np.concatenate([rows[:at], extra, rows[at:]])
        grown_users = users_of_contributions(contributions[:position] + [2] + contributions[position:])
        after = _kept_by_user(grown_rows, grown_users, cap_examples(grown_rows, grown_users, 5, seed=0))
        assert after.pop(extra.tobytes()) == {row.tobytes() for row in extra}
        assert after == before, position
    order = [6, 2, 0, 5, 1, 4, 3]  # the same users dealt in another order
    shuffled_rows = np.concatenate([rows[users == user] for user in order])
    shuffled_users = users_of_contributions([contributions[user] for user in order])
    assert _kept_by_user(shuffled_rows, shuffled_users, cap_examples(shuffled_rows, shuffled_users, 5, 0)) == before


def test_a_subset_of_users_is_the_smallest_keys_of_their_own_rows() -> None:
    """``train_users``: the N users of smallest key (their own rows, the run's seed), every sequence of each,
    renumbered 0..N-1. Adding a user leaves every other membership alone unless the new user's key is among the N
    smallest, when exactly the member of largest key leaves; no id or user count enters."""
    contributions = list(np.random.default_rng(3).integers(1, 6, 40))
    rows, users = _rows_of(contributions, seed=1)
    kept, renumbered = subset_of_users(rows, users, 12, seed=5)
    chosen = np.unique(users[kept])
    assert len(chosen) == 12 and np.array_equal(np.unique(renumbered), np.arange(12))
    assert kept.sum() == np.isin(users, chosen).sum()  # all of each chosen user's sequences
    keys = user_keys(rows, users, 5, Stream.USER_SUBSET)
    assert keys[chosen].max() < np.delete(keys, chosen).min()  # the 12 smallest keys
    assert not np.array_equal(np.unique(users[subset_of_users(rows, users, 12, seed=6)[0]]), chosen)
    members = set(_kept_by_user(rows[kept], users[kept], np.arange(kept.sum())))
    newcomers = {"outside": None, "inside": None}
    for seed in range(200):  # a 2-sequence user whose key falls outside the 12 smallest, and one inside
        extra = np.random.default_rng([seed]).integers(5, 8192, (2, 8), dtype=np.int32)
        key = user_keys(extra, np.zeros(2, np.int64), 5, Stream.USER_SUBSET)[0]
        name = "inside" if key < keys[chosen].max() else "outside"
        newcomers[name] = extra if newcomers[name] is None else newcomers[name]
    for name, extra in newcomers.items():
        grown_rows = np.concatenate([extra, rows])  # first: every other id shifts by one
        grown_users = users_of_contributions([2] + contributions)
        grown_kept, _ = subset_of_users(grown_rows, grown_users, 12, seed=5)
        grown = set(_kept_by_user(grown_rows[grown_kept], grown_users[grown_kept], np.arange(grown_kept.sum())))
        if name == "outside":
            assert grown == members
        else:  # the newcomer in, the member of largest key out, every other membership as it was
            largest = b"".join(row.tobytes() for row in rows[users == chosen[np.argmax(keys[chosen])]])
            assert grown == (members - {largest}) | {extra.tobytes()}
    with pytest.raises(UserError, match="train.train_users: 41 exceeds the 40 users"):
        subset_of_users(rows, users, 41, seed=5)


@pytest.mark.parametrize("values, key", [({"unit": "people"}, "data.users.unit"),
                                         ({"unit": "synthetic", "tail_index": 1.0}, "data.users.tail_index"),
                                         ({"unit": "synthetic", "distribution": "zipf"}, "data.users.distribution"),
                                         ({"unit": "document", "max_examples": 0}, "data.users.max_examples"),
                                         ({"unit": "column"}, "data.users.column"),
                                         ({"unit": "document", "column": "user"}, "data.users.column")])
def test_a_bad_users_block_names_its_key(values, key) -> None:
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        UserSpec.from_config(values)


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    path = tmp_path_factory.mktemp("users") / "documents.parquet"
    frame = prepare_documents(CorpusSpec(source="core", paths=(str(CORPUS),), max_documents=30), 0.1, 0, path)
    return path, frame


def _assert_each_user_holds_its_own_capped_rows(rows: np.ndarray, users: np.ndarray,
                                                own: list[np.ndarray], cap: int) -> np.ndarray:
    """Each packed user ``u``'s rows are at most ``cap`` of ``own[u]``, the independently packed block of its
    own text; returns each block's length before the cap."""
    for user, block in enumerate(own):
        mine = rows[users == user]
        assert len(mine) == min(len(block), cap)
        assert {row.tobytes() for row in mine} <= {row.tobytes() for row in block}
    return np.array([len(block) for block in own])


def test_document_users_pack_each_document_alone_and_are_capped(documents, tmp_path: Path) -> None:
    path, frame = documents
    spec = UserSpec("document", max_examples=20)
    meta = pack_documents(path, VOCAB, "wordpiece-core-8192", 64, 100, tmp_path, users=spec)
    rows, users = load_split(tmp_path, "train"), load_users(tmp_path)
    assert meta == load_meta(tmp_path) and len(users) == len(rows) == meta.n_train
    # an independent packing, document by document: each user's rows are its document's own, capped
    vocabulary = load_vocabulary(VOCAB)
    ids = tokenize_documents(make_tokenizer(vocabulary), frame.loc[frame.split == "train", "text"])
    own = [pack_sequences([doc], 64, vocabulary.cls_id, vocabulary.sep_id) for doc in ids]
    own = [block for block in own if len(block)]
    assert meta.users["n_users"] == len(own) == len(np.unique(users))
    before = _assert_each_user_holds_its_own_capped_rows(rows, users, own, 20)
    assert meta.users["capped_users"] == int((before > 20).sum()) > 0
    assert meta.users["dropped_sequences"] == int(np.clip(before - 20, 0, None).sum())
    assert meta.users["examples_per_user"] == 20 and meta.users["contributions"]["max"] == before.max()
    # the held-out split has no users and is packed as without them
    plain = pack_documents(path, VOCAB, "wordpiece-core-8192", 64, 100, tmp_path / "plain")
    assert np.array_equal(load_split(tmp_path / "plain", "heldout"), load_split(tmp_path, "heldout"))
    assert "users" not in json.loads((tmp_path / "plain" / "meta.json").read_text())  # meta.json as before
    with pytest.raises(UserError, match="data.users"):
        load_users(tmp_path / "plain")
    assert plain.users == {}


def test_synthetic_users_keep_the_packing_and_deal_its_rows_out_in_order(documents, tmp_path: Path) -> None:
    path, _ = documents
    plain = pack_documents(path, VOCAB, "wordpiece-core-8192", 64, 100, tmp_path / "plain")
    spec = UserSpec("synthetic", mean_examples=6, tail_index=1.5, seed=3)
    meta = pack_documents(path, VOCAB, "wordpiece-core-8192", 64, 100, tmp_path / "users", users=spec)
    rows, users = load_split(tmp_path / "users", "train"), load_users(tmp_path / "users")
    assert np.array_equal(rows, load_split(tmp_path / "plain", "train")) and meta.n_train == plain.n_train
    assert np.all(np.diff(users) >= 0)  # consecutive text per user
    assert np.array_equal(np.bincount(users), synthetic_contributions(plain.n_train, spec))
    assert meta.users["unit"] == "synthetic" and meta.users["tail_index"] == 1.5 and meta.users["max_examples"] is None


@pytest.mark.parametrize("data", [
    "  users: {unit: synthetic, mean_examples: 4.0, max_examples: 10}\n",
    # real users: the shipped sample's president column (a Parquet source, so no public domain of the corpus)
    f"  source: parquet\n  paths: [{SAMPLE}]\n  sources: null\n  public_sources: null\n  tokenizer: bert-base-uncased\n  vocab_size: null\n"
    "  users: {unit: column, column: user, max_examples: 10}\n",
], ids=["synthetic", "column"])
def test_the_data_rule_packs_users_where_the_config_sets_them(tmp_path: Path, data: str) -> None:
    users = tmp_path / "users.yaml"
    users.write_text("data:\n" + data)
    run_snakemake("data", "--cores", "2", "--configfile", str(REPO / "tests" / "configs" / "smoke.yaml"), str(users),
                  cwd=tmp_path)
    packed = tmp_path / "results" / "smoke" / "data" / "packed" / "seq=64"
    meta = json.loads((packed / "meta.json").read_text())
    assert meta["users"]["unit"] == ("column" if "column" in data else "synthetic")
    assert meta["users"]["examples_per_user"] <= 10
    assert np.bincount(load_users(packed)).max() <= 10 and len(load_users(packed)) == meta["n_train"]
    if "column" in data:
        documents = pd.read_parquet(tmp_path / "results" / "smoke" / "data" / "documents.parquet")
        assert (documents.groupby("user")["split"].nunique() == 1).all()
        assert meta["users"]["n_users"] == documents.loc[documents.split == "train", "user"].nunique()


def _sample_spec(path: Path = SAMPLE) -> CorpusSpec:
    return CorpusSpec(source="parquet", paths=(str(path),), user_column="user")


def test_column_users_split_by_user_and_pack_each_users_documents_together(tmp_path: Path) -> None:
    frame = prepare_documents(_sample_spec(), 0.2, 0, tmp_path / "documents.parquet")
    source = pd.read_parquet(SAMPLE)
    assert list(frame["user"]) == list(source["user"]) and list(frame["text"]) == [t.strip() for t in source["text"]]
    sides = frame.groupby("user")["split"].nunique()
    assert (sides == 1).all()  # every user's documents on one side
    ids = np.array(sorted(set(source["user"])))
    held = set(ids[heldout_users(ids, 0.2, 0)])
    assert set(frame.loc[frame.split == "heldout", "user"]) == held and 0 < len(held) < len(ids)

    spec = UserSpec("column", column="user", max_examples=20)
    meta = pack_documents(tmp_path / "documents.parquet", VOCAB, "wordpiece-core-8192", 64, 100, tmp_path / "packed",
                          users=spec)
    rows, users = load_split(tmp_path / "packed", "train"), load_users(tmp_path / "packed")
    # an independent packing, user by user in order of first appearance: each user's documents joined
    vocabulary = load_vocabulary(VOCAB)
    train = frame[frame.split == "train"]
    order = list(dict.fromkeys(train["user"]))
    tokenizer = make_tokenizer(vocabulary)
    own = [pack_sequences(tokenize_documents(tokenizer, train.loc[train.user == name, "text"]), 64, vocabulary.cls_id,
                          vocabulary.sep_id) for name in order]
    assert meta.users["n_users"] == len(order) == len(np.unique(users))
    before = _assert_each_user_holds_its_own_capped_rows(rows, users, own, 20)
    assert meta.users["unit"] == "column" and meta.users["column"] == "user"
    assert meta.users["capped_users"] == int((before > 20).sum()) > 0
    assert meta.users["examples_per_user"] == 20 and meta.users["contributions"]["max"] == before.max()


def test_a_column_users_data_does_not_change_with_another_user(tmp_path: Path) -> None:
    """Removing every document of one user changes no other user's side of the split or its packed rows."""
    source = pd.read_parquet(SAMPLE)
    gone = "franklin_d_roosevelt"
    source[source.user != gone].to_parquet(tmp_path / "without.parquet")
    spec = UserSpec("column", column="user", max_examples=8)
    packed = {}
    for name, path in (("all", SAMPLE), ("without", tmp_path / "without.parquet")):
        frame = prepare_documents(_sample_spec(path), 0.2, 0, tmp_path / f"{name}.parquet")
        pack_documents(tmp_path / f"{name}.parquet", VOCAB, "wordpiece-core-8192", 64, 100, tmp_path / name, users=spec)
        rows, users = load_split(tmp_path / name, "train"), load_users(tmp_path / name)
        names = list(dict.fromkeys(frame.loc[frame.split == "train", "user"]))
        packed[name] = ({user: frame.loc[frame.user == user, "split"].iloc[0] for user in set(frame.user)},
                        {names[u]: rows[users == u].tobytes() for u in np.unique(users)})
    (sides, rows), (sides_without, rows_without) = packed["all"], packed["without"]
    assert gone in sides and gone not in sides_without
    assert {user: side for user, side in sides.items() if user != gone} == sides_without
    assert {user: own for user, own in rows.items() if user != gone} == rows_without


@pytest.mark.parametrize("spec, match", [
    (dict(source="text", paths=("a.txt",), user_column="user"), r"data\.users: unit 'column'.*'parquet'"),
    (dict(source="parquet", paths=(str(SAMPLE),), user_column="author"), r"data\.users\.column: 'author'"),
])
def test_a_user_column_the_source_cannot_give_is_named(spec, match) -> None:
    with pytest.raises(UserError, match=match):
        prepare_documents(CorpusSpec(**spec), 0.2, 0, "/nonexistent/never-written.parquet")


def test_a_document_without_a_user_is_refused(tmp_path: Path) -> None:
    pd.DataFrame({"text": ["one text", "another text"], "user": ["a", None]}).to_parquet(tmp_path / "x.parquet")
    with pytest.raises(UserError, match=r"data\.users\.column: document 1 .* has no user"):
        prepare_documents(_sample_spec(tmp_path / "x.parquet"), 0.5, 0, tmp_path / "documents.parquet")
