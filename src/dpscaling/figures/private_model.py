"""The ``private_model`` report's figure: per budget, the law's predicted final loss with its interval
beside the private run's achieved training and held-out loss (docs/private-training.md, "Closing the
loop"). Drawn from the report's table (:mod:`dpscaling.tables.private_model`), not from the law."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpscaling.figures.common import FigureSpec, subplots

REPORT = "private_model"  # what the figure needs: the report's table
COLUMNS = ["budget", "epsilon", "data_budget", "compute", "model", "predicted_loss", "predicted_loss_5",
           "predicted_loss_95", "achieved_train_loss", "achieved_heldout_loss"]


@dataclass
class PrivateModelContext:
    """The report's table (one row per budget) and what its interval is over."""

    table: pd.DataFrame
    interval_note: str


def _compute(context: PrivateModelContext) -> pd.DataFrame:
    return context.table[COLUMNS].assign(Interval=context.interval_note)


def _draw(data: pd.DataFrame, context: PrivateModelContext):
    figure, axes = subplots(width=5.0, height=3.4)
    ax = axes[0, 0]
    x = np.arange(len(data))
    # The interval as a bar from 5% to 95% (the main fit's own answer can lie outside it with few replicates).
    ax.vlines(x - 0.1, data["predicted_loss_5"], data["predicted_loss_95"], color="C0", label="law's 90% interval")
    ax.plot(x - 0.1, data["predicted_loss"], "o", color="C0", label="predicted")
    ax.plot(x + 0.1, data["achieved_train_loss"], "s", label="achieved (train)")
    ax.plot(x + 0.1, data["achieved_heldout_loss"], "^", label="achieved (held-out)")
    ax.set_xticks(x, [f"{m}\nε={e:g}\nN={n:.3g}\nC={c:.2g}" for m, e, n, c in
                      zip(data["model"], data["epsilon"], data["data_budget"], data["compute"])], fontsize=7)
    ax.set_ylabel("final cross entropy (nats)")
    ax.set_title(f"interval: {context.interval_note}", fontsize=7)
    ax.legend(fontsize=7)
    return figure


PREDICTED_VS_ACHIEVED = FigureSpec(
    label="fig:predicted_vs_achieved",
    caption="The law's predicted final loss (with its interval) against the private runs' achieved loss, per budget.",
    needs=(REPORT,),
    compute=_compute,
    draw=_draw,
)
FIGURES = (PREDICTED_VS_ACHIEVED,)
