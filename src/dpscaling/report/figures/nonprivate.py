"""fig:nonprivate_reproduction (paper appendix "Reproducing non-private scaling laws"; LaTeX label fig:my_label).

Compute-optimal cross entropy, model size and iterations of the noise-free
law (σ̄ = 0, the runs "DP-Adam with σ = 0") against compute, with power-law
fits of the optimal model size and of the training tokens against compute
(Chinchilla: both grow roughly as C^0.5).

The batch size is held at the physical batch the law was measured at. With
σ̄ = 0 the law's loss depends on (M, T) only, so a free batch size would always
choose the smallest one (a step of B = 1 predicted as good as one of the
measured batch) — the paper's appendix explains its large token/model ratio by
that fixed "batch size of 1024 examples".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dpscaling.report.figures.common import FLOOR, floor_line
from dpscaling.report.figures.common import LAW, FigureSpec, log_axes, no_data, subplots
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.report.figures.common import BUDGETS_WITHOUT_ANSWER, UNANSWERED, footnote, unanswered_counts
from dpscaling.law.columns import (
    BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO, PRIVACY_BUDGET,
    TOKENS, TOKENS_PER_PARAMETER)
from dpscaling.law.queries import compute_cost

if TYPE_CHECKING:
    from matplotlib.figure import Figure

IN_FIT = "Used In Fit"  # optimum strictly inside the law's model-size and iteration ranges
MODEL_SIZE_EXPONENT = "Model Size Exponent"  # fitted a in M* ∝ C^a
TOKENS_EXPONENT = "Tokens Exponent"          # fitted b in tokens ∝ C^b
PANELS = ((CROSS_ENTROPY, "Compute-optimal cross entropy"), (MODEL_SIZE, "Optimal model size (parameters)"),
          (ITERATIONS, "Optimal iterations"))
COLUMNS = [COMPUTE, CROSS_ENTROPY, MODEL_SIZE, BATCH_SIZE, ITERATIONS, TOKENS, TOKENS_PER_PARAMETER,
           NOISE_BATCH_RATIO, PRIVACY_BUDGET, DATA_BUDGET, IN_FIT, MODEL_SIZE_EXPONENT, TOKENS_EXPONENT,
           BUDGETS_WITHOUT_ANSWER, UNANSWERED]


def reachable_budgets(context: AnalysisContext, batch: float) -> np.ndarray:
    """The context's compute range, cut to what the candidate models and iterations can spend at ``batch``."""
    low, high = context.compute_range()
    sizes, (first, last) = context.model_sizes, context.iteration_bounds
    low = max(low, float(compute_cost(sizes[0], batch, first, context.law.seq_len)))
    high = min(high, float(compute_cost(sizes[-1], batch, last, context.law.seq_len)))
    if not low < high:
        return np.array([])
    return np.geomspace(low, high, context.settings.compute_count)


def power_law_exponent(compute: pd.Series, values: pd.Series) -> float:
    """Slope of log(values) against log(compute) (np.polyfit, degree 1); NaN with fewer than two points."""
    if len(compute) < 2 or np.ptp(np.log(compute.to_numpy(float))) == 0:
        return float("nan")
    return float(np.polyfit(np.log(compute.to_numpy(float)), np.log(values.to_numpy(float)), 1)[0])


def nonprivate_table(context: AnalysisContext) -> pd.DataFrame:
    law = context.law
    batch = float(law.physical_batch)
    users = max(context.settings.data_budgets)  # ε = ∞: σ = 0 whatever N; N only needs q = B/N ≤ 1
    budgets = reachable_budgets(context, batch)
    best = context.best_per_compute(np.inf, users, budgets)  # B = the physical batch (context.batch_sizes)
    counts = unanswered_counts(best)
    if best.empty:
        return pd.DataFrame([counts]).reindex(columns=COLUMNS)
    sizes, (first, last) = context.model_sizes, context.iteration_bounds
    inside = (~np.isclose(best[MODEL_SIZE], sizes[0]) & ~np.isclose(best[MODEL_SIZE], sizes[-1])
              & ~np.isclose(best[ITERATIONS], first) & ~np.isclose(best[ITERATIONS], last))
    fitted = best[inside]
    return best.assign(**{
        IN_FIT: inside,
        MODEL_SIZE_EXPONENT: power_law_exponent(fitted[COMPUTE], fitted[MODEL_SIZE]),
        TOKENS_EXPONENT: power_law_exponent(fitted[COMPUTE], fitted[TOKENS]),
        **counts}).reindex(columns=COLUMNS)


