"""fig:vary_compute_and_privacy (a, b) and fig:token_model_ratios (c) (paper §4.1 and §4.3, Figure 3).

(a–b) Best cross entropy against compute, one panel per privacy budget and one
line per data budget. As in the authors' notebook the line is the running
minimum over compute (a larger budget can always be spent like a smaller one),
and each panel is annotated with the optimal model size at the inflection point
— the saturating compute of Table 2: the smallest budget whose best loss is
within 1% of the best over all budgets — for two of its curves. With bootstrap
replicates (docs/fit.md "Intervals") each line has its 90% band.

(c) Training tokens per parameter (S·B·T/M) of the compute-optimal
configuration against compute at one data budget, one line per privacy budget
and ε = ∞ (the non-private law), the band its range over the near-optimal
configurations, with Chinchilla's rule of thumb (20 tokens per parameter) for
reference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dpscaling.report.figures.common import (
    ACCOUNTING, BOOTSTRAP, BUDGETS_WITHOUT_ANSWER, FLOOR, LAW, UNANSWERED, FigureSpec, budget_label, colours, footnote, log_axes,
    floor_line, no_data, reasons_text, subplots, unanswered_counts)
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.law.bootstrap import INTERVAL_NOTE, band
from dpscaling.law.columns import (
    BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO, PRIVACY_BUDGET,
    REASON, SIGMA, TOKENS, TOKENS_PER_PARAMETER)
from dpscaling.law.queries import SATURATION_TOLERANCE, saturating_compute

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BEST_CROSS_ENTROPY = "Best Cross Entropy"  # running minimum of the compute-optimal loss over compute
INFLECTION_POINT = "Inflection Point"      # this row's compute is the curve's saturating compute
SATURATES = "Saturates In Range"           # the saturating compute is below the largest budget answered
ANNOTATED = "Annotated"                    # the inflection point is labelled on the figure
AT_MODEL_SIZE_EDGE = "Optimum At Model-Size Edge"
ANNOTATED_CURVES = 2  # the caption: "annotated … for two of the curves"
# Hoffmann et al. (2022): about 20 training tokens per parameter, compute-optimal without DP.
CHINCHILLA_TOKENS_PER_PARAMETER = 20.0
CONFIGURATION_COLUMNS = [COMPUTE, CROSS_ENTROPY, MODEL_SIZE, BATCH_SIZE, ITERATIONS, TOKENS,
                         TOKENS_PER_PARAMETER, SIGMA, NOISE_BATCH_RATIO]


# ---------------------------------------------------------------------- shared by this package's law figures

def epsilon_lines(data: pd.DataFrame, answered: pd.DataFrame):
    """Per privacy budget of a figure's ``data`` (in order) with answered rows: those rows of ``answered`` by
    compute, its colour and line style; finite ε on the plasma scale over all of ``data``'s (so a budget
    without answers keeps the others' colours), ε = ∞ (no DP) black and dashed."""
    epsilons = list(dict.fromkeys(data[PRIVACY_BUDGET]))
    finite = [e for e in epsilons if np.isfinite(e)]
    palette = dict(zip(finite, colours(len(finite), "plasma")))
    for epsilon in epsilons:
        line = answered[answered[PRIVACY_BUDGET] == epsilon].sort_values(COMPUTE)
        if not line.empty:
            yield epsilon, line, palette.get(epsilon, "black"), "--" if np.isinf(epsilon) else "-"


def count_note(data: pd.DataFrame, keys: list[str], what: str) -> str:
    """One sentence totalling the per-line count columns (the CSV keeps them per line)."""
    if data.empty or UNANSWERED not in data:
        return ""
    per_line = data.groupby(keys, dropna=False)[[BUDGETS_WITHOUT_ANSWER, UNANSWERED]].first().reset_index()
    lost = per_line[(per_line[UNANSWERED] > 0) | (per_line[BUDGETS_WITHOUT_ANSWER] > 0)]
    if lost.empty:
        return f"Every candidate configuration of every {what} was inside the law's range."
    total, budgets = int(lost[UNANSWERED].sum()), int(lost[BUDGETS_WITHOUT_ANSWER].sum())
    return (f"Outside the law's range (dropped; counts per line in the CSV): {total} candidate configurations "
            f"over {len(lost)} {what}s; {budgets} compute budgets with no answer at all.")


