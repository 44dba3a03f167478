"""fig:training (appendix "Optimal Learning Rates"): raw training curves for each learning rate.

One row per model (settings.training_models), one column per noise-batch
ratio (settings.training_noise_batch_ratios, the nearest one trained), one line
per learning rate, straight from the raw results (no smoothing). As the
authors do (T = 100·⌊2^(k/2)⌋, k = 6…20 on their 100-step logging grid), the
curves are drawn at log-spaced iterations: first·⌊2^(k/2)⌋ from k = 6 on, where
`first` is the first logged iteration, each snapped to the nearest measured
one. A configured model that is not in the results is replaced by the
smallest, then the largest trained model, and the CSV says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.report.figures.common import FLOOR, floor_line
from dpscaling.report.figures.common import RESULTS, FigureSpec, budget_label, colours, no_data, subplots
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.law.collect import TIDY_COLUMNS
from dpscaling.law.columns import (
    CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, SEED, STATUS)

REQUESTED_MODEL = "Requested Model"
REQUESTED_NOISE = "Requested Noise Batch Ratio"
NOTE = "Note"
# The authors' subsample starts at k = 6: 100·⌊2^3⌋ = 800 steps on their 100-step logging grid.
FIRST_HALF_DOUBLING = 6


def chosen_models(requested: tuple[str, ...], sizes: pd.Series) -> list[tuple[str, str, str]]:
    """(requested, shown, note) per row; missing names become the smallest, then the largest, trained model."""
    spares = [name for name in (sizes.index[0], sizes.index[-1]) if name not in requested]
    rows, used = [], set()
    for name in requested:
        if name in sizes.index:
            rows.append((name, name, ""))
            used.add(name)
    for name in requested:
        if name in sizes.index:
            continue
        spare = next((s for s in spares if s not in used), None)
        if spare is None:
            continue
        used.add(spare)
        which = "smallest" if spare == sizes.index[0] else "largest"
        rows.append((name, spare, f"{name} is not in the results; showing the {which} trained model {spare}"))
    return sorted(rows, key=lambda row: sizes[row[1]])


def nearest_noise(available: np.ndarray, target: float) -> float:
    """The trained σ̄ closest to ``target`` in log space (σ̄ = 0 only when asked for)."""
    if target == 0:
        return 0.0 if (available == 0).any() else float(np.min(available))
    private = available[available > 0]
    if private.size == 0:
        return float(available[0])
    return float(private[np.argmin(np.abs(np.log(private) - np.log(target)))])


def log_spaced_iterations(measured: np.ndarray) -> np.ndarray:
    """first·⌊2^(k/2)⌋ from k = 6 (k = 0 if that leaves < 2 points), snapped to the measured iterations."""
    measured = np.sort(np.unique(measured))
    first, last = measured[0], measured[-1]
    for start in (FIRST_HALF_DOUBLING, 0):
        k = np.arange(start, start + 2 * int(np.ceil(np.log2(last / first))) + 3)
        targets = first * np.floor(2.0 ** (k / 2))
        targets = np.append(targets[targets <= last], last)
        snapped = np.unique(measured[np.abs(measured[:, None] - targets[None, :]).argmin(axis=0)])
        if len(snapped) >= 2 or start == 0:
            return snapped
    return measured


def readable_log_ticks(axis) -> None:
    """Ticks at 1, 2, 5 × 10^k in plain numbers: a log axis spanning less than a decade stays legible."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FormatStrFormatter("%g"))
    axis.set_minor_formatter(NullFormatter())


def training_table(context: AnalysisContext) -> pd.DataFrame:
    if context.results is None:
        raise UserError("fig:training needs the raw results (the training curves)")
    results = context.results.dropna(subset=[CROSS_ENTROPY])
    sizes = results.groupby(MODEL)[MODEL_SIZE].first().sort_values()
    frames = []
    for requested, model, note in chosen_models(context.settings.training_models, sizes):
        curves = results[results[MODEL] == model]
        for target in context.settings.training_noise_batch_ratios:
            nbr = nearest_noise(curves[NOISE_BATCH_RATIO].unique(), target)
            rows = curves[curves[NOISE_BATCH_RATIO] == nbr]
            rows = rows[rows[ITERATIONS].isin(log_spaced_iterations(rows[ITERATIONS].to_numpy()))]
            frames.append(rows.assign(**{REQUESTED_MODEL: requested, REQUESTED_NOISE: target, NOTE: note}))
    columns = [c for c in TIDY_COLUMNS if c in results] + [REQUESTED_MODEL, REQUESTED_NOISE, NOTE]
    if not frames:
        return pd.DataFrame(columns=columns)
    table = pd.concat(frames, ignore_index=True)[columns]
    return table.sort_values([MODEL_SIZE, REQUESTED_NOISE, LEARNING_RATE, ITERATIONS]).reset_index(drop=True)


def draw_training(data: pd.DataFrame, context: AnalysisContext):
    targets = context.settings.training_noise_batch_ratios
    models = list(dict.fromkeys(data[MODEL])) or ["(none)"]
    figure, axes = subplots(len(models), max(len(targets), 1), width=3.8, height=3.0)
    rates = np.sort(data[LEARNING_RATE].unique())
    palette = dict(zip(rates, colours(len(rates))))
    for row, model in enumerate(models):
        for column, target in enumerate(targets):
            ax = axes[row, column]
            cell = data[(data[MODEL] == model) & (data[REQUESTED_NOISE] == target)]
            if cell.empty:
                no_data(ax, f"no curves of {model} near σ̄ = {target:g}")
                continue
            nbr = float(cell[NOISE_BATCH_RATIO].iloc[0])
            ax.set_xscale("log")
            readable_log_ticks(ax.xaxis)
            ax.grid(True, which="major", alpha=0.3)
            runs = [LEARNING_RATE] + [c for c in (SEED,) if c in cell]
            for key, run in cell.groupby(runs):
                rate = key[0]
                run = run.sort_values(ITERATIONS)
                unfinished = STATUS in run and (run[STATUS].astype(str).str.lower() != "finished").any()
                ax.plot(run[ITERATIONS], run[CROSS_ENTROPY], marker="o", markersize=2.5, color=palette[rate],
                        linestyle="--" if unfinished else "-", label=f"lr {budget_label(rate)}")
            floor_line(ax, context)
            handles, labels = ax.get_legend_handles_labels()
            unique = dict(zip(labels, handles))
            ax.legend(unique.values(), unique.keys(), fontsize=7)
            ax.set_title(rf"{model}, $\bar\sigma$ = {budget_label(nbr) if nbr > 0 else '0'}", fontsize=9)
            ax.set_xlabel("Iterations T")
            ax.set_ylabel("Cross entropy (raw)")
    notes = sorted(set(data[NOTE]) - {""}) if NOTE in data else []
    title = "Raw training curves per learning rate (dashed: run not finished)"
    figure.suptitle("\n".join([title] + notes), fontsize=9)
    return figure


TRAINING = FigureSpec(
    label="fig:training",
    caption=("Training curves with varying learning rates at different noise-batch ratios (columns) for two "
             "models (rows), from the raw measurements at log-spaced iterations."),
    needs=(RESULTS, FLOOR),
    compute=training_table,
    draw=draw_training,
)

FIGURES = (TRAINING,)
