"""fig:finetune_vs_scratch (not in the paper; docs/finetune.md): the fine-tuning law against the from-scratch
law on the same private data, from table:finetune_vs_scratch (:mod:`dpscaling.findings.finetune`): per
privacy budget, each law's compute-optimal loss and model size against the compute budget."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dpscaling.report.figures.common import budget_label, colours, log_axes, save_figure, subplots
from dpscaling.findings.comparison import column
from dpscaling.findings.finetune import COUNTED, FINETUNED, SCRATCH
from dpscaling.law.columns import COMPUTE, CROSS_ENTROPY, DATA_BUDGET, MODEL_SIZE, PRIVACY_BUDGET

NAME = "fig-finetune_vs_scratch"
STYLES = {FINETUNED: "-", SCRATCH: "--", COUNTED: ":"}


def finetune_figure(table: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Left: the best loss; right: the optimal model size; solid fine-tuned, dashed from scratch, dotted
    fine-tuned with its pretraining paid from C (when the table has it)."""
    figure, axes = subplots(1, 2)
    loss_ax, size_ax = axes[0]
    epsilons = sorted(table[PRIVACY_BUDGET].unique())
    for colour, epsilon in zip(colours(len(epsilons)), epsilons):
        rows = table[table[PRIVACY_BUDGET] == epsilon].sort_values(COMPUTE)
        for regime, style in STYLES.items():
            if column(CROSS_ENTROPY, regime) not in rows:
                continue
            label = rf"$\varepsilon$ = {budget_label(epsilon)}, {regime}"
            loss_ax.plot(rows[COMPUTE], rows[column(CROSS_ENTROPY, regime)], style, color=colour, label=label)
            size_ax.plot(rows[COMPUTE], rows[column(MODEL_SIZE, regime)], style, color=colour)
    log_axes(loss_ax, y=False)
    log_axes(size_ax)
    loss_ax.set(xlabel="compute (FLOPs)", ylabel="compute-optimal loss (nats)")
    size_ax.set(xlabel="compute (FLOPs)", ylabel="compute-optimal model size")
    users = table[DATA_BUDGET].iloc[0] if len(table) else float("nan")
    loss_ax.set_title(f"N = {budget_label(users)}: solid fine-tuned, dashed scratch, dotted pretraining counted",
                     fontsize=8)
    loss_ax.legend(fontsize=6)
    return save_figure(figure, table, stem)
