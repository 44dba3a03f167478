"""The findings check (issue 8, item 5) on the synthetic law: every claim answers, with its numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
from figure_context import synthetic_context

from dpscaling.findings import (
    check_findings, dp_models_are_smaller, findings_table, optimal_beats_baselines, report,
    tokens_per_parameter_rise)
from dpscaling.law.columns import COMPUTE, TOKENS_PER_PARAMETER


def test_every_claim_gets_a_verdict_and_numbers() -> None:
    findings = check_findings(synthetic_context())
    assert len(findings) == 4
    text = report(findings)
    for letter in "abcd":
        assert f"({letter})" in text
    assert all(f.measured and isinstance(f.holds, bool) for f in findings)


def test_table_rows_carry_the_verdicts_of_the_report() -> None:
    findings = check_findings(synthetic_context())
    table = findings_table(findings)
    assert list(table["finding"]) == list("abcd")
    for finding, (_, row) in zip(findings, table.iterrows()):
        assert row["verdict"] == ("holds" if finding.holds else "does not hold")
        assert row["measured"] == finding.measured
        assert f"{row['verdict']} on this data" in report(findings)


def test_saturation_check_reads_the_workflows_table_like_its_own(tmp_path) -> None:
    from dpscaling.findings import loss_saturates
    from dpscaling.tables.inflection_points import inflection_points_table

    context = synthetic_context()
    computed, table = loss_saturates(context)
    path = tmp_path / "table-inflection_points.csv"
    inflection_points_table(context).to_csv(path, index=False)  # as the workflow's table rule writes it
    from_file, _ = loss_saturates(context, pd.read_csv(path))
    assert from_file == computed and len(table) > 0


def test_size_ratio_is_the_measured_one() -> None:
    context = synthetic_context()
    finding = dp_models_are_smaller(context)
    users = context.settings.allocation_data_budget
    public = context.best_per_compute(np.inf, users).set_index(COMPUTE)["Model Size"]
    private = context.best_per_compute(context.settings.privacy_budgets[0], users).set_index(COMPUTE)["Model Size"]
    common = public.index.intersection(private.index)
    # The synthetic law spans 16x in model size: a 10x ratio is possible but need not occur.
    assert f"{(public[common] / private[common]).max():.2f}x" in finding.measured or len(common) == 0


def test_tokens_per_parameter_numbers_come_from_the_queries() -> None:
    context = synthetic_context()
    best = context.best_per_compute(4.0, context.settings.allocation_data_budget)
    finding = tokens_per_parameter_rise(context)
    assert f"{best[TOKENS_PER_PARAMETER].max():.3g}" in finding.measured


def test_baselines_claim_counts_pairs() -> None:
    finding = optimal_beats_baselines(synthetic_context())
    assert "pairs" in finding.measured or "no baseline" in finding.measured
