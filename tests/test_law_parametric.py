"""Parametric fits (paper appendix "Parametric Scaling Laws"): transform, recovery, filters, optimal model size."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO
from dpscaling.law.parametric import (
    EXAMPLES, L1, L2, ParametricFilters, fit_paper_forms, fit_parametric, optimal_model_size,
    sigmoid_noise_batch_ratio)

TRUE_L2 = {"E": 1.5, "A": 40.0, "B": 60.0, "C": 3.0, "alpha": 0.3, "beta": 0.25, "gamma": 1.2, "alpha2": 0.05}


def l2_data() -> pd.DataFrame:
    m, t, s = (a.ravel() for a in np.meshgrid(np.geomspace(1e6, 3e8, 5), np.geomspace(1e4, 1.28e5, 6),
                                             2.0 ** -np.arange(6.0, 22.0, 2), indexing="ij"))
    frame = pd.DataFrame({MODEL_SIZE: m, ITERATIONS: t, NOISE_BATCH_RATIO: s, EXAMPLES: 1024 * t})
    return frame.assign(**{CROSS_ENTROPY: L2.predict(TRUE_L2, m, 1024 * t, s)})


def test_sigmoid_transform() -> None:
    assert sigmoid_noise_batch_ratio(np.exp(-8.0)) == pytest.approx(0.5)
    assert sigmoid_noise_batch_ratio(np.exp(-8.0 + 1.6)) == pytest.approx(1 / (1 + np.exp(-1)))


@pytest.fixture(scope="module")
def paper_forms():
    return fit_paper_forms(l2_data().drop(columns=EXAMPLES), physical_batch=1024)


def test_noiseless_l2_data_is_recovered(paper_forms) -> None:
    fits, diagnostics = paper_forms
    assert fits["L2"]["rmse"] < 1e-3 and fits["L2"]["starts"] == 16
    np.testing.assert_allclose(diagnostics["Predicted L2"], diagnostics[CROSS_ENTROPY], rtol=1e-3)
    # the naive form cannot capture the S-shaped σ̄ dependence as well
    assert fits["L1"]["rmse"] > 10 * fits["L2"]["rmse"]


def test_fit_parametric_uses_huber_lbfgs_multistart() -> None:
    data = l2_data().iloc[::4]
    fit = fit_parametric(L1, data)
    assert fit["starts"] == 8 and fit["huber_delta"] == 1e-3 and fit["points"] == len(data)


def test_filters_scale_with_the_horizon() -> None:
    grid = pd.DataFrame({ITERATIONS: [300.0, 350.0, 400.0, 400.0, 400.0],
                         NOISE_BATCH_RATIO: [1e-3, 1e-3, 1e-3, 1e-7, 1e-3],
                         CROSS_ENTROPY: [3.0, 3.0, 3.0, 3.0, 9.0], MODEL_SIZE: 1e6})
    kept = ParametricFilters().apply(grid)  # T > 0.78125·400 = 312.5, σ̄ > 5e-7, loss ≤ 8
    assert kept[ITERATIONS].tolist() == [350.0, 400.0]


def test_fit_paper_forms_reports_predicted_vs_observed(paper_forms) -> None:
    fits, diagnostics = paper_forms
    assert set(fits) == {"L1", "L2", "filters"}
    assert {"Predicted L1", "Predicted L2", CROSS_ENTROPY} <= set(diagnostics.columns)
    assert len(diagnostics) == fits["L2"]["points"]


def test_optimal_model_size_matches_a_brute_force_search() -> None:
    compute, nbr, seq_len = 1e20, 2.0**-12, 512
    found = optimal_model_size(L2, TRUE_L2, compute, nbr, seq_len, (1e6, 1e10))
    sizes = np.geomspace(1e6, 1e10, 20001)
    brute = sizes[np.argmin(L2.predict(TRUE_L2, sizes, compute / (6 * sizes * seq_len), nbr))]
    assert found == pytest.approx(brute, rel=2e-3)


def test_too_few_points_is_reported_not_fatal() -> None:
    from dpscaling.law import LawSettings, fit_law
    from dpscaling.law.synthetic import synthetic_results

    # Losses above the appendix's cut (cross entropy > 8) leave nothing to fit L1/L2 on.
    results = synthetic_results(noise=0.0)
    results["Cross Entropy"] = results["Cross Entropy"] + 20.0
    law = fit_law(results, LawSettings(warmup_steps=0, rolling_window=None), parametric=True)
    assert law.parametric is None
    assert "parametric filters" in law.report["parametric_failed"]


def test_a_term_the_data_do_not_constrain_is_a_degenerate_fit_not_a_crash() -> None:
    from dpscaling.law.parametric import degenerate_reason

    # The decoder grid's situation: the loss does not fall with M over the grid, so A/M^α can drift
    # until A = exp(log A) overflows while its contribution stays nil.
    assert degenerate_reason(L2, {"E": 1.0, "A": 4489.0, "B": 2.0, "C": 0.2, "alpha": 390.7, "beta": 0.2,
                                  "gamma": 1.0, "alpha2": 0.0}).startswith("L2's fit is degenerate")
    assert degenerate_reason(L2, {name: np.log(value) if name in "EABC" else value
                                  for name, value in TRUE_L2.items()}) is None
    fit = fit_parametric(L2, l2_data().iloc[::3])
    assert fit["degenerate"] is None and fit["converged"]
