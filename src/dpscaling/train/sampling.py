"""Which examples form each step's batch: the study's shuffled batches, or truncated Poisson
sampling at a static shape for private training (paper §3.1 decouples accounting from the
physical batch; private training samples for real, docs/private-training.md). Each sampler of the
registry (:mod:`dpscaling.privacy.samplers`) names its step-batch source here.

``shuffle`` (the study mode of the paper's grid, :class:`ShuffledStepBatches`) is
:class:`dpscaling.train.data.BatchSampler`:
per-epoch permutations, batches never straddle epochs, the epoch's remainder is dropped. An
example therefore takes part in up to ⌈T / ⌊N/B⌋⌉ steps
(:func:`dpscaling.privacy.samplers.shuffle_max_participations`),
which can exceed ⌈q·T⌉ (N = 1000, B = 300, T = 10: 4 against 3); the matched accountant
(:mod:`dpscaling.accounting.matched`) uses this true maximum.

``cyclic`` (:class:`CyclicStepBatches`) is the same with one permutation for every epoch: participations
exactly ⌊N/B⌋ steps apart, the fixed batches a correlated mechanism's deterministic accounting needs.

``truncated_poisson`` (:class:`TruncatedPoissonStepBatches`) is jax-privacy's ``CyclicPoissonSampling`` (cycle length 1, so every example is
eligible at every step; ``PartitionType.INDEPENDENT``, the partition compatible with add/remove
adjacency) with ``truncated_batch_size`` = the physical batch L (chosen by its privacy price,
:mod:`dpscaling.accounting.truncation`): each example joins a step's
batch independently with probability q = B/N, a batch above L keeps a uniform subset of L, and
every batch is padded to exactly L with index −1 (jax-privacy's ``split_and_pad_global_batch``).
Padding examples are a row of [PAD] tokens (never derived from data) with weight 0, so their
clipped gradient is exactly zero; the clipped sum is divided by the expected batch size B
(:func:`dpscaling.dp.clipped_mean_grad`'s ``normaliser``). Each step's batch is drawn from its
own generator seeded by (secret, step), so a resumed run draws the batches of an uninterrupted
one; the secret comes from the operating system (:func:`secret_key`) and lives only in the
checkpoint, since which examples were sampled is itself private.
"""

from __future__ import annotations

import secrets

import numpy as np

from dpscaling.core.errors import UserError
from dpscaling.core.streams import Stream
from dpscaling.dp.per_example import real_examples_first
from dpscaling.train.data import BatchSampler

PADDING_INDEX = -1


def secret_key() -> np.ndarray:
    """A fresh 64-bit threefry key (``uint32[2]``, the layout of ``jax.random.PRNGKey``) from the
    operating system's entropy; never derived from the configuration."""
    return np.frombuffer(secrets.token_bytes(8), dtype=np.uint32).copy()


