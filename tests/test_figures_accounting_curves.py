"""fig:vector_fields, fig:excess-vulnerability, fig:smoothing, fig:training and the parametric figures (docs/figures.md).

Rendered from the fast synthetic context (tests/figure_context.py); the data
behind each figure is checked against independent recomputations.
"""

from __future__ import annotations

import copy
import dataclasses
import time

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dpscaling.privacy.samplers import paper_participations
from dpscaling.report.figures import (
    FIGURES, excess_vulnerability, parametric, render, smoothing, training_curves, vector_fields)
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.law.collect import TIDY_COLUMNS
from dpscaling.law.columns import (
    BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE,
    NOISE_BATCH_RATIO, PRIVACY_BUDGET, REASON)
from figure_context import SETTINGS, synthetic_context

MY_FIGURES = ("fig-vector_fields", "fig-excess-vulnerability", "fig-smoothing", "fig-training",
              "fig-parametric-scaling-law-naive", "fig-parametric-scaling-law-sigmoid",
              "fig-parametric-scaling-law-nbr-transform", "fig-parametric-scaling-optimal-model-size")


@pytest.fixture(scope="module")
def context() -> AnalysisContext:
    return synthetic_context()


def with_settings(**changes) -> AnalysisContext:
    return synthetic_context(dataclasses.replace(SETTINGS, **changes))


@pytest.mark.parametrize("name", MY_FIGURES)
def test_figure_renders_pdf_png_csv(context, tmp_path, name):
    paths = render(name, context, tmp_path / name)
    assert sorted(p.suffix for p in paths) == [".csv", ".pdf", ".png"]
    for path in paths:
        assert path.is_file() and path.stat().st_size > 0, path
    assert not pd.read_csv(tmp_path / f"{name}.csv").empty


def test_figures_are_registered_with_their_inputs():
    assert set(MY_FIGURES) <= set(FIGURES)
    assert FIGURES["fig-vector_fields"].needs == ("accounting",)
    assert FIGURES["fig-training"].needs == ("results", "floor")
    assert set(FIGURES["fig-smoothing"].needs) == {"results", "law", "floor"}


# ---------------------------------------------------------------------- vector fields

def test_vector_field_arrows_are_noise_batch_ratio_ratios(context):
    data = vector_fields.vector_table(context)
    steps = context.settings.vector_iterations

    def nbr(epsilon, batch, users):
        return float(context.sigma(np.array([epsilon]), np.array([steps]), np.array([batch / users]))[0]) / batch

    rng = np.random.default_rng(0)
    for key in "abc":
        rows = data[(data[vector_fields.PANEL] == key) & (data[REASON] == "")]
        assert len(rows) > 0
        cell = rows.iloc[rng.integers(len(rows))]
        e, b, n = cell[PRIVACY_BUDGET], cell[BATCH_SIZE], cell[DATA_BUDGET]
        here = nbr(e, b, n)
        assert cell[NOISE_BATCH_RATIO] == pytest.approx(here, rel=1e-12)
        expected = {PRIVACY_BUDGET: here / nbr(2 * e, b, n) - 1, BATCH_SIZE: here / nbr(e, 2 * b, n) - 1,
                    DATA_BUDGET: here / nbr(e, b, 2 * n) - 1}
        for budget, value in expected.items():
            assert cell[vector_fields.BENEFIT[budget]] == pytest.approx(value, rel=1e-10, abs=1e-12)
    # Every budget of every panel is a power of two in the configured range.
    for column in (PRIVACY_BUDGET, BATCH_SIZE, DATA_BUDGET):
        exponents = np.log2(data[column].to_numpy())
        assert np.allclose(exponents, np.round(exponents))


def test_vector_field_masks_and_counts_q_above_one(tmp_path):
    context = with_settings(vector_data_budget=2.0**8)  # panel (a): B up to 2^10 > N
    data = vector_fields.vector_table(context)
    panel_a = data[data[vector_fields.PANEL] == "a"]
    above = panel_a[panel_a[BATCH_SIZE] > panel_a[DATA_BUDGET]]
    assert len(above) > 0 and (above[REASON] == vector_fields.Q_ABOVE_ONE).all()
    assert above[NOISE_BATCH_RATIO].isna().all()
    # B = N is feasible, but doubling B is not: masked with its own reason.
    edge = panel_a[panel_a[BATCH_SIZE] == panel_a[DATA_BUDGET]]
    assert (edge[REASON].str.contains("after doubling")).all()
    assert edge[NOISE_BATCH_RATIO].notna().all()
    render("fig-vector_fields", context, tmp_path / "masked")


# ---------------------------------------------------------------------- excess vulnerability

