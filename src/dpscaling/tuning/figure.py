"""The learning-rate protocol's evidence (paper §3.2 "Learning Rates"): each model's loss against the rates of
the ladder, its chosen rate, flat basin and the rates the grid trains (:mod:`dpscaling.tuning.rule`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dpscaling.report.figures.common import colours, save_figure, subplots


def plot_learning_rates(table: pd.DataFrame, stem: str | Path, floor: float | None = None) -> list[Path]:
    """One panel: loss (mean of the last logged losses) against log2 rate, a line per model, the chosen rate
    ringed, its basin drawn thick; the held-out unigram floor dashed when given. Writes ``stem``.pdf/.png/.csv."""
    figure, axes = subplots(width=5.2, height=3.6)
    ax = axes[0, 0]
    models = list(dict.fromkeys(table["model"]))
    for colour, model in zip(colours(len(models)), models):
        rows = table[table["model"] == model].sort_values("learning_rate")
        ax.plot(rows["log2_learning_rate"], rows["loss"], "o-", color=colour, lw=1, ms=3, label=model)
        basin = rows[rows["in_basin"]]
        ax.plot(basin["log2_learning_rate"], basin["loss"], "-", color=colour, lw=3, alpha=0.5)
        chosen = rows[rows["chosen"]]
        ax.plot(chosen["log2_learning_rate"], chosen["loss"], "o", mfc="none", mec=colour, ms=10, mew=1.5)
        diverged = rows[rows["loss"].isna()]
        if len(diverged):
            top = np.nanmax(table["loss"].to_numpy(float))
            ax.plot(diverged["log2_learning_rate"], [top] * len(diverged), "x", color=colour, ms=6)
    if floor is not None:
        ax.axhline(floor, color="grey", ls="--", lw=1, label="unigram floor")
    ax.set_xlabel("log2 learning rate")
    ax.set_ylabel("loss at the end of the protocol run (nats)")
    ax.set_title("Learning-rate protocol: clipped, no noise (ringed: chosen; x: diverged)", fontsize=8)
    ax.legend(fontsize=7)
    return save_figure(figure, table, stem)
