"""The two values a query carries down its path (paper §3.4, "Using the Fitted Functions"): the practitioner's
budget as asked (:class:`Budget`: compute C, privacy ε and δ, data as N users or tokens, a user's k sequences and
the S sequences the users hold, the sequence length) and the law's surface priced for it (:class:`PricedSurface`:
the surface at the budget's length, σ's source for its ε, δ and privacy unit, the units the sampler draws from,
the model sizes searched, the physical-batch correction and the near-optimal tolerance).

The query takes them through the method's steps in order, each module entered once: price
(:meth:`dpscaling.law.answers.ScalingLaw.query` builds both), scan (:func:`dpscaling.law.queries.compute_optimal`
and :class:`dpscaling.law.budget_scan.BudgetScan`), choose and round (:mod:`dpscaling.law.rounding`), answer
(:mod:`dpscaling.law.rendering`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.law.decision import DecisionRule
from dpscaling.law.noise import SigmaSource
from dpscaling.law.physical_batch import PhysicalBatchCorrection
from dpscaling.law.queries import (
    ComputeOptimal, InferenceAware, best_loss_per_compute, compute_optimal, inference_aware)
from dpscaling.law.sequence_length import PRIVACY_UNITS, DataBudget
from dpscaling.law.surface import Surface


def held_sequences(users: float, examples_per_user: int, sequences: float | None) -> float:
    """S, the sequences N = ``users`` users of up to k = ``examples_per_user`` hold in all: what ELS samples and is
    priced on. ``sequences`` where given (refused outside N..N·k, naming ``--sequences``); else S = N, the
    conservative end: every user holds at least one sequence, so S ≥ N, and the fewest sequences are the highest
    sampling rate q = B/S at the same batch, the largest σ, a price no S the users can hold exceeds. (N·k, every
    user at the cap, would be the smallest σ: too little noise wherever users hold fewer.)"""
    k = int(examples_per_user)
    if sequences is None:
        return float(users)
    if not users <= sequences <= users * k:
        raise UserError(f"--sequences: the sequences the {users:g} users hold, from one each to k = {k} each "
                        f"({users:g}..{users * k:g}), got {sequences:g}")
    return float(sequences)


def check_positive(compute: float, epsilon: float) -> None:
    """A budget's compute and ε are positive (asked before anything else of a query)."""
    if not (compute > 0 and epsilon > 0):
        raise UserError(f"--compute and --epsilon must be positive, got {compute!r} and {epsilon!r}")


@dataclass(frozen=True)
class Budget:
    """A practitioner's budget, checked: ``compute`` FLOPs, (``epsilon``, ``delta``; None: the law's δ), the
    ``data`` budget (its privacy unit and N users or tokens), ``examples_per_user`` k (a budget per user of up to
    k sequences; None: one unit each) with the ``sequences`` the users hold (None: assumed, :func:`held_sequences`),
    and ``seq_len`` (None: the law's own length, or the best across a bundle's lengths)."""

    compute: float
    epsilon: float
    data: DataBudget
    delta: float | None = None
    seq_len: float | None = None
    examples_per_user: int | None = None
    sequences: float | None = None

    @classmethod
    def asked(cls, compute: float, epsilon: float, users: float | None, tokens: float | None, *,
              delta: float | None = None, privacy_unit: str | None = None, seq_len: float | None = None,
              examples_per_user: int | None = None, sequences: float | None = None) -> Budget:
        """The budget of a query's arguments, each refused with the flag that names it."""
        check_positive(compute, epsilon)
        if (users is None) == (tokens is None):
            raise UserError("give the data budget as exactly one of --users (privacy units) and --tokens")
        unit = privacy_unit or ("sequence" if tokens is not None else "user")
        if unit not in PRIVACY_UNITS:
            raise UserError(f"--privacy-unit: must be one of {PRIVACY_UNITS}, got {unit!r}")
        if examples_per_user is not None and (int(examples_per_user) != examples_per_user or examples_per_user < 1):
            raise UserError(f"--examples-per-user: must be a whole number >= 1, got {examples_per_user!r}")
        if examples_per_user is not None and unit != "user":
            raise UserError("--examples-per-user: a budget per user counts users: give --users, not --tokens")
        if sequences is not None and examples_per_user is None:
            raise UserError("--sequences: the sequences N users hold, for a budget per user: give --examples-per-user")
        return cls(compute, epsilon, DataBudget(unit, tokens, users), delta, seq_len,
                   None if examples_per_user is None else int(examples_per_user), sequences)


@dataclass(frozen=True)
class PricedSurface:
    """The law's surface at one length, priced for one (ε, δ, data) budget: what every step after pricing reads.
    ``units``: the units the sampler draws from (users, sequences, or the sequences users hold); ``sizes``: the
    model sizes searched."""

    epsilon: float
    surface: Surface
    source: SigmaSource
    units: float
    sizes: np.ndarray
    correction: PhysicalBatchCorrection | None
    tolerance: float

    def search(self, compute: float, bounds: tuple[float, float] | None = None,
               rank: Callable[[pd.DataFrame], np.ndarray] | None = None) -> ComputeOptimal:
        """The compute-optimal configuration at ``compute`` (:func:`dpscaling.law.queries.compute_optimal`), T
        inside ``bounds`` (None: the surface's), candidates ranked by ``rank`` (None: by loss)."""
        return compute_optimal(compute, self.epsilon, self.units, self.surface.loss, self.source.sigma,
                               self.surface.step_tokens, self.sizes, bounds or self.surface.iteration_bounds,
                               self.tolerance, correction=self.correction, rank=rank)

    def best_per_compute(self, budgets: np.ndarray) -> pd.DataFrame:
        """Each budget's best configuration (:func:`dpscaling.law.queries.best_loss_per_compute`)."""
        return best_loss_per_compute(budgets, self.epsilon, self.units, self.surface.loss, self.source.sigma,
                                     self.surface.step_tokens, self.sizes, self.surface.iteration_bounds,
                                     correction=self.correction)

    def inference_aware(self, compute: float, inference_tokens: float) -> InferenceAware:
        """The optimum that also pays for serving ``inference_tokens`` (:func:`dpscaling.law.queries.inference_aware`)."""
        return inference_aware(compute, self.epsilon, self.units, self.surface.loss, self.source.sigma,
                               self.surface.step_tokens, self.sizes, self.surface.iteration_bounds, inference_tokens,
                               correction=self.correction)

    def scan_key(self) -> tuple:
        """What a budget's optimum depends on besides the budget (:class:`dpscaling.law.budget_scan.BudgetScan`)."""
        return (float(self.epsilon), float(self.units), self.surface.step_tokens, hash(self.sizes.tobytes()),
                id(self.source), id(self.correction))


@dataclass(frozen=True)
class AnswerSettings:
    """How the answer is given: the decision ``rule`` that chooses among the candidates, the sampling rule
    ``price_rule`` its runnable σ is priced under, whether an optimum past the validated horizon is answered
    (``allow_extrapolation``), the ``microbatch_size`` batches round to (None: the bundle's), and whether the spread
    of the replicates' optima is computed (``optimum_interval``)."""

    rule: DecisionRule
    price_rule: str
    allow_extrapolation: bool = False
    microbatch_size: int | None = None
    optimum_interval: bool = True
