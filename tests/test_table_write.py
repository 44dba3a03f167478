"""The paper tables' three forms (dpscaling.report.tables.write): the CSV at full precision, the Markdown and LaTeX
as read by people, where a budget's whole numbers stay whole."""

from __future__ import annotations

import math

import pandas as pd

from dpscaling.report.tables.write import shown_number, write_table


def test_whole_numbers_are_shown_whole_and_the_rest_to_three_digits() -> None:
    assert [shown_number(v) for v in (1024.0, 100000.0, 4.0, 0.0)] == ["1024", "100000", "4", "0"]
    assert [shown_number(v) for v in (0.0396, 5.4641, 1e13, 3e11, 2.5e7)] == ["0.0396", "5.46", "1e+13", "3e+11",
                                                                               "2.5e+07"]
    assert [shown_number(v) for v in (math.nan, math.inf)] == ["nan", "inf"]


def test_a_table_keeps_its_budgets_exact_in_every_form(tmp_path) -> None:
    frame = pd.DataFrame({"epsilon": [1024.0, 1.0], "data_budget": [100000.0, 5000.0], "regret": [0.03964, 0.0]})
    csv, md, tex = write_table(frame, tmp_path / "worth", "caption", "table:worth",
                               shown={"epsilon": "ε", "data_budget": "N", "regret": "regret"})
    pd.testing.assert_frame_equal(pd.read_csv(csv), frame)
    rows = [line for line in md.read_text().splitlines() if line.startswith("|")][2:]
    assert [[cell.strip() for cell in row.strip("|").split("|")] for row in rows] == [
        ["1024", "100000", "0.0396"], ["1", "5000", "0"]]
    assert "1024 & 100000 & 0.0396" in tex.read_text()
