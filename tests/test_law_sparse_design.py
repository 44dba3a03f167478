"""The law on a sparse design (not in the paper; LawSettings.curve_horizons and fill_missing_models, for
dpscaling.design): a curve stopped at a quarter of the horizon is extrapolated from its own horizon, and a cell no
run measured is filled between the models that have it; with the options off, the paper's law leaves both NaN."""

from __future__ import annotations

import numpy as np
import pytest

from dpscaling.law import LawSettings
from dpscaling.law.artifact import fit_law
from dpscaling.law.columns import ITERATIONS, MODEL, NOISE_BATCH_RATIO
from dpscaling.law.synthetic import TrueLaw, synthetic_results

SIZES = (1e5, 4e5, 1.6e6)
PAPER = LawSettings(warmup_steps=100, rolling_window=3)
SPARSE = LawSettings(warmup_steps=100, rolling_window=3, curve_horizons=True, fill_missing_models=True)


@pytest.fixture(scope="module")
def results():
    return synthetic_results(model_sizes=SIZES, learning_rates=(2.0**-7,), steps=2000, log_every=20, noise=0.005)


def test_a_curve_stopped_short_takes_its_neighbours_longer_curves_and_its_own_extrapolation_only_alone(results):
    short = (results[MODEL] == "Synthetic1") & (results[NOISE_BATCH_RATIO] == 2.0**-10)
    cut = results[~short | (results[ITERATIONS] <= 500)]
    at = (np.array([4e5]), np.array([2000.0]), np.array([2.0**-10]))
    truth = float(TrueLaw()(*at)[0])
    sparse = fit_law(cut, SPARSE)
    assert abs(float(sparse.loss(*at)[0]) - truth) < 0.06  # from the σ̄ neighbours measured to 2000
    # the curves measured to the horizon are read as before
    full = (np.array([1e5, 1.6e6]), np.array([1000.0, 1500.0]), np.array([2.0**-8, 2.0**-12]))
    np.testing.assert_allclose(sparse.loss(*full), fit_law(results, PAPER).loss(*full), atol=0.02)
    grid = sparse.grid
    cells = grid[(grid[MODEL] == "Synthetic1") & (grid[NOISE_BATCH_RATIO] == 2.0**-10) & (grid[ITERATIONS] > 500)]
    assert set(cells["Source"]) == {"filled"} and cells["Cross Entropy"].notna().all()


def test_a_short_curve_at_a_corner_of_the_grid_keeps_its_own_extrapolation(results) -> None:
    """At the smallest model and σ̄ no fill has neighbours on both sides: the curve's own extrapolation from its
    window [62, 500] is what is left (the paper's law, fitting on [250, 2000], answers from 13 points too)."""
    corner = (results[MODEL] == "Synthetic0") & (results[NOISE_BATCH_RATIO] == 2.0**-12)
    cut = results[~corner | (results[ITERATIONS] <= 500)]
    grid = fit_law(cut, SPARSE).grid
    cells = grid[(grid[MODEL] == "Synthetic0") & (grid[NOISE_BATCH_RATIO] == 2.0**-12) & (grid[ITERATIONS] > 500)]
    assert set(cells["Source"]) == {"extrapolated"} and cells["Cross Entropy"].notna().all()
    assert "Own Extrapolation" not in grid


def test_a_cell_no_run_measured_is_filled_between_the_models_that_have_it(results) -> None:
    gap = (results[MODEL] == "Synthetic1") & (results[NOISE_BATCH_RATIO].isin([2.0**-12, 2.0**-6]))
    sparse = results[~gap]
    at = (np.array([4e5, 4e5]), np.array([1000.0, 1000.0]), np.array([2.0**-12, 2.0**-6]))
    assert np.isnan(fit_law(sparse, PAPER).loss(*at)).all()  # the σ̄ fill never extrapolates past a model's range
    predicted = fit_law(sparse, SPARSE).loss(*at)
    assert np.isfinite(predicted).all()
    assert np.max(np.abs(predicted - TrueLaw()(*at))) < 0.1
    assert fit_law(sparse, SPARSE).report["filled_cells"] > fit_law(sparse, PAPER).report["filled_cells"]
