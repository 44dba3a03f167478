"""Everything a figure or table reads: the fitted law, σ(ε, T, q), the budgets, the raw curves.

Paper §3.4 "Using the Fitted Functions": a figure is a set of queries
(compute, privacy and data budgets → constant-compute configurations → σ from
accounting → σ̄ = σ/B → loss from the law). :class:`AnalysisContext` holds the
pieces once so every figure queries them the same way.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dpscaling.data.floor import load_floor
from dpscaling.core.errors import UserError
from dpscaling.report.figures.settings import AnalysisSettings
from dpscaling.law import read_law
from dpscaling.workflow.layout import length_replicates
from dpscaling.law.artifact import Law
from dpscaling.law.bootstrap import (INTERVAL_NOTE, NO_REPEATS, REPLICATE, Replicates, load_replicates, optimum_intervals,
                                     replicate_optima)
from dpscaling.law.columns import (COMPUTE, CROSS_ENTROPY, DATA_BUDGET, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO,
                                   PRIVACY_BUDGET)
from dpscaling.law.noise import SigmaFunction
from dpscaling.law.sequence_length import (
    LawAcrossLengths, load_law_across_lengths, replicate_laws)
from dpscaling.law.queries import (
    DEFAULT_BATCH_SIZES, ComputeOptimal, best_loss_per_compute, compute_optimal, constant_compute_configurations,
    evaluate_configurations, model_size_grid, near_optimal_per_compute)

# Compute range derived from the law: batch sizes from the physical batch up to this many times it
# (the paper's 1024 … 2^20 sequences).
BATCH_RANGE_FACTOR = 1024


def compute_range(law: Law, settings: AnalysisSettings) -> tuple[float, float]:
    """The figures' compute budgets' range: ``analysis.compute_min``..``compute_max``, else from the law's measured
    runs, its smallest model's shortest at the physical batch to its largest's longest at 1024 times that batch."""
    if settings.compute_min is not None:
        return settings.compute_min, settings.compute_max
    sizes = model_size_grid(*law.model_size_range())
    measured = law.grid.loc[law.grid["Source"] == "measured", "Iterations"]
    per_token = 6.0 * law.seq_len * law.physical_batch
    return (per_token * sizes[0] * float(measured.min()),
            per_token * BATCH_RANGE_FACTOR * sizes[-1] * float(measured.max()))


class PrivacyAwareSigma:
    """σ(ε, T, q) of an accounting source, with ε = ∞ meaning no noise (σ = 0: the non-private law).

    The last few answers are kept: a figure asks the same candidates twice (its optimum and
    the optimum's bootstrap band), and each ask interpolates ~10^5 (ε, T, q) in the σ table."""

    REMEMBERED = 8

    def __init__(self, sigma: SigmaFunction):
        self._sigma = sigma
        self._answers: OrderedDict[bytes, np.ndarray] = OrderedDict()

    def __call__(self, epsilon, steps, q) -> np.ndarray:
        e, t, p = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (epsilon, steps, q)))
        key = hashlib.blake2b(b"".join(np.ascontiguousarray(a).tobytes() for a in (e, t, p))
                              + repr(e.shape).encode()).digest()
        if key in self._answers:
            self._answers.move_to_end(key)
            return self._answers[key].copy()
        out = np.zeros(e.shape)
        private = np.isfinite(e)
        if private.any():
            out[private] = self._sigma(e[private], t[private], p[private])
        self._answers[key] = out.copy()
        if len(self._answers) > self.REMEMBERED:
            self._answers.popitem(last=False)
        return out


@dataclass
class LengthsContext:
    """The law across sequence lengths of a run with several ``training.seq_lens`` (not in the paper;
    :mod:`dpscaling.law.sequence_length`), its bootstrap replicates, and what its band is (or why there is none)."""

    law: LawAcrossLengths
    replicates: list[LawAcrossLengths]
    interval_note: str


def load_lengths(directory: str | Path) -> LengthsContext:
    """The law across lengths listed in ``directory``/lengths.json, with every length's replicates."""
    across, laws = load_law_across_lengths(directory)
    replicates, note = replicate_laws(laws, length_replicates(directory))
    return LengthsContext(across, replicates, note)


