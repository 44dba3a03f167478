"""fig:full_grid (paper appendix "Full Experiment Grid").

Cross entropy of the best constant-compute configuration for each value of
one hyper-parameter, the other two minimised over. Rows vary the privacy,
data and compute budget in turn, the other two held at their defaults (bold
in the paper); columns put iterations, model size and batch size on the x
axis. As in the authors' notebook, iterations (not rounded in the
configurations) are binned to the nearest power of 2^(1/4) before minimising.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dpscaling.report.figures.common import FLOOR, floor_line
from dpscaling.report.figures.common import ACCOUNTING, LAW, FigureSpec, budget_label, colours, log_axes, no_data, subplots
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.report.figures.common import UNANSWERED, footnote, reasons_text
from dpscaling.law.columns import (
    BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO, PRIVACY_BUDGET,
    REASON, SIGMA, TOKENS_PER_PARAMETER)
from dpscaling.law.interpolation import reason_counts
from dpscaling.law.queries import constant_compute_configurations

if TYPE_CHECKING:
    from matplotlib.figure import Figure

VARIED = "Varied Budget"
AXIS = "Axis"              # the hyper-parameter on the panel's x axis
AXIS_VALUE = "Axis Value"  # its value (iterations: the 2^(1/4) bin); the other columns: the best configuration
CANDIDATES = "Candidate Configurations"
ITERATION_BINS_PER_OCTAVE = 4
ROWS = ((PRIVACY_BUDGET, "Privacy budget", "ε"), (DATA_BUDGET, "Data budget", "N"), (COMPUTE, "Compute budget", "C"))
COLUMNS = ((ITERATIONS, "Iterations"), (MODEL_SIZE, "Model size (parameters)"), (BATCH_SIZE, "Batch size (sequences)"))


def iteration_bin(iterations) -> np.ndarray:
    """T rounded to the nearest power of 2^(1/4) in log space."""
    steps = np.round(ITERATION_BINS_PER_OCTAVE * np.log2(np.asarray(iterations, float)))
    return 2.0 ** (steps / ITERATION_BINS_PER_OCTAVE)


def defaults(context: AnalysisContext) -> dict[str, float]:
    settings = context.settings
    return {PRIVACY_BUDGET: settings.grid_privacy_budget, DATA_BUDGET: settings.grid_data_budget,
            COMPUTE: settings.grid_compute}


def cases(context: AnalysisContext) -> list[dict[str, float | str]]:
    """(ε, N, C) of every line: each row's budget over its values, the other two at their defaults."""
    settings = context.settings
    values = {PRIVACY_BUDGET: settings.privacy_budgets, DATA_BUDGET: settings.data_budgets,
              COMPUTE: settings.grid_compute_budgets}
    return [{**defaults(context), budget: float(value), VARIED: budget}
            for budget, _, _ in ROWS for value in values[budget]]


