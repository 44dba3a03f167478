"""fig:vector_fields (paper §4.3 "Synergy between Privacy/Data/Compute Budgets"): pure accounting.

At a fixed number of iterations T, the noise-batch ratio σ̄ = σ(ε, T, q = B/N)/B
depends only on the privacy budget ε, the batch size B (the compute budget) and
the data budget N. Each arrow shows the marginal benefit of doubling the two
budgets on its panel's axes: its components are σ̄(x)/σ̄(2x) − 1 per doubling of
x (a component of 1 means doubling that budget halves σ̄). Panel (a) fixes N and
varies ε and B, (b) fixes ε and varies N and B, (c) fixes B and varies N and ε;
every budget is a power of two. The colour says which doubling helps more:
log((1 + x component)/(1 + y component)). Cells where q = B/N > 1, or where
the accounting cannot calibrate σ (here or after a doubling), are masked and
counted in the panel title.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpscaling.report.figures.common import ACCOUNTING, FigureSpec, budget_label, no_data, subplots
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.law.columns import (
    BATCH_SIZE, DATA_BUDGET, ITERATIONS, NOISE_BATCH_RATIO, PRIVACY_BUDGET, REASON, SIGMA)

PANEL = "Panel"
SAMPLING_PROBABILITY = "Sampling Probability"
# σ̄(x)/σ̄(2x) − 1 for each budget x: the marginal benefit of doubling it.
BENEFIT = {PRIVACY_BUDGET: "Benefit of Doubling Privacy Budget", BATCH_SIZE: "Benefit of Doubling Batch Size",
           DATA_BUDGET: "Benefit of Doubling Data Budget"}
BUDGET_NAMES = {PRIVACY_BUDGET: r"Privacy budget $\varepsilon$", BATCH_SIZE: "Batch size B (compute budget)",
                DATA_BUDGET: "Data budget N"}
SYMBOLS = {PRIVACY_BUDGET: r"$\varepsilon$", BATCH_SIZE: "B", DATA_BUDGET: "N"}
Q_ABOVE_ONE = "q = B/N > 1"
NO_SIGMA = "accounting cannot calibrate sigma"


@dataclass(frozen=True)
class Panel:
    """One vector field: ``x`` and ``y`` vary over powers of two, ``fixed`` is held at ``value``."""
    key: str
    x: str
    y: str
    fixed: str
    value: float


def panels(context: AnalysisContext) -> tuple[Panel, ...]:
    s = context.settings
    return (Panel("a", PRIVACY_BUDGET, BATCH_SIZE, DATA_BUDGET, s.vector_data_budget),
            Panel("b", DATA_BUDGET, BATCH_SIZE, PRIVACY_BUDGET, s.vector_privacy_budget),
            Panel("c", DATA_BUDGET, PRIVACY_BUDGET, BATCH_SIZE, s.vector_batch_size))


def powers_of_two(log2_range: tuple[int, int]) -> np.ndarray:
    """2^lo … 2^hi, both ends included."""
    lo, hi = log2_range
    return 2.0 ** np.arange(int(lo), int(hi) + 1)


def budget_axis(context: AnalysisContext, budget: str) -> np.ndarray:
    s = context.settings
    ranges = {PRIVACY_BUDGET: s.vector_log2_epsilon_range, BATCH_SIZE: s.vector_log2_batch_range,
              DATA_BUDGET: s.vector_log2_data_range}
    return powers_of_two(ranges[budget])


def noise_batch_ratio(context: AnalysisContext, epsilon, batch, users, steps: float) -> tuple[np.ndarray, np.ndarray]:
    """(σ̄, reason) from the context's accounting; NaN with a reason where q > 1 or σ is unavailable."""
    epsilon, batch, users = np.broadcast_arrays(*(np.asarray(v, float) for v in (epsilon, batch, users)))
    q = batch / users
    feasible = q <= 1
    sigma = np.full(q.shape, np.nan)
    if feasible.any():
        sigma[feasible] = context.sigma(epsilon[feasible], np.full(feasible.sum(), steps), q[feasible])
    reasons = np.where(feasible, np.where(np.isfinite(sigma), "", NO_SIGMA), Q_ABOVE_ONE).astype(object)
    return sigma / batch, reasons


