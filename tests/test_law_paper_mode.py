"""Paper mode vs the authors' code (docs/fit.md): the non-private column does not move private answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpscaling.law import LawSettings, fit_law
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, NOISE_BATCH_RATIO
from dpscaling.law.synthetic import synthetic_results

SETTINGS = dict(warmup_steps=100, rolling_window=None)


def private_queries(law) -> np.ndarray:
    """Law answers at σ̄ > 0 across model sizes, measured and extrapolated iterations, and between grid σ̄."""
    low, high = law.model_size_range()
    sizes, iterations = np.geomspace(low, high, 5), np.geomspace(200, law.iteration_bounds()[1], 7)
    nbrs = np.geomspace(2.0**-12, 2.0**-6, 9)
    m, t, s = (a.ravel() for a in np.meshgrid(sizes, iterations, nbrs, indexing="ij"))
    return law.loss(m, t, s)


def with_worse_noise_free_curves(results):
    """Only the σ̄ = 0 curves change: they end 0.5 nats higher and bend the other way late in training."""
    changed = results.copy()
    nonprivate = changed[NOISE_BATCH_RATIO] == 0.0
    late = changed[ITERATIONS] / changed[ITERATIONS].max()
    changed.loc[nonprivate, CROSS_ENTROPY] += 0.5 * late[nonprivate] ** 2
    return changed


@pytest.mark.parametrize("reference", [False, True])
def test_private_answers_ignore_the_noise_free_curves_in_paper_mode_only(reference: bool) -> None:
    results = synthetic_results()
    settings = LawSettings.create(reference, **SETTINGS)
    before = private_queries(fit_law(results, settings))
    changed = fit_law(with_worse_noise_free_curves(results), settings)
    after = private_queries(changed)
    assert np.isfinite(before).all() and np.isfinite(after).all()
    # The change is visible where the law answers non-privately.
    assert not np.allclose(changed.loss(1e5, 1000, 0.0), fit_law(results, settings).loss(1e5, 1000, 0.0))
    if reference:  # the authors' code: σ̄ pass and tied E carry the change into every private answer
        assert np.max(np.abs(after - before)) > 0.01
    else:
        np.testing.assert_array_equal(after, before)


def test_interpolation_settings_reach_the_fitted_law() -> None:
    """interpolate_log_loss and fill_missing_nbr: exact at grid points either way, different in between."""
    results = synthetic_results(noise=0.0, noise_batch_ratios=(0.0, 2.0**-12, 2.0**-11, 2.0**-8, 2.0**-6))
    # Synthetic1 lacks σ̄ = 2^-11: filled from its neighbours 2^-12 and 2^-8, a quarter of the way in
    # log σ̄ or half-way by column position.
    results = results[~((results["Model"] == "Synthetic1") & (results[NOISE_BATCH_RATIO] == 2.0**-11))]
    laws = {name: fit_law(results, LawSettings(**SETTINGS, **choice)) for name, choice in {
        "paper": {}, "log": {"interpolate_log_loss": True}, "positional": {"fill_missing_nbr": "positional"}}.items()}
    grid_point = (1e5, 1000.0, 2.0**-8)
    values = {name: law.loss(*grid_point) for name, law in laws.items()}
    np.testing.assert_allclose(values["log"], values["paper"], rtol=1e-12)
    between = (2e5, 1000.0, 2.0**-9)  # between models and σ̄ columns
    assert not np.isclose(laws["log"].loss(*between), laws["paper"].loss(*between), rtol=1e-6)
    filled = (4e5, 1000.0, 2.0**-11)  # Synthetic1's missing column
    assert not np.isclose(laws["positional"].loss(*filled), laws["paper"].loss(*filled), rtol=1e-6)


def test_isotonic_nan_setting_decides_whether_a_curve_with_a_gap_is_smoothed() -> None:
    from dpscaling.law.smoothing import smooth_surface

    column = np.array([3.0, 2.0, np.nan, 2.5, 1.0])
    surface = pd.DataFrame({2.0**-12: column, 2.0**-10: column + 0.1}, index=[100.0, 200, 300, 400, 500])
    skipped = smooth_surface(surface, LawSettings(warmup_steps=0, rolling_window=None))
    passed = smooth_surface(surface, LawSettings(warmup_steps=0, rolling_window=None, isotonic_skip_nan=False))
    assert skipped[2.0**-12].iloc[3] <= skipped[2.0**-12].iloc[1]  # monotone around the gap
    assert passed[2.0**-12].iloc[3] > passed[2.0**-12].iloc[1]  # scipy leaves it: 2.5 after 2.0