def test_mia_advantage_is_the_unamplified_closed_form():
    context = with_settings(vulnerability_batch_count=9)
    assert context.sampling == "deterministic"
    start = time.perf_counter()
    data = excess_vulnerability.vulnerability_table(context)
    assert time.perf_counter() - start < 30
    assert len(data) >= 5
    advantage = data[excess_vulnerability.MIA_ADVANTAGE].to_numpy()
    assert np.all((advantage >= 0) & (advantage <= 1))
    for _, row in data.iterrows():
        q = row[BATCH_SIZE] / row[DATA_BUDGET]
        k = paper_participations(q, int(row[ITERATIONS]))
        expected = 2 * stats.norm.cdf(np.sqrt(k) / (2 * row["Sigma"])) - 1
        assert row[excess_vulnerability.MIA_ADVANTAGE] == pytest.approx(expected, rel=1e-9)
        assert q <= 1
    # Every configuration spends the panel's compute, inside the law's iteration range.
    seq_len = context.law.seq_len
    assert np.allclose(6 * data[MODEL_SIZE] * data[BATCH_SIZE] * seq_len * data[ITERATIONS], data[COMPUTE])
    lo, hi = context.iteration_bounds
    assert data[ITERATIONS].between(lo, hi).all() and (data[ITERATIONS] == data[ITERATIONS].round()).all()


def test_pareto_optimal_points_are_not_dominated():
    loss = np.array([3.0, 2.0, 2.5, 1.5, np.nan, 1.5])
    advantage = np.array([0.1, 0.2, 0.3, 0.5, 0.0, 0.6])
    optimal = excess_vulnerability.pareto_optimal(loss, advantage)
    assert optimal.tolist() == [True, True, False, True, False, False]


def test_poisson_branch_is_used_when_sigma_is_below_the_deterministic_one():
    context = with_settings()
    context.sampling = "min"
    # σ far below the deterministic-batching σ can only come from Poisson amplification.
    assert excess_vulnerability.batching_of(context, 0.5, 8.0, 0.01, 1000) == "poisson"
    assert excess_vulnerability.batching_of(context, 1e6, 8.0, 0.01, 1000) == "deterministic"


# ---------------------------------------------------------------------- smoothing

def test_smoothed_curves_are_monotone_and_raw_points_are_measured(context):
    data = smoothing.smoothing_table(context)
    panel = data[smoothing.PANEL]
    over_t = data[(panel == smoothing.OVER_ITERATIONS) & (data[smoothing.SERIES] == smoothing.ISOTONIC)]
    values = over_t.sort_values(ITERATIONS)[CROSS_ENTROPY].dropna().to_numpy()
    assert len(values) > 10 and np.all(np.diff(values) <= 1e-12)
    over_s = data[(panel == smoothing.OVER_NOISE) & (data[smoothing.SERIES] == smoothing.ISOTONIC)]
    values = over_s.sort_values(NOISE_BATCH_RATIO)[CROSS_ENTROPY].dropna().to_numpy()
    assert len(values) >= 3 and np.all(np.diff(values) >= -1e-12)
    assert over_s[ITERATIONS].nunique() == 1
    # The model, σ̄ and T are the configured ones (or the nearest measured).
    assert set(data[MODEL]) == {context.settings.smoothing_model}
    assert over_t[NOISE_BATCH_RATIO].iloc[0] == pytest.approx(context.settings.smoothing_noise_batch_ratio)
    assert over_s[ITERATIONS].iloc[0] == context.settings.smoothing_iterations
    # Raw points are rows of the results; extrapolated ones lie beyond the trained horizon.
    raw = data[data[smoothing.SERIES].isin([smoothing.RAW, smoothing.WARMUP])]
    keys = [MODEL, LEARNING_RATE, ITERATIONS, NOISE_BATCH_RATIO, CROSS_ENTROPY]
    merged = raw[keys].merge(context.results[keys], on=keys, how="left", indicator=True)
    assert (merged["_merge"] == "both").all()
    assert (raw.loc[raw[smoothing.SERIES] == smoothing.WARMUP, ITERATIONS] < context.law.settings.warmup_steps).all()
    extrapolated = data[data[smoothing.SERIES] == smoothing.EXTRAPOLATED]
    assert len(extrapolated) > 0 and (extrapolated[ITERATIONS] > context.horizon()).all()
    assert data[LEARNING_RATE].dropna().nunique() == 1


# ---------------------------------------------------------------------- training curves

