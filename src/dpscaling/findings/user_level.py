"""Where user-level sampling wins: ULS's law against ELS's at a budget per user (not in the paper: the privacy
unit as an axis; docs/private-training.md "User-level sampling", docs/query.md "A budget per user").

A budget per user is (C, ε, N users of up to k sequences). Each is asked of the run's bundle exactly as
``dpscaling query --users N --examples-per-user k`` asks it (:meth:`dpscaling.law.mechanisms.LawAcrossMechanisms.query`:
one search, one rounding, one price, one decision rule): the user-level mechanism's law (``uls-m<m>``: users
sampled, each user's m sequences clipped as one, σ over users) and DP-SGD's law with ELS's σ (the S sequences the
N users hold sampled, accounted for the user's k), each answer runnable and priced exactly. Beside them the
sequence-level answer for the same S sequences (DP-SGD's law, a guarantee per sequence): what protecting users
costs and how the answer moves. S is the data's own (a heavy tail puts it far below N·k, which would flatter
ELS: more sequences, a lower sampling rate for the same batch). Charles et al. (2024, arXiv 2407.07737) found
ULS better where privacy must be strong or compute is large; the claims checked
(:func:`check_user_level_findings`):

* (a) ULS beats ELS at the strongest privacy: at the smallest ε, ULS's runnable answer predicts the lower loss at
  most of the compute budgets both answer;
* (b) ULS's edge shrinks as ε grows: Spearman's ρ(ε, gain) < 0 (gain = ELS's loss − ULS's, nats);
* (c) ULS's edge grows with compute: ρ(C, gain) > 0;
* (d) where ULS wins, it wins by more than the laws can resolve: at most of the budgets where ULS is lower, the
  gain exceeds the larger calibrated 90% half-width of the two answers (a gain inside the laws' own error is
  not a win the laws show); the median and largest gain are its record;
* (e) protecting users costs loss and moves the answer as a smaller privacy budget does (the paper's §4.1,
  Optimal Compute Budget Allocation: a smaller model at a larger batch): against the sequence-level answer at the same S sequences, the medians of the
  chosen per-user answer's ratios are M* ≤ 1 and B* ≥ 1 (in sequences, B·m for ULS), and the median loss cost
  is > 0; T*'s ratio is its record.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.findings.comparison import GAIN, column
from dpscaling.findings.paper import Finding
from dpscaling.law.columns import COMPUTE, DATA_BUDGET, PRIVACY_BUDGET
from dpscaling.privacy.mechanisms import DPSGD, mechanism_named

LABEL = "finding:user-level"
CAPTION = ("User-level DP: where user-level sampling's law (ULS) beats example-level sampling's (ELS) at a budget "
           "per user, by how much, and how the chosen answer moves against the sequence-level one (the numbers "
           "measured).")
COMPARISON_LABEL = "table:uls_vs_els"
COMPARISON_CAPTION = ("ULS against ELS at the same compute C, privacy budget per user and N users of up to k "
                      "sequences: each law's runnable answer (model size, batch in sequences, iterations, predicted "
                      "loss, calibrated 90% half-width), the gain (ELS's loss minus ULS's), the decision rule's "
                      "choice, and the sequence-level answer for the same S sequences (those the N users hold).")
FINDING_NAMES = list("abcde")
EXAMPLES_PER_USER = "Examples per User"
SEQUENCES = "Sequences"
HALF_WIDTH = "Calibrated Half-Width"
CHOSEN = "Chosen"
ELS, ULS, SEQUENCE = "ELS", "ULS", "sequence"
QUANTITIES = ("Predicted Loss", "Model Size", "Batch Sequences", "Iterations", "Sampler", HALF_WIDTH)


def _answer_columns(answer: Any, name: str) -> dict[str, Any]:
    runnable = answer.runnable
    interval = runnable.calibrated_interval
    values = (runnable.predicted_loss, runnable.model_size, runnable.batch_size * runnable.sequences_per_unit,
              runnable.iterations, None if runnable.price is None else runnable.price.sampler,
              np.nan if interval is None else (interval[1] - interval[0]) / 2)
    return {column(quantity, name): value for quantity, value in zip(QUANTITIES, values)}


def _empty(name: str) -> dict[str, Any]:
    return {column(quantity, name): np.nan for quantity in QUANTITIES}


def comparison_table(bundle: str | os.PathLike[str] | Any, epsilons: Sequence[float], budgets: Sequence[float],
                     users: float, examples_per_user: int, sequences: float | None = None,
                     progress=None) -> pd.DataFrame:
    """One row per (ε, C): ULS's and ELS's runnable answers for N = ``users`` users of up to k =
    ``examples_per_user`` sequences holding ``sequences`` S in all (None: N, as the query assumes:
    :func:`dpscaling.law.answers.held_sequences`), the gain, the rule's choice and the sequence-level answer at S
    sequences.
    A law that refuses the budget leaves its columns empty there. ``bundle``: the run's bundle, or it loaded."""
    from dpscaling.law.answers import held_sequences
    from dpscaling.law.loading import load_law
    from dpscaling.law.mechanisms import LawAcrossMechanisms

    laws = bundle if isinstance(bundle, LawAcrossMechanisms) else load_law(bundle)
    if not isinstance(laws, LawAcrossMechanisms):
        raise UserError(f"{bundle}: one mechanism's law; the user-level findings compare a user-level mechanism's "
                        "(training.mechanisms: uls-m<m>) with DP-SGD's")
    user_level = [name for name in laws.mechanisms if mechanism_named(name).unit == "user"]
    if DPSGD.name not in laws.mechanisms or not user_level:
        raise UserError(f"{bundle}: holds {laws.mechanisms}; the user-level findings need dpsgd and a uls-m<m> law")
    uls, dpsgd = user_level[0], laws.law(DPSGD.name)
    options = dict(allow_extrapolation=True, optimum_interval=False, sampling="poisson", progress=progress)
    sequences = held_sequences(users, examples_per_user, sequences)
    rows = []
    for epsilon in epsilons:
        for compute in budgets:
            row: dict[str, Any] = {PRIVACY_BUDGET: float(epsilon), COMPUTE: float(compute), DATA_BUDGET: float(users),
                                   EXAMPLES_PER_USER: int(examples_per_user), SEQUENCES: sequences}
            choice = None
            try:
                choice = laws.query(compute, epsilon, users=users, examples_per_user=examples_per_user,
                                    sequences=sequences, mechanism=None, **options)
            except UserError:
                pass
            answers = {} if choice is None else choice.answers
            for name, mechanism in ((ULS, uls), (ELS, DPSGD.name)):
                row.update(_answer_columns(answers[mechanism], name) if mechanism in answers else _empty(name))
            row[CHOSEN] = None if choice is None else (ULS if choice.mechanism == uls else ELS)
            try:
                row.update(_answer_columns(dpsgd.query(compute, epsilon, users=sequences, privacy_unit="user",
                                                       **options), SEQUENCE))
            except UserError:
                row.update(_empty(SEQUENCE))
            rows.append(row)
    table = pd.DataFrame(rows)
    table[GAIN] = table[column(QUANTITIES[0], ELS)] - table[column(QUANTITIES[0], ULS)]
    return table


