"""fig:smoothing (appendix "Smoothing and Extrapolation"): raw versus smoothed curves of one model.

Shows exactly what the law's fit did, with the law's own settings and the
library's functions (:mod:`dpscaling.law.smoothing`): for one (model, learning
rate) surface, (a) one noise-batch ratio over iterations — the raw
measurements (warm-up ones, which the fit drops, greyed), the trailing rolling
mean, the isotonic result (non-increasing in T, non-decreasing in σ̄), and the
law's extrapolated power law beyond the trained horizon; (b) one measured
iteration count over σ̄ — raw versus isotonic. The learning rate shown is the
one the law's minimum over learning rates picked most often for that σ̄.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.report.figures.common import FLOOR, floor_line
from dpscaling.report.figures.common import LAW, RESULTS, FigureSpec, budget_label, log_axes, subplots
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.law.artifact import exclude_unfit_runs
from dpscaling.law.columns import (
    CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, SEED, SOURCE)
from dpscaling.law.smoothing import rolling_mean, smooth_surface, surface_of

PANEL, SERIES, NOTE = "Panel", "Series", "Note"
OVER_ITERATIONS, OVER_NOISE = "a: over iterations", "b: over noise batch ratio"
RAW, WARMUP, ROLLING, ISOTONIC, EXTRAPOLATED = (
    "raw", "raw (warm-up, dropped by the fit)", "rolling mean", "isotonic (smoothed)", "extrapolated (law grid)")
# Drawn in this order: the thin rolling mean on top of the thick isotonic line.
STYLE = {RAW: dict(marker=".", linestyle="none", color="0.35", markersize=4),
         WARMUP: dict(marker="x", linestyle="none", color="0.7", markersize=3),
         ISOTONIC: dict(linestyle="-", color="tab:blue", linewidth=2.5),
         ROLLING: dict(linestyle="-", color="tab:orange", linewidth=1.0),
         EXTRAPOLATED: dict(marker="o", linestyle="--", color="tab:green", markersize=3)}


def nearest(values, target: float) -> float:
    """The value closest to ``target`` in log space (all values and target > 0)."""
    values = np.asarray(values, dtype=float)
    return float(values[np.argmin(np.abs(np.log(values) - np.log(target)))])


def shown_model(context: AnalysisContext, results: pd.DataFrame) -> tuple[str, str]:
    """(model, note): the configured model, or the smallest one in the results."""
    sizes = results.groupby(MODEL)[MODEL_SIZE].first().sort_values()
    wanted = context.settings.smoothing_model
    if wanted is not None and wanted in sizes.index:
        return wanted, ""
    note = "" if wanted is None else f"{wanted} is not in the results; showing the smallest model"
    return str(sizes.index[0]), note


def chosen_learning_rate(context: AnalysisContext, model: str, nbr: float, rates) -> float:
    """The learning rate the law's minimum over learning rates picked most often for (model, σ̄)."""
    grid = context.law.grid
    picked = grid.loc[(grid[MODEL] == model) & np.isclose(grid[NOISE_BATCH_RATIO], nbr)
                      & (grid[SOURCE] == "measured"), LEARNING_RATE].dropna()
    return float(picked.mode().iloc[0]) if not picked.empty else float(min(rates))


def _long(values: pd.Series, panel: str, series: str) -> pd.DataFrame:
    frame = values.rename(CROSS_ENTROPY).reset_index()
    return frame.assign(**{PANEL: panel, SERIES: series})


def smoothing_table(context: AnalysisContext) -> pd.DataFrame:
    if context.results is None:
        raise UserError("fig:smoothing needs the raw results (the training curves)")
    settings = context.law.settings
    results, _ = exclude_unfit_runs(context.results)  # as the fit does
    model, note = shown_model(context, results)
    curves = results[results[MODEL] == model]
    nbr = nearest(curves.loc[curves[NOISE_BATCH_RATIO] > 0, NOISE_BATCH_RATIO].unique(),
                  context.settings.smoothing_noise_batch_ratio)
    rate = chosen_learning_rate(context, model, nbr, curves[LEARNING_RATE].unique())
    curves = curves[curves[LEARNING_RATE] == rate]
    kept = curves[curves[ITERATIONS] >= settings.warmup_steps]
    surface = surface_of(kept)
    smoothed = smooth_surface(surface, settings)
    rolled = (rolling_mean(surface.sort_index().sort_index(axis=1), settings.rolling_window)
              if settings.rolling_window else None)
    steps = nearest(surface.index, context.settings.smoothing_iterations)

    raw_a = curves[np.isclose(curves[NOISE_BATCH_RATIO], nbr)]
    raw_a = raw_a.assign(**{PANEL: OVER_ITERATIONS,
                            SERIES: np.where(raw_a[ITERATIONS] >= settings.warmup_steps, RAW, WARMUP)})
    grid = context.law.grid
    extrapolated = grid[(grid[MODEL] == model) & np.isclose(grid[NOISE_BATCH_RATIO], nbr)
                        & (grid[SOURCE] == "extrapolated")]
    raw_columns = [c for c in (ITERATIONS, NOISE_BATCH_RATIO, CROSS_ENTROPY, SEED) if c in curves]
    frames = [raw_a[[PANEL, SERIES] + raw_columns],
              _long(smoothed[nbr], OVER_ITERATIONS, ISOTONIC).assign(**{NOISE_BATCH_RATIO: nbr}),
              extrapolated[[ITERATIONS, NOISE_BATCH_RATIO, CROSS_ENTROPY]].assign(
                  **{PANEL: OVER_ITERATIONS, SERIES: EXTRAPOLATED}),
              curves[curves[ITERATIONS] == steps][raw_columns].assign(
                  **{PANEL: OVER_NOISE, SERIES: RAW}),
              _long(smoothed.loc[steps], OVER_NOISE, ISOTONIC).assign(**{ITERATIONS: steps})]
    if rolled is not None:
        frames += [_long(rolled[nbr], OVER_ITERATIONS, ROLLING).assign(**{NOISE_BATCH_RATIO: nbr}),
                   _long(rolled.loc[steps], OVER_NOISE, ROLLING).assign(**{ITERATIONS: steps})]
    table = pd.concat(frames, ignore_index=True)
    table = table.assign(**{MODEL: model, MODEL_SIZE: float(curves[MODEL_SIZE].iloc[0]), LEARNING_RATE: rate,
                            NOTE: note})
    # The extrapolation continues the minimum over learning rates, not this rate's surface.
    table.loc[table[SERIES] == EXTRAPOLATED, LEARNING_RATE] = np.nan
    columns = [PANEL, SERIES, MODEL, MODEL_SIZE, LEARNING_RATE, ITERATIONS, NOISE_BATCH_RATIO, CROSS_ENTROPY,
               SEED, NOTE]
    table = table.reindex(columns=columns)
    return table.sort_values([PANEL, SERIES, ITERATIONS, NOISE_BATCH_RATIO]).reset_index(drop=True)


