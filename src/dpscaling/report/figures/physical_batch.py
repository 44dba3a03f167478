"""fig:physical_batch_size_ablation and fig:physical-batch-size-sweep-loss (paper appendix
"Physical Batch Size Ablation", "Physical Batch Size Ablation - Extended").

Both are drawn from the ``ablation_batch`` target's own training curves (never from
the law or the main grid), collected by :func:`collect_ablation_curves` into one tidy
table that says which runs belong to which figure:

- **fig:physical_batch_size_ablation** — one panel per noise-batch ratio, one line per
  physical batch size at the ablation's one learning rate: the raw training loss
  averaged over seeds at every logged iteration, shaded between the seeds' minimum and
  maximum.
- **fig:physical-batch-size-sweep-loss** — the learning-rate sweep at one noise-batch
  ratio: per physical batch size and logged iteration, the best (lowest) over learning
  rates of the seed-averaged loss ("the best cross entropy across all learning rates on a
  per-iteration basis"), with the learning rate that gave it in the CSV.

Seed averages are taken only where every seed of the run logged the iteration; the CSV
counts the seeds behind each value, and a run that did not finish is drawn dashed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.report.figures.common import ABLATION, FigureSpec, budget_label, colours, no_data, subplots
from dpscaling.workflow.grid import TrainPoint, ablation_curve_points, ablation_sweep_points
from dpscaling.core.io import atomic_path
from dpscaling.law.collect import TIDY_COLUMNS, tidy_training_curve
from dpscaling.law.columns import (
    BATCH_SIZE, CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, NOISE_BATCH_RATIO, SEED, STATUS)
from dpscaling.models.family import BERT, DECODER

if TYPE_CHECKING:
    from matplotlib.figure import Figure

IN_ABLATION = "In Ablation"  # a run of fig:physical_batch_size_ablation (the ablation's learning rate)
IN_SWEEP = "In Sweep"  # a run of fig:physical-batch-size-sweep-loss (the learning-rate sweep)
CURVE_COLUMNS = [*TIDY_COLUMNS, BATCH_SIZE, IN_ABLATION, IN_SWEEP]
MINIMUM, MAXIMUM = f"{CROSS_ENTROPY} Min", f"{CROSS_ENTROPY} Max"
SEEDS, UNFINISHED = "Seeds", "Unfinished Seeds"
BEST_RATE, RATES = "Best Learning Rate", "Learning Rates"
_RUN = [MODEL, NOISE_BATCH_RATIO, BATCH_SIZE, LEARNING_RATE]


# ---------------------------------------------------------------------------- the ablation's curves


def collect_ablation_curves(paths: Iterable[str | Path], config: Mapping[str, Any]) -> pd.DataFrame:
    """The ablation's training curves (``metrics.parquet`` files) as one tidy table.

    Columns: the law's tidy columns, ``Batch Size`` and whether the run belongs to the
    fixed-learning-rate ablation and/or the learning-rate sweep of ``config['ablation_batch']``.
    """
    ablation = {_key(point) for point in ablation_curve_points(config)}
    sweep = {_key(point) for point in ablation_sweep_points(config)}
    frames = []
    for path in paths:
        curve = pd.read_parquet(path)
        if curve.empty:
            continue
        first = curve.iloc[0]
        key = _key(TrainPoint(str(first["model"]), int(first["batch_size"]), int(first["seed"]),
                              float(first["noise_batch_ratio"]), float(first["learning_rate"])))
        if key not in ablation | sweep:
            raise UserError(f"{path}: run {key} is not in the configured ablation_batch grid")
        frames.append(tidy_training_curve(curve).assign(
            **{BATCH_SIZE: int(first["batch_size"]), IN_ABLATION: key in ablation, IN_SWEEP: key in sweep}))
    if not frames:
        raise UserError("no ablation training curves to collect")
    return pd.concat(frames, ignore_index=True)[CURVE_COLUMNS]


def _key(point: TrainPoint) -> tuple[str, ...]:
    return tuple(point.wildcards.values())


def write_ablation_curves(paths: Iterable[str | Path], config: Mapping[str, Any], out: str | Path) -> pd.DataFrame:
    table = collect_ablation_curves(paths, config)
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
    return table


@dataclass
class AblationContext:
    """What the ablation's figures read: its collected curves (:func:`collect_ablation_curves`)."""

    curves: pd.DataFrame


