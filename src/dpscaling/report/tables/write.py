"""Writing a paper table three ways — CSV (data), Markdown (reading), LaTeX (the paper) — atomically."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from dpscaling.core.io import atomic_path


# Whole numbers below this are shown whole (a budget's ε = 1,024 or N = 100,000, not 1.02e+03 or 1e+05).
_WHOLE_BELOW = 1e7


def shown_number(value: float) -> str:
    """A float as the .md and .tex tables show it: whole numbers below 10⁷ exactly, others to 3 significant
    digits."""
    if value.is_integer() and abs(value) < _WHOLE_BELOW:
        return f"{value:.0f}"
    return f"{value:.3g}"


def write_table(frame: pd.DataFrame, stem: str | Path, caption: str, label: str,
                shown: Mapping[str, str] | None = None) -> list[Path]:
    """``stem``.csv (every column, full precision), .md and .tex (:func:`shown_number`; only the columns of
    ``shown``, renamed to its headings, when given); returns the paths."""
    stem = Path(stem)
    text = frame if shown is None else frame[list(shown)].rename(columns=dict(shown))
    shown = text.map(lambda v: shown_number(v) if isinstance(v, float) else v)
    texts = {
        ".csv": frame.to_csv(index=False),
        ".md": f"**{label}** — {caption}\n\n" + shown.to_markdown(index=False) + "\n",
        ".tex": shown.to_latex(index=False, caption=caption, label=label, escape=True),
    }
    written = []
    for suffix, text in texts.items():
        target = stem.with_suffix(suffix)
        with atomic_path(target) as tmp:
            tmp.write_text(text, encoding="utf-8")
        written.append(target)
    return written
