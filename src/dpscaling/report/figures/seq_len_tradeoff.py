"""fig:seq_len_tradeoff (not in the paper: its limitations name sequence length "yet another important knob").

Documented in docs/figures.md and docs/fit.md, "Sequence length".

The law across the run's measured sequence lengths (:mod:`dpscaling.law.sequence_length`) answers, per
compute budget C = 6·M·B·S·T, the compute-optimal (M, S, B, T) over the measured lengths and those between
them (linear in log S), at two or more privacy budgets and without privacy. Left: the optimal S; right: its
predicted loss. The data budget is stated in its privacy unit (``analysis.privacy_unit``): under ``sequence``
a token budget D holds D/S units at length S, so a shorter S also means a smaller sampling rate and less
noise at the same ε; under ``user`` N users whatever S. Without privacy (ε = ∞, σ̄ = 0) the batch is the
physical batch the laws were trained at, as in fig:nonprivate_reproduction (the law says nothing about B
there). With every length's bootstrap replicates, each line has its 90% band: the replicates' optimal S
and loss (seed noise propagated through every length's fit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.report.figures.common import (
    ACCOUNTING, BUDGETS_WITHOUT_ANSWER, FLOOR, LAW, LENGTHS, UNANSWERED, FigureSpec, floor_line, footnote, log_axes,
    no_data, subplots)
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.report.figures.vary_compute import count_note, draw_band, epsilon_lines
from dpscaling.law.bootstrap import INTERVAL_NOTE, band
from dpscaling.law.columns import (
    BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO, PRIVACY_BUDGET,
    SIGMA, TOKENS)
from dpscaling.law.sequence_length import (
    ALL_LENGTHS_ANSWERED, LENGTHS_ANSWERING, PRIVACY_UNIT, SEQ_LEN, candidate_lengths, length_tradeoff)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DATA_BUDGET_NOTE = "Data Budget Note"
MEASURED_LENGTHS = "Measured Lengths"
COLUMNS = [PRIVACY_BUDGET, COMPUTE, SEQ_LEN, *band(SEQ_LEN), CROSS_ENTROPY, *band(CROSS_ENTROPY), MODEL_SIZE,
           BATCH_SIZE, ITERATIONS, TOKENS, SIGMA, NOISE_BATCH_RATIO, DATA_BUDGET, PRIVACY_UNIT, DATA_BUDGET_NOTE,
           MEASURED_LENGTHS, LENGTHS_ANSWERING, ALL_LENGTHS_ANSWERED, BUDGETS_WITHOUT_ANSWER, UNANSWERED,
           INTERVAL_NOTE]


def compute_budgets_across_lengths(context: AnalysisContext) -> np.ndarray:
    """``analysis.compute_min/max`` or the primary law's range (:meth:`AnalysisContext.compute_range`) stretched
    from the shortest to the longest measured length; ``compute_count`` log-spaced budgets."""
    lengths = context.lengths.law.lengths
    low, high = context.compute_range()
    if context.settings.compute_min is None:
        low, high = low * lengths[0] / context.law.seq_len, high * lengths[-1] / context.law.seq_len
    return np.geomspace(low, high, context.settings.compute_count)


def tradeoff_table(context: AnalysisContext) -> pd.DataFrame:
    """Per privacy budget (and ε = ∞) and compute budget: the compute-optimal length and configuration."""
    if context.lengths is None:
        raise UserError("fig:seq_len_tradeoff needs a law across sequence lengths: set training.seq_lens to two "
                        "or more lengths")
    settings, lengths = context.settings, context.lengths
    data = settings.data_budget_across_lengths(context.law.seq_len)
    budgets = compute_budgets_across_lengths(context)
    frames = []
    for epsilon in (*settings.seq_len_privacy_budgets, np.inf):
        best = length_tradeoff(lengths.law, context.sigma, budgets, epsilon, data, context.batch_sizes(epsilon),
                               lengths.replicates)
        frames.append(best.assign(**{
            PRIVACY_BUDGET: epsilon, BUDGETS_WITHOUT_ANSWER: best.attrs["budgets_without_answer"],
            UNANSWERED: int(sum(best.attrs["unanswered"].values()))}))
    table = pd.concat(frames, ignore_index=True)
    return table.reindex(columns=COLUMNS).assign(**{
        DATA_BUDGET_NOTE: data.describe(), PRIVACY_UNIT: data.privacy_unit,
        MEASURED_LENGTHS: " ".join(map(str, lengths.law.lengths)), INTERVAL_NOTE: lengths.interval_note})


def _epsilon_label(epsilon: float) -> str:
    return "no DP (σ̄ = 0)" if np.isinf(epsilon) else rf"$\varepsilon$ = {epsilon:g}"


def draw_tradeoff(data: pd.DataFrame, context: AnalysisContext) -> Figure:
    figure, axes = subplots(1, 2, width=4.6)
    length_ax, loss_ax = axes[0]
    measured = context.lengths.law.lengths if context.lengths is not None else []
    # S on a log2 scale drawn linearly, so that its ticks stay the measured lengths.
    log_axes(length_ax, y=False)
    log_axes(loss_ax, y=False)
    length_ax.set_ylabel("Compute-optimal sequence length S")
    loss_ax.set_ylabel("Predicted cross entropy at the optimum")
    for ax in (length_ax, loss_ax):
        ax.set_xlabel("Compute budget C = 6·M·B·S·T (FLOPs)")
    answered = data.dropna(subset=[CROSS_ENTROPY])
    if answered.empty:
        for ax in (length_ax, loss_ax):
            no_data(ax, "no compute budget inside the laws' range at any length")
        return figure
    for epsilon, line, colour, style in epsilon_lines(data, answered):
        log_length = line.assign(**{column: np.log2(line[column]) for column in (SEQ_LEN, *band(SEQ_LEN))
                                    if column in line})
        forced = ~line[ALL_LENGTHS_ANSWERED].astype(bool)
        for ax, curve, column in ((length_ax, log_length, SEQ_LEN), (loss_ax, line, CROSS_ENTROPY)):
            ax.plot(curve[COMPUTE], curve[column], style, color=colour, label=_epsilon_label(epsilon))
            ax.plot(curve[COMPUTE][~forced], curve[column][~forced], "o", color=colour, markersize=2.5)
            ax.plot(curve[COMPUTE][forced], curve[column][forced], "o", mfc="none", color=colour, markersize=4)
            draw_band(ax, curve, column, colour)
    length_ax.set_yticks(np.log2(measured), [str(s) for s in measured])
    length_ax.set_ylim(np.log2(measured[0]) - 0.2, np.log2(measured[-1]) + 0.2)
    for s in measured:
        length_ax.axhline(np.log2(s), color="grey", linewidth=0.5, alpha=0.5)
    floor_line(loss_ax, context)
    length_ax.legend(fontsize=7)
    first = data.iloc[0]
    candidates = candidate_lengths(measured)
    footnote(figure, f"Data budget: {first[DATA_BUDGET_NOTE]}. Measured lengths {measured} (grey), "
             f"{len(candidates)} candidate lengths between them (linear in log S); hollow markers: some length "
             "could not answer the budget (its iterations outside the law's range), so the optimum is chosen "
             "among the others. Without DP the batch is the "
             f"physical batch of the laws' runs ({context.law.physical_batch}). Shading: "
             f"{first[INTERVAL_NOTE]}. " + count_note(data, [PRIVACY_BUDGET], "privacy budget"))
    return figure


SEQ_LEN_TRADEOFF = FigureSpec(
    label="fig:seq_len_tradeoff",
    caption=("Not in the paper: the compute-optimal sequence length (left) and its predicted loss (right) "
             "against compute, at two or more privacy budgets and without DP, from the laws fitted at each "
             "measured length and interpolated in log S between them; shading: the 90% band over the "
             "bootstrap replicates of every length's law. The data budget's privacy unit is in the footnote."),
    needs=(LAW, ACCOUNTING, LENGTHS, FLOOR),
    compute=tradeoff_table,
    draw=draw_tradeoff,
)

FIGURES = (SEQ_LEN_TRADEOFF,)
