"""The floor to beat: held-out unigram entropy under the run's tokenizer (docs/data.md).

A masked-LM that has learned nothing about context can still predict each masked token
from how often it occurs. The cross-entropy such a context-free predictor reaches is the
first number a trained model must beat before its loss says anything about language
modelling (the paper's models are far below it; the paper states no floor, it is a
sanity check of a reproduction, not part of the method).

:func:`unigram_entropy` estimates the predictor from the training split with add-one
(Laplace) smoothing and scores the held-out split:

    p(v) = (count_train(v) + 1) / (N_train + V),    H = -(1 / N_held) Σ_t log p(t)

in nats, over the held-out tokens t.

**Which tokens are counted** is the training objective's (:mod:`dpscaling.train.objectives`): the
floor of a family is the floor of what it predicts (:data:`TARGETS`).

* ``masked_lm`` (BERT): the masked-LM targets (:func:`dpscaling.train.mlm.mask_tokens`): masked positions are drawn among a sequence's
non-special tokens, so ``[PAD] [UNK] [CLS] [SEP] [MASK]`` (``DatasetMeta.special_ids``)
are never a target — [CLS]/[SEP] are the packing's frame and document boundaries, packed
sequences have no padding, and [UNK] is excluded from the candidates. Those ids are left
out of both counts and out of the support: V is the number of non-special vocabulary
entries, the tokens a target can be.
* ``causal_lm`` (decoders): every next-token target, positions 2…S of each packed sequence: the
  text's tokens, [UNK] and the [SEP] that ends each document. [PAD], [CLS] and [MASK] are never a
  target and are left out of the support.

Every counted token weighs the same (a token average); training's loss is a mean over sequences
of per-sequence means, which differs only through the few sequences with fewer targets.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from dpscaling.data.shards import DatasetMeta, load_meta, load_split
from dpscaling.core.errors import UserError
from dpscaling.core.io import write_json_atomic

FLOOR_FILE = "unigram_floor.json"


@dataclass(frozen=True)
class UnigramFloor:
    """Held-out unigram cross-entropy and what it was computed from."""

    nats: float  # mean -log p(t) over the counted held-out tokens
    train_tokens: int  # counted tokens (targets) of the training split
    heldout_tokens: int  # counted tokens (targets) of the held-out split
    support: int  # V: vocabulary entries a target can be, each given one pseudo-count
    smoothing: str = "add-one"
    objective: str = "masked_lm"  # whose targets were counted (dpscaling.train.objectives)

    def to_dict(self) -> dict:
        return asdict(self)


def _masked_lm_targets(rows: np.ndarray, meta: DatasetMeta) -> np.ndarray:
    return np.asarray(rows).ravel()


def _causal_lm_targets(rows: np.ndarray, meta: DatasetMeta) -> np.ndarray:
    return np.asarray(rows)[:, 1:].ravel()


# objective → (its target tokens of (rows, seq) packed sequences, the ids that are never a target)
TARGETS = {
    "masked_lm": (_masked_lm_targets, lambda meta: meta.special_ids),
    "causal_lm": (_causal_lm_targets, lambda meta: (meta.pad_id, meta.cls_id, meta.mask_id)),
}


def objective_targets(objective: str):
    """``objective``'s (targets of packed rows, ids that are never a target) from :data:`TARGETS`, refused by
    name if unknown."""
    if objective not in TARGETS:
        raise UserError(f"objective: {objective!r} is not one of {sorted(TARGETS)}")
    return TARGETS[objective]


def never_target_mask(vocab_size: int, never) -> np.ndarray:
    """A boolean mask over the vocabulary, True at the ids in ``never`` (outside the support)."""
    excluded = np.zeros(vocab_size, dtype=bool)
    excluded[list(never)] = True
    return excluded


def add_one_log_counts(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """log(count(v) + 1) of the ids ``ids`` for every v of the vocabulary (add-one smoothing's numerator)."""
    return np.log(np.bincount(ids, minlength=vocab_size).astype(np.float64) + 1.0)


def unigram_entropy(train: np.ndarray, heldout: np.ndarray, vocab_size: int, never: tuple[int, ...],
                    objective: str = "masked_lm") -> UnigramFloor:
    """Cross-entropy (nats) of ``heldout``'s target tokens under add-one-smoothed unigram frequencies of
    ``train``'s (token ids in ``[0, vocab_size)``); ids in ``never`` are no target and no part of the support."""
    excluded = never_target_mask(vocab_size, never)
    train_ids = np.asarray(train).ravel()
    held_ids = np.asarray(heldout).ravel()
    for name, ids in (("train", train_ids), ("heldout", held_ids)):
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            raise UserError(f"data: the {name} split has token ids outside the vocabulary of {vocab_size}")
    train_ids = train_ids[~excluded[train_ids]]
    held_ids = held_ids[~excluded[held_ids]]
    if held_ids.size == 0:
        raise UserError("data: the held-out split has no target tokens")
    support = int(vocab_size - excluded.sum())
    log_p = add_one_log_counts(train_ids, vocab_size) - np.log(train_ids.size + support)
    nats = float(-log_p[held_ids].mean())
    return UnigramFloor(nats, int(train_ids.size), int(held_ids.size), support, objective=objective)


def unigram_floor(data_dir: str | Path, objective: str = "masked_lm") -> UnigramFloor:
    """:func:`unigram_entropy` of a packed data directory's ``objective`` targets (:mod:`dpscaling.data.shards`)."""
    targets, never = objective_targets(objective)
    meta = load_meta(data_dir)
    return unigram_entropy(targets(load_split(data_dir, "train"), meta), targets(load_split(data_dir, "heldout"), meta),
                           meta.vocab_size, tuple(never(meta)), objective)


def write_floor(floor: UnigramFloor, path: str | Path) -> None:
    write_json_atomic(Path(path), floor.to_dict())


def load_floor(path: str | Path) -> UnigramFloor:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"data: {str(path)!r} is missing; run the data stage first")
    return UnigramFloor(**json.loads(path.read_text(encoding="utf-8")))
