"""Figures that query the fitted law (docs/figures.md): fig:vary_compute_and_privacy, fig:token_model_ratios,
fig:full_grid, fig:baseline_compare and the non-private reproduction.

Each is rendered on the synthetic context (tests/figure_context.py); the CSV written beside it is read back
and checked against the identities its numbers must satisfy.
"""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from figure_context import PHYSICAL_BATCH, SEQ_LEN, SETTINGS, synthetic_context

from dpscaling.report.figures import FIGURES, baselines, full_grid, nonprivate, render, vary_compute
from dpscaling.law.columns import (
    BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO,
    PRIVACY_BUDGET, REASON, TOKENS_PER_PARAMETER)
from dpscaling.law.queries import saturating_compute

NAMES = ("fig-vary_compute_and_privacy", "fig-token_model_ratios", "fig-full_grid", "fig-baseline_compare",
         "fig-nonprivate_reproduction")
MODULES = {"fig-vary_compute_and_privacy": vary_compute, "fig-token_model_ratios": vary_compute,
           "fig-full_grid": full_grid, "fig-baseline_compare": baselines, "fig-nonprivate_reproduction": nonprivate}


@pytest.fixture(scope="module")
def context():
    return synthetic_context()


@pytest.fixture(scope="module")
def rendered(context, tmp_path_factory):
    """name → (written paths, the CSV read back); each figure rendered once through the registry."""
    out = tmp_path_factory.mktemp("figures")
    return {name: (paths := render(name, context, out / name), pd.read_csv(paths[-1])) for name in NAMES}


def answered(data: pd.DataFrame) -> pd.DataFrame:
    return data.dropna(subset=[CROSS_ENTROPY, MODEL_SIZE, BATCH_SIZE, ITERATIONS])


def texts(figure) -> list[str]:
    return [t.get_text() for ax in figure.axes for t in ax.texts] + [t.get_text() for t in figure.texts]


def test_every_figure_is_registered_with_the_paper_label():
    for name in NAMES:
        spec = FIGURES[name]
        assert spec in MODULES[name].FIGURES and spec.name == name and spec.caption
    assert "fig:my_label" in FIGURES["fig-nonprivate_reproduction"].caption


@pytest.mark.parametrize("name", NAMES)
def test_renders_pdf_png_and_csv(rendered, name):
    paths, data = rendered[name]
    assert [p.suffix for p in paths] == [".pdf", ".png", ".csv"]
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)
    assert paths[0].read_bytes()[:4] == b"%PDF" and paths[1].read_bytes()[:4] == b"\x89PNG"
    assert len(answered(data)) > 0
    # Configurations the law cannot answer are counted, never silently dropped.
    assert (data[vary_compute.UNANSWERED].dropna() >= 0).all() and data[vary_compute.UNANSWERED].notna().all()


@pytest.mark.parametrize("name", NAMES)
def test_configurations_spend_their_compute_and_ratio_is_tokens_per_parameter(rendered, name):
    rows = answered(rendered[name][1])
    m, b, t = (rows[c].to_numpy(float) for c in (MODEL_SIZE, BATCH_SIZE, ITERATIONS))
    np.testing.assert_allclose(rows[COMPUTE], 6 * m * b * SEQ_LEN * t, rtol=1e-9)
    np.testing.assert_allclose(rows[TOKENS_PER_PARAMETER], b * t * SEQ_LEN / m, rtol=1e-9)


# ---------------------------------------------------------------------- fig:vary_compute_and_privacy

def test_best_loss_is_a_running_minimum_over_compute(rendered, context):
    data = rendered["fig-vary_compute_and_privacy"][1]
    best = vary_compute.BEST_CROSS_ENTROPY
    curves = list(data.groupby([PRIVACY_BUDGET, DATA_BUDGET]))
    assert len(curves) == len(SETTINGS.vary_compute_privacy_budgets) * len(SETTINGS.data_budgets)
    for _, curve in curves:
        curve = curve.sort_values(COMPUTE)
        assert (np.diff(curve[best]) <= 0).all()
        np.testing.assert_allclose(curve[best], curve[CROSS_ENTROPY].cummin())
        # Every compute budget is either a point of the curve or counted as unanswered.
        assert len(curve) + curve[vary_compute.BUDGETS_WITHOUT_ANSWER].iloc[0] == SETTINGS.compute_count
        assert curve[vary_compute.INFLECTION_POINT].sum() == 1