def empty_row(epsilon: float, users: float, per_compute: pd.DataFrame) -> pd.DataFrame:
    """A line that has no point at all stays in the data as one row saying why."""
    reason = reasons_text(per_compute.attrs.get("unanswered", {})) or "no candidate configuration"
    return pd.DataFrame([{PRIVACY_BUDGET: epsilon, DATA_BUDGET: users, REASON: f"no compute budget answered: {reason}",
                          **unanswered_counts(per_compute)}])


# ---------------------------------------------------------------------- (a–b) best loss vs compute

def inflection_text(model_size: float) -> str:
    """The annotation of an inflection point: the optimal model size there."""
    return "M* = " + f"{model_size:.2g}".replace("e+0", "e").replace("e+", "e")


def running_minimum(per_compute: pd.DataFrame, epsilon: float, users: float) -> pd.DataFrame:
    """One curve: the compute-optimum per budget, its running minimum and the saturating compute."""
    if per_compute.empty:
        return empty_row(epsilon, users, per_compute)
    curve = per_compute.sort_values(COMPUTE).reset_index(drop=True)
    saturating = saturating_compute(curve, SATURATION_TOLERANCE)
    curve = curve[CONFIGURATION_COLUMNS].assign(**{
        PRIVACY_BUDGET: epsilon, DATA_BUDGET: users,
        BEST_CROSS_ENTROPY: curve[CROSS_ENTROPY].cummin(),
        INFLECTION_POINT: curve[COMPUTE] == saturating[COMPUTE],
        SATURATES: bool(saturating[COMPUTE] < curve[COMPUTE].max()),
        **unanswered_counts(per_compute)})
    return curve


def choose_annotated(panel: pd.DataFrame, count: int = ANNOTATED_CURVES) -> pd.Series:
    """Mark the inflection points to label: of the curves that saturate inside the compute range, the
    ``count`` with the largest data budgets (their inflection comes latest, at the largest models)."""
    points = panel[panel[INFLECTION_POINT].fillna(False).astype(bool) & panel[SATURATES].fillna(False).astype(bool)]
    chosen = points.sort_values(DATA_BUDGET, ascending=False).head(count).index
    return pd.Series(panel.index.isin(chosen), index=panel.index)


def saturation_note(data: pd.DataFrame) -> str:
    curves = data[data[INFLECTION_POINT].fillna(False).astype(bool)]
    saturating = int(curves[SATURATES].fillna(False).astype(bool).sum())
    return (f"Inflection point: the smallest compute within {SATURATION_TOLERANCE:.0%} of the curve's best loss; "
            f"it lies before the largest budget answered for {saturating} of {len(curves)} curves. Dots: per panel, "
            f"the {ANNOTATED_CURVES} of those with the largest data budgets, labelled with the optimal model size "
            "there.")


def with_interval(curve: pd.DataFrame, bands: pd.DataFrame) -> pd.DataFrame:
    """A curve with its bootstrap band columns (NaN where a replicate-free run has none)."""
    if COMPUTE not in curve or bands.empty:
        return curve
    return curve.merge(bands.drop(columns=[INTERVAL_NOTE]), on=COMPUTE, how="left")


def interval_text(context: AnalysisContext) -> str:
    """The footnote's sentence on the band: what it is, or why there is none."""
    if context.replicates is None:
        return f"No band ({context.interval_note})."
    return (f"Shading: {context.interval_note} (seed-to-seed noise propagated through the fit; docs/fit.md "
            "\"Intervals\").")


def draw_band(ax, curve: pd.DataFrame, column: str, colour) -> None:
    low, high = band(column)
    if low in curve and curve[low].notna().any():
        ax.fill_between(curve[COMPUTE], curve[low], curve[high], color=colour, alpha=0.3, linewidth=0)


