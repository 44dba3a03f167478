"""What every figure shares: its spec, the data it plots, atomic PDF + PNG + CSV output, axis helpers.

A figure is data first: ``compute(context)`` returns the tidy table that is
plotted (saved beside the figure as CSV, so every number in it can be checked
and comes from the pipeline), and ``draw(data, context)`` turns it into a
matplotlib figure. Ranges and ticks follow the data, never the paper's values.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dpscaling.core.io import atomic_path

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from dpscaling.report.figures.context import AnalysisContext

# Inputs a figure can need; the workflow gives each figure job only these. ABLATION: the physical-batch
# ablation's own curves (dpscaling.report.figures.physical_batch), instead of the law and everything else.
LAW, ACCOUNTING, RESULTS, ABLATION = "law", "accounting", "results", "ablation"
# BOOTSTRAP: the law's bootstrap replicates, when the run has them (figures that band the optimum).
BOOTSTRAP = "bootstrap"
# FLOOR: the figure plots loss and draws the held-out unigram entropy (dpscaling.data.floor), given when the
# run trained on its own data (none when the law comes from the authors' results.csv).
FLOOR = "floor"
UNIGRAM_FLOOR, UNIGRAM_FLOOR_NOTE = "Unigram Floor", "Unigram Floor Note"
# LENGTHS: the law across sequence lengths and every length's replicates (runs with several training.seq_lens).
LENGTHS = "lengths"
FLOOR_COLOUR = "firebrick"
# Columns counting what a law query could not answer (kept per line in a figure's CSV).
BUDGETS_WITHOUT_ANSWER = "Budgets Without Answer"
UNANSWERED = "Unanswered Configurations"
FOOTNOTE_CHARACTERS_PER_INCH = 17  # 7-point text


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display on workers), imported on first use: the workflow
    reads the figure registry when it parses its rules, and only figure jobs draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


@dataclass(frozen=True)
class FigureSpec:
    label: str                      # the paper's LaTeX label, e.g. "fig:full_grid"
    caption: str
    needs: tuple[str, ...]
    compute: Callable[[AnalysisContext], pd.DataFrame]
    draw: Callable[[pd.DataFrame, AnalysisContext], Figure]

    @property
    def name(self) -> str:
        """File stem: the label with ':' → '-' (``fig-full_grid``)."""
        return self.label.replace(":", "-")


def save_figure(figure: Figure, data: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Write ``stem``.pdf, .png and .csv atomically; close the figure."""
    stem = Path(stem)
    written = []
    readable_log_ticks(figure)
    try:
        for suffix in (".pdf", ".png"):
            target = stem.with_suffix(suffix)
            with atomic_path(target) as tmp:
                figure.savefig(tmp, format=suffix[1:], dpi=150, bbox_inches="tight")
            written.append(target)
    finally:
        pyplot().close(figure)
    target = stem.with_suffix(".csv")
    with atomic_path(target) as tmp:
        data.to_csv(tmp, index=False)
    written.append(target)
    return written


def subplots(rows: int = 1, columns: int = 1, width: float = 4.2, height: float = 3.2, **kwargs):
    """A grid of panels sized per panel, with constrained layout."""
    return pyplot().subplots(rows, columns, figsize=(width * columns, height * rows), layout="constrained",
                        squeeze=False, **kwargs)


def colours(count: int, name: str = "viridis") -> list:
    cmap = pyplot().get_cmap(name)
    return [cmap(x) for x in np.linspace(0.05, 0.9, max(count, 1))]


def budget_label(value: float) -> str:
    """1e+07 → '10^7' in mathtext; other values in short %g form."""
    if np.isinf(value):
        return r"$\infty$"
    exponent = np.log10(value)
    if np.isclose(exponent, round(exponent)):
        return rf"$10^{{{int(round(exponent))}}}$"
    exponent2 = np.log2(value)
    if np.isclose(exponent2, round(exponent2)) and abs(exponent2) > 3:
        return rf"$2^{{{int(round(exponent2))}}}$"
    return f"{value:g}"


