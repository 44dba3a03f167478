"""The adaptive design measured against the full grid, on a known truth: error, regret and FLOPs.

- **Error**: the adaptive law's mean absolute error on every full-grid measurement it did not train (a point it
  never trained, or a step past the horizon it trained that point to; at each (model, σ̄, T) the best learning
  rate's, the quantity the law fits), beside the full-grid law's error on the same measurements; and both laws'
  error against the truth's clean loss there, which a simulation knows.
- **Regret** per target budget: the loss the full-grid law predicts for the adaptive law's answer (its M, B, T,
  σ̄), minus the full-grid law's own answer's loss.
- **High-compute error**: the law's mean absolute error on the full grid's measurements of the largest model at the
  longest horizon, trained or not (the region a sparse design knows least and the answers need most).
- **FLOPs** of both designs (:func:`dpscaling.design.runs.design_flops`: an extended run paid once).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.design.answers import Target
from dpscaling.design.runs import DesignRun, design_flops
from dpscaling.design.simulate import Simulator
from dpscaling.law.columns import (
    CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, SEED)


@dataclass(frozen=True)
class Comparison:
    adaptive_flops: float
    grid_flops: float
    untrained_measurements: int
    adaptive_error: float  # mean |law − measured| over the full grid's measurements the design did not train
    grid_error: float  # the full-grid law's, on the same measurements
    adaptive_truth_error: float  # mean |law − truth| there
    grid_truth_error: float
    regret: tuple[float, ...]  # per target, nats
    answers: tuple[tuple[float, float], ...]  # per target: (adaptive answer's loss, full grid's), each its own law
    high_compute_error: float = float("nan")  # its law's error at the largest model and longest horizon
    grid_high_compute_error: float = float("nan")  # the full-grid law's there

    @property
    def fraction(self) -> float:
        return self.adaptive_flops / self.grid_flops

    def row(self) -> dict[str, Any]:
        return {"FLOPs fraction": self.fraction, "adaptive FLOPs": self.adaptive_flops, "grid FLOPs": self.grid_flops,
                "untrained measurements": self.untrained_measurements, "adaptive error": self.adaptive_error,
                "grid error": self.grid_error, "adaptive error vs truth": self.adaptive_truth_error,
                "grid error vs truth": self.grid_truth_error, "largest regret": max(self.regret, default=np.nan),
                "mean regret": float(np.mean(self.regret)) if self.regret else np.nan,
                "adaptive high-compute error": self.high_compute_error,
                "grid high-compute error": self.grid_high_compute_error}


def best_measurements(full: pd.DataFrame, seed: int) -> pd.DataFrame:
    """The full grid's main-seed measurements as the law reads them: each (model, σ̄, T)'s best learning rate."""
    main = full[full[SEED] == seed]
    return main.loc[main.groupby([MODEL, NOISE_BATCH_RATIO, ITERATIONS])[CROSS_ENTROPY].idxmin()]


def untrained(full: pd.DataFrame, trained: Sequence[DesignRun], seed: int,
              best: pd.DataFrame | None = None) -> pd.DataFrame:
    """The full grid's main-seed measurements, as the law reads them (each (model, σ̄, T)'s best learning rate:
    paper §3.3; ``best``, :func:`best_measurements` when the caller has them), that the design did not train: a point
    it never trained at any rate, or a step past the horizon it trained that point to."""
    reached: dict[tuple, int] = {}
    for run in trained:
        if run.seed == seed:
            key = (run.model, run.noise_batch_ratio)
            reached[key] = max(reached.get(key, 0), run.steps)
    best = best_measurements(full, seed) if best is None else best
    horizon = np.array([reached.get((m, float(s)), 0) for m, s in zip(best[MODEL], best[NOISE_BATCH_RATIO])], float)
    return best[best[ITERATIONS].to_numpy(float) > horizon]


def compare(simulator: Simulator, grid: Sequence[tuple[str, float, float]], trained: Sequence[DesignRun],
            horizon: int, fit: Callable[[pd.DataFrame], Any], context_of: Callable[[Any], Any],
            targets: Sequence[Target], batch: int, seq_len: int, seed: int = 0,
            full_runs: Sequence[DesignRun] | None = None) -> Comparison:
    """The three numbers (module doc) for the adaptive design's ``trained`` runs against the full ``grid`` trained
    to ``horizon`` (or ``full_runs``, the full design's runs, its repeats included); ``context_of``: law → context."""
    full_runs = list(full_runs) if full_runs is not None else [DesignRun(*point, seed, horizon) for point in grid]
    full = simulator.results(full_runs)

    def truth(held: pd.DataFrame) -> np.ndarray:  # the clean loss at each measurement's own rate
        m, t, s = (held[c].to_numpy(float) for c in (MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO))
        return simulator.truth(m, t, s) * np.array([simulator.rate_penalty[r] for r in held[LEARNING_RATE]])

    return comparison(full, trained, fit(full), fit(simulator.results(trained)), context_of, targets,
                      design_flops(trained, simulator.sizes, batch, seq_len),
                      design_flops(full_runs, simulator.sizes, batch, seq_len), seed, truth)


def comparison(full: pd.DataFrame, trained: Sequence[DesignRun], grid_law: Any, adaptive_law: Any,
               context_of: Callable[[Any], Any], targets: Sequence[Target], adaptive_flops: float, grid_flops: float,
               seed: int, truth: Callable[[pd.DataFrame], np.ndarray] | None = None) -> Comparison:
    """The three numbers from the full grid's tidy measurements ``full`` and both laws, simulated or trained;
    ``truth`` (held-out measurements → their clean loss) where a simulation knows it."""
    best = best_measurements(full, seed)
    held = untrained(full, trained, seed, best)
    m, t, s = (held[c].to_numpy(float) for c in (MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO))
    measured = held[CROSS_ENTROPY].to_numpy(float)
    clean = truth(held) if truth is not None else np.full(len(held), np.nan)
    adaptive, full_law = adaptive_law.loss(m, t, s), grid_law.loss(m, t, s)
    regret, answers = _regret(context_of(adaptive_law), context_of(grid_law), grid_law, targets)
    # the high-compute region, trained or not: the largest model at the longest horizon
    high = best[(best[MODEL_SIZE] == best[MODEL_SIZE].max()) & (best[ITERATIONS] == best[ITERATIONS].max())]
    hm, ht, hs = (high[c].to_numpy(float) for c in (MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO))
    measured_high = high[CROSS_ENTROPY].to_numpy(float)
    return Comparison(adaptive_flops, grid_flops, len(held), _mean_abs(adaptive - measured),
                      _mean_abs(full_law - measured), _mean_abs(adaptive - clean), _mean_abs(full_law - clean),
                      regret, answers, _mean_abs(adaptive_law.loss(hm, ht, hs) - measured_high),
                      _mean_abs(grid_law.loss(hm, ht, hs) - measured_high))


def _regret(adaptive: Any, full: Any, full_law: Any, targets: Sequence[Target]):
    regret, answers = [], []
    for target in targets:
        budgets = np.array([target.compute])
        mine = adaptive.best_per_compute(target.epsilon, target.data_budget, budgets=budgets)
        best = full.best_per_compute(target.epsilon, target.data_budget, budgets=budgets)
        if mine.empty or best.empty:
            regret.append(np.nan)
            answers.append((np.nan, np.nan))
            continue
        row = mine.iloc[0]
        under_full = float(full_law.loss(np.array([row[MODEL_SIZE]]), np.array([row[ITERATIONS]]),
                                         np.array([row[NOISE_BATCH_RATIO]]))[0])
        regret.append(under_full - float(best[CROSS_ENTROPY].iloc[0]))
        answers.append((float(row[CROSS_ENTROPY]), float(best[CROSS_ENTROPY].iloc[0])))
    return tuple(regret), tuple(answers)


def _mean_abs(values: np.ndarray) -> float:
    finite = np.asarray(values, float)[np.isfinite(values)]
    return float(np.mean(np.abs(finite))) if len(finite) else float("nan")