def draw_smoothing(data: pd.DataFrame, context: AnalysisContext):
    figure, axes = subplots(1, 2, width=4.8, height=3.6)
    first = data[data[SERIES] == ISOTONIC].iloc[0]
    settings = context.law.settings
    over_t = data[data[PANEL] == OVER_ITERATIONS]
    over_s = data[data[PANEL] == OVER_NOISE]
    nbr = float(over_t[NOISE_BATCH_RATIO].iloc[0])
    steps = float(over_s[ITERATIONS].iloc[0])

    ax = axes[0, 0]
    log_axes(ax, y=False)
    for series, style in STYLE.items():
        rows = over_t[over_t[SERIES] == series].sort_values(ITERATIONS)
        if not rows.empty:
            ax.plot(rows[ITERATIONS], rows[CROSS_ENTROPY], label=series, **style)
    horizon = over_t.loc[over_t[SERIES] == ISOTONIC, ITERATIONS].max()
    ax.axvline(horizon, color="0.5", linestyle=":", linewidth=1)
    floor_line(ax, context)
    ax.set_xlabel("Iterations T")
    ax.set_ylabel("Cross entropy")
    ax.set_title(rf"(a) $\bar\sigma$ = {budget_label(nbr)}", fontsize=9)
    window = f"rolling window {settings.rolling_window}" if settings.rolling_window else "no rolling mean"
    ax.legend(fontsize=7, title=f"warm-up < {settings.warmup_steps:g} steps; {window}", title_fontsize=7)

    ax = axes[0, 1]
    log_axes(ax, y=False)
    for series in (RAW, ISOTONIC, ROLLING):
        rows = over_s[over_s[SERIES] == series].sort_values(NOISE_BATCH_RATIO)
        private, public = rows[rows[NOISE_BATCH_RATIO] > 0], rows[rows[NOISE_BATCH_RATIO] == 0]
        if private.empty:
            continue
        ax.plot(private[NOISE_BATCH_RATIO], private[CROSS_ENTROPY], label=series, **STYLE[series])
        for value in public[CROSS_ENTROPY].dropna():  # σ̄ = 0 has no place on a log axis: a level line
            ax.axhline(value, color=STYLE[series]["color"], linestyle=":", linewidth=0.8)
    ax.set_xlabel(r"Noise-batch ratio $\bar\sigma$ (dotted levels: $\bar\sigma$ = 0)")
    ax.set_ylabel("Cross entropy")
    ax.set_title(f"(b) T = {steps:g}", fontsize=9)
    floor_line(ax, context)
    ax.legend(fontsize=7)
    title = (f"Smoothing of {first[MODEL]} (M = {first[MODEL_SIZE]:.3g}), learning rate "
             f"{budget_label(first[LEARNING_RATE])}")
    if first[NOTE]:
        title += f"\n{first[NOTE]}"
    figure.suptitle(title, fontsize=9)
    return figure


SMOOTHING = FigureSpec(
    label="fig:smoothing",
    caption=("Demonstration of the semi-parametric smoothing on one model and learning rate: (a) one noise-batch "
             "ratio over iterations (raw measurements, rolling mean, isotonic regression, and the law's "
             "extrapolation beyond the trained horizon); (b) one iteration count over the noise-batch ratio "
             "(raw versus isotonic; dotted levels are the noise-free values)."),
    needs=(RESULTS, LAW, FLOOR),
    compute=smoothing_table,
    draw=draw_smoothing,
)

FIGURES = (SMOOTHING,)