@dataclass
class AnalysisContext:
    law: Law
    sigma: SigmaFunction
    settings: AnalysisSettings
    delta: float
    sampling: str = "min"
    results: pd.DataFrame | None = None  # raw tidy curves (fig:smoothing, fig:training)
    accounting_source: str = ""
    # The law's bootstrap replicates (docs/fit.md "Intervals"), or None and why there are none.
    replicates: Replicates | None = None
    interval_note: str = NO_REPEATS
    unigram_floor: float | None = None  # held-out unigram entropy of the run's data (dpscaling.data.floor)
    floor_note: str = ""  # why there is no floor, when there is none
    lengths: LengthsContext | None = None  # the law across sequence lengths (runs with several seq_lens)

    def __post_init__(self) -> None:
        self.sigma = PrivacyAwareSigma(self.sigma)
        self.model_sizes = model_size_grid(*self.law.model_size_range())
        self.iteration_bounds = self.law.iteration_bounds()

    # ------------------------------------------------------------------ what the law covers

    def model_size_of(self, name: str) -> float:
        sizes = self.law.grid.groupby(MODEL)[MODEL_SIZE].first()
        if name not in sizes:
            raise UserError(f"model {name!r} is not in the law (models: {', '.join(sizes.index)})")
        return float(sizes[name])

    def trained_models(self) -> pd.Series:
        """Model name → size, smallest first."""
        return self.law.grid.groupby(MODEL)[MODEL_SIZE].first().sort_values()

    def horizon(self) -> float:
        """The last measured (not extrapolated) iteration count."""
        measured = self.law.grid.loc[self.law.grid["Source"] == "measured", "Iterations"]
        return float(measured.max())

    def compute_range(self) -> tuple[float, float]:
        return compute_range(self.law, self.settings)

    def compute_budgets(self, count: int | None = None) -> np.ndarray:
        return np.geomspace(*self.compute_range(), count or self.settings.compute_count)

    # ------------------------------------------------------------------ queries

    def batch_sizes(self, epsilon: float) -> np.ndarray:
        """Candidate batch sizes. Without privacy (ε = ∞) σ̄ = 0 whatever B, and the law, measured at one
        physical batch, says nothing about B: a free B would always pick B = 1 (more steps for free). As in
        the paper's non-private reproduction, B is then the physical batch the law was trained with."""
        return np.array([float(self.law.physical_batch)]) if np.isinf(epsilon) else DEFAULT_BATCH_SIZES

    def optimal(self, compute: float, epsilon: float, users: float) -> ComputeOptimal:
        return compute_optimal(compute, epsilon, users, self.law.loss, self.sigma, self.law.seq_len,
                               self.model_sizes, self.iteration_bounds, self.settings.near_optimal_tolerance,
                               self.batch_sizes(epsilon))

    def best_per_compute(self, epsilon: float, users: float, budgets: np.ndarray | None = None,
                         model_sizes: np.ndarray | None = None) -> pd.DataFrame:
        """The compute-optimal configuration per budget, over ``model_sizes`` (None: the law's model range)."""
        budgets = self.compute_budgets() if budgets is None else budgets
        sizes = self.model_sizes if model_sizes is None else model_sizes
        return best_loss_per_compute(budgets, epsilon, users, self.law.loss, self.sigma, self.law.seq_len,
                                     sizes, self.iteration_bounds, self.batch_sizes(epsilon))

    def near_optimal(self, epsilon: float, users: float, budgets: np.ndarray | None = None) -> pd.DataFrame:
        """Per budget: the optimum and each hyper-parameter's near-optimal min / max (figure bands)."""
        budgets = self.compute_budgets() if budgets is None else budgets
        return near_optimal_per_compute(budgets, epsilon, users, self.law.loss, self.sigma, self.law.seq_len,
                                        self.model_sizes, self.iteration_bounds,
                                        self.settings.near_optimal_tolerance, self.batch_sizes(epsilon))

    def optimum_intervals(self, epsilon: float, users: float, budgets: np.ndarray | None = None) -> pd.DataFrame:
        """Per budget: the 5% / 95% band over the bootstrap replicates of the optimum's loss (and its running
        minimum) and of its M, B, T; the ``Interval`` column says over what, or why there is no band."""
        if self.replicates is None:
            return pd.DataFrame({COMPUTE: pd.Series(dtype=float), INTERVAL_NOTE: pd.Series(dtype=str)})
        table = optimum_intervals(self._priced_candidates(epsilon, users, budgets), self.replicates)
        return table.assign(**{INTERVAL_NOTE: self.interval_note})

    def replicate_optima(self, epsilon: float, users: float, budgets: np.ndarray) -> pd.DataFrame:
        """Each bootstrap replicate's own optimum per budget, one row per (replicate, budget) it answers
        (:func:`dpscaling.law.bootstrap.replicate_optima`); empty without replicates."""
        if self.replicates is None:
            return pd.DataFrame(columns=[COMPUTE, CROSS_ENTROPY, REPLICATE])
        return replicate_optima(self._priced_candidates(epsilon, users, budgets), self.replicates)

    def _priced_candidates(self, epsilon: float, users: float, budgets: np.ndarray | None) -> pd.DataFrame:
        """The constant-compute configurations of ``budgets`` with σ and σ̄ (the same for every replicate), the
        unpriced ones left out."""
        budgets = self.compute_budgets() if budgets is None else budgets
        configs = constant_compute_configurations(budgets, self.model_sizes, self.law.seq_len, self.iteration_bounds,
                                                  self.batch_sizes(epsilon))
        candidates = evaluate_configurations(configs.assign(**{PRIVACY_BUDGET: epsilon, DATA_BUDGET: users}),
                                             self.law.loss, self.sigma, self.law.seq_len)
        return candidates.dropna(subset=[NOISE_BATCH_RATIO])

    def evaluate(self, configs: pd.DataFrame) -> pd.DataFrame:
        """σ, σ̄ and loss for rows of (Model Size, Batch Size, Iterations, Privacy Budget, Data Budget)."""
        for column in (PRIVACY_BUDGET, DATA_BUDGET):
            if column not in configs:
                raise ValueError(f"configurations need a {column!r} column")
        return evaluate_configurations(configs, self.law.loss, self.sigma, self.law.seq_len)