def best_loss_table(context: AnalysisContext) -> pd.DataFrame:
    settings = context.settings
    frames = []
    for epsilon in settings.vary_compute_privacy_budgets:
        panel = pd.concat([with_interval(running_minimum(context.best_per_compute(epsilon, users), epsilon, users),
                                         context.optimum_intervals(epsilon, users))
                           for users in settings.data_budgets], ignore_index=True)
        if INFLECTION_POINT in panel:
            panel[ANNOTATED] = choose_annotated(panel)
        frames.append(panel)
    data = pd.concat(frames, ignore_index=True)
    columns = [PRIVACY_BUDGET, DATA_BUDGET, COMPUTE, BEST_CROSS_ENTROPY, *band(BEST_CROSS_ENTROPY),
               *CONFIGURATION_COLUMNS[1:], *band(MODEL_SIZE), INFLECTION_POINT, SATURATES, ANNOTATED,
               BUDGETS_WITHOUT_ANSWER, UNANSWERED, REASON, INTERVAL_NOTE]
    data = data.reindex(columns=columns).assign(**{INTERVAL_NOTE: context.interval_note})
    return data.astype({column: "boolean" for column in (INFLECTION_POINT, SATURATES, ANNOTATED)})


def draw_best_loss(data: pd.DataFrame, context: AnalysisContext) -> Figure:
    epsilons, data_budgets = context.settings.vary_compute_privacy_budgets, context.settings.data_budgets
    figure, axes = subplots(1, len(epsilons))
    for ax, epsilon in zip(axes[0], epsilons):
        panel = data[(data[PRIVACY_BUDGET] == epsilon) & data[COMPUTE].notna()]
        log_axes(ax, y=False)
        ax.set_title(rf"Privacy budget $\varepsilon$ = {epsilon:g}", fontsize=9)
        ax.set_xlabel("Compute budget (FLOPs)")
        ax.set_ylabel("Best cross entropy")
        if panel.empty:
            no_data(ax, f"no compute budget inside the law's range at ε = {epsilon:g}")
            continue
        annotated = 0
        for colour, users in zip(colours(len(data_budgets)), data_budgets):
            curve = panel[panel[DATA_BUDGET] == users].sort_values(COMPUTE)
            if curve.empty:
                continue
            ax.plot(curve[COMPUTE], curve[BEST_CROSS_ENTROPY], color=colour, label=f"N = {budget_label(users)}")
            draw_band(ax, curve, BEST_CROSS_ENTROPY, colour)
            for _, point in curve[curve[ANNOTATED].fillna(False).astype(bool)].iterrows():
                ax.plot(point[COMPUTE], point[BEST_CROSS_ENTROPY], "o", color=colour, markersize=5)
                # Staggered upwards: the annotated curves' inflection points are often close together.
                ax.annotate(inflection_text(point[MODEL_SIZE]), (point[COMPUTE], point[BEST_CROSS_ENTROPY]),
                            xytext=(-10, 14 + 12 * annotated), textcoords="offset points", ha="right", fontsize=7,
                            arrowprops=dict(arrowstyle="-", color=colour, lw=0.8))
                annotated += 1
        floor_line(ax, context)
        ax.legend(fontsize=7)
    footnote(figure, saturation_note(data) + " " + interval_text(context) + " "
             + count_note(data, [PRIVACY_BUDGET, DATA_BUDGET], "curve"))
    return figure


# ---------------------------------------------------------------------- (c) token / model ratio

