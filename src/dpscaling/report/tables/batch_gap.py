"""table:physical_batch_gap — does the loss depend on σ̄ and not on the physical batch? (paper §3.1's
assumption, checked by its appendix "Physical Batch Size Ablation").

From the ``ablation_batch`` target's own curves at its one learning rate: each run's final training
loss (the mean of its last ``final_intervals`` logged intervals), per noise-batch ratio and physical
batch the mean, minimum and maximum over seeds. Per noise-batch ratio, the **gap** is the largest
difference between the physical batches' seed means and the **seed spread** is the widest per-batch
range over seeds; the assumption is consistent with the ablation where the gap is within the spread.
"""

from __future__ import annotations

import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.report.figures.physical_batch import IN_ABLATION
from dpscaling.law.columns import BATCH_SIZE, CROSS_ENTROPY, ITERATIONS, MODEL, NOISE_BATCH_RATIO, SEED

LABEL = "table:physical_batch_gap"
CAPTION = ("Final training loss per physical batch size at equal noise-batch ratio (mean and range over seeds): "
           "the largest gap between batch sizes against the widest seed range.")
FINAL_LOSS = "Final Loss"
GAP, SPREAD, WITHIN = "Batch Gap", "Seed Spread", "Gap Within Seed Spread"
COLUMNS = [MODEL, NOISE_BATCH_RATIO, BATCH_SIZE, FINAL_LOSS, f"{FINAL_LOSS} Min", f"{FINAL_LOSS} Max", "Seeds",
           ITERATIONS, GAP, SPREAD, WITHIN]


def batch_gap_table(curves: pd.DataFrame, final_intervals: int = 3) -> pd.DataFrame:
    """One row per (σ̄, physical batch) of the ablation's runs, with its σ̄'s gap and seed spread."""
    runs = curves[curves[IN_ABLATION].astype(bool)].dropna(subset=[CROSS_ENTROPY])
    if runs.empty:
        raise UserError("the ablation has no finished curves to compare")
    keys = [MODEL, NOISE_BATCH_RATIO, BATCH_SIZE]
    last = runs.sort_values(ITERATIONS).groupby([*keys, SEED]).tail(final_intervals)
    per_seed = last.groupby([*keys, SEED]).agg(final=(CROSS_ENTROPY, "mean"), steps=(ITERATIONS, "max"))
    table = per_seed.groupby(level=keys).agg(
        **{FINAL_LOSS: ("final", "mean"), f"{FINAL_LOSS} Min": ("final", "min"),
           f"{FINAL_LOSS} Max": ("final", "max"), "Seeds": ("final", "size"), ITERATIONS: ("steps", "min")}
    ).reset_index()
    by_ratio = table.groupby([MODEL, NOISE_BATCH_RATIO])
    table[GAP] = by_ratio[FINAL_LOSS].transform("max") - by_ratio[FINAL_LOSS].transform("min")
    table[SPREAD] = (table[f"{FINAL_LOSS} Max"] - table[f"{FINAL_LOSS} Min"]).groupby(
        [table[MODEL], table[NOISE_BATCH_RATIO]]).transform("max")
    table[WITHIN] = table[GAP] <= table[SPREAD]
    return table[COLUMNS].sort_values([NOISE_BATCH_RATIO, BATCH_SIZE]).reset_index(drop=True)
