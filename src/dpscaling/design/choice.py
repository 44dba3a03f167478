"""The adaptive design's choice rule: the runs expected to shrink the uncertainty of the answers most per FLOP.

Not in the paper, which trains its whole grid (§3.2). The answers are the law's predicted losses at the target
budgets (the config's analysis budgets and the explorer's grid). Their uncertainty, and how it moves with what a
candidate run would measure, is read from a committee of laws fitted to the runs so far (bootstrap replicates,
:mod:`dpscaling.law.bootstrap`): across the committee, the answers ``a`` and the candidates' predicted losses ``y``
have a joint covariance Σ. A run measures its loss with the seed-to-seed noise s² on top, so observing candidate c
reduces the answers' variance, in the linear-Gaussian (ensemble Kalman) approximation, by

    ΔV(c) = Σ_j Cov(a_j, y_c)² / (Var(y_c) + s²),

and the rule takes the candidate of the largest ΔV(c) per FLOP of its cost, updates Σ as if it had been observed
(Σ ← Σ − Σ[:, c] Σ[c, :] / (Σ_cc + s²)), and repeats for the round's next run. The update makes a second pick of
the same point (a repeated seed) or of a strongly correlated one worth less than the first, so a round spreads
its runs where the answers depend on them. Costs are what each run trains: a horizon extension pays only its added
steps.

Why this criterion: it is aimed at the decisions, not at the law everywhere (a run far from every target's optimum
is worth little however uncertain the law is there), it prices compute as the design's one scarce resource, and it
needs nothing but the committee the workflow already fits. Li et al. 2026 ("active experiment selection" for
scaling laws) choose runs by the same target: the expected reduction of the uncertainty of the prediction in the
expensive target region per unit cost, coming close to a fit on all runs with about 10% of the budget. The
linear-Gaussian update is the ensemble Kalman filter's (Evensen 2009), used here as the design criterion of
sequential Bayesian experimental design under a Gaussian approximation (Chaloner and Verdinelli 1995).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Pick:
    """One chosen candidate: its index, and the answers' variance it was expected to remove per FLOP and in all."""

    candidate: int
    variance_reduction: float  # Σ_j ΔV_j, nats², at the time it was picked
    per_flop: float


@dataclass(frozen=True)
class Choice:
    """A round's picks in order, and the answers' variance before and (expected) after them."""

    picks: tuple[Pick, ...]
    variance_before: np.ndarray  # per target answer
    variance_after: np.ndarray

    @property
    def candidates(self) -> list[int]:
        return [pick.candidate for pick in self.picks]


def joint_covariance(answers: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """The committee's covariance of (answers, candidate predictions): ``answers`` members × targets, ``predictions``
    members × candidates; each pair of columns over the members that give both (a member may fail to answer a
    target or predict a candidate outside its range). A column fewer than two members give is refused."""
    joint = np.hstack([np.atleast_2d(answers), np.atleast_2d(predictions)]).astype(float)
    if np.atleast_2d(answers).shape[0] != np.atleast_2d(predictions).shape[0]:
        raise ValueError(f"{np.atleast_2d(answers).shape[0]} members' answers but "
                         f"{np.atleast_2d(predictions).shape[0]} members' predictions")
    if np.any(np.sum(np.isfinite(joint), axis=0) < 2):
        raise ValueError("the committee needs at least two members that answer every target and candidate")
    return pd.DataFrame(joint).cov(min_periods=2).to_numpy(float)


def jackknife_covariance(answers: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """The jackknife's covariance of (answers, predictions) from laws refitted with one point left out each
    (members × ...): (n − 1)/n · Σ_i d_i d_iᵀ, d_i the i-th refit's deviation from their mean (pairwise over the
    members that give both, as :func:`joint_covariance`). It measures what the bootstrap cannot: how much the
    answers hang on single runs of a sparse design."""
    joint = np.hstack([np.atleast_2d(answers), np.atleast_2d(predictions)]).astype(float)
    finite = np.isfinite(joint).astype(float)
    pairs = finite.T @ finite  # members giving both columns
    return joint_covariance(answers, predictions) * (pairs - 1) ** 2 / pairs


def choose_runs(answers: np.ndarray, predictions: np.ndarray, costs: Sequence[float], noise_variance: float,
                runs: int) -> Choice:
    """Up to ``runs`` candidates, greedily by expected variance reduction of the answers per FLOP (module doc).

    ``answers``: committee members × target answers (nats); ``predictions``: members × candidates, each candidate's
    predicted loss where it would be measured; ``costs``: each candidate's FLOPs (> 0); ``noise_variance``: s², the
    variance of one run's measurement about the law (seed noise). A candidate may be picked again (a repeated seed).
    Stops early when no candidate is expected to remove any variance."""
    return choose_from_covariance(joint_covariance(answers, predictions), np.atleast_2d(answers).shape[1], costs,
                                  noise_variance, runs)


def choose_from_covariance(sigma: np.ndarray, n_targets: int, costs: Sequence[float], noise_variance: float,
                           runs: int) -> Choice:
    """:func:`choose_runs` from the joint covariance ``sigma`` of (the ``n_targets`` answers, the candidates'
    predictions), e.g. the bootstrap's plus the jackknife's (:func:`jackknife_covariance`)."""
    costs = np.asarray(costs, float)
    sigma = np.array(sigma, float)
    if costs.shape != (sigma.shape[0] - n_targets,) or np.any(~(costs > 0)):
        raise ValueError("one positive cost per candidate")
    if not noise_variance > 0:
        raise ValueError(f"noise_variance must be > 0, got {noise_variance}")
    before = np.diag(sigma)[:n_targets].copy()
    picks: list[Pick] = []
    for _ in range(runs):
        cross = sigma[:n_targets, n_targets:]  # targets × candidates
        spread = np.diag(sigma)[n_targets:] + noise_variance
        reduction = np.sum(cross**2, axis=0) / spread
        score = reduction / costs
        best = int(np.argmax(score))
        if not reduction[best] > 0:
            break
        picks.append(Pick(best, float(reduction[best]), float(score[best])))
        column = sigma[:, n_targets + best].copy()
        sigma = sigma - np.outer(column, column) / (column[n_targets + best] + noise_variance)
    return Choice(tuple(picks), before, np.diag(sigma)[:n_targets].copy())