def log_axes(ax: Axes, x: bool = True, y: bool = True) -> None:
    if x:
        ax.set_xscale("log")
    if y:
        ax.set_yscale("log")
    ax.grid(True, which="major", alpha=0.3)


def short_number(value: float) -> str:
    """3 significant digits with an SI suffix: 320000 → '320k', 1.5e9 → '1.5G', 0.004 → '0.004'."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def readable_log_ticks(figure: Figure, max_decades: float = 1.5, count: int = 3) -> None:
    """On log axes spanning less than ``max_decades`` (the CPU grid's narrow ranges), replace
    matplotlib's crowded minor labels by ``count`` evenly spaced ticks with short labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    for ax in figure.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            low, high = sorted(limits)
            if axis.get_scale() != "log" or not 0 < low < high or np.log10(high / low) >= max_decades:
                continue
            ticks = [float(f"{v:.2g}") for v in np.geomspace(low, high, count + 2)[1:-1]]
            axis.set_major_locator(FixedLocator(ticks))
            axis.set_major_formatter(FuncFormatter(lambda value, _: short_number(value)))
            axis.set_minor_locator(NullLocator())
            axis.set_minor_formatter(NullFormatter())


def no_data(ax: Axes, reason: str) -> None:
    """Say on the panel why it is empty, instead of drawing nothing."""
    ax.text(0.5, 0.5, reason, ha="center", va="center", wrap=True, fontsize=8, transform=ax.transAxes)


def unanswered_counts(per_compute: pd.DataFrame) -> dict[str, int]:
    """Configurations and budgets a ``best_per_compute`` query could not answer (its ``attrs``)."""
    return {BUDGETS_WITHOUT_ANSWER: int(per_compute.attrs.get("budgets_without_answer", 0)),
            UNANSWERED: int(sum(per_compute.attrs.get("unanswered", {}).values()))}


def reasons_text(reasons: dict[str, int]) -> str:
    return "; ".join(f"{count} × {reason}" for reason, count in sorted(reasons.items(), key=lambda r: -r[1]))


def footnote(figure: Figure, text: str) -> None:
    """Small text under the panels (kept by the tight bounding box of ``save_figure``), wrapped to the
    figure's width (by characters: matplotlib's own ``wrap=True`` doubles the time to save)."""
    width = max(40, int(figure.get_figwidth() * FOOTNOTE_CHARACTERS_PER_INCH))
    figure.text(0.0, 0.0, textwrap.fill(text, width), ha="left", va="top", fontsize=7)


def floor_line(ax: Axes, context) -> None:
    """The held-out unigram entropy (the loss to beat, :mod:`dpscaling.data.floor`) as a labelled horizontal
    line on a loss axis; without one (law from results.csv), a small note on the panel says so."""
    floor = getattr(context, "unigram_floor", None)
    if floor is None:
        ax.text(0.99, 0.01, "no unigram floor", transform=ax.transAxes, ha="right", va="bottom", fontsize=6,
                color=FLOOR_COLOUR)
        return
    ax.axhline(floor, color=FLOOR_COLOUR, linestyle="-.", linewidth=0.9)
    ax.text(0.01, floor, f"held-out unigram entropy {floor:.2f}", transform=ax.get_yaxis_transform(),
            ha="left", va="bottom", fontsize=6, color=FLOOR_COLOUR)


def with_floor(data: pd.DataFrame, context) -> pd.DataFrame:
    """``data`` with the floor drawn (NaN when none) and why there is none, for the figure's CSV."""
    floor = getattr(context, "unigram_floor", None)
    return data.assign(**{UNIGRAM_FLOOR: np.nan if floor is None else floor,
                          UNIGRAM_FLOOR_NOTE: getattr(context, "floor_note", "")})
