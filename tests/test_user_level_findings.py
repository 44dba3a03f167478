"""finding:user-level's claims (dpscaling.findings.user_level) on small synthetic comparison tables: each claim
has a criterion that holds on one table and fails on another."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpscaling.law.columns import COMPUTE, PRIVACY_BUDGET
from dpscaling.findings.comparison import GAIN, column
from dpscaling.findings.user_level import (
    CHOSEN, ELS, HALF_WIDTH, QUANTITIES, SEQUENCE, ULS, against_sequence_level, by_how_much, check_user_level_findings)


def comparison(uls_loss, els_loss, half_width=0.02, chosen_model=1e6, chosen_batch=512, sequence_loss=None,
               sequence_model=1e6, sequence_batch=256) -> pd.DataFrame:
    """A comparison table of one budget per entry of ``uls_loss`` (ε 1, 4, 16, ... and C rising together), the
    rule choosing the lower loss; the sequence-level answer a little lower (protection costs) unless given."""
    rows = []
    for i, (uls, els) in enumerate(zip(uls_loss, els_loss)):
        chosen = ULS if uls < els else ELS
        row = {PRIVACY_BUDGET: 4.0 ** (i % 3), COMPUTE: 1e12 * 3**i, CHOSEN: chosen}
        for name, loss in ((ULS, uls), (ELS, els)):
            row |= {column(QUANTITIES[0], name): loss, column("Model Size", name): chosen_model,
                    column("Batch Sequences", name): chosen_batch, column("Iterations", name): 100,
                    column(HALF_WIDTH, name): half_width}
        row |= {column(QUANTITIES[0], SEQUENCE): min(uls, els) - 0.03 if sequence_loss is None else sequence_loss,
                column("Model Size", SEQUENCE): sequence_model, column("Batch Sequences", SEQUENCE): sequence_batch,
                column("Iterations", SEQUENCE): 120, column(HALF_WIDTH, SEQUENCE): half_width}
        rows.append(row)
    table = pd.DataFrame(rows)
    table[GAIN] = table[column(QUANTITIES[0], ELS)] - table[column(QUANTITIES[0], ULS)]
    return table


def test_by_how_much_holds_only_where_most_wins_exceed_the_laws_calibrated_half_width() -> None:
    wide = comparison([5.0, 5.0, 5.0], [5.1, 5.08, 5.05])  # gains 0.1, 0.08, 0.05 against half-width 0.02
    finding = by_how_much(wide)
    assert finding.holds and "by more than the half-width at 3" in finding.measured
    narrow = comparison([5.0, 5.0, 5.0], [5.01, 5.015, 5.1])  # 2 of 3 wins inside the laws' error
    finding = by_how_much(narrow)
    assert not finding.holds and "ULS lower at 3 of 3 budgets, by more than the half-width at 1" in finding.measured
    assert not by_how_much(comparison([5.1, 5.1], [5.0, 5.0])).holds  # ULS wins nowhere
    uncalibrated = by_how_much(comparison([5.0, 5.0], [5.2, 5.2], half_width=np.nan))
    assert not uncalibrated.holds and "no calibrated interval" in uncalibrated.measured


@pytest.mark.parametrize(("change", "holds"), [
    ({}, True),  # the same model, twice the batch, at a cost: as a smaller eps moves it
    ({"chosen_model": 2e6}, False),  # a larger model per user
    ({"chosen_batch": 128}, False),  # a smaller batch
    ({"sequence_loss": 5.5}, False),  # protecting users costing nothing (lower than per sequence)
])
def test_against_sequence_level_holds_only_as_a_smaller_budget_moves_the_answer(change, holds) -> None:
    finding = against_sequence_level(comparison([5.0, 5.2, 5.3], [5.1, 5.1, 5.4], **change))
    assert finding.holds is holds, finding.measured
    assert "3 budgets; per-user / per-sequence medians" in finding.measured
    empty = comparison([5.0], [5.1]).assign(**{CHOSEN: None})
    assert not against_sequence_level(empty).holds


def test_every_claim_is_checked_on_the_table() -> None:
    findings = check_user_level_findings(comparison([5.0, 5.0, 5.0], [5.1, 5.08, 5.05]))
    assert len(findings) == 5 and all(isinstance(f.holds, bool) for f in findings)