def test_training_rows_are_raw_results(context):
    data = training_curves.training_table(context)
    assert len(data) > 0
    columns = [c for c in TIDY_COLUMNS if c in context.results]
    merged = data[columns].merge(context.results[columns], on=columns, how="left", indicator=True)
    assert (merged["_merge"] == "both").all()
    assert set(data[MODEL]) == set(context.settings.training_models)
    assert set(data[NOISE_BATCH_RATIO]) == set(context.settings.training_noise_batch_ratios)
    assert (data[training_curves.NOTE] == "").all()
    # The log-spaced subsample of the measured iterations, ending at the last one.
    measured = context.results[ITERATIONS].to_numpy()
    assert sorted(data[ITERATIONS].unique()) == training_curves.log_spaced_iterations(measured).tolist()
    assert data[ITERATIONS].max() == measured.max() and data[ITERATIONS].nunique() < len(np.unique(measured))


def test_training_falls_back_to_trained_models(tmp_path):
    context = with_settings(training_models=("BertTiny", "Synthetic1"), training_noise_batch_ratios=(3e-4,))
    data = training_curves.training_table(context)
    shown = data.groupby(training_curves.REQUESTED_MODEL)[MODEL].first().to_dict()
    assert shown == {"BertTiny": "Synthetic0", "Synthetic1": "Synthetic1"}
    notes = data.loc[data[training_curves.REQUESTED_MODEL] == "BertTiny", training_curves.NOTE]
    assert notes.str.contains("not in the results").all()
    assert set(data[NOISE_BATCH_RATIO]) == {2.0**-12}  # the nearest trained σ̄ to 3e-4 in log space
    render("fig-training", context, tmp_path / "fallback")


def test_log_spaced_iterations_follow_the_authors_rule():
    measured = np.arange(100, 128001, 100, dtype=float)
    expected = [100 * np.floor(2 ** (k / 2)) for k in range(6, 21)] + [128000.0]
    assert training_curves.log_spaced_iterations(measured).tolist() == expected


# ---------------------------------------------------------------------- parametric

@pytest.mark.parametrize("name", ["L1", "L2"])
def test_parametric_predictions_are_the_form_at_the_fitted_parameters(context, name):
    data = parametric.fit_table(context, name)
    p = context.law.parametric[name]["params"]
    m, n, nbr = data[MODEL_SIZE], data["Examples"], data[NOISE_BATCH_RATIO]
    noise = nbr if name == "L1" else 1 / (1 + np.exp(-(np.log(nbr) + 8) / 1.6))
    coupling = m ** p["alpha2"] if name == "L2" else 1.0
    expected = p["E"] + p["A"] / m ** p["alpha"] + p["B"] / n ** p["beta"] + p["C"] * noise ** p["gamma"] / coupling
    assert np.allclose(data[parametric.PREDICTED], expected, rtol=1e-10)
    assert np.allclose(data[parametric.PREDICTED],
                       context.law.parametric_diagnostics[f"Predicted {name}"], rtol=1e-10)
    assert np.array_equal(data["Examples"], context.law.physical_batch * data[ITERATIONS])


def test_nonprivate_optimal_size_is_chinchillas_closed_form(context):
    data = parametric.optimal_size_table(context)
    p = context.law.parametric["L2"]["params"]
    public = data[~data[parametric.PRIVATE] & ~data[parametric.AT_BOUND]]
    assert len(public) > 0
    # argmin_M A/M^α + B·(6MS/C)^β = (αA/(βB))^(1/(α+β)) · (C/(6S))^(β/(α+β))
    a, b = p["alpha"], p["beta"]
    expected = ((a * p["A"]) / (b * p["B"])) ** (1 / (a + b)) * (
        public[COMPUTE] / (6 * context.law.seq_len)) ** (b / (a + b))
    assert np.allclose(public[parametric.OPTIMAL_MODEL_SIZE], expected, rtol=1e-3)
    private = data[data[parametric.PRIVATE]]
    assert set(private[NOISE_BATCH_RATIO]) == set(context.settings.parametric_noise_batch_ratios)
    assert np.allclose(data["Examples"] * data[parametric.OPTIMAL_MODEL_SIZE] * 6 * context.law.seq_len,
                       data[COMPUTE])


def test_parametric_figures_say_why_without_a_fit(context, tmp_path):
    law = copy.copy(context.law)
    law.parametric, law.parametric_diagnostics = None, None
    law.report = dict(law.report, parametric_failed="only 3 points pass the parametric filters")
    bare = copy.copy(context)
    bare.law = law
    for name in MY_FIGURES[4:]:
        render(name, bare, tmp_path / name)
        saved = pd.read_csv(tmp_path / f"{name}.csv")
        assert "only 3 points" in saved[REASON].iloc[0]
    law.report = {}
    assert "fit.parametric" in parametric.missing_reason(bare)
