"""Batch samplers: one record per way of choosing each step's examples, holding everything the rest of
the code asks of one (paper §3.1 decouples the study's accounting from the batches it trains on; a run
that claims a guarantee is accounted for the sampler it ran: docs/private-training.md).

A :class:`Sampler` supplies its step-batch source (:mod:`dpscaling.train.sampling`, imported only when a
run builds it), the accounting event matched to it (:mod:`dpscaling.accounting.matched`), the most steps
one example can take part in, whether its physical batch is a truncated, padded L (and the batch size B
then the *expected* batch), and whether it is private: its batches and noise come from a secret key
held in the checkpoint, it must clip, and its runs carry a guarantee. Training, accounting, the config
checks, the private runs and :mod:`dpscaling.workflow.cluster` ask the sampler; none tests which sampler it is.

* ``shuffle`` — the study mode of the paper's grid: seeded per-epoch permutations, the epoch's
  remainder dropped; accounted as deterministic batches with its true participation bound.
* ``cyclic`` — fixed-order epochs: one seeded permutation, then the same order every epoch, so an example's
  participations lie exactly ⌊N/B⌋ steps apart; accounted as deterministic batches. The fixed batches a
  correlated mechanism (BandMF) needs: its b-banded strategy's columns of one example never overlap when
  ⌊N/B⌋ ≥ b (:mod:`dpscaling.accounting.pricing`).
* ``poisson`` — private training: jax-privacy's Poisson batch selection truncated at a static L,
  accounted with jax-privacy's truncated DP-SGD event.
* ``user_shuffle`` and ``user_poisson`` — the same two at the user level (user-level sampling, ULS; its unit
  is ``user``, :mod:`dpscaling.train.units`): each batch is B (expected) users of the data's ``data.users``,
  each user's m sequences clipped as one, and the data budget N is the number of users. ``user_poisson`` is
  accounted with the truncated DP-SGD event over users.
* ``els_poisson`` — example-level sampling (ELS): ``truncated_poisson``'s batches of sequences, accounted for a
  user of up to k sequences (jax-privacy's user-level DP-SGD accountant, the truncation priced in δ).

This module is JAX-free on purpose: the workflow imports it to check and size jobs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpscaling.core.errors import UserError

__all__ = ["CYCLIC", "ELS_POISSON", "SAMPLERS", "SHUFFLE", "TRUNCATED_POISSON", "USER_POISSON", "USER_SHUFFLE", "Sampler", "check_batch_fits", "fixed_batch_participations", "paper_participations",
           "sampler_named", "separation_at_rate", "shuffle_max_participations",
           "truncating_samplers", "user_level_sampler"]


def check_batch_fits(n_rows: int, batch_size: int) -> None:
    """Refuse a (expected) batch larger than the training sequences, for any sampler."""
    if n_rows < batch_size:
        raise UserError(f"train.batch_size: {batch_size} exceeds the {n_rows} training sequences")


# The participation counts below are ratios computed in floating point: 0.1 * 1000 = 100.00000000000001 must
# give 100 participations, not 101, and 1 / (1/3) two steps apart, not three.
_ROUNDING = 1e-9


def fixed_batch_participations(steps, separation):
    """Most steps one example joins when fixed batches place its participations at least ``separation`` steps
    apart (one per epoch of ⌊N/B⌋ steps): ⌈T / separation⌉. Vectorised (NumPy scalars and arrays)."""
    return np.maximum(1, np.ceil(np.asarray(steps, float) / np.asarray(separation, float) * (1 - _ROUNDING)))


def separation_at_rate(q):
    """⌊1/q⌋: an epoch's steps, the separation of one example's fixed batches, at rate q = B/N. Vectorised."""
    with np.errstate(divide="ignore"):
        return np.floor(1.0 / np.asarray(q, float) * (1 + _ROUNDING))


def paper_participations(q, steps):
    """k = ⌈q·T⌉, the paper's deterministic batching (appendix "Notes on Generalized DP-SGD"): each example in
    exactly that many of the T steps. No sampler runs it: a shuffle's fixed batches give ⌈T/⌊N/B⌋⌉
    (:func:`shuffle_max_participations`), which exceeds it when an epoch's remainder is dropped, so it prices
    the paper's rule only (:func:`dpscaling.accounting.pricing.paper_sigma`). Vectorised."""
    return np.maximum(1, np.ceil(np.asarray(q, float) * np.asarray(steps, float) * (1 - _ROUNDING)))


