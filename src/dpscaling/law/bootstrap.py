"""Intervals on the law's answers: seed-to-seed noise propagated through the whole fit by bootstrap.

Documented in docs/fit.md, "Intervals".

The paper reports point answers (§3.4). To say how far to trust one, a few grid
points are trained with extra seeds (``training.repeat_seeds`` ×
``training.repeat_points``). The main fit uses one curve per run, the primary
seed's (:func:`primary_seed_curves`), so adding repeats changes no existing answer.

Each replicate is a curve-level residual bootstrap: every measured curve of the
main fit gets one seed-to-seed residual curve added, drawn with replacement
(and a random sign) from the pool measured at the repeated points, and the law
is refitted with the same settings (smoothing → extrapolation → σ̄ fill →
interpolants). A residual curve is the deviation of one seed's curve from the
seed mean at its point, scaled by √(n/(n−1)) so its variance is one seed's.
Whole curves are resampled, not single measurements, because seed noise is
correlated along T (a seed's curve sits above or below the others for long
stretches); a parametric model would need that covariance, which a handful of
curves cannot estimate. Only the replicate's grid is kept (what queries need).
Answers then come with the 5% / 95% quantiles over replicates.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.core.io import atomic_path
from dpscaling.law.artifact import Law, fit_law
from dpscaling.law.collect import RUN, load_results, primary_seed_curves
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, NOISE_BATCH_RATIO, SEED
from dpscaling.law.interpolation import LossFunction
from dpscaling.law.physical_batch import PhysicalBatchCorrection
from dpscaling.law.settings import LawSettings, mode_name

REPLICATE = "Replicate"
REFERENCE_COMPATIBLE = "Reference Compatible"
GRID_COLUMNS = ["Model Size", ITERATIONS, NOISE_BATCH_RATIO, CROSS_ENTROPY]
QUANTILES = (0.05, 0.95)
# The --configs answer's interval columns.
LOSS_LOW, LOSS_HIGH = "Cross Entropy 5%", "Cross Entropy 95%"
NO_REPEATS = "no interval: no repeated seeds"
BOOTSTRAP_OFF = "no interval: bootstrap off (fit.bootstrap.replicates = 0)"


def residual_curves(results: pd.DataFrame) -> list[pd.Series]:
    """Seed-to-seed residual curves (index: iterations) at every run measured with ≥ 2 seeds."""
    curves = []
    finite = results.dropna(subset=[CROSS_ENTROPY])
    for _, group in finite.groupby(RUN, sort=True):
        table = group.pivot_table(index=ITERATIONS, columns=SEED, values=CROSS_ENTROPY, aggfunc="mean").dropna()
        n = table.shape[1]
        if n < 2 or table.empty:
            continue
        deviations = table.sub(table.mean(axis=1), axis=0) * np.sqrt(n / (n - 1))
        curves += [deviations[seed] for seed in deviations.columns]
    return curves


def seed_noise(results: pd.DataFrame) -> float:
    """The root-mean-square seed-to-seed deviation in nats (0.0 when nothing is repeated)."""
    curves = residual_curves(results)
    if not curves:
        return 0.0
    return float(np.sqrt(np.mean(np.concatenate([c.to_numpy() ** 2 for c in curves]))))


def perturb(curves: pd.DataFrame, residuals: Sequence[pd.Series], rng: np.random.Generator) -> pd.DataFrame:
    """Add one randomly drawn (and randomly signed) residual curve to every run's curve.

    A residual curve is read at each measurement's iteration count by linear interpolation
    (held flat beyond its ends), so curves logged at other steps still get a value.
    """
    out = curves.copy()
    loss = out[CROSS_ENTROPY].to_numpy(float).copy()
    for _, rows in out.groupby(RUN, sort=True).indices.items():
        residual = residuals[rng.integers(len(residuals))]
        sign = rng.choice((-1.0, 1.0))
        steps = out[ITERATIONS].to_numpy(float)[rows]
        loss[rows] += sign * np.interp(steps, residual.index.to_numpy(float), residual.to_numpy(float))
    out[CROSS_ENTROPY] = loss
    return out


def refit(curves: pd.DataFrame, residuals: Sequence[pd.Series], settings: LawSettings, seed: int, replicate: int,
          **fit_options) -> Law:
    """Replicate ``replicate`` of the law on ``curves`` (one seed's): every curve perturbed with a residual
    curve drawn from ``np.random.default_rng([seed, replicate])``, then refitted with ``settings``."""
    rng = np.random.default_rng([int(seed), int(replicate)])
    return fit_law(perturb(curves, residuals, rng), settings, **fit_options)


def replicate_grids(results: pd.DataFrame, settings: LawSettings, replicates: Sequence[int],
                    seed: int = 0, **fit_options) -> pd.DataFrame:
    """Refit the law on perturbed curves, once per replicate id; their grids stacked with a Replicate column.

    Replicate ``r`` draws from ``np.random.default_rng([seed, r])``, so a chunk's answer does not
    depend on how the replicates were split into jobs. Raises UserError without repeated seeds.
    """
    residuals = residual_curves(results)
    if not residuals:
        raise UserError(f"{NO_REPEATS}: set training.repeat_seeds and training.repeat_points "
                        "(or fit.bootstrap.replicates: 0)")
    main, _ = primary_seed_curves(results)
    grids = []
    for replicate in replicates:
        law = refit(main, residuals, settings, seed, replicate, **fit_options)
        grids.append(law.grid[GRID_COLUMNS].assign(**{REPLICATE: int(replicate)}))
    table = pd.concat(grids, ignore_index=True)
    return table.assign(**{REFERENCE_COMPATIBLE: settings.reference_compatible})


def chunk_replicates(replicates: int, chunk_size: int, chunk: int) -> list[int]:
    """The replicate ids of job ``chunk`` (0-based) when ``replicates`` are split into chunks of ``chunk_size``."""
    return list(range(chunk * chunk_size, min(replicates, (chunk + 1) * chunk_size)))


def chunk_count(replicates: int, chunk_size: int) -> int:
    if chunk_size < 1:
        raise UserError(f"fit.bootstrap.chunk_size: must be >= 1, got {chunk_size}")
    return -(-int(replicates) // int(chunk_size))


def write_replicates(table: pd.DataFrame, out: str | os.PathLike[str]) -> None:
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)


@dataclass
class Replicates:
    """The replicate laws of one fit: a loss function each."""
    losses: list[LossFunction]

    def __len__(self) -> int:
        return len(self.losses)

    def loss_matrix(self, model_size, iterations, nbr) -> np.ndarray:
        """Replicates × points losses at given (M, T, σ̄)."""
        return np.vstack([loss(model_size, iterations, nbr) for loss in self.losses])


def interval(values: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The 5% and 95% quantiles over replicates (NaN replicates ignored; all-NaN → NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column is NaN, as it should be
        low, high = np.nanquantile(np.asarray(values, float), QUANTILES, axis=axis)
    return low, high


def replicate_files(path: str | os.PathLike[str]) -> list[Path]:
    """The replicate files at ``path``: the file itself, or a directory's Parquet files (none: [])."""
    path = Path(path)
    return [path] if path.is_file() else sorted(path.glob("*.parquet")) if path.is_dir() else []


def load_replicates(directory: str | os.PathLike[str], settings: LawSettings) -> Replicates | None:
    """The replicate laws saved in ``directory`` (chunk Parquet files) or one such file; None if there are none.

    Raises UserError when they were fitted in the other mode (paper vs reference-compatible).
    """
    files = replicate_files(directory)
    if not files:
        return None
    table = pd.concat([pd.read_parquet(path) for path in files], ignore_index=True)
    modes = set(table[REFERENCE_COMPATIBLE].astype(bool))
    if modes != {settings.reference_compatible}:
        mode = mode_name(settings.reference_compatible)
        raise UserError(f"the bootstrap replicates in {directory} were not fitted in this law's {mode} mode; "
                        "refit them (`snakemake fit`) or pass the matching --bootstrap DIR")
    losses = [LossFunction.from_grid(grid, log_loss=settings.interpolate_log_loss,
                                     ignore_zero_weight_nan=settings.ignore_zero_weight_nan)
              for _, grid in table.groupby(REPLICATE, sort=True)]
    return Replicates(losses)


def combine_chunks(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> pd.DataFrame:
    """The chunk jobs' replicates in one file (what queries and figures read)."""
    chunks = [pd.read_parquet(path) for path in paths]
    ids = [set(chunk[REPLICATE]) for chunk in chunks]
    if sum(map(len, ids)) != len(set().union(*ids)):
        raise UserError("bootstrap chunks overlap (a replicate in two chunks): refit them (`snakemake fit`)")
    table = pd.concat(chunks, ignore_index=True)
    write_replicates(table, out)
    return table


def bootstrap_from_files(results: str | os.PathLike[str], settings: LawSettings, replicates: Sequence[int],
                         out: str | os.PathLike[str], *, seed: int = 0, results_format: str = "dpscaling") -> None:
    """One bootstrap job of the workflow: read the run's results, refit ``replicates``, write their grids."""
    write_replicates(replicate_grids(load_results(results, results_format)[0], settings, replicates, seed), out)


OPTIMUM_COLUMNS = (CROSS_ENTROPY, "Model Size", "Batch Size", ITERATIONS)
ANSWERING = "Replicates Answering"  # how many replicates have an optimum at the budget
BEST = "Best Cross Entropy"  # running minimum of the optimum's loss over compute (fig:vary_compute_and_privacy)
INTERVAL_NOTE = "Interval"


def band(column: str) -> tuple[str, str]:
    """The CSV columns of a quantity's 5% / 95% band across replicates."""
    return f"{column} 5%", f"{column} 95%"


def replicate_optima(candidates: pd.DataFrame, replicates: Replicates, compute: str = "Compute",
                     correction: PhysicalBatchCorrection | None = None) -> pd.DataFrame:
    """Each replicate's optimum per compute budget: one row per (replicate, budget) it answers, with the optimum's
    loss, M, B, T, σ̄ and the running best (:data:`BEST`) over budgets, and the replicate's index.

    ``candidates``: constant-compute configurations with their σ̄ (as :func:`evaluate_configurations` gives
    them; σ does not depend on the law, so it is computed once). Each replicate's loss picks its own optimum;
    with a ``correction`` (not in the paper) every replicate's loss is corrected to the candidate's batch, as the
    answer's."""
    m, t, s = (candidates[c].to_numpy(float) for c in ("Model Size", ITERATIONS, NOISE_BATCH_RATIO))
    shift = 0.0 if correction is None else correction.shift(candidates["Batch Size"].to_numpy(float), s, m)
    codes, budgets = pd.factorize(candidates[compute], sort=True)
    columns = {name: candidates[name].to_numpy(float)
               for name in (*OPTIMUM_COLUMNS, NOISE_BATCH_RATIO) if name != CROSS_ENTROPY}
    optima: dict[str, list[np.ndarray]] = {name: [] for name in (compute, CROSS_ENTROPY, *columns, BEST, REPLICATE)}
    for index, loss in enumerate(replicates.losses):
        values = np.asarray(loss(m, t, s) - shift, float)
        finite = np.isfinite(values)
        if not finite.any():
            continue
        # Each budget's first lowest loss (sorted by budget, then loss; stable: ties keep the candidates' order).
        order = np.lexsort((np.where(finite, values, np.inf), codes))
        order = order[finite[order]]
        groups, first = np.unique(codes[order], return_index=True)
        best = order[first]
        for name, part in ((compute, np.asarray(budgets)[groups]), (CROSS_ENTROPY, values[best]),
                           *((name, column[best]) for name, column in columns.items()),
                           (BEST, np.minimum.accumulate(values[best])), (REPLICATE, np.full(len(best), index))):
            optima[name].append(part)
    if not optima[REPLICATE]:
        return pd.DataFrame(columns=list(optima))
    # One frame of every replicate's optima (a frame per replicate cost more than their losses)
    return pd.DataFrame({name: np.concatenate(parts) for name, parts in optima.items()})


def optimum_intervals(candidates: pd.DataFrame, replicates: Replicates, compute: str = "Compute",
                      correction: PhysicalBatchCorrection | None = None) -> pd.DataFrame:
    """Per compute budget: 5% / 95% quantiles over replicates of the optimum's loss, M, B and T
    (:func:`replicate_optima`); ``Best Cross Entropy`` bands the running minimum over compute, per replicate."""
    stacked = replicate_optima(candidates, replicates, compute, correction)
    columns = [compute] + [name for column in (BEST, *OPTIMUM_COLUMNS) for name in band(column)] + [ANSWERING]
    if stacked.empty:
        return pd.DataFrame(columns=columns)
    grouped = stacked.groupby(compute)[[BEST, *OPTIMUM_COLUMNS]]
    low, high = grouped.quantile(QUANTILES[0]), grouped.quantile(QUANTILES[1])
    table = pd.concat([low.add_suffix(" 5%"), high.add_suffix(" 95%"),
                       stacked.groupby(compute)[REPLICATE].nunique().rename(ANSWERING)], axis=1).reset_index()
    return table.reindex(columns=columns)
