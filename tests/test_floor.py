"""The held-out unigram entropy (dpscaling.data.floor) against a hand computation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dpscaling.cli import main
from dpscaling.data.floor import load_floor, unigram_entropy, unigram_floor, write_floor
from dpscaling.data.shards import DatasetMeta, write_meta, write_split
from dpscaling.core.errors import UserError

# Vocabulary of 10: 0..4 are [PAD] [UNK] [CLS] [SEP] [MASK], 5..9 are words.
SPECIAL = (0, 1, 2, 3, 4)
TRAIN = np.array([[2, 5, 5, 6, 3], [2, 5, 7, 1, 3]], dtype=np.int32)  # words: 5 5 6 5 7 ([UNK] not counted)
HELDOUT = np.array([[2, 5, 8, 9, 3], [2, 6, 3, 5, 3]], dtype=np.int32)  # words: 5 8 9 6 5
# Add-one over the 5 words, N = 5: p(5) = 4/10, p(6) = p(7) = 2/10, p(8) = p(9) = 1/10.
EXPECTED = -(2 * math.log(0.4) + math.log(0.1) + math.log(0.1) + math.log(0.2)) / 5


def _packed(tmp_path: Path) -> Path:
    data = tmp_path / "packed"
    write_split(TRAIN, data / "train", shard_rows=1)  # two shards: the floor reads them all
    write_split(HELDOUT, data / "heldout", shard_rows=10)
    write_meta(data, DatasetMeta(seq_len=5, vocab_size=10, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4,
                                 n_train=2, n_heldout=2, tokenizer="hand", vocab_sha256="-"))
    return data


def test_unigram_entropy_matches_the_hand_computation() -> None:
    floor = unigram_entropy(TRAIN, HELDOUT, 10, SPECIAL)
    assert floor.nats == pytest.approx(EXPECTED, rel=1e-12)
    assert (floor.train_tokens, floor.heldout_tokens, floor.support) == (5, 5, 5)


def test_special_tokens_do_not_count() -> None:
    # More [CLS]/[SEP]/[PAD] framing changes nothing: only maskable tokens are targets.
    padded = np.pad(HELDOUT, ((0, 0), (0, 3)), constant_values=0)
    framed = np.pad(TRAIN, ((0, 0), (0, 2)), constant_values=3)
    assert unigram_entropy(framed, padded, 10, SPECIAL).nats == pytest.approx(EXPECTED, rel=1e-12)


def test_floor_of_packed_shards_and_round_trip(tmp_path: Path) -> None:
    floor = unigram_floor(_packed(tmp_path))
    assert floor.nats == pytest.approx(EXPECTED, rel=1e-12)
    write_floor(floor, tmp_path / "floor.json")
    assert load_floor(tmp_path / "floor.json") == floor


def test_cli_prints_the_floor_as_json(tmp_path: Path, capsys) -> None:
    data = _packed(tmp_path)
    assert main(["floor", "--data", str(data), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["nats"] == pytest.approx(EXPECTED, rel=1e-12) and result["heldout_tokens"] == 5


def test_bad_input_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no target tokens"):
        unigram_entropy(TRAIN, np.full((1, 4), 3, dtype=np.int32), 10, SPECIAL)
    with pytest.raises(UserError, match="outside the vocabulary"):
        unigram_entropy(TRAIN + 10, HELDOUT, 10, SPECIAL)
    assert main(["floor", "--data", str(tmp_path / "missing")]) == 2
