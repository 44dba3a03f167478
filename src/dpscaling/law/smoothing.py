"""Data cleaning and smoothing (paper §3.3 "Data Cleaning and Smoothing"; appendix "Smoothing and Extrapolation").

Per (model, learning rate): drop warm-up measurements, a trailing rolling mean
over the previous measurements of each training curve, isotonic regression
non-increasing in iterations for each σ̄, then non-decreasing in σ̄ for each
iteration count; no monotonicity in model size. Finally the pointwise minimum
over learning rates. The σ̄ pass orders the noisy columns only, as the paper
says ("the 18 loss values"), so the non-private curve never moves a private
one; ``LawSettings.smooth_nonprivate_along_nbr`` (on in reference mode)
includes σ̄ = 0, as the authors' code does, so the noise-free curve ends up
below every noisy one.

NaN handling: the paper's default fits each isotonic regression on the finite
entries only and leaves NaNs in place, so the finite values are exactly
monotone and the NaNs are counted, not hidden; with NaNs the two passes
alternate until both orders hold (without NaNs one pass already guarantees it).
``LawSettings.isotonic_skip_nan=False`` (reference mode) passes NaNs to scipy as
the authors' code does (scipy then returns the vector unchanged: monotonicity
silently broken).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from dpscaling.law.columns import (
    CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO)
from dpscaling.law.settings import LawSettings

logger = logging.getLogger(__name__)


def isotonic(values: np.ndarray, increasing: bool, skip_nan: bool = True) -> np.ndarray:
    """L2 isotonic regression of a 1-D vector; with ``skip_nan`` NaNs stay NaN and do not block pooling."""
    from scipy.optimize import isotonic_regression  # SciPy on first use, not when the workflow plans

    values = np.asarray(values, dtype=float)
    if not skip_nan:
        return isotonic_regression(values, increasing=increasing).x
    finite = np.isfinite(values)
    result = np.full_like(values, np.nan)
    if finite.any():
        result[finite] = isotonic_regression(values[finite], increasing=increasing).x
    return result


def rolling_mean(surface: pd.DataFrame, window: int | None) -> pd.DataFrame:
    """Step 1: the trailing mean over ``window`` measurements (rows = iterations, ascending); None = off."""
    if not window:
        return surface
    # Mask afterwards: a rolling mean would otherwise invent values where a run has none.
    return surface.rolling(window, min_periods=1).mean().where(surface.notna())


def smooth_surface(surface: pd.DataFrame, settings: LawSettings) -> pd.DataFrame:
    """Smooth one (model, learning rate) surface: rows = iterations (ascending), columns = σ̄ (ascending)."""
    surface = rolling_mean(surface.sort_index().sort_index(axis=1), settings.rolling_window)
    skip_nan = settings.isotonic_skip_nan
    # Columns the σ̄ pass orders: all, or the noisy ones only (σ̄ = 0 is the first column when present).
    first = 0 if settings.smooth_nonprivate_along_nbr else int((surface.columns <= 0).sum())
    values = _isotonic_passes(surface.to_numpy(dtype=float), skip_nan, first)
    # One pass suffices on a complete grid: isotonic regression is order-preserving, so rows that are
    # ordered in T stay ordered after the σ̄ pass. Rows with NaNs in different places are fitted on
    # different subsets and can lose the T order; alternate the passes until both orders hold.
    passes = 1
    while skip_nan and _violation(values, first) > _TOLERANCE and passes < _MAX_PASSES:
        values = _isotonic_passes(values, skip_nan, first)
        passes += 1
    if skip_nan and passes == _MAX_PASSES:
        logger.warning("smoothing: monotonicity still broken by %.3g after %d passes", _violation(values, first),
                       passes)
    return pd.DataFrame(values, index=surface.index, columns=surface.columns)


_TOLERANCE = 1e-12
_MAX_PASSES = 10_000


def _isotonic_passes(values: np.ndarray, skip_nan: bool, first: int = 0) -> np.ndarray:
    """Non-increasing along iterations (axis 0), then non-decreasing along σ̄ (axis 1) over columns ``first:``."""
    values = np.apply_along_axis(isotonic, 0, values, increasing=False, skip_nan=skip_nan)
    if values.shape[1] - first > 1:
        values[:, first:] = np.apply_along_axis(isotonic, 1, values[:, first:], increasing=True, skip_nan=skip_nan)
    return values


def _violation(values: np.ndarray, first: int = 0) -> float:
    """Largest break of either order between consecutive finite cells of a column or row (rows: columns ``first:``)."""
    worst = 0.0
    for axis, sign in ((0, -1.0), (1, 1.0)):
        lines = values[:, first:] if axis == 1 else values.T
        for line in lines:
            finite = line[np.isfinite(line)]
            if len(finite) > 1:
                worst = max(worst, float(np.max(-sign * np.diff(finite))))
    return worst


def surface_of(results: pd.DataFrame) -> pd.DataFrame:
    """Pivot one (model, learning rate) slice to iterations × σ̄; repeated seeds are averaged."""
    return results.pivot_table(index=ITERATIONS, columns=NOISE_BATCH_RATIO, values=CROSS_ENTROPY,
                               aggfunc="mean", dropna=False)


def smooth_results(results: pd.DataFrame, settings: LawSettings) -> pd.DataFrame:
    """Tidy measurements → smoothed grid, minimised over learning rates.

    Returns one row per (Model, Model Size, Iterations, Noise Batch Ratio) with
    the smoothed Cross Entropy and the Learning Rate that achieved it (NaN
    where no learning rate has a value).
    """
    kept = results[results[ITERATIONS] >= settings.warmup_steps]
    smoothed = []
    for (model, size, rate), group in kept.groupby([MODEL, MODEL_SIZE, LEARNING_RATE], sort=True):
        surface = smooth_surface(surface_of(group), settings)
        long = surface.stack(future_stack=True).rename(CROSS_ENTROPY).reset_index()
        smoothed.append(long.assign(**{MODEL: model, MODEL_SIZE: size, LEARNING_RATE: rate}))
    if not smoothed:
        return pd.DataFrame(columns=[MODEL, MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO, CROSS_ENTROPY, LEARNING_RATE])
    return minimum_over_learning_rates(pd.concat(smoothed, ignore_index=True))


def minimum_over_learning_rates(smoothed: pd.DataFrame) -> pd.DataFrame:
    """Pointwise minimum over learning rates, keeping which rate won (NaNs are skipped)."""
    keys = [MODEL, MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO]
    finite = smoothed.dropna(subset=[CROSS_ENTROPY])
    best = finite.loc[finite.groupby(keys)[CROSS_ENTROPY].idxmin()]
    every_cell = smoothed[keys].drop_duplicates()
    merged = every_cell.merge(best[keys + [CROSS_ENTROPY, LEARNING_RATE]], on=keys, how="left")
    return merged.sort_values(keys).reset_index(drop=True)


def monotonicity_violations(grid: pd.DataFrame, tolerance: float = 1e-12,
                            nonprivate_along_nbr: bool = False) -> pd.DataFrame:
    """Cells of a smoothed grid that break the paper's invariants (for tests and reports).

    Compares consecutive finite values per (model, σ̄) along iterations and per
    (model, iterations) along σ̄ (σ̄ > 0 only unless ``nonprivate_along_nbr``, the authors' invariant).
    """
    rows = []
    finite = grid.dropna(subset=[CROSS_ENTROPY])
    for axis, along, sign in ((NOISE_BATCH_RATIO, ITERATIONS, -1), (ITERATIONS, NOISE_BATCH_RATIO, +1)):
        lines = finite if along == ITERATIONS or nonprivate_along_nbr else finite[finite[NOISE_BATCH_RATIO] > 0]
        for (model, key), group in lines.groupby([MODEL, axis]):
            values = group.sort_values(along)[CROSS_ENTROPY].to_numpy()
            bad = np.flatnonzero(sign * np.diff(values) < -tolerance)
            rows += [{MODEL: model, axis: key, "along": along, "position": int(i)} for i in bad]
    return pd.DataFrame(rows, columns=[MODEL, NOISE_BATCH_RATIO, ITERATIONS, "along", "position"])