class PoissonBatches:
    """Padded index arrays of truncated Poisson batches: ``indices(step)`` has length L, the real
    indices then ``PADDING_INDEX``, laid out for microbatches of ``microbatch_size``
    (:func:`dpscaling.dp.per_example.real_examples_first`): real examples fill the leading microbatches,
    padding whole trailing ones, which the step skips (None: one microbatch, real indices first).

    With ``cycle_length`` b > 1 (DP-BandMF's cyclic Poisson sampling) the examples are split once into b
    groups of ⌊N/b⌋ (jax-privacy's ``EQUAL_SPLIT``; N mod b examples are never sampled) and step t samples
    group t mod b at rate B/⌊N/b⌋, so an example joins at most ⌈T/b⌉ steps, b apart. The partition and
    every batch come from one generator seeded by the secret, replayed up to the step on resume; with b = 1
    each step has its own generator (seeded by (secret, step)), as before cyclic sampling existed.
    """

    def __init__(
        self,
        n_rows: int,
        expected_batch_size: int,
        truncated_batch_size: int,
        key: np.ndarray,
        cycle_length: int = 1,
        microbatch_size: int | None = None,
    ):
        if expected_batch_size > n_rows // cycle_length:
            raise UserError(
                f"train.batch_size: expected batch {expected_batch_size} exceeds the "
                f"{n_rows // cycle_length} training sequences of one of {cycle_length} groups"
                if cycle_length > 1 else
                f"train.batch_size: expected batch {expected_batch_size} exceeds the "
                f"{n_rows} training sequences"
            )
        self.n_rows = n_rows
        self.cycle_length = cycle_length
        self.truncated_batch_size = truncated_batch_size
        self.microbatch_size = microbatch_size
        self.sampling_probability = expected_batch_size / (n_rows // cycle_length)
        self._seed = [int(w) for w in np.asarray(key, dtype=np.uint32).ravel()]
        # Imported here: jax-privacy loads its accountants with it, a second of every study job's start-up.
        from jax_privacy.batch_selection import CyclicPoissonSampling, PartitionType

        self._strategy = CyclicPoissonSampling(
            sampling_prob=self.sampling_probability,
            iterations=1 if cycle_length == 1 else np.iinfo(np.int64).max,
            truncated_batch_size=truncated_batch_size,
            cycle_length=cycle_length,
            # b = 1: no partition; b > 1: exact group sizes, which the truncated BandMF event needs
            # (jax-privacy: compatible with zero-out adjacency, docs/mechanisms.md).
            partition_type=PartitionType.INDEPENDENT if cycle_length == 1 else PartitionType.EQUAL_SPLIT,
        )
        self._stream = None  # (next step, iterator) of the cyclic generator

    def indices(self, step: int) -> np.ndarray:
        from jax_privacy.batch_selection import split_and_pad_global_batch

        (padded,) = split_and_pad_global_batch(
            self._batch(step).astype(np.int64), minibatch_size=self.truncated_batch_size
        )
        return real_examples_first(padded, self.microbatch_size)

    def _batch(self, step: int) -> np.ndarray:
        if self.cycle_length == 1:
            rng = np.random.default_rng([*self._seed, Stream.DATA, step])
            (batch,) = self._strategy.batch_iterator(self.n_rows, rng=rng)
            return batch
        if self._stream is None or self._stream[0] > step:
            rng = np.random.default_rng([*self._seed, Stream.DATA])
            self._stream = (0, self._strategy.batch_iterator(self.n_rows, rng=rng))
        position, batches = self._stream
        for _ in range(step - position):
            next(batches)
        self._stream = (step + 1, batches)
        return next(batches)


class UserExamples:
    """Each selected user's ``per_user`` sequences for a step: a uniform ``per_user`` of its own without
    replacement (all of them, cycled in a random order, when it has fewer), from a generator seeded by
    (seed words, step). A pure function of the step, so a resumed run draws what an uninterrupted one does;
    jax-privacy's ``UserSelectionStrategy`` cycles each user's examples across steps instead, a state only a
    replay of every earlier batch restores. Which sequences a user contributes does not change its
    guarantee: the user's whole contribution is clipped as one (:mod:`dpscaling.train.units`).

    The users are the ids 0..U−1, U = the largest + 1, each holding a sequence (as the data stage numbers them and
    a subset renumbers them); an id holding none is refused here, since the samplers count it as a user and it
    has no row of its own to give."""

    def __init__(self, users: np.ndarray, per_user: int, seed_words: list[int]):
        users = np.asarray(users, np.int64)
        self.n_users = int(users.max()) + 1 if len(users) else 0
        self.per_user = per_user
        self._order = np.argsort(users, kind="stable")
        self._counts = np.bincount(users, minlength=self.n_users)
        empty = np.flatnonzero(self._counts == 0)
        if len(empty):
            raise UserError(f"data.users: user ids run 0..{self.n_users - 1}, each holding a sequence, but "
                            f"{len(empty):,} hold none (ids {', '.join(map(str, empty[:5]))}"
                            f"{', ...' if len(empty) > 5 else ''}); pack the data again with the data rule")
        self._starts = np.r_[0, np.cumsum(self._counts)[:-1]]
        self._seed = list(seed_words)

    def rows(self, step: int, selected: np.ndarray) -> np.ndarray:
        """``(len(selected), per_user)`` row indices; a padding slot (user ``PADDING_INDEX``) stays padding."""
        rng = np.random.default_rng([*self._seed, Stream.USER_EXAMPLES, step])
        rows = np.full((len(selected), self.per_user), PADDING_INDEX, np.int64)
        for slot, user in enumerate(selected):
            if user == PADDING_INDEX:
                continue
            count = self._counts[user]
            picks = rng.permutation(count)
            picks = picks[: self.per_user] if count >= self.per_user else np.resize(picks, self.per_user)
            rows[slot] = self._order[self._starts[user] + picks]
        return rows


class ShuffledStepBatches:
    """The study's step inputs: ``tokens`` of the seeded shuffled batch, laid out by ``parallel``; a
    pure function of (seed, step). ``key`` is unused (the study's batches are not secret), and so is
    ``cycle_length``: the study prices participation after the fact (a BandMF study run's own ε uses the
    strategy's sensitivity at any separation: :mod:`dpscaling.accounting.matched`)."""

    reshuffle = True

    def __init__(self, rows: np.ndarray, pad_id: int, batch_size: int, physical_batch_size: int, seed: int,
                 key: np.ndarray | None = None, cycle_length: int = 1, users: np.ndarray | None = None,
                 examples_per_user: int = 1, microbatch_size: int | None = None):
        self._rows = rows
        self._shuffle = BatchSampler(len(rows), batch_size, seed, reshuffle=self.reshuffle)

    def indices(self, step: int) -> np.ndarray:
        """Row indices of the step's batch."""
        return self._shuffle.indices(step)

    def __call__(self, parallel, step: int) -> tuple:
        """``(tokens, None)``: every example of a shuffled batch has weight 1."""
        return parallel.global_batch(self._rows, self.indices(step)), None


class CyclicStepBatches(ShuffledStepBatches):
    """The ``cyclic`` sampler's step inputs: the shuffled sampler's first epoch, repeated in the same order, so
    an example's participations lie exactly ⌊N/B⌋ steps apart (:mod:`dpscaling.privacy.samplers`)."""

    reshuffle = False


class TruncatedPoissonStepBatches:
    """A private run's step inputs: ``tokens`` and ``example_weights`` of the padded truncated Poisson
    batch as global arrays laid out by ``parallel``; a pure function of (secret key, step)."""

    def __init__(self, rows: np.ndarray, pad_id: int, batch_size: int, physical_batch_size: int, seed: int,
                 key: np.ndarray | None = None, cycle_length: int = 1, users: np.ndarray | None = None,
                 examples_per_user: int = 1, microbatch_size: int | None = None):
        if key is None:
            raise ValueError("truncated_poisson batches need the run's secret key")
        # One extra row of [PAD] tokens, not derived from any example, for the padding slots.
        self._rows = np.concatenate([rows, np.full((1,) + rows.shape[1:], pad_id, rows.dtype)])
        self._weights = np.ones(len(rows) + 1, np.float32)
        self._weights[-1] = 0.0
        self._poisson = PoissonBatches(len(rows), batch_size, physical_batch_size, key, cycle_length, microbatch_size)

    def indices(self, step: int) -> np.ndarray:
        """Row indices of the step's physical batch (padding slots = ``PADDING_INDEX``)."""
        return self._poisson.indices(step)

    def __call__(self, parallel, step: int) -> tuple:
        """``(tokens, example_weights)``: padding slots read the [PAD] row with weight 0."""
        indices = self.indices(step)
        rows = np.where(indices == PADDING_INDEX, len(self._rows) - 1, indices)
        return parallel.global_batch(self._rows, rows), parallel.global_batch(self._weights, rows)


class UserShuffledStepBatches:
    """The ``user_shuffle`` sampler's step inputs (the study mode of user-level sampling): ``tokens``
    ``(B, m, S)`` of B users from seeded per-epoch permutations of the users, each user's m sequences drawn by
    :class:`UserExamples`; a pure function of (seed, step)."""

    def __init__(self, rows: np.ndarray, pad_id: int, batch_size: int, physical_batch_size: int, seed: int,
                 key: np.ndarray | None = None, cycle_length: int = 1, users: np.ndarray | None = None,
                 examples_per_user: int = 1, microbatch_size: int | None = None):
        if users is None:
            raise ValueError("user-level batches need each sequence's user")
        self._rows = rows
        self._examples = UserExamples(users, examples_per_user, [seed])
        self._shuffle = BatchSampler(self._examples.n_users, batch_size, seed)

    def indices(self, step: int) -> np.ndarray:
        """``(B, m)`` row indices of the step's users' sequences."""
        return self._examples.rows(step, self._shuffle.indices(step))

    def __call__(self, parallel, step: int) -> tuple:
        return parallel.global_batch(self._rows, self.indices(step)), None


class UserPoissonStepBatches:
    """A user-level private run's step inputs (``user_poisson``): users drawn by truncated Poisson sampling
    (:class:`PoissonBatches` over the users, rate B/U, L user slots), each real user's m sequences drawn by
    :class:`UserExamples` under the secret key; ``tokens`` ``(L, m, S)`` and one weight per user slot (0:
    padding, whose rows read the [PAD] row). A pure function of (secret key, step)."""

    def __init__(self, rows: np.ndarray, pad_id: int, batch_size: int, physical_batch_size: int, seed: int,
                 key: np.ndarray | None = None, cycle_length: int = 1, users: np.ndarray | None = None,
                 examples_per_user: int = 1, microbatch_size: int | None = None):
        if key is None or users is None:
            raise ValueError("user_poisson batches need the run's secret key and each sequence's user")
        self._rows = np.concatenate([rows, np.full((1,) + rows.shape[1:], pad_id, rows.dtype)])
        words = [int(w) for w in np.asarray(key, dtype=np.uint32).ravel()]
        self._examples = UserExamples(users, examples_per_user, words)
        self._poisson = PoissonBatches(self._examples.n_users, batch_size, physical_batch_size, key, cycle_length,
                                      microbatch_size)

    def users(self, step: int) -> np.ndarray:
        """The step's L user slots (padding = ``PADDING_INDEX``)."""
        return self._poisson.indices(step)

    def indices(self, step: int) -> np.ndarray:
        """``(L, m)`` row indices (padding slots = ``PADDING_INDEX``)."""
        return self._examples.rows(step, self.users(step))

    def __call__(self, parallel, step: int) -> tuple:
        selected = self.users(step)
        indices = self._examples.rows(step, selected)
        rows = np.where(indices == PADDING_INDEX, len(self._rows) - 1, indices)
        weights = (selected != PADDING_INDEX).astype(np.float32)
        return parallel.global_batch(self._rows, rows), parallel.global_batch(weights, np.arange(len(weights)))