def _both(table: pd.DataFrame) -> pd.DataFrame:
    return table.dropna(subset=[GAIN])


def _rho(x: pd.Series, y: pd.Series) -> float:
    from scipy import stats  # on first use: the workflow imports this module when it parses its rules

    return float(stats.spearmanr(x, y).statistic) if len(x) >= 3 and x.nunique() > 1 else float("nan")


def wins_at_strong_privacy(table: pd.DataFrame) -> Finding:
    claim = "ULS beats ELS at the strongest privacy (lower loss at most compute budgets of the smallest eps)"
    both = _both(table)
    if both.empty:
        return Finding(claim, False, "no budget is answered by both laws")
    strongest = both[both[PRIVACY_BUDGET] == both[PRIVACY_BUDGET].min()]
    wins = int((strongest[GAIN] > 0).sum())
    return Finding(claim, wins > len(strongest) / 2,
                   f"eps={strongest[PRIVACY_BUDGET].iloc[0]:g}: ULS lower at {wins} of {len(strongest)} budgets, "
                   f"gain median {strongest[GAIN].median():.3f} nats")


def edge_shrinks_with_epsilon(table: pd.DataFrame) -> Finding:
    claim = "ULS's edge shrinks as eps grows (Spearman rho(eps, gain) < 0)"
    both = _both(table)
    rho = _rho(both[PRIVACY_BUDGET], both[GAIN])
    medians = "; ".join(f"eps={e:g}: {g[GAIN].median():.3f}" for e, g in both.groupby(PRIVACY_BUDGET))
    return Finding(claim, bool(rho < 0), f"rho = {rho:.2f} over {len(both)} budgets; median gain {medians or 'none'}")


def edge_grows_with_compute(table: pd.DataFrame) -> Finding:
    claim = "ULS's edge grows with compute (Spearman rho(C, gain) > 0)"
    both = _both(table)
    rho = _rho(both[COMPUTE], both[GAIN])
    return Finding(claim, bool(rho > 0), f"rho = {rho:.2f} over {len(both)} budgets, C {both[COMPUTE].min():.3g}.."
                   f"{both[COMPUTE].max():.3g}" if len(both) else "no budget is answered by both laws")