def panel_table(context: AnalysisContext, panel: Panel) -> pd.DataFrame:
    """Every cell of one panel: σ, σ̄ and the benefit of doubling each of the three budgets."""
    steps = context.settings.vector_iterations
    x, y = np.meshgrid(budget_axis(context, panel.x), budget_axis(context, panel.y), indexing="ij")
    budgets = {panel.x: x.ravel(), panel.y: y.ravel(), panel.fixed: np.full(x.size, panel.value)}
    nbr, reasons = noise_batch_ratio(context, budgets[PRIVACY_BUDGET], budgets[BATCH_SIZE],
                                     budgets[DATA_BUDGET], steps)
    table = pd.DataFrame({PANEL: panel.key, PRIVACY_BUDGET: budgets[PRIVACY_BUDGET],
                          BATCH_SIZE: budgets[BATCH_SIZE], DATA_BUDGET: budgets[DATA_BUDGET], ITERATIONS: steps,
                          SAMPLING_PROBABILITY: budgets[BATCH_SIZE] / budgets[DATA_BUDGET],
                          SIGMA: nbr * budgets[BATCH_SIZE], NOISE_BATCH_RATIO: nbr})
    for budget, column in BENEFIT.items():
        doubled = dict(budgets, **{budget: 2.0 * budgets[budget]})
        nbr_doubled, doubled_reasons = noise_batch_ratio(context, doubled[PRIVACY_BUDGET], doubled[BATCH_SIZE],
                                                         doubled[DATA_BUDGET], steps)
        table[column] = nbr / nbr_doubled - 1.0
        if budget in (panel.x, panel.y):  # an arrow needs both of its components
            reasons = np.where((reasons == "") & (doubled_reasons != ""),
                               [f"{r} after doubling {budget.lower()}" for r in doubled_reasons], reasons)
    table[REASON] = reasons
    return table


def vector_table(context: AnalysisContext) -> pd.DataFrame:
    return pd.concat([panel_table(context, panel) for panel in panels(context)], ignore_index=True)


def _power_of_two_formatter():
    from matplotlib.ticker import FuncFormatter
    return FuncFormatter(lambda value, _: rf"$2^{{{value:g}}}$")


def draw_vector_fields(data: pd.DataFrame, context: AnalysisContext):
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.ticker import MaxNLocator
    figure, axes = subplots(1, 3, width=4.4, height=3.8)
    for ax, panel in zip(axes[0], panels(context)):
        rows = data[data[PANEL] == panel.key]
        shown = rows[rows[REASON] == ""]
        title = f"({panel.key}) {SYMBOLS[panel.fixed]} = {budget_label(panel.value)}"
        masked = len(rows) - len(shown)
        if masked:
            title += f"\n{masked} of {len(rows)} cells masked ({', '.join(sorted(set(rows[REASON]) - {''}))})"
        ax.set_title(title, fontsize=8)
        ax.set_xlabel(BUDGET_NAMES[panel.x])
        ax.set_ylabel(BUDGET_NAMES[panel.y])
        if shown.empty:
            no_data(ax, "no cell of this panel can be calibrated")
            continue
        # Axes in log2 units: one grid step is one doubling, so arrows are comparable across cells.
        x, y = np.log2(shown[panel.x].to_numpy()), np.log2(shown[panel.y].to_numpy())
        u, v = shown[BENEFIT[panel.x]].to_numpy(), shown[BENEFIT[panel.y]].to_numpy()
        colour = np.log((1.0 + u) / (1.0 + v))
        limit = max(float(np.max(np.abs(colour))), 1e-12)
        longest = max(float(np.max(np.hypot(u, v))), 1e-12)
        arrows = ax.quiver(x, y, u, v, colour, cmap="coolwarm", norm=TwoSlopeNorm(0.0, -limit, limit),
                           angles="xy", scale_units="xy", scale=longest / 0.9, width=0.006)
        colourbar = figure.colorbar(arrows, ax=ax, shrink=0.85)
        colourbar.set_label(f"log ratio of the benefits (> 0: doubling {SYMBOLS[panel.x]} helps more)", fontsize=7)
        all_x, all_y = np.log2(rows[panel.x].to_numpy()), np.log2(rows[panel.y].to_numpy())
        ax.set_xlim(all_x.min() - 0.5, all_x.max() + 1.0)
        ax.set_ylim(all_y.min() - 0.5, all_y.max() + 1.0)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(MaxNLocator(integer=True, nbins=6))
            axis.set_major_formatter(_power_of_two_formatter())
        ax.grid(True, alpha=0.3)
    figure.suptitle(f"Marginal benefit of doubling each budget on the noise-batch ratio "
                    f"(T = {context.settings.vector_iterations:g}; arrow = "
                    r"$\bar\sigma(x)/\bar\sigma(2x) - 1$ per doubling)", fontsize=9)
    return figure


VECTOR_FIELDS = FigureSpec(
    label="fig:vector_fields",
    caption=("Marginal benefits of increasing the privacy budget (ε), compute budget (B), and data budget (N) on "
             "the noise-batch ratio at a fixed number of iterations. Each arrow component is σ̄(x)/σ̄(2x) − 1 for "
             "doubling that budget; (a) fixed data budget, (b) fixed privacy budget, (c) fixed batch size. "
             "Masked cells (q = B/N > 1 or outside the accounting) are counted in each panel's title."),
    needs=(ACCOUNTING,),
    compute=vector_table,
    draw=draw_vector_fields,
)

FIGURES = (VECTOR_FIELDS,)
