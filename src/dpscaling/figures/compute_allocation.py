"""fig:compute_allocation_selection and fig:optimal_allocation_extended (paper §4.1, appendix).

Optimal model size, batch size and iterations against compute, one line per
privacy budget: the line is the minimum of the hyper-parameter over the
configurations within the near-optimal tolerance of the best loss at that
compute (caption: 1%), the shading its full range. The extended figure repeats
the row for several data budgets.
"""

from __future__ import annotations

import pandas as pd

from dpscaling.figures.common import ACCOUNTING, LAW, FigureSpec, budget_label, colours, log_axes, no_data, subplots
from dpscaling.figures.context import AnalysisContext
from dpscaling.law.columns import BATCH_SIZE, COMPUTE, DATA_BUDGET, ITERATIONS, MODEL_SIZE, PRIVACY_BUDGET

PANELS = ((MODEL_SIZE, "Model size (parameters)"), (BATCH_SIZE, "Batch size (sequences)"),
          (ITERATIONS, "Iterations"))


def allocation_table(context: AnalysisContext, data_budgets) -> pd.DataFrame:
    """Near-optimal ranges per (data budget, privacy budget, compute)."""
    frames = [context.near_optimal(epsilon, users) for users in data_budgets
              for epsilon in context.settings.privacy_budgets]
    frames = [frame for frame in frames if not frame.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=[DATA_BUDGET, PRIVACY_BUDGET, COMPUTE])


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
            ax.set_xlabel("Compute budget (FLOPs)")
            ax.set_ylabel(title)
            ax.set_title(f"N = {budget_label(users)}", fontsize=9)
    axes[0, 0].legend(fontsize=7)
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
    needs=(LAW, ACCOUNTING),
    compute=lambda context: allocation_table(context, _selection_budgets(context)),
    draw=lambda data, context: draw_allocation(data, context, _selection_budgets(context)),
)

EXTENDED = FigureSpec(
    label="fig:optimal_allocation_extended",
    caption=("Compute-optimal model sizes, batch sizes and iterations for varying privacy, compute and data "
             "budgets; one row per data budget. Lines: minimum near-optimal value; shading: the full "
             "near-optimal range."),
    needs=(LAW, ACCOUNTING),
    compute=lambda context: allocation_table(context, _extended_budgets(context)),
    draw=lambda data, context: draw_allocation(data, context, _extended_budgets(context)),
)

FIGURES = (SELECTION, EXTENDED)
