"""Smoothing (paper §3.3): isotonic monotonicity, idempotence, NaN handling, rolling mean, warm-up, LR minimum."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import isotonic_regression

from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO
from dpscaling.law.settings import LawSettings
from dpscaling.law.smoothing import isotonic, monotonicity_violations, smooth_results, smooth_surface

NO_ROLLING = LawSettings(warmup_steps=0, rolling_window=None)


def noisy_surface(seed: int = 0, rows: int = 40, nan_cells: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    iterations = np.arange(1, rows + 1) * 100.0
    nbrs = [0.0, 2.0**-12, 2.0**-9, 2.0**-6]
    values = (3 + 20 * iterations[:, None] ** -0.4 + np.arange(len(nbrs))[None, :] * 0.05
              + rng.normal(0, 0.1, (rows, len(nbrs))))
    if nan_cells:
        flat = rng.choice(values.size, nan_cells, replace=False)
        values.ravel()[flat] = np.nan
    return pd.DataFrame(values, index=pd.Index(iterations, name=ITERATIONS),
                        columns=pd.Index(nbrs, name=NOISE_BATCH_RATIO))


def assert_monotone(surface: pd.DataFrame, nonprivate_along_nbr: bool = False) -> None:
    for column in surface.columns:
        finite = surface[column].dropna().to_numpy()
        assert np.all(np.diff(finite) <= 1e-10), f"not non-increasing in T at σ̄={column}"
    ordered = surface if nonprivate_along_nbr else surface.loc[:, surface.columns > 0]
    for _, row in ordered.iterrows():
        finite = row.dropna().to_numpy()
        assert np.all(np.diff(finite) >= -1e-10), "not non-decreasing in σ̄"


def test_smoothing_is_monotone_in_both_directions() -> None:
    smoothed = smooth_surface(noisy_surface(), NO_ROLLING)
    assert_monotone(smoothed)
    assert smoothed.notna().all().all()


def test_second_smoothing_changes_nothing() -> None:
    once = smooth_surface(noisy_surface(seed=1), NO_ROLLING)
    np.testing.assert_allclose(smooth_surface(once, NO_ROLLING), once, rtol=0, atol=1e-12)


def test_reference_mode_pools_the_noise_free_curve_into_the_nbr_pass() -> None:
    """The authors' code: σ̄ = 0 takes part, so the noise-free curve ends below every noisy one."""
    surface = noisy_surface(seed=2)
    surface[0.0] = surface[2.0**-6] + 1.0  # noise-free measured above every noisy one
    smoothed = smooth_surface(surface, LawSettings.reference(warmup_steps=0))
    assert (smoothed[0.0] <= smoothed[2.0**-12] + 1e-12).all()
    assert_monotone(smoothed, nonprivate_along_nbr=True)


def test_paper_mode_orders_only_the_noisy_columns_along_nbr() -> None:
    """Paper §3.3: the σ̄ pass orders "the 18 loss values"; σ̄ = 0 is smoothed in T only and moves nothing."""
    surface = noisy_surface(seed=2)
    surface[0.0] = surface[2.0**-6] + 1.0
    paper = smooth_surface(surface, NO_ROLLING)
    included = smooth_surface(surface, LawSettings(warmup_steps=0, rolling_window=None,
                                                   smooth_nonprivate_along_nbr=True))
    # The setting decides the answer on this data: the noise-free curve stays above, or is pulled below.
    assert (paper[0.0] > paper[2.0**-6]).all()
    assert (included[0.0] <= included[2.0**-12] + 1e-12).all()
    np.testing.assert_allclose(paper[0.0], isotonic(surface[0.0].to_numpy(), increasing=False))
    # The noisy columns do not depend on the noise-free one at all.
    other = surface.copy()
    other[0.0] = surface[0.0] - 2.0
    pd.testing.assert_frame_equal(smooth_surface(other, NO_ROLLING).drop(columns=0.0), paper.drop(columns=0.0))
    assert not np.allclose(included.drop(columns=0.0), paper.drop(columns=0.0))


def test_nans_stay_in_place_and_do_not_break_monotonicity() -> None:
    surface = noisy_surface(seed=3, nan_cells=30, rows=200)
    smoothed = smooth_surface(surface, NO_ROLLING)
    pd.testing.assert_frame_equal(smoothed.isna(), surface.isna())
    assert_monotone(smoothed)