def load_ablation_context(path: str | Path) -> AblationContext:
    curves = pd.read_parquet(path)
    missing = sorted(set(CURVE_COLUMNS) - set(curves.columns))
    if missing:
        raise UserError(f"{path}: not a table of ablation curves (missing {', '.join(missing)})")
    return AblationContext(curves)


def seed_summary(curves: pd.DataFrame) -> pd.DataFrame:
    """Per run (model, σ̄, physical batch, learning rate) and logged iteration: the mean, minimum and maximum
    loss over seeds, at the iterations every seed of the run logged with a finite loss."""
    columns = [*_RUN, ITERATIONS, CROSS_ENTROPY, MINIMUM, MAXIMUM, SEEDS, UNFINISHED]
    if curves.empty:
        return pd.DataFrame(columns=columns)
    per_seed = curves.groupby([*_RUN, SEED])[STATUS].first().astype(str).str.lower()
    runs = pd.DataFrame({SEEDS: per_seed.groupby(level=_RUN).size(),
                         UNFINISHED: (per_seed != "finished").groupby(level=_RUN).sum()}).reset_index()
    grouped = curves.dropna(subset=[CROSS_ENTROPY]).groupby([*_RUN, ITERATIONS])[CROSS_ENTROPY]
    summary = grouped.agg(["mean", "min", "max", "count"]).reset_index()
    summary = summary.rename(columns={"mean": CROSS_ENTROPY, "min": MINIMUM, "max": MAXIMUM})
    summary = summary.merge(runs, on=_RUN)
    summary = summary[summary["count"] == summary[SEEDS]]  # every seed logged it
    return summary[columns].sort_values([*_RUN, ITERATIONS]).reset_index(drop=True)


# ---------------------------------------------------------------------------- fig:physical_batch_size_ablation


def ablation_table(context: AblationContext) -> pd.DataFrame:
    """Seed mean and spread per (σ̄, physical batch, iteration) at the ablation's learning rate."""
    return seed_summary(context.curves[context.curves[IN_ABLATION].astype(bool)])


def _curve_axes(ax, title: str) -> None:
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("Iterations T")
    ax.set_ylabel("Cross entropy (training)")


def _nbr_label(nbr: float) -> str:
    return budget_label(nbr) if nbr > 0 else "0"


def _batch_palette(batches) -> dict[int, Any]:
    batches = sorted(int(b) for b in batches)
    return dict(zip(batches, colours(len(batches))))


def _zoom(ax, data: pd.DataFrame, columns: list[str]) -> None:
    """y range of the curves after their steep start (the last 90% of the logged iterations), so the batch
    sizes' differences stay visible and the start runs off the top; left alone for curves of few points."""
    first, last = data[ITERATIONS].min(), data[ITERATIONS].max()
    late = data[data[ITERATIONS] >= first + 0.1 * (last - first)]
    values = late[columns].to_numpy(float).ravel()
    values = values[np.isfinite(values)]
    if late[ITERATIONS].nunique() < 3 or values.size == 0:
        return
    low, high = float(values.min()), float(values.max())
    pad = 0.05 * max(high - low, 1e-6)
    ax.set_ylim(low - pad, high + pad)


def draw_ablation(data: pd.DataFrame, context: AblationContext) -> Figure:
    ratios = sorted(data[NOISE_BATCH_RATIO].unique()) or [np.nan]
    figure, axes = subplots(1, len(ratios), width=3.8, height=3.0)
    palette = _batch_palette(data[BATCH_SIZE].unique())
    for ax, nbr in zip(axes[0], ratios):
        panel = data[data[NOISE_BATCH_RATIO] == nbr]
        if panel.empty:
            no_data(ax, "no ablation curves")
            continue
        model, rate = panel[MODEL].iloc[0], panel[LEARNING_RATE].iloc[0]
        _curve_axes(ax, rf"{model}, $\bar\sigma$ = {_nbr_label(nbr)}, lr {budget_label(rate)}")
        for batch, line in panel.groupby(BATCH_SIZE):
            line = line.sort_values(ITERATIONS)
            seeds = int(line[SEEDS].iloc[0])
            dashed = int(line[UNFINISHED].iloc[0]) > 0
            ax.plot(line[ITERATIONS], line[CROSS_ENTROPY], color=palette[int(batch)],
                    linestyle="--" if dashed else "-", label=f"B = {int(batch)} ({seeds} seeds)")
            ax.fill_between(line[ITERATIONS], line[MINIMUM], line[MAXIMUM], color=palette[int(batch)],
                            alpha=0.2, linewidth=0)
        _zoom(ax, panel, [MINIMUM, MAXIMUM])
        ax.legend(fontsize=7)
    figure.suptitle("Training loss per physical batch size, mean over seeds (band: min–max; dashed: a run "
                    "did not finish)", fontsize=9)
    return figure