def _fit_line(ax, data: pd.DataFrame, column: str, exponent: float, label: str) -> None:
    """Draw value ∝ C^exponent through the fitted points' geometric mean."""
    fitted = data[data[IN_FIT].astype(bool)]
    if fitted.empty or not np.isfinite(exponent):
        return
    log_c, log_v = np.log(fitted[COMPUTE].to_numpy(float)), np.log(fitted[column].to_numpy(float))
    intercept = log_v.mean() - exponent * log_c.mean()
    ends = np.array([log_c.min(), log_c.max()])
    ax.plot(np.exp(ends), np.exp(intercept + exponent * ends), ":", color="tab:red", label=label)


def draw_nonprivate(data: pd.DataFrame, context: AnalysisContext) -> Figure:
    figure, axes = subplots(1, len(PANELS))
    answered = data.dropna(subset=[CROSS_ENTROPY]).sort_values(COMPUTE)
    for ax, (column, label) in zip(axes[0], PANELS):
        log_axes(ax, y=column != CROSS_ENTROPY)
        ax.set_xlabel("Compute budget (FLOPs)")
        ax.set_ylabel(label)
        if answered.empty:
            no_data(ax, "no compute budget inside the law's noise-free range at the physical batch size")
            continue
        ax.plot(answered[COMPUTE], answered[column], "o-", color="tab:blue", markersize=3,
                label=r"$\bar\sigma$ = 0 optimum")
        if column == CROSS_ENTROPY:
            floor_line(ax, context)
    if not answered.empty:
        m_exp, t_exp = answered[MODEL_SIZE_EXPONENT].iloc[0], answered[TOKENS_EXPONENT].iloc[0]
        used = int(answered[IN_FIT].astype(bool).sum())
        _fit_line(axes[0, 1], answered, MODEL_SIZE, m_exp, rf"fit: $M^* \propto C^{{{m_exp:.2f}}}$ ({used} points)")
        # B is fixed, so tokens = B·S·T and iterations share the tokens' exponent.
        _fit_line(axes[0, 2], answered, ITERATIONS, t_exp,
                  rf"fit: tokens $\propto C^{{{t_exp:.2f}}}$ ({used} points)")
        for ax in axes[0]:
            ax.legend(fontsize=7)
    batch = context.law.physical_batch
    dropped = int(data[UNANSWERED].iloc[0]) if len(data) else 0
    without = int(data[BUDGETS_WITHOUT_ANSWER].iloc[0]) if len(data) else 0
    footnote(figure, f"Batch size fixed at the physical batch ({batch} sequences); σ̄ = 0 (ε = ∞). Fits use the "
             "optima strictly inside the law's model-size and iteration ranges. "
             f"Outside the law's range (dropped): {dropped} candidate configurations; "
             f"{without} compute budgets with no answer.")
    return figure


NONPRIVATE = FigureSpec(
    label="fig:nonprivate_reproduction",
    caption=("Compute-optimal cross entropy, model size, and number of iterations when running DP-Adam with "
             "σ = 0 (the paper's appendix \"Reproducing non-private scaling laws\", LaTeX label fig:my_label), "
             "at the physical batch size, with power-law fits of the optimal model size and of the training "
             "tokens against compute."),
    needs=(LAW, FLOOR),
    compute=nonprivate_table,
    draw=draw_nonprivate,
)

FIGURES = (NONPRIVATE,)
