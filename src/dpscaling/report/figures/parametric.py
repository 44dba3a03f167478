"""The parametric-law figures (appendix "Parametric Scaling Laws"), from the law's parametric fit.

- fig:parametric-scaling-law-naive / -sigmoid: observed cross entropy against
  the prediction of L̂1 = E + A/M^α + B/N^β + C·σ̄^γ and of
  L̂2 = E + A/M^α + B/N^β + C·σ̄↷^γ/M^α2, on the points the fit saw; two panels
  coloured by model size and by σ̄, the fitted exponents in the title;
- fig:parametric-scaling-law-nbr-transform: cross entropy against σ̄ (log-log)
  and against σ̄↷ = sigmoid((log σ̄ + 8)/1.6) (linear), one line per model size
  at its last fitted iteration count;
- fig:parametric-scaling-optimal-model-size: argmin_M L̂2(M, N = C/(6·M·S), σ̄)
  against compute for several σ̄ (:func:`~dpscaling.law.parametric.optimal_model_size`),
  the non-private law (σ̄ = 0, the C-term vanishes) dashed.

The fit exists when the law was fitted with ``fit.parametric: true``; otherwise,
or when too few points passed the appendix's filters, each figure says why on
its panel.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

from dpscaling.report.figures.common import LAW, FigureSpec, budget_label, colours, log_axes, no_data, subplots
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.law.columns import COMPUTE, CROSS_ENTROPY, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO, REASON
from dpscaling.law.parametric import EXAMPLES, FORMS, optimal_model_size, sigmoid_noise_batch_ratio

FORM = "Form"
PREDICTED = "Predicted Cross Entropy"
TRANSFORMED = "Sigmoid Noise Batch Ratio"  # σ̄↷
OPTIMAL_MODEL_SIZE = "Optimal Model Size"
PRIVATE = "Private"
AT_BOUND = "At Search Bound"
OPTIMAL_SIZE_FORM = "L2"  # the appendix's optimal-size curves use L̂2
SYMBOLS = {"alpha": r"\alpha", "beta": r"\beta", "gamma": r"\gamma", "alpha2": r"\alpha_2"}
# An optimum within this distance (in log M) of a search bound is flagged: the bound, not the law, set it.
_BOUND_TOLERANCE = 1e-3


def missing_reason(context: AnalysisContext, form: str | None = None) -> str | None:
    """Why the law has no (usable) parametric fit of ``form`` (any form if None), or None if it has one."""
    law = context.law
    if law.parametric is not None and law.parametric_diagnostics is not None:
        return law.parametric[form].get("degenerate") if form else None
    failed = law.report.get("parametric_failed")
    if failed:
        return f"parametric fit failed: {failed}"
    return "the law was fitted without the parametric forms (set fit.parametric: true)"


def _reason_frame(reason: str) -> pd.DataFrame:
    return pd.DataFrame({REASON: [reason]})


def _has_data(data: pd.DataFrame) -> bool:
    return REASON not in data or data[REASON].isna().all()


def _no_data_figure(data: pd.DataFrame):
    """One empty panel stating why there is nothing to plot."""
    figure, axes = subplots(1, 1, width=6.0, height=2.5)
    ax = axes[0, 0]
    ax.set_xticks([])
    ax.set_yticks([])
    no_data(ax, textwrap.fill(str(data[REASON].iloc[0]), 80))
    return figure


# ---------------------------------------------------------------------- observed vs predicted

def fit_table(context: AnalysisContext, name: str) -> pd.DataFrame:
    """The points the fit saw, their observed loss and ``name``'s prediction at the fitted parameters."""
    reason = missing_reason(context, name)
    if reason:
        return _reason_frame(reason)
    fit, points = context.law.parametric[name], context.law.parametric_diagnostics
    table = points[[MODEL_SIZE, ITERATIONS, EXAMPLES, NOISE_BATCH_RATIO, CROSS_ENTROPY]].copy()
    table.insert(0, FORM, name)
    table[PREDICTED] = FORMS[name].predict(fit["params"], table[MODEL_SIZE], table[EXAMPLES],
                                           table[NOISE_BATCH_RATIO])
    for parameter, value in fit["params"].items():
        table[f"Fitted {parameter}"] = value
    return table


def exponent_title(context: AnalysisContext, name: str) -> str:
    fit = context.law.parametric[name]
    exponents = ", ".join(rf"${SYMBOLS[p]}$ = {fit['params'][p]:.2f}" for p in FORMS[name].parameters
                          if p in SYMBOLS)
    return (rf"$\hat L_{name[-1]}$ fit: {exponents}; RMSE {fit['rmse']:.3g} on {fit['points']} points")