def test_inflection_annotation_is_the_optimal_model_size_at_the_saturating_compute():
    # A wider, denser compute range than the default, so that a curve of the synthetic law saturates.
    wide = synthetic_context(dataclasses.replace(SETTINGS, compute_min=1e11, compute_max=1e19, compute_count=40))
    data = vary_compute.best_loss_table(wide)
    figure = vary_compute.draw_best_loss(data, wide)
    try:
        annotated = 0
        for ax, epsilon in zip(figure.axes, SETTINGS.vary_compute_privacy_budgets):
            labels = [t.get_text() for t in ax.texts if t.get_text().startswith("M* =")]
            expected = []
            for users, curve in data[data[PRIVACY_BUDGET] == epsilon].groupby(DATA_BUDGET):
                saturating = saturating_compute(curve)
                flagged = curve[curve[vary_compute.INFLECTION_POINT].astype(bool)]
                assert flagged[COMPUTE].tolist() == [saturating[COMPUTE]]
                if flagged[vary_compute.ANNOTATED].astype(bool).any():
                    assert saturating[COMPUTE] < curve[COMPUTE].max()
                    expected.append(vary_compute.inflection_text(saturating[MODEL_SIZE]))
            assert sorted(labels) == sorted(expected) and len(labels) <= vary_compute.ANNOTATED_CURVES
            annotated += len(labels)
        assert annotated >= 1
    finally:
        plt.close(figure)


# ---------------------------------------------------------------------- fig:token_model_ratios

def test_token_ratios_cover_every_privacy_budget_and_the_nonprivate_law(rendered):
    data = answered(rendered["fig-token_model_ratios"][1])
    assert set(data[PRIVACY_BUDGET]) == {*SETTINGS.token_ratio_privacy_budgets, np.inf}
    assert (data[DATA_BUDGET] == SETTINGS.token_ratio_data_budget).all()
    ratio = TOKENS_PER_PARAMETER
    assert (data[f"{ratio} Min"] <= data[ratio] * (1 + 1e-12)).all()
    assert (data[ratio] <= data[f"{ratio} Max"] * (1 + 1e-12)).all()
    # Without privacy σ̄ = 0 for any B, so B is held at the physical batch the law was measured at.
    nonprivate = data[np.isinf(data[PRIVACY_BUDGET])]
    assert (nonprivate[NOISE_BATCH_RATIO] == 0).all() and len(nonprivate) > 0
    assert (nonprivate[BATCH_SIZE] == PHYSICAL_BATCH).all()


def test_token_ratio_figure_draws_chinchilla_rule(context, rendered):
    figure = vary_compute.draw_token_ratio(rendered["fig-token_model_ratios"][1], context)
    try:
        lines = [line for line in figure.axes[0].lines if "Chinchilla" in line.get_label()]
        assert len(lines) == 1 and set(lines[0].get_ydata()) == {vary_compute.CHINCHILLA_TOKENS_PER_PARAMETER}
    finally:
        plt.close(figure)


# ---------------------------------------------------------------------- fig:full_grid

def test_full_grid_minimises_over_the_other_hyper_parameters(rendered, context):
    data = rendered["fig-full_grid"][1]
    rows = answered(data)
    assert set(rows[full_grid.AXIS]) == {ITERATIONS, MODEL_SIZE, BATCH_SIZE}
    iterations = rows[rows[full_grid.AXIS] == ITERATIONS][full_grid.AXIS_VALUE]
    np.testing.assert_allclose(4 * np.log2(iterations), np.round(4 * np.log2(iterations)), atol=1e-9)
    cases = rows.groupby([full_grid.VARIED, PRIVACY_BUDGET, DATA_BUDGET, COMPUTE])
    assert len(cases) == len(SETTINGS.privacy_budgets) + len(SETTINGS.data_budgets) + len(SETTINGS.grid_compute_budgets)
    for (_, epsilon, users, compute), case in cases:
        # min over x of (min over the other two) is the overall optimum, whichever x: the library's answer.
        per_axis = case.groupby(full_grid.AXIS)[CROSS_ENTROPY].min()
        optimum = context.best_per_compute(epsilon, users, np.array([compute]))[CROSS_ENTROPY].iloc[0]
        np.testing.assert_allclose(per_axis.to_numpy(), optimum, rtol=1e-12)
        assert (case[full_grid.CANDIDATES] > case[vary_compute.UNANSWERED]).all()


# ---------------------------------------------------------------------- fig:baseline_compare

