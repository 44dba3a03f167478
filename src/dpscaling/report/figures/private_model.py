"""The ``private_model`` report's figure: per budget, the law's predicted final loss with its interval
beside the private run's achieved training and held-out loss (docs/private-training.md, "Closing the
loop"). Drawn from the report's table (:mod:`dpscaling.report.tables.private_model`), not from the law."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpscaling.report.figures.common import FigureSpec, subplots

REPORT = "private_model"  # what the figure needs: the report's table
COLUMNS = ["budget", "epsilon", "data_budget", "compute", "model", "law_loss", "predicted_loss",
           "predicted_loss_5", "predicted_loss_95", "calibrated_low", "calibrated_high", "achieved_train_loss",
           "achieved_heldout_loss", "achieved_grid_batch", "achieved_recommended_batch", "law_error",
           "physical_batch_effect", "sampler_effect"]
SPLIT = {"law_error": "law (twin at grid batch − law)", "physical_batch_effect": "physical batch (twin at B − twin)",
         "sampler_effect": "sampler (private − twin at B)"}


@dataclass
class PrivateModelContext:
    """The report's table (one row per budget) and what its interval is over."""

    table: pd.DataFrame
    interval_note: str


def _compute(context: PrivateModelContext) -> pd.DataFrame:
    return context.table[COLUMNS].assign(Interval=context.interval_note)


def _draw(data: pd.DataFrame, context: PrivateModelContext):
    figure, axes = subplots(1, 2, width=5.0, height=3.6)
    ax, split = axes[0, 0], axes[0, 1]
    x = np.arange(len(data))
    # Both intervals as bars: the calibrated one (the law's held-out error) wide and light, the seed-only one
    # narrow and dark (the main fit's own answer can lie outside the latter with few replicates).
    ax.vlines(x - 0.12, data["calibrated_low"], data["calibrated_high"], color="C0", alpha=0.35, linewidth=6,
              label="calibrated 90%")
    ax.vlines(x - 0.12, data["predicted_loss_5"], data["predicted_loss_95"], color="C0", linewidth=2,
              label=f"seed-only 90% ({context.interval_note})")
    ax.plot(x - 0.12, data["predicted_loss"], "o", color="C0", label="predicted")
    ax.plot(x + 0.12, data["achieved_train_loss"], "s", color="C3", label="achieved (private, train)")
    ax.plot(x + 0.12, data["achieved_heldout_loss"], "^", color="C2", label="achieved (private, held-out)")
    ax.plot(x + 0.24, data["achieved_grid_batch"], "x", color="C4", label="study twin, grid batch")
    ax.plot(x + 0.24, data["achieved_recommended_batch"], "+", color="C1", label="study twin, batch B")
    labels = [f"{m}\nε={e:g}\nN={n:.3g}\nC={c:.2g}" for m, e, n, c in
              zip(data["model"], data["epsilon"], data["data_budget"], data["compute"])]
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("final cross entropy (nats)")
    ax.legend(fontsize=6)
    width = 0.25
    for offset, (column, label) in zip((-width, 0.0, width), SPLIT.items()):
        split.bar(x + offset, data[column], width, label=label)
    split.axhline(0.0, color="black", linewidth=0.5)
    if data["law_error"].isna().all():
        split.text(0.5, 0.5, "no study twins\n(private_model.cause_split: false)", transform=split.transAxes,
                   ha="center", va="center", fontsize=7)
    split.set_xticks(x, labels, fontsize=7)
    split.set_ylabel("achieved − law, split (nats)")
    split.legend(fontsize=6)
    return figure


PREDICTED_VS_ACHIEVED = FigureSpec(
    label="fig:predicted_vs_achieved",
    caption=("The law's predicted final loss with its seed-only and calibrated 90% intervals against the private "
             "runs' achieved loss and their study twins, per budget; right, the difference split into the law's "
             "own error, the physical batch and the sampler."),
    needs=(REPORT,),
    compute=_compute,
    draw=_draw,
)
FIGURES = (PREDICTED_VS_ACHIEVED,)