def draw_fit(data: pd.DataFrame, context: AnalysisContext, name: str):
    from matplotlib.colors import LogNorm
    if not _has_data(data):
        return _no_data_figure(data)
    figure, axes = subplots(1, 2, width=4.2, height=3.6)
    observed, predicted = data[CROSS_ENTROPY], data[PREDICTED]
    low, high = float(min(observed.min(), predicted.min())), float(max(observed.max(), predicted.max()))
    pad = 0.03 * (high - low or 1.0)
    for ax, column, label in zip(axes[0], (MODEL_SIZE, NOISE_BATCH_RATIO),
                                 ("Model size", r"Noise-batch ratio $\bar\sigma$")):
        points = ax.scatter(predicted, observed, c=data[column], s=8,
                            norm=LogNorm(data[column].min(), data[column].max()), cmap="viridis")
        figure.colorbar(points, ax=ax).set_label(label)
        ax.plot([low - pad, high + pad], [low - pad, high + pad], color="0.4", linestyle="--", linewidth=1)
        ax.set_xlim(low - pad, high + pad)
        ax.set_ylim(low - pad, high + pad)
        ax.set_xlabel(rf"Predicted cross entropy ($\hat L_{name[-1]}$)")
        ax.set_ylabel("Observed cross entropy (smoothed)")
        ax.set_title(f"coloured by {label.split(' $')[0].lower()}", fontsize=9)
        ax.grid(True, alpha=0.3)
    figure.suptitle(exponent_title(context, name), fontsize=9)
    return figure


# ---------------------------------------------------------------------- σ̄ transform

def transform_table(context: AnalysisContext) -> pd.DataFrame:
    """Per model size, the fitted points at its last iteration count: σ̄, σ̄↷ and the loss."""
    reason = missing_reason(context)
    if reason:
        return _reason_frame(reason)
    points = context.law.parametric_diagnostics
    last = points.groupby(MODEL_SIZE)[ITERATIONS].transform("max")
    table = points.loc[points[ITERATIONS] == last, [MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO, CROSS_ENTROPY]]
    table = table.assign(**{TRANSFORMED: sigmoid_noise_batch_ratio(table[NOISE_BATCH_RATIO])})
    return table.sort_values([MODEL_SIZE, NOISE_BATCH_RATIO]).reset_index(drop=True)


def draw_transform(data: pd.DataFrame, context: AnalysisContext):
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
    if not _has_data(data):
        return _no_data_figure(data)
    figure, axes = subplots(1, 2, width=4.2, height=3.4)
    sizes = sorted(data[MODEL_SIZE].unique())
    left, right = axes[0]
    log_axes(left)
    right.grid(True, alpha=0.3)
    for colour, size in zip(colours(len(sizes)), sizes):
        rows = data[data[MODEL_SIZE] == size]
        label = f"M = {size:.3g} (T = {rows[ITERATIONS].iloc[0]:g})"
        left.plot(rows[NOISE_BATCH_RATIO], rows[CROSS_ENTROPY], "o-", color=colour, markersize=3, label=label)
        right.plot(rows[TRANSFORMED], rows[CROSS_ENTROPY], "o-", color=colour, markersize=3, label=label)
    # Losses span less than a decade: label every integer multiple, in plain numbers.
    left.yaxis.set_major_locator(LogLocator(base=10, subs=np.arange(1, 10)))
    left.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    left.yaxis.set_minor_formatter(NullFormatter())
    left.set_xlabel(r"Noise-batch ratio $\bar\sigma$")
    right.set_xlabel(r"$\bar\sigma_\looparrowright$ = sigmoid((log $\bar\sigma$ + 8)/1.6)")
    for ax in (left, right):
        ax.set_ylabel("Cross entropy (smoothed)")
    left.set_title("log-log", fontsize=9)
    right.set_title("transformed, linear", fontsize=9)
    left.legend(fontsize=7)
    return figure


# ---------------------------------------------------------------------- optimal model size

