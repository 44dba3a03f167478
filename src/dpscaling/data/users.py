"""Who contributed each training sequence: the user identities of user-level DP (not in the paper, which
protects one sequence; Charles et al. 2024, arXiv 2407.07737, and Chua et al. 2024, arXiv 2406.14322, train
and account per user).

``data.users`` names the unit (:class:`UserSpec`):

* ``document`` — each train document is one user. Its tokens are packed apart from every other document's, so
  no sequence holds two users' text (each document's last partial sequence is dropped). The number of
  sequences per user is then the corpus's own, heavy-tailed as documents are.
* ``synthetic`` — the train split is packed as without users, and its sequences, in stream order, are dealt
  out to users whose contributions are drawn from ``distribution``: ``lomax`` (1 + ⌊λ·X⌋, X Pareto-II with
  tail index α, λ = (mean − 1)(α − 1), so the mean is about ``mean_examples`` and, for α ≤ 2, the variance
  infinite, as in real data), or ``constant`` (every user ``mean_examples`` sequences). A user's sequences are
  consecutive text, as one author's writing is. This partition is a simulation that defines who the users
  are; everything after it treats each user as below.
* ``column`` — each document's user is read from ``column`` of a Parquet or Hugging Face source: real user
  ids. A user's train documents, in source order, are packed together and apart from every other user's
  (its last partial sequence is dropped), users in the order they first appear. The held-out split is of whole
  users (:func:`heldout_users`), so the held-out loss is that of people the model never trained on.

**Each user's own.** A user-level guarantee holds for a person only if whatever is done to the data before
training treats each user by that user's data alone: then raw data that differ in one user (added or removed)
become training data that differ in that user only. A user id is a position (the order of documents, of the
deal), and adding one user shifts every later id, so no choice is keyed by an id. A user's *key* is instead
:func:`user_keys`: BLAKE2b, keyed by the seed and the choice's :class:`~dpscaling.core.streams.Stream`, of the
user's own rows in their order (its content). The seed may be public: the guarantee needs each user's choice
to be a function of its own data, not a secret one.

* **The cap k** (``max_examples``, :func:`cap_examples`). A user with more than k sequences keeps k of them,
  drawn uniformly without replacement by a generator seeded with its key, in stream order. The rest are
  dropped from training (never given to another user, which would break the unit). Every user then
  contributes at most k sequences, the bound a user-level accountant needs, and which ones depends only on the
  user's own sequences and ``data.users.seed``: adding or removing another user changes nothing of it.
* **A subset of users** (``train.train_users`` N, :func:`subset_of_users`): the N users of smallest key
  (keyed by the run's seed), with every sequence of each. A user's key is its own, so adding a user leaves
  every other user's membership as it was unless the new key is among the N smallest; then the member of
  largest key leaves to keep N fixed (a fixed N cannot do better: where the data hold exactly N users, one more
  must push one out). The subset of neighbouring data is therefore the same, or differs by one user replaced,
  which the run's add/remove guarantee covers by group privacy at (2ε, (1 + e^ε)δ); for the N users trained
  on, the run's own (ε, δ) holds.

* **The held-out users** (unit ``column``, :func:`heldout_users`): a user is held out when its key, BLAKE2b of
  its own id keyed by ``data.split_seed``, falls below ``data.heldout_fraction`` of the key range: each user's
  side rests on its own id alone.

The held-out split has no users (its sequences are scored, never trained on).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpscaling.core.errors import UserError
from dpscaling.core.streams import Stream

UNITS = ("document", "synthetic", "column")
DISTRIBUTIONS = ("lomax", "constant")


@dataclass(frozen=True)
class UserSpec:
    """The config's ``data.users``: the unit, the contributions of synthetic users, the cap k, the seed."""

    unit: str
    distribution: str = "lomax"
    mean_examples: float = 8.0
    tail_index: float = 1.5
    max_examples: int | None = None
    seed: int = 0
    column: str | None = None  # unit column: the source's column of user ids

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise UserError(f"data.users.unit: must be one of {UNITS}, got {self.unit!r}")
        if self.unit == "column" and not self.column:
            raise UserError("data.users.column: unit 'column' needs the name of the source's column of user ids")
        if self.unit != "column" and self.column is not None:
            raise UserError(f"data.users.column: only used with unit 'column', got unit {self.unit!r}")
        if self.distribution not in DISTRIBUTIONS:
            raise UserError(f"data.users.distribution: must be one of {DISTRIBUTIONS}, got {self.distribution!r}")
        if not self.mean_examples >= 1:
            raise UserError(f"data.users.mean_examples: {self.mean_examples} must be >= 1")
        if self.distribution == "lomax" and not self.tail_index > 1:
            raise UserError(f"data.users.tail_index: {self.tail_index} must be > 1 (a finite mean)")
        if self.max_examples is not None and self.max_examples < 1:
            raise UserError(f"data.users.max_examples: {self.max_examples} must be >= 1 (or null: no cap)")

    @classmethod
    def from_config(cls, values: dict[str, Any] | None) -> UserSpec | None:
        """The spec of a ``data.users`` mapping; None where it is unset (each sequence its own unit)."""
        if not values:
            return None
        return cls(**{key: value for key, value in values.items() if value is not None or key == "max_examples"})


