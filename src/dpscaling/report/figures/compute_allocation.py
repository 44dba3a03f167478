"""fig:compute_allocation_selection and fig:optimal_allocation_extended (paper §4.1, appendix).

Optimal model size, batch size and iterations against compute, one line per
privacy budget: the line is the minimum of the hyper-parameter over the
configurations within the near-optimal tolerance of the best loss at that
compute (caption: 1%), the shading its full range; with bootstrap replicates
(docs/fit.md "Intervals") dotted lines give the optimum's 5% / 95% spread. The
extended figure repeats the row for several data budgets.
"""

from __future__ import annotations

import pandas as pd

from dpscaling.report.figures.common import (
    ACCOUNTING, BOOTSTRAP, LAW, FigureSpec, budget_label, colours, footnote, log_axes, no_data, subplots)
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.report.figures.vary_compute import interval_text, with_interval
from dpscaling.law.bootstrap import INTERVAL_NOTE, band
from dpscaling.law.columns import BATCH_SIZE, COMPUTE, DATA_BUDGET, ITERATIONS, MODEL_SIZE, PRIVACY_BUDGET

PANELS = ((MODEL_SIZE, "Model size (parameters)"), (BATCH_SIZE, "Batch size (sequences)"),
          (ITERATIONS, "Iterations"))


def allocation_table(context: AnalysisContext, data_budgets) -> pd.DataFrame:
    """Near-optimal ranges per (data budget, privacy budget, compute)."""
    frames = [with_interval(context.near_optimal(epsilon, users), context.optimum_intervals(epsilon, users))
              for users in data_budgets for epsilon in context.settings.privacy_budgets]
    frames = [frame for frame in frames if not frame.empty]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=[DATA_BUDGET, PRIVACY_BUDGET, COMPUTE])
    bands = [name for parameter, _ in PANELS for name in band(parameter)]
    return table.reindex(columns=[*table.columns, *(c for c in bands if c not in table)]).assign(
        **{INTERVAL_NOTE: context.interval_note})


def draw_allocation(data: pd.DataFrame, context: AnalysisContext, data_budgets):
    figure, axes = subplots(len(data_budgets), len(PANELS))
    epsilons = context.settings.privacy_budgets
    for row, users in enumerate(data_budgets):
        rows = data[data[DATA_BUDGET] == users]
        for column, (parameter, title) in enumerate(PANELS):
            ax = axes[row, column]
            log_axes(ax)
            if rows.empty:
                no_data(ax, f"no configuration inside the law's range at N = {users:g}")
                continue
            for colour, epsilon in zip(colours(len(epsilons)), epsilons):
                line = rows[rows[PRIVACY_BUDGET] == epsilon].sort_values(COMPUTE)
                if line.empty:
                    continue
                ax.plot(line[COMPUTE], line[f"{parameter} Min"], color=colour,
                        label=rf"$\varepsilon$ = {epsilon:g}")
                ax.fill_between(line[COMPUTE], line[f"{parameter} Min"], line[f"{parameter} Max"],
                                color=colour, alpha=0.2, linewidth=0)
                low, high = band(parameter)
                if line[low].notna().any():  # the optimum's 5% / 95% spread over bootstrap replicates
                    for edge in (low, high):
                        ax.plot(line[COMPUTE], line[edge], ":", color=colour, linewidth=0.9)
            ax.set_xlabel("Compute budget (FLOPs)")
            ax.set_ylabel(title)
            ax.set_title(f"N = {budget_label(users)}", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    bootstrap = (f"Dotted: the optimum's 5% and 95% quantiles over the bootstrap replicates ({context.interval_note}; "
                 "seed-to-seed noise propagated through the fit, docs/fit.md \"Intervals\")."
                 if context.replicates is not None else interval_text(context))
    footnote(figure, f"Shading: configurations within {context.settings.near_optimal_tolerance:.0%} of the optimal "
             f"loss. {bootstrap}")
    return figure


def _selection_budgets(context: AnalysisContext) -> tuple[float, ...]:
    return (context.settings.allocation_data_budget,)


def _extended_budgets(context: AnalysisContext) -> tuple[float, ...]:
    return context.settings.data_budgets


SELECTION = FigureSpec(
    label="fig:compute_allocation_selection",
    caption=("Optimal model size, batch size, and iterations for varying privacy and compute budgets at a "
             "fixed data budget. Lines show the minimum value of each hyper-parameter that achieves within the "
             "near-optimal tolerance of the optimal cross entropy for constant-compute training; shaded "
             "regions the full range of near-optimal settings."),
    needs=(LAW, ACCOUNTING, BOOTSTRAP),
    compute=lambda context: allocation_table(context, _selection_budgets(context)),
    draw=lambda data, context: draw_allocation(data, context, _selection_budgets(context)),
)

EXTENDED = FigureSpec(
    label="fig:optimal_allocation_extended",
    caption=("Compute-optimal model sizes, batch sizes and iterations for varying privacy, compute and data "
             "budgets; one row per data budget. Lines: minimum near-optimal value; shading: the full "
             "near-optimal range."),
    needs=(LAW, ACCOUNTING, BOOTSTRAP),
    compute=lambda context: allocation_table(context, _extended_budgets(context)),
    draw=lambda data, context: draw_allocation(data, context, _extended_budgets(context)),
)

FIGURES = (SELECTION, EXTENDED)