def token_ratio_table(context: AnalysisContext) -> pd.DataFrame:
    """Per privacy budget (and ∞): the compute-optimum's tokens per parameter and its near-optimal range."""
    settings, budgets = context.settings, context.compute_budgets()
    users = settings.token_ratio_data_budget
    edges = (context.model_sizes[0], context.model_sizes[-1])
    frames = []
    for epsilon in (*settings.token_ratio_privacy_budgets, np.inf):
        best = context.best_per_compute(epsilon, users, budgets)
        table = context.near_optimal(epsilon, users, budgets)
        if table.empty:
            frames.append(empty_row(epsilon, users, best))
            continue
        frames.append(table.assign(**{
            PRIVACY_BUDGET: epsilon, DATA_BUDGET: users,
            AT_MODEL_SIZE_EDGE: np.isclose(table[MODEL_SIZE], edges[0]) | np.isclose(table[MODEL_SIZE], edges[1]),
            **unanswered_counts(best)}))
    data = pd.concat(frames, ignore_index=True)
    front = [PRIVACY_BUDGET, DATA_BUDGET, COMPUTE, TOKENS_PER_PARAMETER, CROSS_ENTROPY, AT_MODEL_SIZE_EDGE]
    return data.reindex(columns=front + [c for c in data.columns if c not in front])


def draw_token_ratio(data: pd.DataFrame, context: AnalysisContext) -> Figure:
    figure, axes = subplots(1, 1, width=5.0)
    ax = axes[0, 0]
    log_axes(ax)
    ax.set_xlabel("Compute budget (FLOPs)")
    ax.set_ylabel("Tokens / parameter (S·B·T / M)")
    ax.set_title(f"Compute-optimal token-to-model ratio, N = {budget_label(context.settings.token_ratio_data_budget)}",
                 fontsize=9)
    answered = data[data[COMPUTE].notna()]
    if answered.empty:
        no_data(ax, "no compute budget inside the law's range for any privacy budget")
        return figure
    for epsilon, line, colour, style in epsilon_lines(data, answered):
        ax.plot(line[COMPUTE], line[TOKENS_PER_PARAMETER], style, color=colour,
                label=rf"$\varepsilon$ = {budget_label(epsilon) if np.isinf(epsilon) else f'{epsilon:g}'}")
        ax.fill_between(line[COMPUTE], line[f"{TOKENS_PER_PARAMETER} Min"], line[f"{TOKENS_PER_PARAMETER} Max"],
                        color=colour, alpha=0.15, linewidth=0)
        edge = line[line[AT_MODEL_SIZE_EDGE].astype(bool)]
        ax.plot(edge[COMPUTE], edge[TOKENS_PER_PARAMETER], "o", mfc="none", color=colour, markersize=4)
    ax.axhline(CHINCHILLA_TOKENS_PER_PARAMETER, color="grey", linestyle=":",
               label=f"Chinchilla's rule of thumb ({CHINCHILLA_TOKENS_PER_PARAMETER:g} tokens/parameter)")
    ax.legend(fontsize=6, ncols=2)
    footnote(figure, f"Bands: range over configurations within {context.settings.near_optimal_tolerance:.0%} of the "
             "optimal loss. Hollow markers: optimum at the edge of the law's model-size range (the ratio is "
             "bounded by that edge). ε = ∞: the non-private law (σ = 0). "
             + count_note(data, [PRIVACY_BUDGET], "privacy budget"))
    return figure


VARY_COMPUTE = FigureSpec(
    label="fig:vary_compute_and_privacy",
    caption=("Best cross-entropy loss achieved for varying compute budgets, one line per data budget and one "
             "panel per privacy budget (the paper's panels a–b; label fig:vary_compute_and_privacy2 is panel b). "
             "Each panel is annotated with the optimal model size at the inflection point (the saturating "
             "compute budget) for two of the curves."),
    needs=(LAW, ACCOUNTING, BOOTSTRAP, FLOOR),
    compute=best_loss_table,
    draw=draw_best_loss,
)

TOKEN_RATIOS = FigureSpec(
    label="fig:token_model_ratios",
    caption=("Number of training tokens S·B·T divided by the number of model parameters for the compute-optimal "
             "training configuration at a fixed data budget, for several privacy budgets and non-private "
             "training (ε = ∞); shading: the range over near-optimal configurations; dotted: Chinchilla's "
             "rule of thumb of 20 tokens per parameter."),
    needs=(LAW, ACCOUNTING),
    compute=token_ratio_table,
    draw=draw_token_ratio,
)

FIGURES = (VARY_COMPUTE, TOKEN_RATIOS)
