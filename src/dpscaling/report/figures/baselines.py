"""fig:baseline_compare (paper §4.4 "Comparison Against Baselines").

Fixed training configurations as the DP literature uses them — a model and a
number of iterations, the batch size then set by the compute budget,
B = C/(6·M·T·S) — evaluated over the privacy budget at a fixed data budget,
against the compute-optimal configuration at the same compute and at a
reduced compute budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dpscaling.report.figures.common import FLOOR, floor_line
from dpscaling.report.figures.common import ACCOUNTING, LAW, FigureSpec, budget_label, colours, log_axes, no_data, subplots
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.report.figures.common import UNANSWERED, footnote, reasons_text, unanswered_counts
from dpscaling.law.columns import (
    BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO,
    PRIVACY_BUDGET, REASON, SIGMA, TOKENS_PER_PARAMETER)
from dpscaling.law.queries import compute_cost

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CONFIGURATION = "Configuration"
KIND = "Kind"
BASELINE, OPTIMAL = "baseline", "compute-optimal"
COLUMNS = [CONFIGURATION, KIND, MODEL, PRIVACY_BUDGET, DATA_BUDGET, COMPUTE, CROSS_ENTROPY, MODEL_SIZE, BATCH_SIZE,
           ITERATIONS, SIGMA, NOISE_BATCH_RATIO, TOKENS_PER_PARAMETER, UNANSWERED, REASON]


def baseline_name(model: str, iterations: float) -> str:
    return f"{model}, T = {iterations:g}"


def optimal_name(compute: float) -> str:
    return f"compute-optimal, C = {compute:.2g}"


def baseline_table(context: AnalysisContext) -> pd.DataFrame:
    """Each baseline's (M, B, T) at every privacy budget, with σ, σ̄ and its predicted loss."""
    settings, seq_len = context.settings, context.law.seq_len
    rows = []
    for baseline in settings.baselines:
        size = context.model_size_of(baseline.model)
        batch = settings.baseline_compute / compute_cost(size, 1.0, baseline.iterations, seq_len)
        rows += [{CONFIGURATION: baseline_name(baseline.model, baseline.iterations), KIND: BASELINE,
                  MODEL: baseline.model, MODEL_SIZE: size, BATCH_SIZE: batch, ITERATIONS: baseline.iterations,
                  PRIVACY_BUDGET: epsilon, DATA_BUDGET: settings.baseline_data_budget}
                 for epsilon in settings.baseline_privacy_budgets]
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    evaluated = context.evaluate(pd.DataFrame(rows))
    return evaluated.assign(**{UNANSWERED: evaluated[CROSS_ENTROPY].isna().astype(int)})


def optimal_table(context: AnalysisContext) -> pd.DataFrame:
    """The compute-optimal configuration per (compute budget, privacy budget); a row with its reason if none."""
    settings = context.settings
    rows = []
    for compute in (settings.baseline_compute, settings.baseline_reduced_compute):
        for epsilon in settings.baseline_privacy_budgets:
            best = context.best_per_compute(epsilon, settings.baseline_data_budget, np.array([compute]))
            labels = {CONFIGURATION: optimal_name(compute), KIND: OPTIMAL, COMPUTE: compute,
                      PRIVACY_BUDGET: epsilon, DATA_BUDGET: settings.baseline_data_budget,
                      UNANSWERED: unanswered_counts(best)[UNANSWERED]}
            if best.empty:
                why = reasons_text(best.attrs.get("unanswered", {})) or "no configuration at this compute"
                rows.append({**labels, REASON: f"no configuration inside the law's range: {why}"})
            else:
                rows.append({**best.iloc[0].to_dict(), **labels})
    return pd.DataFrame(rows)


def comparison_table(context: AnalysisContext) -> pd.DataFrame:
    data = pd.concat([baseline_table(context), optimal_table(context)], ignore_index=True)
    return data.reindex(columns=COLUMNS)


def draw_comparison(data: pd.DataFrame, context: AnalysisContext) -> Figure:
    figure, axes = subplots(1, 1, width=5.5, height=3.6)
    ax = axes[0, 0]
    log_axes(ax, y=False)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(r"Privacy budget $\varepsilon$")
    ax.set_ylabel("Predicted cross entropy")
    ax.set_title(f"N = {budget_label(context.settings.baseline_data_budget)}", fontsize=9)
    if data[CROSS_ENTROPY].isna().all():
        no_data(ax, "no baseline or compute-optimal configuration is inside the law's range")
        return figure
    baselines = list(dict.fromkeys(data.loc[data[KIND] == BASELINE, CONFIGURATION]))
    optimal = list(dict.fromkeys(data.loc[data[KIND] == OPTIMAL, CONFIGURATION]))
    styles = ([(name, colour, "--", "o") for name, colour in zip(baselines, colours(len(baselines), "plasma"))]
              + [(name, colour, "-", None) for name, colour in zip(optimal, ("black", "grey"))])
    missing = []
    for name, colour, style, marker in styles:
        line = data[data[CONFIGURATION] == name].sort_values(PRIVACY_BUDGET)
        answered = line.dropna(subset=[CROSS_ENTROPY])
        if len(answered) < len(line):
            why = line.loc[line[CROSS_ENTROPY].isna(), REASON].value_counts()
            missing.append(f"{name}: {len(line) - len(answered)}/{len(line)} ({why.index[0]})")
        label = name
        if name in baselines and len(line):
            label += f", B = {line[BATCH_SIZE].iloc[0]:.3g}"
        ax.plot(line[PRIVACY_BUDGET], line[CROSS_ENTROPY], style, color=colour, marker=marker, markersize=3,
                linewidth=1.8 if marker is None else 1.2, label=label)
    floor_line(ax, context)
    ax.legend(fontsize=7)
    footnote(figure, f"Every baseline spends C = {context.settings.baseline_compute:.2g} FLOPs (B = C/(6·M·T·S)). "
             + ("Privacy budgets with no prediction inside the law's range (not drawn): " + "; ".join(missing)
                if missing else "Every point is inside the law's range."))
    return figure


BASELINE_COMPARE = FigureSpec(
    label="fig:baseline_compare",
    caption=("Comparison of compute-optimal training configurations to natural baselines (fixed model and "
             "iterations, batch size set by the compute budget) as a function of the privacy budget. The "
             "baselines and the first compute-optimal line use the same compute budget, the second a reduced "
             "one; all use the same data budget."),
    needs=(LAW, ACCOUNTING, FLOOR),
    compute=comparison_table,
    draw=draw_comparison,
)

FIGURES = (BASELINE_COMPARE,)