def by_how_much(table: pd.DataFrame) -> Finding:
    claim = ("where ULS wins, it wins by more than the laws resolve (gain above both answers' calibrated 90% "
             "half-width at most of its wins)")
    both = _both(table)
    wins = both[both[GAIN] > 0]
    if wins.empty:
        return Finding(claim, False, f"ULS wins at none of {len(both)} budgets answered by both")
    width = wins[[column(HALF_WIDTH, ULS), column(HALF_WIDTH, ELS)]].max(axis=1, skipna=False)
    if width.isna().all():
        return Finding(claim, False, f"ULS lower at {len(wins)} of {len(both)} budgets, gain median "
                       f"{wins[GAIN].median():.3f} nats, but the laws have no calibrated interval to resolve it")
    resolved = int((wins[GAIN] > width).sum())
    return Finding(claim, resolved > len(wins) / 2,
                   f"ULS lower at {len(wins)} of {len(both)} budgets, by more than the half-width at {resolved}: "
                   f"gain median {wins[GAIN].median():.3f}, max {wins[GAIN].max():.3f} nats, half-width median "
                   f"{width.median():.3f} (eps {wins[PRIVACY_BUDGET].min():g}..{wins[PRIVACY_BUDGET].max():g})")


def against_sequence_level(table: pd.DataFrame) -> Finding:
    claim = ("protecting users costs loss and moves the answer as a smaller eps does: against the sequence-level "
             "answer at the same S sequences, median M* ratio <= 1, B* ratio >= 1, loss cost > 0")
    rows = []
    for _, row in table.dropna(subset=[CHOSEN, column(QUANTITIES[0], SEQUENCE)]).iterrows():
        rows.append({quantity: row[column(quantity, row[CHOSEN])] / row[column(quantity, SEQUENCE)]
                     for quantity in QUANTITIES[1:4]} | {
            "cost": row[column(QUANTITIES[0], row[CHOSEN])] - row[column(QUANTITIES[0], SEQUENCE)]})
    if not rows:
        return Finding(claim, False, "no budget has both a chosen and a sequence-level answer")
    ratios = pd.DataFrame(rows).median()
    holds = bool(ratios["Model Size"] <= 1 and ratios["Batch Sequences"] >= 1 and ratios["cost"] > 0)
    return Finding(claim, holds, f"{len(rows)} budgets; per-user / per-sequence medians: M* {ratios['Model Size']:.3g}, "
                   f"B* (sequences) {ratios['Batch Sequences']:.3g}, T* {ratios['Iterations']:.3g}; protecting users "
                   f"costs {ratios['cost']:.3f} nats (median)")


def check_user_level_findings(table: pd.DataFrame) -> list[Finding]:
    """Claims (a)-(e) (module docstring) on the comparison table."""
    return [wins_at_strong_privacy(table), edge_shrinks_with_epsilon(table), edge_grows_with_compute(table),
            by_how_much(table), against_sequence_level(table)]


def users_of(meta: str | os.PathLike[str]) -> tuple[int, int, int]:
    """(N users, k, S sequences) of the packed data's ``users`` record (meta.json): the users, the cap on a
    user's sequences (the largest contribution when uncapped) and the train sequences they hold."""
    from dpscaling.data.shards import load_meta

    meta_record = load_meta(os.path.dirname(os.fspath(meta)))
    record = meta_record.users
    if not record:
        raise UserError(f"{meta}: the packed data names no users; set data.users (docs/data.md)")
    k = record.get("max_examples") or record["contributions_capped"]["max"]
    return int(record["n_users"]), int(k), int(meta_record.n_train)


def compute_budgets(laws: Any, settings: Any) -> np.ndarray:
    """``analysis.user_level_compute_count`` budgets log-spaced over the DP-SGD law's compute range (the
    figures' range: :func:`dpscaling.report.figures.context.compute_range`); ``laws``: the run's loaded bundle."""
    from dpscaling.report.figures.context import compute_range

    law = laws.law(DPSGD.name).bundle.law
    return np.geomspace(*compute_range(law, settings), settings.user_level_compute_count)


def write_user_level_stage(bundle: str | os.PathLike[str], meta: str | os.PathLike[str], settings: Any, output: Any,
                           progress=None) -> pd.DataFrame:
    """finding:user-level and its comparison table (each as .csv, .md, .tex) for the run's data: N users of up to
    k sequences, S in all, at ``analysis.user_level_privacy_budgets`` × :func:`compute_budgets`; returns the
    findings."""
    from dpscaling.findings.paper import findings_table
    from dpscaling.report.tables.write import write_table

    from dpscaling.law.loading import load_law

    users, k, sequences = users_of(meta)
    laws = load_law(bundle)  # once: the budgets and the table read the same bundle
    table = comparison_table(laws, settings.user_level_privacy_budgets, compute_budgets(laws, settings), users, k,
                             sequences, progress)
    frame = findings_table(check_user_level_findings(table), FINDING_NAMES)
    write_table(frame, output.csv.removesuffix(".csv"), CAPTION, LABEL)
    write_table(table, output.comparison.removesuffix(".csv"), COMPARISON_CAPTION, COMPARISON_LABEL)
    return frame
