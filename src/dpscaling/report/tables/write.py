"""Writing a paper table three ways — CSV (data), Markdown (reading), LaTeX (the paper) — atomically."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from dpscaling.core.io import atomic_path


def write_table(frame: pd.DataFrame, stem: str | Path, caption: str, label: str,
                shown: Mapping[str, str] | None = None) -> list[Path]:
    """``stem``.csv (every column, full precision), .md and .tex (3 significant digits; only the columns of
    ``shown``, renamed to its headings, when given); returns the paths."""
    stem = Path(stem)
    text = frame if shown is None else frame[list(shown)].rename(columns=dict(shown))
    shown = text.map(lambda v: f"{v:.3g}" if isinstance(v, float) else v)
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
