"""What the findings share when they compare a configuration A against a baseline B at the same budgets
(fine-tuned against from scratch, :mod:`.finetune`; a BandMF mechanism against DP-SGD, :mod:`.mechanisms`;
user-level sampling against example-level, :mod:`.user_level`): each comparison table names a measure on one
side "<measure> (<side>)" and carries the gain (B's loss minus A's, nats: above 0, A wins); the fine-tuning and the
mechanism comparisons also mark an optimum whose T* is past its law's measured horizon.

What "A beats B" compares differs, on purpose, and each finding's table says which: the fine-tuning and the
mechanism findings test the paper's claims, which are about the laws' compute-optimal *point optima* (§3.4's
search on each law's σ table); the user-level finding compares the *runnable answers* each law's query chooses by
the decision rule and prices exactly (:mod:`dpscaling.law.rounding`), because ULS and ELS differ in how a
configuration is priced, which only the runnable answer carries."""

from __future__ import annotations

import pandas as pd

from dpscaling.law.columns import CROSS_ENTROPY

GAIN = "Gain (nats)"
# T* beyond the last measured iteration of its law's curves: the law's extrapolation answers it.
EXTRAPOLATED = "Extrapolated"


def column(name: str, side: str) -> str:
    """The comparison table's column of measure ``name`` on one ``side`` of the comparison, e.g. "Model Size
    (scratch)"."""
    return f"{name} ({side})"


def answered_by_both(table: pd.DataFrame, side: str, baseline: str) -> pd.DataFrame:
    """The rows of a comparison table where both sides' laws answered (a loss on each side)."""
    return table.dropna(subset=[column(CROSS_ENTROPY, side), column(CROSS_ENTROPY, baseline)])