def test_baselines_spend_the_baseline_compute(rendered, context):
    data = rendered["fig-baseline_compare"][1]
    base = data[data[baselines.KIND] == baselines.BASELINE]
    assert len(base) == len(SETTINGS.baselines) * len(SETTINGS.baseline_privacy_budgets)
    np.testing.assert_allclose(base[COMPUTE], SETTINGS.baseline_compute, rtol=1e-9)
    m, b, t = (base[c].to_numpy(float) for c in (MODEL_SIZE, BATCH_SIZE, ITERATIONS))
    np.testing.assert_allclose(6 * m * b * SEQ_LEN * t, SETTINGS.baseline_compute, rtol=1e-9)
    for baseline in SETTINGS.baselines:
        rows = base[base[MODEL] == baseline.model]
        assert (rows[MODEL_SIZE] == context.model_size_of(baseline.model)).all()
        assert (rows[ITERATIONS] == baseline.iterations).all()
    optimal = data[data[baselines.KIND] == baselines.OPTIMAL]
    assert set(optimal[COMPUTE]) == {SETTINGS.baseline_compute, SETTINGS.baseline_reduced_compute}
    assert len(optimal) == 2 * len(SETTINGS.baseline_privacy_budgets)
    # A point without a prediction says why.
    missing = data[data[CROSS_ENTROPY].isna()]
    assert missing[REASON].fillna("").str.len().gt(0).all()


# ---------------------------------------------------------------------- non-private reproduction

def test_nonprivate_reproduction_fits_come_from_the_data(rendered, context):
    data = rendered["fig-nonprivate_reproduction"][1]
    assert (data[BATCH_SIZE] == context.law.physical_batch).all() and (data[NOISE_BATCH_RATIO] == 0).all()
    fitted = data[data[nonprivate.IN_FIT].astype(bool)]
    assert len(fitted) >= 2
    slope_m = np.polyfit(np.log(fitted[COMPUTE]), np.log(fitted[MODEL_SIZE]), 1)[0]
    slope_t = np.polyfit(np.log(fitted[COMPUTE]), np.log(fitted["Tokens"]), 1)[0]
    np.testing.assert_allclose(data[nonprivate.MODEL_SIZE_EXPONENT], slope_m, rtol=1e-9)
    np.testing.assert_allclose(data[nonprivate.TOKENS_EXPONENT], slope_t, rtol=1e-9)
    assert slope_m + slope_t == pytest.approx(1.0, abs=1e-9)  # C = 6·M·tokens
    figure = nonprivate.draw_nonprivate(data, context)
    try:
        legend = [t.get_text() for ax in figure.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        assert any(f"{slope_m:.2f}" in text for text in legend) and any(f"{slope_t:.2f}" in text for text in legend)
    finally:
        plt.close(figure)


# ---------------------------------------------------------------------- nothing inside the law's range

def test_empty_figures_say_why():
    nothing = synthetic_context(dataclasses.replace(SETTINGS, compute_min=1.0, compute_max=10.0, grid_compute=1.0,
                                                    grid_compute_budgets=(1.0,)))
    data = vary_compute.best_loss_table(nothing)
    assert data[COMPUTE].isna().all() and data[REASON].str.startswith("no compute budget").all()
    assert (data[vary_compute.BUDGETS_WITHOUT_ANSWER] == SETTINGS.compute_count).all()
    grid = full_grid.grid_table(nothing)
    assert grid[full_grid.VARIED].eq(COMPUTE).sum() == 1 and grid[CROSS_ENTROPY].isna().any()
    ratios = vary_compute.token_ratio_table(nothing)
    assert ratios[COMPUTE].isna().all() and len(ratios) == len(SETTINGS.token_ratio_privacy_budgets) + 1
    reproduction = nonprivate.nonprivate_table(nothing)
    assert reproduction[CROSS_ENTROPY].isna().all() and len(reproduction) == 1
    for figure in (vary_compute.draw_best_loss(data, nothing), full_grid.draw_grid(grid, nothing),
                   vary_compute.draw_token_ratio(ratios, nothing), nonprivate.draw_nonprivate(reproduction, nothing)):
        try:
            assert any("no " in text and "law's range" in text for text in texts(figure))
        finally:
            plt.close(figure)


def test_a_repeated_sigma_ask_is_answered_from_memory_and_a_new_one_is_not():
    """A figure asks σ for the same candidates twice (its optimum and the optimum's band): the
    second ask must not interpolate again, must return the first answer, and must not share it."""
    from dpscaling.report.figures.context import PrivacyAwareSigma

    asked = []

    def sigma(epsilon, steps, q):
        asked.append(len(epsilon))
        return epsilon * steps * q

    remembered = PrivacyAwareSigma(sigma)
    epsilon, steps, q = np.array([1.0, np.inf, 2.0]), np.array([10.0, 20.0, 30.0]), np.array([0.5, 0.5, 0.25])
    first = remembered(epsilon, steps, q)
    np.testing.assert_array_equal(first, [5.0, 0.0, 15.0])  # ε = ∞: no noise
    first[0] = -1.0  # a caller's edit must not reach the memory
    np.testing.assert_array_equal(remembered(epsilon, steps, q), [5.0, 0.0, 15.0])
    assert asked == [2]
    np.testing.assert_array_equal(remembered(epsilon, steps, 2 * q), [10.0, 0.0, 30.0])
    assert asked == [2, 2]
