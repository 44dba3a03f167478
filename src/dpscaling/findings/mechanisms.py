"""What changes with a better mechanism: DP-BandMF's laws against DP-SGD's (not in the paper: its second open
question, "better underlying mechanisms"; docs/mechanisms.md "What changes").

Each mechanism's law, with its own accounting table σ_b(ε, T, q), answers every (ε, N, C) of the comparison
with its compute-optimal configuration (paper §3.4 queries over the law's continuous model range, as the
paper's figures). :func:`comparison_table` sets each BandMF mechanism beside DP-SGD: loss, M*, B*, T*, the
epochs of its optimum (B*·T*/N), whether T* is past the law's measured horizon, and the gain (DP-SGD's loss
minus BandMF's, nats). The literature's claims checked (:func:`check_mechanism_findings`):

* (a) BandMF at least matches DP-SGD (Choquette-Choo et al. 2023): gain ≥ −:data:`MATCH_TOLERANCE` wherever
  both laws answer;
* (b) its advantage grows with ε (McKenna 2025): at fixed (N, C), the gain does not fall as ε rises;
* (c) its advantage shrinks with epochs: the gain falls as the optimum's epochs rise (rank correlation);
* (d) how the optimum moves: where BandMF wins, its M*, B*, T* against DP-SGD's (medians of the ratios).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from dpscaling.report.figures.context import AnalysisContext
from dpscaling.findings.comparison import EXTRAPOLATED, GAIN, answered_by_both, column
from dpscaling.findings.paper import Finding
from dpscaling.law.columns import (
    BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL_SIZE, PRIVACY_BUDGET)
from dpscaling.privacy.mechanisms import DPSGD

MECHANISM = "Mechanism"
BASELINE = DPSGD.name
EPOCHS = "Epochs"
COMPARED = (CROSS_ENTROPY, MODEL_SIZE, BATCH_SIZE, ITERATIONS, EPOCHS)
# A loss this much above DP-SGD's still "matches" it (the laws' own fit error is larger).
MATCH_TOLERANCE = 0.005
COMPARISON_BUDGETS = 7

COMPARISON_LABEL = "table:mechanism_vs_dpsgd"
COMPARISON_CAPTION = ("DP-BandMF against DP-SGD at the same compute C, privacy budget and data budget N: each "
                      "mechanism's law answers with its own accounting table; compute-optimal loss, model size, batch "
                      "size, iterations and epochs (B*T*/N) of each, and the gain (DP-SGD's loss minus BandMF's).")
LABEL = "finding:mechanism"
CAPTION = ("Better mechanisms: where DP-BandMF's laws beat DP-SGD's and by how much, checked against the literature's "
           "claims (the numbers measured).")
FINDING_NAMES = list("abcd")


def comparison_table(contexts: Mapping[str, AnalysisContext], epsilons: Sequence[float], data_budgets: Sequence[float],
                     budgets: np.ndarray | None = None) -> pd.DataFrame:
    """One row per BandMF mechanism × (ε, N, C) with DP-SGD's and its compute-optimal configuration, whether
    each T* lies past its law's measured horizon, and the gain; a law that cannot answer leaves its columns
    empty there. ``contexts``: mechanism → its law's context (DP-SGD's among them)."""
    baseline = contexts[BASELINE]
    budgets = baseline.compute_budgets(COMPARISON_BUDGETS) if budgets is None else budgets
    rows = []
    for mechanism, context in contexts.items():
        if mechanism == BASELINE:
            continue
        for epsilon in epsilons:
            for users in data_budgets:
                best = {name: ctx.best_per_compute(epsilon, users, budgets).set_index(COMPUTE)
                        for name, ctx in ((BASELINE, baseline), (MECHANISM, context))}
                for compute in budgets:
                    row = {MECHANISM: mechanism, PRIVACY_BUDGET: float(epsilon), DATA_BUDGET: float(users),
                           COMPUTE: float(compute)}
                    for name, table in best.items():
                        answered = compute in table.index
                        for quantity in COMPARED[:-1]:
                            row[column(quantity, name)] = float(table.at[compute, quantity]) if answered else np.nan
                        row[column(EPOCHS, name)] = (row[column(BATCH_SIZE, name)] * row[column(ITERATIONS, name)]
                                                     / float(users))
                        horizon = (baseline if name == BASELINE else context).horizon()
                        row[column(EXTRAPOLATED, name)] = bool(answered and row[column(ITERATIONS, name)] > horizon)
                    rows.append(row)
    table = pd.DataFrame(rows)
    if len(table):
        table[GAIN] = table[column(CROSS_ENTROPY, BASELINE)] - table[column(CROSS_ENTROPY, MECHANISM)]
    return table


def _inside(table: pd.DataFrame) -> pd.DataFrame:
    """Rows where neither optimum's T* is past its law's measured horizon."""
    return table[~table[column(EXTRAPOLATED, BASELINE)].astype(bool) & ~table[column(EXTRAPOLATED, MECHANISM)].astype(bool)]


def at_least_matches(table: pd.DataFrame) -> Finding:
    """(a) BandMF's compute-optimal loss is at most DP-SGD's (+ :data:`MATCH_TOLERANCE`) wherever both answer."""
    claim = f"BandMF at least matches DP-SGD (gain >= -{MATCH_TOLERANCE} nats at every answered (eps, N, C))"
    compared = answered_by_both(table, MECHANISM, BASELINE)
    if compared.empty:
        return Finding(claim, False, "no (eps, N, C) is answered by both laws")
    parts = []
    for mechanism, group in compared.groupby(MECHANISM, sort=False):
        gain, inside = group[GAIN], _inside(group)[GAIN]
        parts.append(f"{mechanism}: gain > 0 at {int((gain > 0).sum())} of {len(gain)} (eps, N, C), median "
                     f"{gain.median():.3f}, min {gain.min():.3f}, max {gain.max():.3f} nats; neither extrapolated: "
                     f"{len(inside)} points" + (f", median {inside.median():.3f}, min {inside.min():.3f}"
                                                if len(inside) else ""))
    return Finding(claim, bool((compared[GAIN] >= -MATCH_TOLERANCE).all()), "; ".join(parts))


def grows_with_epsilon(table: pd.DataFrame) -> Finding:
    """(b) At every (mechanism, N, C) answered at two or more ε, the gain does not fall as ε rises (within
    :data:`MATCH_TOLERANCE`)."""
    claim = "BandMF's advantage grows with eps (at fixed N and C)"
    compared = answered_by_both(table, MECHANISM, BASELINE)
    slices = [group.sort_values(PRIVACY_BUDGET)[GAIN].to_numpy()
              for _, group in compared.groupby([MECHANISM, DATA_BUDGET, COMPUTE]) if len(group) >= 2]
    if not slices:
        return Finding(claim, False, "no (N, C) is answered at two privacy budgets")
    rising = sum(bool((np.diff(gains) >= -MATCH_TOLERANCE).all()) for gains in slices)
    medians = "; ".join(f"eps={epsilon:g}: {group[GAIN].median():.3f}"
                        for epsilon, group in compared.groupby(PRIVACY_BUDGET))
    return Finding(claim, rising == len(slices),
                   f"gain non-decreasing in eps at {rising} of {len(slices)} (mechanism, N, C) slices; median gain "
                   f"per eps: {medians}")


def shrinks_with_epochs(table: pd.DataFrame) -> Finding:
    """(c) The gain falls as the BandMF optimum's epochs rise: Spearman's rank correlation < 0 (and where the
    optimum trains under one epoch, the gain is larger than where it trains over one)."""
    claim = "BandMF's advantage shrinks with epochs"
    compared = answered_by_both(table, MECHANISM, BASELINE)
    if len(compared) < 3:
        return Finding(claim, False, f"{len(compared)} answered points: too few to rank")
    epochs = compared[column(EPOCHS, MECHANISM)]
    from scipy import stats  # on first use: the workflow imports this module when it parses its rules

    rho = float(stats.spearmanr(epochs, compared[GAIN]).statistic)
    few, many = compared[epochs < 1][GAIN], compared[epochs >= 1][GAIN]
    split = (f"; median gain under one epoch {few.median():.3f} ({len(few)} points), at one or more "
             f"{many.median():.3f} ({len(many)})" if len(few) and len(many) else
             f"; every optimum trains {'under' if len(few) else 'at least'} one epoch")
    return Finding(claim, bool(rho < 0), f"Spearman rho(epochs, gain) = {rho:.2f} over {len(compared)} points, epochs "
                   f"{epochs.min():.3g}..{epochs.max():.3g}{split}")


def how_the_optimum_moves(table: pd.DataFrame) -> Finding:
    """(d) Where BandMF wins, its optimum against DP-SGD's: medians of the M*, B*, T* ratios (a record, not
    a claim of the literature: it holds when a win exists)."""
    claim = "where BandMF wins, its compute-optimal M, B and T against DP-SGD's"
    wins = answered_by_both(table, MECHANISM, BASELINE)
    wins = wins[wins[GAIN] > 0]
    if wins.empty:
        return Finding(claim, False, "BandMF wins nowhere")
    ratios = {name: (wins[column(name, MECHANISM)] / wins[column(name, BASELINE)]).median()
              for name in (MODEL_SIZE, BATCH_SIZE, ITERATIONS)}
    return Finding(claim, True, f"{len(wins)} points; BandMF / DP-SGD medians: M* {ratios[MODEL_SIZE]:.3g}, "
                   f"B* {ratios[BATCH_SIZE]:.3g}, T* {ratios[ITERATIONS]:.3g}")


def check_mechanism_findings(contexts: Mapping[str, AnalysisContext], table: pd.DataFrame | None = None
                             ) -> tuple[list[Finding], pd.DataFrame]:
    """Claims (a)-(d) (module docstring) and the comparison table they read, at the analysis settings'
    privacy budgets and data budgets."""
    settings = contexts[BASELINE].settings
    if table is None:
        table = comparison_table(contexts, settings.privacy_budgets, settings.data_budgets)
    return [at_least_matches(table), grows_with_epsilon(table), shrinks_with_epochs(table),
            how_the_optimum_moves(table)], table