def minimised(evaluated: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Per value of ``axis``: the configuration with the lowest loss over the other two hyper-parameters."""
    key = iteration_bin(evaluated[ITERATIONS]) if axis == ITERATIONS else evaluated[axis].to_numpy()
    answered = evaluated.assign(**{AXIS_VALUE: key}).dropna(subset=[CROSS_ENTROPY])
    best = answered.loc[answered.groupby(AXIS_VALUE)[CROSS_ENTROPY].idxmin()]
    return best.assign(**{AXIS: axis}).sort_values(AXIS_VALUE)


def grid_table(context: AnalysisContext) -> pd.DataFrame:
    law = context.law
    frames = []
    for case in cases(context):
        configs = constant_compute_configurations(case[COMPUTE], context.model_sizes, law.seq_len,
                                                  context.iteration_bounds)
        evaluated = context.evaluate(configs.assign(**{PRIVACY_BUDGET: case[PRIVACY_BUDGET],
                                                       DATA_BUDGET: case[DATA_BUDGET]}))
        reasons = reason_counts(evaluated[REASON].to_numpy())
        counts = {VARIED: case[VARIED], CANDIDATES: len(evaluated), UNANSWERED: sum(reasons.values())}
        parts = [minimised(evaluated, axis) for axis, _ in COLUMNS] if len(evaluated) else []
        parts = [part for part in parts if not part.empty]
        if not parts:  # the line has no point: keep one row saying why
            why = reasons_text(reasons) or "no configuration with iterations inside the law's range"
            frames.append(pd.DataFrame([{**case, **counts, REASON: why}]))
            continue
        frames.append(pd.concat(parts, ignore_index=True).assign(**counts))
    data = pd.concat(frames, ignore_index=True)
    columns = [VARIED, PRIVACY_BUDGET, DATA_BUDGET, COMPUTE, AXIS, AXIS_VALUE, CROSS_ENTROPY, MODEL_SIZE,
               BATCH_SIZE, ITERATIONS, SIGMA, NOISE_BATCH_RATIO, TOKENS_PER_PARAMETER, CANDIDATES, UNANSWERED, REASON]
    return data.reindex(columns=columns)


def _value_text(budget: str, value: float) -> str:
    return f"{value:g}" if budget == PRIVACY_BUDGET else budget_label(value)


def draw_grid(data: pd.DataFrame, context: AnalysisContext) -> Figure:
    figure, axes = subplots(len(ROWS), len(COLUMNS), width=3.8, height=2.9)
    fixed = defaults(context)
    notes = []
    for row, (budget, title, symbol) in enumerate(ROWS):
        rows = data[data[VARIED] == budget]
        values = list(dict.fromkeys(rows[budget]))
        others = ", ".join(f"{s} = {_value_text(b, fixed[b])}" for b, _, s in ROWS if b != budget)
        lost = rows.groupby(budget)[[UNANSWERED, CANDIDATES]].first()
        if lost[UNANSWERED].sum():
            notes.append(f"{title.lower()} row: " + ", ".join(
                f"{symbol} = {_value_text(budget, v)}: {int(n)}/{int(total)}"
                for v, (n, total) in lost.iterrows() if n))
        for column, (axis, label) in enumerate(COLUMNS):
            ax = axes[row, column]
            log_axes(ax, y=False)
            ax.set_xlabel(label)
            ax.set_ylabel("Best cross entropy")
            ax.set_title(f"{title} varies ({others})", fontsize=8)
            panel = rows[rows[AXIS] == axis]
            if panel.empty:
                no_data(ax, f"no configuration inside the law's range for any {symbol} in this row")
                continue
            for colour, value in zip(colours(len(values)), values):
                line = panel[panel[budget] == value].sort_values(AXIS_VALUE)
                if line.empty:
                    continue
                default = np.isclose(value, fixed[budget])
                ax.plot(line[AXIS_VALUE], line[CROSS_ENTROPY], color=colour, linewidth=2.4 if default else 1.2,
                        label=f"{symbol} = {_value_text(budget, value)}" + (" (default)" if default else ""))
            floor_line(ax, context)
            ax.legend(fontsize=6)
    footnote(figure, "Thick lines: the default budget of the other rows. Iterations binned to powers of 2^(1/4). "
             + ("Candidate configurations outside the law's range (dropped), per line: " + "; ".join(notes)
                if notes else "Every candidate configuration was inside the law's range."))
    return figure


FULL_GRID = FigureSpec(
    label="fig:full_grid",
    caption=("Cross entropy of the best models trained in each setting. From top to bottom the privacy budget, "
             "data budget and compute budget vary, the other two fixed to their defaults (thick lines). From "
             "left to right the number of iterations, the model size and the batch size vary, the other two "
             "treated as nuisance parameters that are minimised over."),
    needs=(LAW, ACCOUNTING, FLOOR),
    compute=grid_table,
    draw=draw_grid,
)

FIGURES = (FULL_GRID,)