def heldout_users(ids: Sequence[str], heldout_fraction: float, seed: int) -> np.ndarray:
    """Whether each distinct user id is held out (unit ``column``): its key, BLAKE2b of the id's UTF-8 text keyed
    by (``seed``, :attr:`Stream.USER_HELDOUT`), below ``heldout_fraction`` of the 64-bit range. A function of the
    user's own id: adding or removing another user moves no one across the split."""
    secret = np.array([seed, int(Stream.USER_HELDOUT)], "<i8").tobytes()
    keys = np.array([int.from_bytes(hashlib.blake2b(str(user).encode("utf-8"), digest_size=8, key=secret).digest(),
                                    "little") for user in ids], np.float64)
    return keys < heldout_fraction * 2.0**64


def synthetic_contributions(n_rows: int, spec: UserSpec) -> np.ndarray:
    """Sequences per synthetic user, drawn until they cover ``n_rows`` (the last user takes the remainder)."""
    rng = np.random.default_rng([spec.seed, n_rows])
    counts: list[np.ndarray] = []
    covered = 0
    while covered < n_rows:
        draw = max(64, math.ceil(2 * (n_rows - covered) / spec.mean_examples))
        if spec.distribution == "constant":
            block = np.full(draw, round(spec.mean_examples), np.int64)
        else:
            scale = (spec.mean_examples - 1) * (spec.tail_index - 1)
            block = 1 + np.floor(scale * rng.pareto(spec.tail_index, draw)).astype(np.int64)
        counts.append(block)
        covered += int(block.sum())
    contributions = np.concatenate(counts)
    ends = np.cumsum(contributions)
    last = int(np.searchsorted(ends, n_rows))
    contributions = contributions[: last + 1].copy()
    contributions[-1] -= int(ends[last]) - n_rows
    return contributions


def users_of_contributions(contributions: Sequence[int]) -> np.ndarray:
    """Each row's user: ``contributions[u]`` consecutive rows per user u."""
    return np.repeat(np.arange(len(contributions), dtype=np.int32), np.asarray(contributions, np.int64))


def user_keys(rows: np.ndarray, users: np.ndarray, seed: int, stream: Stream) -> np.ndarray:
    """Each user id's key (``uint64``, indexed by id 0..max; an id without rows gets the key of nothing): BLAKE2b
    keyed by (``seed``, ``stream``) of the user's own rows, in their order, as little-endian int64 tokens. A
    function of the user's content, never of its id or of any other user (module docstring)."""
    rows, users = np.asarray(rows), np.asarray(users, np.int64)
    if len(rows) != len(users):
        raise ValueError(f"{len(rows)} rows but {len(users)} users")
    secret = np.array([seed, int(stream)], "<i8").tobytes()
    order = np.argsort(users, kind="stable")  # each user's rows together, in their order
    counts = np.bincount(users, minlength=int(users.max()) + 1 if len(users) else 0)
    ends = np.cumsum(counts)
    keys = np.empty(len(counts), np.uint64)
    for user, (end, count) in enumerate(zip(ends, counts)):
        own = rows[order[end - count:end]].astype("<i8", copy=False)
        digest = hashlib.blake2b(own.tobytes(), digest_size=8, key=secret).digest()
        keys[user] = int.from_bytes(digest, "little")
    return keys


