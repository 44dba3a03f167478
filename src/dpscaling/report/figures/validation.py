"""Predicted vs measured loss on held-out measurements (docs/fit.md, `validate`; see :mod:`dpscaling.law.validation`).

One panel per mode (paper, reference-compatible); one colour per held-out set; the diagonal is a
perfect prediction. Not a paper figure: the paper does not validate its law on held-out data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dpscaling.report.figures.common import colours, save_figure, subplots
from dpscaling.law.columns import CROSS_ENTROPY
from dpscaling.law.validation import HELD_OUT, MODE, PREDICTED


def predicted_vs_measured(points: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Write ``stem``.pdf/.png (scatter per mode) and ``stem``.csv (every point); return the paths."""
    modes = list(dict.fromkeys(points[MODE]))
    sets = list(dict.fromkeys(points[HELD_OUT]))
    figure, axes = subplots(1, len(modes), width=4.4, height=4.0, sharex=True, sharey=True)
    answered = points.dropna(subset=[PREDICTED, CROSS_ENTROPY])
    values = answered[[PREDICTED, CROSS_ENTROPY]].to_numpy(float)
    low, high = (values.min(), values.max()) if len(values) else (0.0, 1.0)
    for ax, mode in zip(axes[0], modes):
        for colour, name in zip(colours(len(sets), "tab10"), sets):
            rows = answered[(answered[MODE] == mode) & (answered[HELD_OUT] == name)]
            error = np.abs(rows[PREDICTED] - rows[CROSS_ENTROPY]).mean() if len(rows) else np.nan
            ax.scatter(rows[CROSS_ENTROPY], rows[PREDICTED], s=6, alpha=0.6, color=colour,
                       label=f"{name}: mean |err| {error:.3f}")
        ax.plot([low, high], [low, high], color="black", linewidth=0.8)
        ax.set_title(mode)
        ax.set_xlabel("measured cross entropy (held out)")
        ax.legend(fontsize=6, loc="upper left")
    axes[0][0].set_ylabel("law's prediction")
    return save_figure(figure, points, stem)
