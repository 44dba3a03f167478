"""The paper's qualitative findings, checked on OUR fitted law (paper §1 bullets, §4.1–§4.4),
and whether the non-private curves end below the noisy ones (what the smoothing presumes; docs/fit.md).
The workflow's ``findings`` target: docs/appendix-experiments.md.

Each check states a claim, computes the numbers behind it from the law and the
accounting (the same queries the figures make), and says whether the claim
holds on this data. Nothing here asserts the paper's numbers: a claim that
does not hold on a small CPU grid is reported as such, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpscaling.report.figures.baselines import BASELINE, KIND, OPTIMAL, comparison_table
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.law.columns import (
    COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO,
    PRIVACY_BUDGET, TOKENS_PER_PARAMETER)
from dpscaling.report.tables.inflection_points import inflection_points_table

CHINCHILLA_TOKENS_PER_PARAMETER = 20.0
SMALLER_FACTOR = 10.0


@dataclass(frozen=True)
class Finding:
    claim: str
    holds: bool
    measured: str


def _optimal_sizes(context: AnalysisContext, epsilon: float, users: float) -> pd.Series:
    best = context.best_per_compute(epsilon, users)
    return best.set_index(COMPUTE)[MODEL_SIZE]


def dp_models_are_smaller(context: AnalysisContext) -> Finding:
    """(a) At equal compute the DP compute-optimal model is ≥ 10× smaller than the non-private one."""
    users = context.settings.allocation_data_budget
    public = _optimal_sizes(context, np.inf, users)
    ratios = []
    for epsilon in context.settings.privacy_budgets:
        private = _optimal_sizes(context, epsilon, users)
        common = public.index.intersection(private.index)
        ratios += list(public[common] / private[common])
    if not ratios:
        return Finding("DP compute-optimal models are >= 10x smaller than non-private ones", False,
                       "no compute budget has both a private and a non-private answer")
    ratios = np.array(ratios)
    low, high = context.law.model_size_range()
    measured = (f"non-private / private optimal size at N={users:g}, eps in {list(context.settings.privacy_budgets)}: "
                f"median {np.median(ratios):.2f}x, max {ratios.max():.2f}x over {len(ratios)} (C, eps) pairs; "
                f"the law's models span only {high / low:.1f}x ({low:.3g}..{high:.3g} parameters)")
    return Finding("DP compute-optimal models are >= 10x smaller than non-private ones",
                   bool(np.median(ratios) >= SMALLER_FACTOR), measured)


def loss_saturates(context: AnalysisContext, table: pd.DataFrame | None = None) -> tuple[Finding, pd.DataFrame]:
    """(b) The best loss saturates in compute; the saturating compute rises with ε and with N.

    ``table`` is table:inflection_points when the workflow has already computed it (its
    queries are this check's costliest part); otherwise it is computed here.
    """
    if table is None:
        table = inflection_points_table(context)
    answered = table.dropna(subset=[COMPUTE])
    _, top = context.compute_range()
    # Saturated: the last decade (or more) of compute buys less than the 1% tolerance.
    saturated = answered[answered[COMPUTE] <= top / 10]
    grid = answered.pivot(index=DATA_BUDGET, columns=PRIVACY_BUDGET, values=COMPUTE)
    rises_with_eps = int((grid.diff(axis=1).iloc[:, 1:] >= 0).sum().sum())
    rises_with_n = int((grid.diff(axis=0).iloc[1:] >= 0).sum().sum())
    pairs_eps = int(grid.diff(axis=1).iloc[:, 1:].notna().sum().sum())
    pairs_n = int(grid.diff(axis=0).iloc[1:].notna().sum().sum())
    measured = (f"{len(saturated)} of {len(table)} (N, eps) cells gain < 1% over their last decade of compute; saturating "
                f"compute non-decreasing in eps for {rises_with_eps}/{pairs_eps} neighbouring pairs, "
                f"in N for {rises_with_n}/{pairs_n}")
    holds = (len(saturated) > len(table) / 2 and rises_with_eps >= 0.75 * max(pairs_eps, 1)
             and rises_with_n >= 0.75 * max(pairs_n, 1))
    return Finding("loss saturates in compute; the saturating compute rises with eps and N", holds, measured), table


def tokens_per_parameter_rise(context: AnalysisContext) -> Finding:
    """(c) Tokens/parameter of the optimum rises with compute and is far above Chinchilla's 20 for moderate ε."""
    users, moderate = context.settings.allocation_data_budget, 4.0
    best = context.best_per_compute(moderate, users)
    if len(best) < 2:
        return Finding("tokens/parameter rises with compute and is far above 20 (moderate eps)", False,
                       f"fewer than two answered compute budgets at eps={moderate:g}, N={users:g}")
    ratio = best[TOKENS_PER_PARAMETER].to_numpy()
    slope = float(np.polyfit(np.log(best[COMPUTE]), np.log(ratio), 1)[0])
    above = float(np.mean(ratio > 5 * CHINCHILLA_TOKENS_PER_PARAMETER))
    measured = (f"eps={moderate:g}, N={users:g}: tokens/parameter {ratio.min():.3g}..{ratio.max():.3g} over "
                f"{len(ratio)} budgets, log-log slope vs compute {slope:.2f}, {above:.0%} of budgets above 100")
    return Finding("tokens/parameter rises with compute and is far above 20 (moderate eps)",
                   bool(slope > 0 and above >= 0.5), measured)


def optimal_beats_baselines(context: AnalysisContext) -> Finding:
    """(d) The compute-optimal configuration beats every fixed baseline at equal compute."""
    data = comparison_table(context)
    compute = context.settings.baseline_compute
    optimal = data[(data[KIND] == OPTIMAL) & np.isclose(data[COMPUTE], compute)].set_index(PRIVACY_BUDGET)
    baselines = data[data[KIND] == BASELINE].dropna(subset=[CROSS_ENTROPY])
    wins = total = 0
    gaps = []
    for _, row in baselines.iterrows():
        best = optimal[CROSS_ENTROPY].get(row[PRIVACY_BUDGET], np.nan)
        if np.isfinite(best):
            total += 1
            wins += int(best <= row[CROSS_ENTROPY] + 1e-12)
            gaps.append(row[CROSS_ENTROPY] - best)
    if not total:
        return Finding("compute-optimal configurations beat the fixed baselines at equal compute", False,
                       "no baseline has a predicted loss inside the law's range")
    measured = (f"C={compute:g}: optimal <= baseline in {wins}/{total} (baseline, eps) pairs; "
                f"baseline loss minus optimal: median {np.median(gaps):.3f}, max {np.max(gaps):.3f} nats")
    return Finding("compute-optimal configurations beat the fixed baselines at equal compute", wins == total,
                   measured)


def final_losses(results: pd.DataFrame) -> pd.DataFrame:
    """Each (model, learning rate, σ̄) curve's last measured loss (seeds averaged), from the tidy curves."""
    finite = results.dropna(subset=[CROSS_ENTROPY])
    last = finite[finite[ITERATIONS] == finite.groupby([MODEL, LEARNING_RATE, NOISE_BATCH_RATIO])[ITERATIONS]
                  .transform("max")]
    return (last.groupby([MODEL, MODEL_SIZE, LEARNING_RATE, NOISE_BATCH_RATIO], as_index=False)
            .agg(**{ITERATIONS: (ITERATIONS, "first"), CROSS_ENTROPY: (CROSS_ENTROPY, "mean")}))


def nonprivate_ends_lowest(results: pd.DataFrame | None) -> Finding:
    """(e) The σ̄ = 0 curve ends at or below the smallest σ̄'s, for every model and learning rate (raw curves).

    Not a claim of the paper but what its monotone smoothing along σ̄ presumes; on the CPU default it
    fails (gradient noise helps a tiny model over a short horizon; docs/fit.md), and paper-mode smoothing
    keeps σ̄ = 0 out of the σ̄ pass so that no private answer depends on it.
    """
    claim = "the non-private curve (sigma-bar = 0) ends at or below the smallest sigma-bar's, every model and LR"
    if results is None or results.empty:
        return Finding(claim, False, "no training curves given")
    ends = final_losses(results)
    pairs = []
    for (model, rate), group in ends.sort_values([MODEL_SIZE, LEARNING_RATE]).groupby(
            [MODEL, LEARNING_RATE], sort=False):
        public = group[group[NOISE_BATCH_RATIO] == 0]
        private = group[group[NOISE_BATCH_RATIO] > 0]
        if public.empty or private.empty:
            continue
        smallest = private.loc[private[NOISE_BATCH_RATIO].idxmin()]
        pairs.append((model, rate, float(public[CROSS_ENTROPY].iloc[0]), float(smallest[NOISE_BATCH_RATIO]),
                      float(smallest[CROSS_ENTROPY]), int(smallest[ITERATIONS])))
    if not pairs:
        return Finding(claim, False, "no (model, learning rate) has both a sigma-bar = 0 and a noisy curve")
    below = [p for p in pairs if p[2] <= p[4]]
    details = "; ".join(f"{model} LR 2^{np.log2(rate):.3g}: {public:.3f} vs {private:.3f} at sigma-bar 2^"
                        f"{np.log2(nbr):.3g} (T={steps})" for model, rate, public, nbr, private, steps in pairs)
    measured = f"{len(below)} of {len(pairs)} (model, LR) pairs end at or below; last losses: {details}"
    return Finding(claim, len(below) == len(pairs), measured)


SHORTER_UNDER_DP = "the compute-optimal sequence length is shorter under DP than without it"


def shorter_length_under_dp(tradeoff: pd.DataFrame) -> Finding:
    """Not a claim of the paper (its limitations expect the length trade-off to differ under DP): at equal
    compute, the DP compute-optimal sequence length is shorter than the non-private one, from
    fig:seq_len_tradeoff's data (:mod:`dpscaling.report.figures.seq_len_tradeoff`), over every (compute, ε) pair
    where every candidate length answered both with DP and without (elsewhere the optimum over S is forced
    by the law's iteration range, not chosen). Holds when a majority of the pairs is strictly shorter under
    DP. The measured string names the privacy unit, the pairs left out, the per-ε medians, how many optima
    sit at the shortest measured length and how often the DP optimum's seed-only band lies wholly below the
    non-private optimum."""
    from dpscaling.report.figures.seq_len_tradeoff import DATA_BUDGET_NOTE, MEASURED_LENGTHS
    from dpscaling.law.bootstrap import band
    from dpscaling.law.sequence_length import ALL_LENGTHS_ANSWERED, SEQ_LEN

    answered = tradeoff.dropna(subset=[CROSS_ENTROPY])
    chosen = answered[answered[ALL_LENGTHS_ANSWERED].astype(bool)]
    public = chosen[np.isinf(chosen[PRIVACY_BUDGET])].set_index(COMPUTE)[SEQ_LEN]
    private = chosen[np.isfinite(chosen[PRIVACY_BUDGET])]
    pairs = private[private[COMPUTE].isin(public.index)].assign(**{"public": lambda f: f[COMPUTE].map(public)})
    all_pairs = answered[np.isfinite(answered[PRIVACY_BUDGET])][COMPUTE].isin(
        answered.loc[np.isinf(answered[PRIVACY_BUDGET]), COMPUTE]).sum()
    if pairs.empty:
        return Finding(SHORTER_UNDER_DP, False, "no compute budget is answered at every candidate length both with "
                                                f"DP and without ({all_pairs} (C, eps) pairs answered at some)")
    ratio = pairs[SEQ_LEN] / pairs["public"]
    shorter, longer = int((ratio < 1).sum()), int((ratio > 1).sum())
    high = band(SEQ_LEN)[1]
    below = int((pairs[high] < pairs["public"]).sum()) if high in pairs and pairs[high].notna().any() else None
    per_epsilon = "; ".join(
        f"eps={epsilon:g}: median S* {group[SEQ_LEN].median():.3g} vs {group['public'].median():.3g} without DP"
        for epsilon, group in pairs.groupby(PRIVACY_BUDGET))
    shortest = float(str(tradeoff[MEASURED_LENGTHS].iloc[0]).split()[0])
    measured = (f"{tradeoff[DATA_BUDGET_NOTE].iloc[0]}; over {len(pairs)} (C, eps) pairs answered at every candidate "
                f"length ({all_pairs - len(pairs)} more answered at some only, left out) S*_DP is shorter in "
                f"{shorter}, equal in {len(pairs) - shorter - longer}, longer in {longer}; median S*_DP / S*_noDP "
                f"{ratio.median():.3g}; {per_epsilon}; at the shortest measured length S = {shortest:g}: "
                f"{int((pairs[SEQ_LEN] == shortest).sum())} DP and {int((pairs['public'] == shortest).sum())} "
                "non-private optima of these pairs"
                + ("" if below is None else f"; the DP optimum's 90% band lies wholly below the non-private S* in "
                                            f"{below} of {len(pairs)}"))
    return Finding(SHORTER_UNDER_DP, bool(shorter > len(pairs) / 2), measured)


SEQ_LEN_LABEL = "finding:seq_len"
SEQ_LEN_CAPTION = ("Not in the paper: whether the compute-optimal sequence length is shorter under DP than without "
                   "it, on this run's laws across sequence lengths (fig:seq_len_tradeoff's data), with the numbers "
                   "measured and the privacy unit assumed.")


def check_findings(context: AnalysisContext, inflection_points: pd.DataFrame | None = None) -> list[Finding]:
    """Claims (a)-(e); ``inflection_points``: a table:inflection_points already computed for this context.

    (e) reads the raw training curves, ``context.results``.
    """
    return [dp_models_are_smaller(context), loss_saturates(context, inflection_points)[0],
            tokens_per_parameter_rise(context), optimal_beats_baselines(context),
            nonprivate_ends_lowest(context.results)]


LABEL = "findings"
CAPTION = ("The paper's qualitative findings (§1, §4.1-§4.4) checked on this run's fitted law and accounting: "
           "each claim, whether it holds on this data, and the numbers measured; (e) whether each model and "
           "learning rate's non-private curve ends at or below its smallest noise's (raw training curves).")


def findings_table(findings: list[Finding], names: list[str] | None = None) -> pd.DataFrame:
    """One row per claim, lettered as in the report (and docs/appendix-experiments.md) unless ``names`` are
    given, for the workflow's ``findings`` target."""
    return pd.DataFrame({
        "finding": names or list("abcde"[: len(findings)]),
        "claim": [finding.claim for finding in findings],
        "verdict": ["holds" if finding.holds else "does not hold" for finding in findings],
        "measured": [finding.measured for finding in findings],
    })


def report(findings: list[Finding]) -> str:
    lines = []
    for letter, finding in zip("abcde", findings):
        verdict = "holds" if finding.holds else "does not hold"
        lines.append(f"({letter}) {finding.claim}: {verdict} on this data\n    {finding.measured}")
    return "\n".join(lines)


def write_comparison_stage(findings: list[Finding], names: list[str], table: pd.DataFrame, output, *, caption: str,
                           label: str, comparison_caption: str, comparison_label: str, draw) -> pd.DataFrame:
    """A comparison stage's outputs (finding:finetune, finding:mechanism): the lettered findings at
    ``output.csv``, the comparison table they read at ``output.comparison`` (each with its .md and .tex) and
    ``draw(table, stem)``'s figure at ``output.figure``; returns the findings' frame."""
    from dpscaling.report.tables.write import write_table

    frame = findings_table(findings, names[: len(findings)])
    write_table(frame, output.csv.removesuffix(".csv"), caption, label)
    write_table(table, output.comparison.removesuffix(".csv"), comparison_caption, comparison_label)
    draw(table, output.figure.removesuffix(".pdf"))
    return frame