def _no_accounting(epsilon, steps, q) -> np.ndarray:
    raise UserError("this figure needs accounting: a law with accounting tables, or the accounting stage's table")


def load_context(law_dir: str | Path, settings: AnalysisSettings, *, sigma_table: str | Path | None = None,
                 results: str | Path | None = None, sampling: str = "min",
                 results_format: str = "dpscaling", bootstrap: str | Path | None = None,
                 interval_note: str = NO_REPEATS, floor: str | Path | None = None,
                 lengths: str | Path | None = None) -> AnalysisContext:
    """The context from workflow files: a law directory, dpscaling's σ table, the raw results, the law's
    bootstrap replicates (``bootstrap``; without them ``interval_note`` says why figures draw no band), and
    the data stage's unigram floor (``unigram_floor.json``; none when the law comes from the authors' results),
    and the law across sequence lengths (``lengths``: the directory of its lengths.json; runs with several lengths).

    σ comes from the accounting tables saved with the law (the authors' CSVs) when it has
    them, else from ``sigma_table`` (dpscaling's accounting stage).
    """
    law = read_law(law_dir)
    if law.accounting or sigma_table is not None:
        # The law's own tables apply the law's rule, whatever the workflow's accounting setting says.
        found = law.sigma_source(sigma_table=sigma_table, sampling=sampling)
        sigma, delta, sampling, source = found.sigma, found.delta, found.sampling, found.description
    else:
        sigma, delta, source = _no_accounting, float("nan"), "none"
    raw = None
    if results is not None:
        from dpscaling.law.collect import load_results, primary_seed_curves

        # The curves the fit saw: repeat seeds (training.repeat_seeds) only feed the bootstrap.
        raw = primary_seed_curves(load_results(results, results_format)[0])[0]
    replicates = load_replicates(bootstrap, law.settings) if bootstrap is not None else None
    if replicates is not None:
        interval_note = f"90% band over {len(replicates)} bootstrap replicates"
    if floor is not None:
        value, note = load_floor(floor).nats, ""
    elif results_format == "reference":
        value, note = None, "no unigram floor: the law comes from the authors' results.csv, not this run's data"
    else:
        value, note = None, "no unigram floor given"
    return AnalysisContext(law, sigma, settings, delta, sampling, raw, source, replicates=replicates,
                           interval_note=interval_note, unigram_floor=value, floor_note=note,
                           lengths=load_lengths(lengths) if lengths is not None else None)
