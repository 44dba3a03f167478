"""finding:finetune and table:finetune_vs_scratch (dpscaling.findings.finetune): two laws fitted to synthetic
curves whose truth differs in a known way, so each claim's verdict and numbers are known in advance."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from dpscaling.report.figures.context import AnalysisContext
from dpscaling.report.figures.finetune import finetune_figure
from dpscaling.findings.comparison import GAIN, column
from dpscaling.findings.finetune import (
    FINETUNED, SCRATCH, best_loss_per_model, check_finetune_findings, comparison_table, falls_with_size,
    pretraining_lowers_the_loss)
from dpscaling.law import LawSettings
from dpscaling.law.artifact import fit_law
from dpscaling.law.columns import CROSS_ENTROPY, MODEL_SIZE
from dpscaling.law.synthetic import DeterministicGaussianSigma, TrueLaw, synthetic_results
from figure_context import PHYSICAL_BATCH, SEQ_LEN, SETTINGS


def context(truth: TrueLaw) -> AnalysisContext:
    results = synthetic_results(truth, model_sizes=(1e5, 4e5, 1.6e6), learning_rates=(2.0**-7,))
    law = fit_law(results, LawSettings(warmup_steps=100, rolling_window=3), seq_len=SEQ_LEN,
                  physical_batch=PHYSICAL_BATCH)
    return AnalysisContext(law, DeterministicGaussianSigma(), SETTINGS, delta=1e-8, sampling="deterministic",
                           results=results)


@pytest.fixture(scope="module")
def scratch() -> AnalysisContext:
    return context(TrueLaw())


def test_a_law_lower_by_a_constant_gains_it_everywhere_at_the_same_allocation(scratch, tmp_path) -> None:
    tuned = context(dataclasses.replace(TrueLaw(), E=TrueLaw().E - 0.2))
    table = comparison_table(scratch, tuned, SETTINGS.privacy_budgets, SETTINGS.allocation_data_budget)
    both = table.dropna(subset=[GAIN])
    assert len(both) >= 6
    assert both[GAIN].to_numpy() == pytest.approx(0.2, abs=0.04)
    ratio = both[column(MODEL_SIZE, FINETUNED)] / both[column(MODEL_SIZE, SCRATCH)]
    assert 0.7 < ratio.median() < 1.4  # a constant shift moves no optimum
    findings, _ = check_finetune_findings(scratch, tuned, table)
    verdicts = {name: finding for name, finding in zip("abcdefgh", findings)}
    assert len(findings) == 8
    assert verdicts["f"].holds and f"gain > 0 in {len(both)} of {len(both)}" in verdicts["f"].measured
    horizon = scratch.horizon()
    assert (both[column("Extrapolated", SCRATCH)] == (both[column("Iterations", SCRATCH)] > horizon)).all()
    inside = both[~both[column("Extrapolated", SCRATCH)] & ~both[column("Extrapolated", FINETUNED)]]
    assert f"past its law's measured horizon: gain > 0 in {len(inside)} of {len(inside)}" in verdicts["f"].measured
    assert not verdicts["h"].holds  # the same allocation: not larger
    # (g) holds exactly when the fine-tuned best loss falls with size at every ε; at ε = 8 the truth's A·M^-α
    # shows through the noise (at ε = 1 the fitted law need not be monotone in M).
    assert verdicts["g"].holds == ("falls with size at 2 of 2 eps fine-tuned" in verdicts["g"].measured)
    assert falls_with_size(best_loss_per_model(tuned, 8.0, SETTINGS.allocation_data_budget))
    assert not falls_with_size(pd.Series([3.0, 2.9, 2.95])) and not falls_with_size(pd.Series([3.0, np.nan]))
    written = finetune_figure(table, tmp_path / "fig-finetune_vs_scratch")
    assert all(path.stat().st_size > 0 for path in written)


def test_a_worse_start_is_reported_as_a_loss_not_a_gain(scratch) -> None:
    worse = context(dataclasses.replace(TrueLaw(), E=TrueLaw().E + 0.3))
    table = comparison_table(scratch, worse, (8.0,), SETTINGS.allocation_data_budget)
    finding = pretraining_lowers_the_loss(table)
    assert not finding.holds and "gain > 0 in 0 of" in finding.measured
    both = table.dropna(subset=[GAIN])
    assert np.all(both[column(CROSS_ENTROPY, FINETUNED)] > both[column(CROSS_ENTROPY, SCRATCH)])


def test_paying_for_the_pretraining_answers_among_the_pretrained_models_with_what_is_left(scratch) -> None:
    from dpscaling.findings.finetune import COUNTED, GAIN_COUNTED, PRETRAINING_COMPUTE

    tuned = context(dataclasses.replace(TrueLaw(), E=TrueLaw().E - 0.2))
    sizes = tuned.trained_models()
    users = SETTINGS.allocation_data_budget
    cheap = comparison_table(scratch, tuned, (8.0,), users, pretraining_tokens={name: 1.0 for name in sizes.index})
    both = cheap.dropna(subset=[column(CROSS_ENTROPY, COUNTED), column(CROSS_ENTROPY, FINETUNED)])
    assert len(both) >= 3
    # A negligible pretraining (6·M FLOPs): the best of the measured sizes at C itself.
    for row in both.itertuples(index=False):
        row = dict(zip(both.columns, row))
        discrete = tuned.best_per_compute(8.0, users, np.array([row["Compute"]]), sizes.to_numpy(float))
        assert row[column(CROSS_ENTROPY, COUNTED)] == pytest.approx(discrete[CROSS_ENTROPY].iloc[0], rel=1e-4)
    assert set(both[column(MODEL_SIZE, COUNTED)]) <= set(sizes.astype(float))
    assert np.allclose(both[column(PRETRAINING_COMPUTE, COUNTED)], 6.0 * both[column(MODEL_SIZE, COUNTED)])
    assert np.allclose(both[GAIN_COUNTED], both[column(CROSS_ENTROPY, SCRATCH)] - both[column(CROSS_ENTROPY, COUNTED)])
    dear = comparison_table(scratch, tuned, (8.0,), users, pretraining_tokens={name: 1e30 for name in sizes.index})
    assert dear[column(CROSS_ENTROPY, COUNTED)].isna().all() and dear[GAIN_COUNTED].isna().all()
    assert "no pair answered" in pretraining_lowers_the_loss(dear).measured