# ---------------------------------------------------------------------------- fig:physical-batch-size-sweep-loss


def sweep_table(context: AblationContext) -> pd.DataFrame:
    """Per physical batch and iteration: the lowest seed-averaged loss over the sweep's learning rates."""
    columns = [MODEL, NOISE_BATCH_RATIO, BATCH_SIZE, ITERATIONS, CROSS_ENTROPY, BEST_RATE, RATES, SEEDS,
               UNFINISHED]
    summary = seed_summary(context.curves[context.curves[IN_SWEEP].astype(bool)])
    if summary.empty:
        return pd.DataFrame(columns=columns)
    keys = [MODEL, NOISE_BATCH_RATIO, BATCH_SIZE, ITERATIONS]
    best = summary.loc[summary.groupby(keys)[CROSS_ENTROPY].idxmin()].rename(columns={LEARNING_RATE: BEST_RATE})
    best[RATES] = summary.groupby(keys)[LEARNING_RATE].nunique().to_numpy()
    best[UNFINISHED] = summary.groupby(keys)[UNFINISHED].sum().to_numpy()
    return best[columns].sort_values([BATCH_SIZE, ITERATIONS]).reset_index(drop=True)


def draw_sweep(data: pd.DataFrame, context: AblationContext) -> Figure:
    figure, axes = subplots(1, 1, width=5.0, height=3.6)
    ax = axes[0, 0]
    if data.empty:
        no_data(ax, "no learning-rate sweep curves")
        return figure
    nbr, model = float(data[NOISE_BATCH_RATIO].iloc[0]), data[MODEL].iloc[0]
    rates = int(data[RATES].max())
    _curve_axes(ax, rf"{model}, $\bar\sigma$ = {_nbr_label(nbr)}: best of {rates} learning rates per iteration")
    palette = _batch_palette(data[BATCH_SIZE].unique())
    for batch, line in data.groupby(BATCH_SIZE):
        line = line.sort_values(ITERATIONS)
        dashed = int(line[UNFINISHED].max()) > 0
        ax.plot(line[ITERATIONS], line[CROSS_ENTROPY], color=palette[int(batch)],
                linestyle="--" if dashed else "-", label=f"B = {int(batch)}")
    _zoom(ax, data, [CROSS_ENTROPY])
    ax.legend(fontsize=7, title="physical batch", title_fontsize=7)
    return figure


ABLATION_FIGURE = FigureSpec(
    label="fig:physical_batch_size_ablation",
    caption=("Cross entropy of the ablation's model averaged over seeds (shading: minimum to maximum over "
             "seeds) for different physical batch sizes and noise-batch ratios, at one learning rate."),
    needs=(ABLATION,),
    compute=ablation_table,
    draw=draw_ablation,
)

SWEEP_FIGURE = FigureSpec(
    label="fig:physical-batch-size-sweep-loss",
    caption=("Physical batch sizes at one noise-batch ratio with learning-rate tuning: the best seed-averaged "
             "cross entropy across the swept learning rates on a per-iteration basis."),
    needs=(ABLATION,),
    compute=sweep_table,
    draw=draw_sweep,
)

# Paper appendix "Training Pipelines": the same learning-rate sweep on a ~30M-parameter decoder built on
# NanoDO (smoothed cross entropy averaged over seeds), drawn when the ablation's model is a decoder.
NANODO_FIGURE = FigureSpec(
    label="fig:physical-batch-size-sweep-nanodo",
    caption=("The physical-batch sweep on a decoder-only model (the paper's NanoDO pipeline): the best "
             "seed-averaged cross entropy across the swept learning rates on a per-iteration basis."),
    needs=(ABLATION,),
    compute=sweep_table,
    draw=draw_sweep,
)

FIGURES = (ABLATION_FIGURE, SWEEP_FIGURE, NANODO_FIGURE)
# What the ablation draws for its model's family (dpscaling.models.family): the paper drew the sweep on BERT
# and again on NanoDO, a decoder.
FIGURES_BY_FAMILY = {BERT.name: (ABLATION_FIGURE, SWEEP_FIGURE), DECODER.name: (ABLATION_FIGURE, NANODO_FIGURE)}
