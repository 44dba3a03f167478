"""Extrapolation in iterations (paper §3.3): exact on noiseless power laws, scaled windows, failures reported."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, SOURCE
from dpscaling.law.extrapolation import EXTRAPOLATED, extrapolate, power_law
from dpscaling.law.settings import LawSettings, Window

# Per model: shared asymptote E; per σ̄: (A, α) — noise slows convergence, as in the authors' model.
TRUE_CURVES = {
    ("Small", 1e6): (2.5, {0.0: (30.0, 0.35), 2.0**-10: (45.0, 0.33), 2.0**-6: (80.0, 0.3)}),
    ("Large", 1e7): (2.0, {0.0: (25.0, 0.4), 2.0**-10: (40.0, 0.37), 2.0**-6: (70.0, 0.32)}),
}


def power_law_grid(iterations: np.ndarray) -> pd.DataFrame:
    frames = []
    for (model, size), (E, curves) in TRUE_CURVES.items():
        for nbr, (A, alpha) in curves.items():
            frames.append(pd.DataFrame({MODEL: model, MODEL_SIZE: size, ITERATIONS: iterations,
                                        NOISE_BATCH_RATIO: nbr, CROSS_ENTROPY: power_law(iterations, E, A, alpha)}))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("asymptote", ["per_curve", "nonprivate"])
def test_noiseless_power_laws_are_extrapolated_exactly_to_the_papers_horizon(asymptote: str) -> None:
    measured = power_law_grid(np.arange(1000, 128_001, 100, dtype=float))
    grid, fits = extrapolate(measured, LawSettings(extrapolation_asymptote=asymptote))
    assert (fits["status"] == "ok").all()
    extrapolated = grid[grid[SOURCE] == EXTRAPOLATED]
    # 16000·2^k from 256K to 8.192M, as the paper and the authors' code
    assert sorted(extrapolated[ITERATIONS].unique()) == [256_000 * 2**k for k in range(6)]
    for (model, _), (E, curves) in TRUE_CURVES.items():
        own = fits.query("model == @model and kind == 'asymptote'")
        if asymptote == "nonprivate":
            assert np.isclose(own["E"].item(), E, rtol=1e-6)
        else:  # paper: no E* fit; every curve finds the shared E on its own
            assert own.empty
            np.testing.assert_allclose(fits.query("model == @model")["E"], E, rtol=1e-5)
        for nbr, (A, alpha) in curves.items():
            rows = extrapolated[(extrapolated[MODEL] == model) & (extrapolated[NOISE_BATCH_RATIO] == nbr)]
            np.testing.assert_allclose(rows[CROSS_ENTROPY], power_law(rows[ITERATIONS], E, A, alpha), rtol=1e-6)


def test_windows_scale_with_a_short_horizon() -> None:
    measured = power_law_grid(np.arange(10, 401, 10, dtype=float))
    settings = LawSettings(warmup_steps=10)
    assert settings.extrapolation_window.resolve(400) == (50, 400)
    grid, fits = extrapolate(measured, settings)
    assert sorted(grid.loc[grid[SOURCE] == EXTRAPOLATED, ITERATIONS].unique()) == [800 * 2**k for k in range(6)]
    curve_fits = fits[fits["kind"] == "curve"]
    assert (curve_fits["points"] == 36).all()  # T = 50..400 every 10
    extrapolated = grid[grid[SOURCE] == EXTRAPOLATED]
    E, (A, alpha) = 2.0, TRUE_CURVES[("Large", 1e7)][1][2.0**-6]
    rows = extrapolated[(extrapolated[MODEL] == "Large") & (extrapolated[NOISE_BATCH_RATIO] == 2.0**-6)]
    np.testing.assert_allclose(rows[CROSS_ENTROPY], power_law(rows[ITERATIONS], E, A, alpha), rtol=1e-6)


def test_explicit_step_windows() -> None:
    window = Window(16_000, 128_000, "steps")
    assert window.resolve(400) == (16_000, 128_000)
    assert Window(1 / 8, 1.0).resolve(128_000) == (16_000, 128_000)


def test_failed_fits_are_reported_and_their_cells_are_nan_not_dropped() -> None:
    """Reference mode (E tied to E*): a model without a noise-free fit loses every σ̄."""
    measured = power_law_grid(np.arange(1000, 128_001, 1000, dtype=float))
    hole = (measured[MODEL] == "Small") & (measured[NOISE_BATCH_RATIO] == 2.0**-6) & (measured[ITERATIONS] > 17_000)
    measured.loc[hole, CROSS_ENTROPY] = np.nan  # too few points left in [16K, 128K]
    no_noise_free = measured[~((measured[MODEL] == "Large") & (measured[NOISE_BATCH_RATIO] == 0.0))]
    grid, fits = extrapolate(no_noise_free, LawSettings.reference())
    failed = fits[fits["status"] == "failed"]
    small = failed[failed["model"] == "Small"]
    assert small["noise_batch_ratio"].tolist() == [2.0**-6] and "finite points" in small["reason"].item()
    large = failed[failed["model"] == "Large"]
    assert set(large["kind"]) == {"asymptote", "curve"} and len(large) == 3
    assert "noise-free" in large.query("kind == 'asymptote'")["reason"].item()
    extrapolated = grid[grid[SOURCE] == EXTRAPOLATED]
    failed_cells = extrapolated[(extrapolated[MODEL] == "Large")
                                | ((extrapolated[MODEL] == "Small") & (extrapolated[NOISE_BATCH_RATIO] == 2.0**-6))]
    assert len(failed_cells) == 3 * 6 and failed_cells[CROSS_ENTROPY].isna().all()


def test_paper_mode_a_failed_curve_fails_only_that_curve() -> None:
    """Paper mode: no noise-free curve for Large and a broken Small curve fail those two curves only."""
    measured = power_law_grid(np.arange(1000, 128_001, 1000, dtype=float))
    hole = (measured[MODEL] == "Small") & (measured[NOISE_BATCH_RATIO] == 2.0**-6) & (measured[ITERATIONS] > 17_000)
    measured.loc[hole, CROSS_ENTROPY] = np.nan
    no_noise_free = measured[~((measured[MODEL] == "Large") & (measured[NOISE_BATCH_RATIO] == 0.0))]
    grid, fits = extrapolate(no_noise_free, LawSettings())
    failed = fits[fits["status"] == "failed"]
    assert list(zip(failed["model"], failed["noise_batch_ratio"])) == [("Small", 2.0**-6)]
    extrapolated = grid[grid[SOURCE] == EXTRAPOLATED]
    large = extrapolated[extrapolated[MODEL] == "Large"]
    assert len(large) == 2 * 6 and large[CROSS_ENTROPY].notna().all()
    E, (A, alpha) = 2.0, TRUE_CURVES[("Large", 1e7)][1][2.0**-10]
    rows = large[large[NOISE_BATCH_RATIO] == 2.0**-10]
    np.testing.assert_allclose(rows[CROSS_ENTROPY], power_law(rows[ITERATIONS], E, A, alpha), rtol=1e-5)


def test_asymptote_setting_decides_the_extrapolation_when_curves_do_not_share_e() -> None:
    """Noisy curves with their own asymptote (above E*): per-curve E recovers them, tying E to E* cannot."""
    iterations = np.arange(1000, 128_001, 1000, dtype=float)
    own_asymptote = {0.0: 2.0, 2.0**-10: 2.4, 2.0**-6: 3.0}
    measured = pd.concat([pd.DataFrame({MODEL: "M", MODEL_SIZE: 1e6, ITERATIONS: iterations, NOISE_BATCH_RATIO: nbr,
                                        CROSS_ENTROPY: power_law(iterations, E, 40.0, 0.35)})
                          for nbr, E in own_asymptote.items()], ignore_index=True)
    answers = {}
    for asymptote in ("per_curve", "nonprivate"):
        grid, _ = extrapolate(measured, LawSettings(extrapolation_asymptote=asymptote))
        rows = grid[(grid[SOURCE] == EXTRAPOLATED) & (grid[NOISE_BATCH_RATIO] == 2.0**-6)]
        answers[asymptote] = (rows[CROSS_ENTROPY].to_numpy(), power_law(rows[ITERATIONS], 3.0, 40.0, 0.35))
    np.testing.assert_allclose(*answers["per_curve"], rtol=1e-5)
    predicted, truth = answers["nonprivate"]
    assert np.max(np.abs(predicted - truth)) > 0.05  # tied to E* = 2.0, the extrapolation undershoots


def test_a_failed_free_fit_falls_back_to_the_models_asymptote_only_where_asked() -> None:
    """per_curve_else_nonprivate: a curve straight in log T (the free fit runs E towards -inf and fails) is
    fitted again with E = E*; every curve whose free fit succeeds is the paper's bit for bit."""
    iterations = np.arange(10, 501, 10, dtype=float)
    measured = power_law_grid(iterations)
    straight = (measured[MODEL] == "Small") & (measured[NOISE_BATCH_RATIO] == 2.0**-6)
    measured.loc[straight, CROSS_ENTROPY] = 6.0 - 0.05 * np.log(iterations)  # no finite asymptote fits it
    settings = LawSettings(warmup_steps=10)
    paper_grid, paper = extrapolate(measured, settings)
    failed = paper[paper["status"] == "failed"]
    assert list(zip(failed["model"], failed["noise_batch_ratio"])) == [("Small", 2.0**-6)]
    grid, fits = extrapolate(measured, dataclasses.replace(settings,
                                                            extrapolation_asymptote="per_curve_else_nonprivate"))
    assert (fits["status"] == "ok").all()
    # One E* fit, for the model that needed it, and the replaced curve says why it is tied.
    asymptotes = fits[fits["kind"] == "asymptote"]
    assert asymptotes["model"].tolist() == ["Small"] and np.isclose(asymptotes["E"].item(), 2.5, rtol=1e-4)
    replaced = fits[(fits["model"] == "Small") & (fits["noise_batch_ratio"] == 2.0**-6)]
    assert replaced["E"].item() == asymptotes["E"].item() and "free fit failed" in replaced["reason"].item()
    # Every other curve and cell is the paper's, bit for bit.
    curves = fits[fits["kind"] == "curve"].drop(columns="reason").reset_index(drop=True)
    paper_curves = paper.drop(columns="reason").reset_index(drop=True)
    others = ~((curves["model"] == "Small") & (curves["noise_batch_ratio"] == 2.0**-6))
    pd.testing.assert_frame_equal(curves[others].reset_index(drop=True), paper_curves[others].reset_index(drop=True))
    cell = (grid[MODEL] == "Small") & (grid[NOISE_BATCH_RATIO] == 2.0**-6) & (grid[SOURCE] == EXTRAPOLATED)
    pd.testing.assert_frame_equal(grid[~cell].reset_index(drop=True), paper_grid[~cell].reset_index(drop=True))
    assert grid.loc[cell, CROSS_ENTROPY].notna().all() and paper_grid.loc[cell, CROSS_ENTROPY].isna().all()
    # The tied extrapolation keeps falling towards E*, from below the last measurement.
    tied = grid.loc[cell].sort_values(ITERATIONS)[CROSS_ENTROPY].to_numpy()
    assert (np.diff(tied) < 0).all() and tied[0] < 6.0 - 0.05 * np.log(500) and (tied > 2.5).all()