def optimal_size_table(context: AnalysisContext) -> pd.DataFrame:
    """argmin_M L̂2 per (compute, σ̄), σ̄ = 0 (the non-private law) included.

    M is searched over every size the compute budget admits: at least one
    parameter and at least one training example (N = C/(6·M·S) ≥ 1); an
    optimum at a bound is flagged.
    """
    reason = missing_reason(context, OPTIMAL_SIZE_FORM)
    if reason:
        return _reason_frame(reason)
    form, params = FORMS[OPTIMAL_SIZE_FORM], context.law.parametric[OPTIMAL_SIZE_FORM]["params"]
    seq_len = context.law.seq_len
    rows = []
    for nbr in (0.0, *context.settings.parametric_noise_batch_ratios):
        if nbr == 0 and params["gamma"] <= 0:
            continue  # the noise term does not vanish at σ̄ = 0: no non-private limit to draw
        for compute in context.compute_budgets():
            bounds = (1.0, compute / (6.0 * seq_len))
            with np.errstate(divide="ignore"):  # σ̄ = 0: log σ̄↷ = −∞, the noise term is exactly 0
                size = optimal_model_size(form, params, compute, nbr, seq_len, bounds)
                examples = compute / (6.0 * size * seq_len)
                loss = float(form.predict(params, size, examples, nbr))
            at_bound = bool(np.min(np.abs(np.log(size) - np.log(bounds))) < _BOUND_TOLERANCE)
            rows.append({FORM: OPTIMAL_SIZE_FORM, COMPUTE: compute, NOISE_BATCH_RATIO: nbr, PRIVATE: nbr > 0,
                         OPTIMAL_MODEL_SIZE: size, EXAMPLES: examples, PREDICTED: loss, AT_BOUND: at_bound})
    return pd.DataFrame(rows)


def draw_optimal_size(data: pd.DataFrame, context: AnalysisContext):
    if not _has_data(data):
        return _no_data_figure(data)
    figure, axes = subplots(1, 1, width=5.0, height=3.8)
    ax = axes[0, 0]
    log_axes(ax)
    private = sorted(data.loc[data[PRIVATE], NOISE_BATCH_RATIO].unique())
    for colour, nbr in zip(colours(len(private), "plasma"), private):
        rows = data[data[NOISE_BATCH_RATIO] == nbr].sort_values(COMPUTE)
        ax.plot(rows[COMPUTE], rows[OPTIMAL_MODEL_SIZE], color=colour, label=rf"$\bar\sigma$ = {budget_label(nbr)}")
    public = data[~data[PRIVATE]].sort_values(COMPUTE)
    if not public.empty:
        ax.plot(public[COMPUTE], public[OPTIMAL_MODEL_SIZE], "k--", label=r"non-private ($\bar\sigma$ = 0)")
    bounded = data[data[AT_BOUND]]
    if not bounded.empty:
        ax.plot(bounded[COMPUTE], bounded[OPTIMAL_MODEL_SIZE], "x", color="0.3", label="at a search bound")
    trained = context.law.model_size_range()
    ax.axhspan(*trained, color="0.85", alpha=0.5, linewidth=0, label="trained model sizes")
    ax.set_xlabel("Compute budget C (FLOPs)")
    ax.set_ylabel(r"Optimal model size (argmin $\hat L_2$)")
    alpha2 = context.law.parametric[OPTIMAL_SIZE_FORM]["params"]["alpha2"]
    ax.set_title(rf"$\hat L_2$ with $\alpha_2$ = {alpha2:.3g}: $\bar\sigma$ moves the optimum only through "
                 r"$C\bar\sigma_\looparrowright^\gamma/M^{\alpha_2}$", fontsize=8)
    ax.legend(fontsize=7)
    return figure


def _spec(label: str, caption: str, compute, draw) -> FigureSpec:
    return FigureSpec(label=label, caption=caption, needs=(LAW,), compute=compute, draw=draw)


NAIVE = _spec(
    "fig:parametric-scaling-law-naive",
    "Parametric private scaling law L̂1 = E + A/M^α + B/N^β + C·σ̄^γ: observed against predicted cross entropy, "
    "coloured by model size (left) and noise-batch ratio (right); fitted exponents in the title.",
    lambda context: fit_table(context, "L1"), lambda data, context: draw_fit(data, context, "L1"))
SIGMOID = _spec(
    "fig:parametric-scaling-law-sigmoid",
    "Parametric private scaling law L̂2 = E + A/M^α + B/N^β + C·σ̄↷^γ/M^α2: observed against predicted cross "
    "entropy, coloured by model size (left) and noise-batch ratio (right); fitted exponents in the title.",
    lambda context: fit_table(context, "L2"), lambda data, context: draw_fit(data, context, "L2"))
TRANSFORM = _spec(
    "fig:parametric-scaling-law-nbr-transform",
    "Relation between the noise-batch ratio and the cross entropy: (left) log-log; (right) against the "
    "transformed ratio σ̄↷ = sigmoid((log σ̄ + 8)/1.6).",
    transform_table, draw_transform)
OPTIMAL_SIZE = _spec(
    "fig:parametric-scaling-optimal-model-size",
    "Optimal model sizes against compute according to the parametric private scaling law L̂2, one line per "
    "noise-batch ratio; dashed: the non-private law (σ̄ = 0); shaded: the trained model sizes.",
    optimal_size_table, draw_optimal_size)

FIGURES = (NAIVE, SIGMOID, TRANSFORM, OPTIMAL_SIZE)