def test_isotonic_skips_nan_without_blocking_pooling() -> None:
    result = isotonic(np.array([3.0, 2.0, np.nan, 2.5, 1.0]), increasing=False)
    np.testing.assert_allclose(result, [3.0, 2.25, np.nan, 2.25, 1.0])


def test_reference_mode_passes_nan_to_scipy_and_loses_monotonicity() -> None:
    """The authors' code: scipy returns a NaN-containing vector unchanged.

    docs/fit.md, 'The authors' analysis code', step 1.
    """
    column = np.array([3.0, 2.0, np.nan, 2.5, 1.0])
    np.testing.assert_array_equal(isotonic(column, increasing=False, skip_nan=False),
                                  isotonic_regression(column, increasing=False).x)
    surface = pd.DataFrame({0.0: column, 2.0**-10: column + 0.1}, index=[100.0, 200, 300, 400, 500])
    smoothed = smooth_surface(surface, LawSettings.reference(warmup_steps=0))
    assert smoothed[0.0].iloc[3] > smoothed[0.0].iloc[1]  # 2.5 after 2.0: still increasing in T


def test_rolling_mean_over_previous_measurements_is_on_by_default() -> None:
    iterations = np.arange(1, 31) * 100.0
    curve = 2 + 10 / np.sqrt(iterations)  # already monotone, so isotonic keeps the rolling mean
    surface = pd.DataFrame({0.0: curve, 2.0**-8: curve + 0.5}, index=iterations)
    smoothed = smooth_surface(surface, LawSettings(warmup_steps=0))
    expected = pd.Series(curve).rolling(10, min_periods=1).mean().to_numpy()
    np.testing.assert_allclose(smoothed[0.0], expected)
    reference = smooth_surface(surface, LawSettings.reference(warmup_steps=0))
    np.testing.assert_allclose(reference[0.0], curve)  # the authors' code never applies it


def test_rolling_mean_does_not_invent_values_where_a_run_has_none() -> None:
    surface = noisy_surface(seed=4)
    surface.iloc[25:, 1] = np.nan  # a run that stopped early
    smoothed = smooth_surface(surface, LawSettings(warmup_steps=0))
    assert smoothed.iloc[25:, 1].isna().all()


def tidy(surface: pd.DataFrame, model: str, size: float, rate: float) -> pd.DataFrame:
    long = surface.stack(future_stack=True).rename(CROSS_ENTROPY).reset_index()
    long.columns = [ITERATIONS, NOISE_BATCH_RATIO, CROSS_ENTROPY]
    return long.assign(**{MODEL: model, MODEL_SIZE: size, LEARNING_RATE: rate})


def test_warmup_is_dropped_and_minimum_over_learning_rates_is_taken() -> None:
    good, bad = noisy_surface(seed=5), noisy_surface(seed=5) + 0.3
    bad.iloc[-1, :] = 0.0  # the other learning rate wins one row
    results = pd.concat([tidy(good, "M", 1e6, 2.0**-7), tidy(bad, "M", 1e6, 2.0**-8)])
    grid = smooth_results(results, LawSettings(warmup_steps=1000, rolling_window=None))
    assert grid[ITERATIONS].min() == 1000  # T = warm-up is kept, T < warm-up dropped
    last = grid[grid[ITERATIONS] == grid[ITERATIONS].max()]
    assert (last[LEARNING_RATE] == 2.0**-8).all() and (last[CROSS_ENTROPY] == 0.0).all()
    assert (grid.loc[grid[ITERATIONS] < 3000, LEARNING_RATE] == 2.0**-7).all()
    assert monotonicity_violations(grid).empty


@pytest.mark.parametrize("reference", [False, True])
def test_smooth_results_keeps_cells_without_any_learning_rate_as_nan(reference: bool) -> None:
    surface = noisy_surface(seed=6)
    surface.iloc[-3:, 2] = np.nan
    settings = LawSettings.create(reference, warmup_steps=0)
    grid = smooth_results(tidy(surface, "M", 1e6, 0.01), settings)
    assert len(grid) == surface.size
    assert grid[CROSS_ENTROPY].isna().sum() == 3