def cap_examples(rows: np.ndarray, users: np.ndarray, max_examples: int | None, seed: int) -> np.ndarray:
    """Indices of the rows kept (in order): every row of a user with at most ``max_examples`` rows, a uniform
    ``max_examples`` of a larger user's, drawn by a generator seeded with its key (:func:`user_keys`): which
    rows a user keeps depends on its own rows and ``seed`` alone."""
    users = np.asarray(users, np.int64)
    if max_examples is None:
        return np.arange(len(users))
    counts = np.bincount(users) if len(users) else np.zeros(0, np.int64)
    larger = np.flatnonzero(counts > max_examples)
    if not len(larger):
        return np.arange(len(users))
    capped = np.isin(users, larger)
    keys = user_keys(rows[capped], users[capped], seed, Stream.USER_CAP)
    keep = ~capped
    order = np.argsort(users, kind="stable")  # each user's rows together, in stream order
    ends = np.cumsum(counts)
    for user in larger:
        own = order[ends[user] - counts[user]:ends[user]]
        picks = np.random.default_rng(int(keys[user])).choice(len(own), max_examples, replace=False)
        keep[own[picks]] = True
    return np.flatnonzero(keep)


def subset_of_users(rows: np.ndarray, users: np.ndarray, count: int | None,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A training subset of ``count`` users (None: all of them): the ``count`` users of smallest key
    (:func:`user_keys` of their rows, keyed by ``seed``; ties, identical users, by id), so a user's membership
    rests on its own rows and on how many keys fall below its own, never on an id or on how many users exist.
    Returns the rows kept (a mask: every sequence of each chosen user) and their users renumbered 0..N−1 in the
    order of their ids. One subset for the run and its plan."""
    users = np.asarray(users)
    if count is None:
        return np.ones(len(users), bool), users
    present = np.unique(users)
    if count > len(present):
        raise UserError(f"train.train_users: {count:,} exceeds the {len(present):,} users of the data")
    keys = user_keys(rows, users, seed, Stream.USER_SUBSET)[present]
    chosen = np.sort(present[np.lexsort((present, keys))[:count]])
    kept = np.isin(users, chosen)
    return kept, np.searchsorted(chosen, users[kept]).astype(users.dtype)


def contribution_summary(users: np.ndarray) -> dict[str, float]:
    """Users and their sequences: count, mean, median, 90th and 99th percentile, max."""
    counts = np.bincount(np.asarray(users, np.int64))
    counts = counts[counts > 0]
    return {"users": int(len(counts)), "mean": float(counts.mean()), "median": float(np.median(counts)),
            "p90": float(np.percentile(counts, 90)), "p99": float(np.percentile(counts, 99)),
            "max": int(counts.max())}


def users_record(spec: UserSpec, before: np.ndarray, after: np.ndarray) -> dict[str, Any]:
    """What the packed data's ``meta.json`` says of its users: the spec, the contributions before and after the
    cap, and k, the most sequences any user now contributes (what a user-level accountant reads)."""
    counts = np.bincount(np.asarray(before, np.int64))
    k = spec.max_examples
    return {"unit": spec.unit, "distribution": spec.distribution if spec.unit == "synthetic" else None,
            "mean_examples": spec.mean_examples if spec.unit == "synthetic" else None,
            "tail_index": spec.tail_index if spec.unit == "synthetic" and spec.distribution == "lomax" else None,
            **({"column": spec.column} if spec.unit == "column" else {}),
            "max_examples": k, "seed": spec.seed, "n_users": int(len(np.unique(after))),
            "examples_per_user": int(np.bincount(np.asarray(after, np.int64)).max()),
            "capped_users": int((counts > k).sum()) if k is not None else 0,
            "dropped_sequences": int(len(before) - len(after)),
            "contributions": contribution_summary(before), "contributions_capped": contribution_summary(after)}