def shuffle_max_participations(n_rows: int, batch_size: int, steps: int) -> int:
    """Most steps any example takes part in under the shuffled sampler (per-epoch permutations,
    remainder dropped): one per epoch started, ⌈T / ⌊N/B⌋⌉, which can exceed ⌈q·T⌉."""
    check_batch_fits(n_rows, batch_size)
    return int(fixed_batch_participations(steps, n_rows // batch_size))


@dataclass(frozen=True)
class Sampler:
    """Everything the code asks of one batch sampler."""

    name: str  # the value of training.sampling, recorded with every run
    batches: str  # "package.module:Class", the step-batch source a run builds (dpscaling.train.sampling)
    accountant: str  # the accounting event that describes it (dpscaling.accounting.matched)
    private: bool  # secret-keyed batches and noise, must clip, its runs claim a guarantee
    truncated: bool  # the physical batch is a padded L >= B (training.truncated_batch_size); B is expected
    # Most steps one example joins, from (N, B, T); None: unbounded (each step samples independently).
    participation_bound: Callable[[int, int, int], int] | None
    # Fewest steps between two participations of one example, from (N, B); 1: any two may be adjacent.
    min_separation: Callable[[int, int], int] = lambda n_rows, batch_size: 1
    # What one clipped contribution is (dpscaling.train.units): a sequence, or a user's m sequences. For a
    # user unit, N and B count users.
    unit: str = "sequence"
    # Whom its guarantee protects: one sequence, or one user of data.users (the data must name them).
    protects: str = "sequence"
    # The sampler that draws users the way this one draws sequences (a user-level mechanism's runs train
    # with it: dpscaling.privacy.mechanisms); None: it has none.
    user_level: str | None = None

    def batch_source(self) -> type:
        """The class that yields a run's step inputs (imported on demand: it needs JAX)."""
        module, _, name = self.batches.partition(":")
        return getattr(importlib.import_module(module), name)

    def physical_batch(self, batch_size: int, truncated_batch_size: int | None) -> int | None:
        """Examples per step as computed: B, or the padded L (None while L is not priced yet)."""
        return truncated_batch_size if self.truncated else batch_size


# Seeded per-epoch permutations: the study mode of the paper's grid.
SHUFFLE = Sampler(
    name="shuffle", batches="dpscaling.train.sampling:ShuffledStepBatches", accountant="deterministic",
    private=False, truncated=False, participation_bound=shuffle_max_participations, user_level="user_shuffle")
# One seeded permutation in the same order every epoch: participations N // B steps apart.
CYCLIC = Sampler(
    name="cyclic", batches="dpscaling.train.sampling:CyclicStepBatches", accountant="deterministic",
    private=False, truncated=False, participation_bound=shuffle_max_participations,
    min_separation=lambda n_rows, batch_size: n_rows // batch_size)
# Truncated Poisson sampling at a padded static batch L: private training.
TRUNCATED_POISSON = Sampler(
    name="truncated_poisson", batches="dpscaling.train.sampling:TruncatedPoissonStepBatches", accountant="truncated_poisson",
    private=True, truncated=True, participation_bound=None, user_level="user_poisson")
# The study mode of user-level sampling: seeded per-epoch permutations of the users.
USER_SHUFFLE = Sampler(
    name="user_shuffle", batches="dpscaling.train.sampling:UserShuffledStepBatches", accountant="deterministic",
    private=False, truncated=False, participation_bound=shuffle_max_participations, unit="user")
# Truncated Poisson sampling of users at a padded static L user slots: user-level private training.
USER_POISSON = Sampler(
    name="user_poisson", batches="dpscaling.train.sampling:UserPoissonStepBatches", accountant="truncated_poisson",
    private=True, truncated=True, participation_bound=None, unit="user", protects="user")
# Example-level sampling accounted per user (ELS): truncated Poisson batches of sequences, the guarantee for a
# user of up to k of them (dpscaling.accounting.user_level).
ELS_POISSON = Sampler(
    name="els_poisson", batches="dpscaling.train.sampling:TruncatedPoissonStepBatches", accountant="user_level_poisson",
    private=True, truncated=True, participation_bound=None, protects="user")
SAMPLERS: dict[str, Sampler] = {sampler.name: sampler for sampler in (
    SHUFFLE, CYCLIC, TRUNCATED_POISSON, USER_SHUFFLE, USER_POISSON, ELS_POISSON)}


def sampler_named(name: str, block: str = "train") -> Sampler:
    """The sampler called ``name``; ``block`` names the key in the message (``training`` in a config)."""
    if name not in SAMPLERS:
        raise UserError(f"{block}.sampling: must be one of {tuple(SAMPLERS)}, got {name!r}")
    return SAMPLERS[name]


def user_level_sampler(name: str, block: str = "training") -> Sampler:
    """The sampler that draws users as ``name`` draws sequences (a user-level mechanism's runs train with it);
    refused, naming the key, for a sampler without one."""
    sampler = sampler_named(name, block)
    if sampler.user_level is None:
        having = tuple(known for known, record in SAMPLERS.items() if record.user_level is not None)
        raise UserError(f"{block}.sampling: a user-level mechanism draws users the way the sampler draws "
                        f"sequences; {name!r} has no user-level form (one of {having} has)")
    return SAMPLERS[sampler.user_level]


def truncating_samplers() -> tuple[str, ...]:
    """Names of the samplers that take a truncated_batch_size."""
    return tuple(name for name, sampler in SAMPLERS.items() if sampler.truncated)
