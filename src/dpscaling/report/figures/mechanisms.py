"""fig:mechanism_vs_dpsgd (not in the paper; docs/mechanisms.md): DP-BandMF's laws against DP-SGD's, from
table:mechanism_vs_dpsgd (:mod:`dpscaling.findings.mechanisms`): per mechanism, privacy budget and data budget,
the loss BandMF gains over DP-SGD and its optimal model size relative to DP-SGD's, against compute."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dpscaling.report.figures.common import budget_label, colours, log_axes, save_figure, subplots
from dpscaling.law.columns import COMPUTE, DATA_BUDGET, MODEL_SIZE, PRIVACY_BUDGET
from dpscaling.findings.comparison import GAIN, column
from dpscaling.findings.mechanisms import BASELINE, MECHANISM

NAME = "fig-mechanism_vs_dpsgd"
STYLES = ("-", "--", ":", "-.")


def mechanism_figure(table: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Left: the gain (DP-SGD's compute-optimal loss minus BandMF's; above 0, BandMF wins); right: BandMF's M*
    over DP-SGD's. Colour: ε; line style: data budget N (and mechanism, when several)."""
    figure, axes = subplots(1, 2)
    gain_ax, size_ax = axes[0]
    epsilons = sorted(table[PRIVACY_BUDGET].unique()) if len(table) else []
    styles = {key: STYLES[i % len(STYLES)] for i, key in
              enumerate(table[[MECHANISM, DATA_BUDGET]].drop_duplicates().itertuples(index=False, name=None))}
    for colour, epsilon in zip(colours(len(epsilons)), epsilons):
        for (mechanism, users), style in styles.items():
            rows = table[(table[PRIVACY_BUDGET] == epsilon) & (table[MECHANISM] == mechanism)
                         & (table[DATA_BUDGET] == users)].sort_values(COMPUTE)
            label = rf"$\varepsilon$ = {budget_label(epsilon)}, N = {budget_label(users)}, {mechanism}"
            gain_ax.plot(rows[COMPUTE], rows[GAIN], style, color=colour, label=label)
            size_ax.plot(rows[COMPUTE], rows[column(MODEL_SIZE, MECHANISM)] / rows[column(MODEL_SIZE, BASELINE)],
                         style, color=colour)
    gain_ax.axhline(0.0, color="grey", linewidth=0.8)
    size_ax.axhline(1.0, color="grey", linewidth=0.8)
    log_axes(gain_ax, y=False)
    log_axes(size_ax, y=False)
    gain_ax.set(xlabel="compute (FLOPs)", ylabel="loss gained over DP-SGD (nats)")
    size_ax.set(xlabel="compute (FLOPs)", ylabel="optimal model size, BandMF / DP-SGD")
    gain_ax.set_title("above 0: BandMF's compute-optimal loss is lower", fontsize=8)
    gain_ax.legend(fontsize=6)
    return save_figure(figure, table, stem)
