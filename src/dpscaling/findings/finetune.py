"""What changes when DP training starts from public pretraining (not in the paper: its first open question,
"how do the scaling laws change when doing finetuning instead of pretraining"; docs/finetune.md).

Two laws of one run, both fitted on the private domain's curves: the grid's, trained from scratch, and the
fine-tuning law, trained from the pretrained checkpoints (compute: the fine-tuning's own 6·M·B·S·T). At the
same (C, ε, N) each answers with its compute-optimal configuration (paper §3.4 queries, the run's σ table);
:func:`comparison_table` sets them side by side. The claims checked:

* (a)–(e): the paper's findings (:mod:`dpscaling.findings.paper`) on the fine-tuning law;
* (f) pretraining lowers the loss at every compared (C, ε, N) (and, measured beside it, how much is left
  when each model's public pretraining, 6·M·D_pre, is paid from C: :func:`counted_optimum`);
* (g) the hypothesis of the DP fine-tuning literature that larger pretrained models are better DP learners:
  with compute not binding (the best over the whole compute range, per measured model), the fine-tuned loss
  falls with model size, at every ε;
* (h) the compute-optimal model is larger when fine-tuning than from scratch.

Both searches run over the law's continuous model range (the law's allocation, as the paper's figures); a
query of the fine-tuning law's bundle weighs only the pretrained models (:mod:`dpscaling.law.answers`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from dpscaling.report.figures.context import AnalysisContext
from dpscaling.findings.comparison import EXTRAPOLATED, GAIN, answered_by_both, column
from dpscaling.findings.paper import Finding, check_findings
from dpscaling.law.columns import (
    BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL_SIZE, PRIVACY_BUDGET, TOKENS_PER_PARAMETER)
from dpscaling.law.queries import compute_cost

SCRATCH, FINETUNED = "scratch", "fine-tuned"
# The fine-tuned law with each model's public pretraining paid from C (C - 6·M·D_pre left to fine-tune).
COUNTED = "fine-tuned, pretraining counted"
GAIN_COUNTED = "Gain, pretraining counted (nats)"
PRETRAINING_COMPUTE = "Pretraining Compute"
COMPARED = (CROSS_ENTROPY, MODEL_SIZE, TOKENS_PER_PARAMETER, BATCH_SIZE, ITERATIONS)
# Compute budgets of the comparison: log-spaced over the from-scratch law's compute range.
COMPARISON_BUDGETS = 9

COMPARISON_LABEL = "table:finetune_vs_scratch"
COMPARISON_CAPTION = ("Fine-tuning from public pretraining against training from scratch on the private domain, at the "
                      "same compute C (the fine-tuning's own 6MBST), privacy budget and data budget N: each law's "
                      "compute-optimal loss, model size, tokens per parameter, batch size and iterations, and the loss "
                      "gained by pretraining (scratch minus fine-tuned).")
LABEL = "finding:finetune"
CAPTION = ("Fine-tuning from public pretraining: the paper's findings (a)-(e) checked on the fine-tuning law, and "
           "(f)-(h) how it differs from training from scratch on the same private data (the numbers measured).")


def comparison_table(scratch: AnalysisContext, finetuned: AnalysisContext, epsilons, users: float,
                     budgets: np.ndarray | None = None,
                     pretraining_tokens: Mapping[str, float] | None = None) -> pd.DataFrame:
    """One row per (ε, C) with each law's compute-optimal configuration, whether its T* lies past the law's
    measured horizon (``Extrapolated``), and the gain; a law that cannot answer a budget leaves its columns
    empty there. With ``pretraining_tokens`` (model → D_pre) also the
    fine-tuned answer that pays each model's pretraining from C (:func:`counted_optimum`)."""
    budgets = scratch.compute_budgets(COMPARISON_BUDGETS) if budgets is None else budgets
    rows = []
    for epsilon in epsilons:
        best = {regime: context.best_per_compute(epsilon, users, budgets).set_index(COMPUTE)
                for regime, context in ((SCRATCH, scratch), (FINETUNED, finetuned))}
        for compute in budgets:
            row = {PRIVACY_BUDGET: float(epsilon), DATA_BUDGET: float(users), COMPUTE: float(compute)}
            for regime, table in best.items():
                for name in COMPARED:
                    row[column(name, regime)] = float(table.at[compute, name]) if compute in table.index else np.nan
            if pretraining_tokens:
                counted = counted_optimum(finetuned, epsilon, users, float(compute), pretraining_tokens)
                row[column(PRETRAINING_COMPUTE, COUNTED)] = counted.pop(PRETRAINING_COMPUTE)
                row.update({column(name, COUNTED): counted[name] for name in COMPARED})
            rows.append(row)
    table = pd.DataFrame(rows)
    for regime, context in ((SCRATCH, scratch), (FINETUNED, finetuned)):
        table[column(EXTRAPOLATED, regime)] = table[column(ITERATIONS, regime)] > context.horizon()
    table[GAIN] = table[column(CROSS_ENTROPY, SCRATCH)] - table[column(CROSS_ENTROPY, FINETUNED)]
    if pretraining_tokens:
        table[GAIN_COUNTED] = table[column(CROSS_ENTROPY, SCRATCH)] - table[column(CROSS_ENTROPY, COUNTED)]
    return table


def counted_optimum(finetuned: AnalysisContext, epsilon: float, users: float, compute: float,
                    pretraining_tokens: Mapping[str, float]) -> dict[str, float]:
    """The best pretrained model at total compute C when its pretraining (6·M·D_pre) is paid from C: each
    measured model with a known D_pre answered at what is left (C is the fine-tuning's own in the table's
    other columns); NaN where none is left or the law does not answer."""
    best = {name: np.nan for name in (*COMPARED, PRETRAINING_COMPUTE)}
    for name, size in finetuned.trained_models().items():
        if name not in pretraining_tokens:
            continue
        spent = float(compute_cost(size, 1.0, pretraining_tokens[name], 1.0))
        if spent >= compute:
            continue
        found = finetuned.best_per_compute(epsilon, users, np.array([compute - spent]), np.array([float(size)]))
        if len(found) and not found[CROSS_ENTROPY].iloc[0] >= best[CROSS_ENTROPY]:
            best = {**{key: float(found[key].iloc[0]) for key in COMPARED}, PRETRAINING_COMPUTE: spent}
    return best


def pretraining_lowers_the_loss(table: pd.DataFrame) -> Finding:
    """(f) The fine-tuned optimum's loss is below the from-scratch optimum's at every compared (C, ε, N)."""
    claim = "pretraining lowers the compute-optimal loss at every (C, eps, N)"
    compared = answered_by_both(table, FINETUNED, SCRATCH)
    if compared.empty:
        return Finding(claim, False, "no (C, eps) is answered by both laws")
    gain = compared[GAIN]
    per_epsilon = "; ".join(f"eps={epsilon:g}: median {group[GAIN].median():.3f}"
                            for epsilon, group in compared.groupby(PRIVACY_BUDGET))
    measured = (f"N={compared[DATA_BUDGET].iloc[0]:g}: gain > 0 in {int((gain > 0).sum())} of {len(compared)} "
                f"(C, eps) pairs; gain (scratch minus fine-tuned) median {gain.median():.3f}, "
                f"min {gain.min():.3f}, max {gain.max():.3f} nats; {per_epsilon}")
    inside = compared[~compared[column(EXTRAPOLATED, SCRATCH)] & ~compared[column(EXTRAPOLATED, FINETUNED)]][GAIN]
    measured += (f"; where neither optimum's T* is past its law's measured horizon: gain > 0 in "
                 f"{int((inside > 0).sum())} of {len(inside)}"
                 + (f", median {inside.median():.3f}" if len(inside) else ""))
    if GAIN_COUNTED in table:
        counted = table[GAIN_COUNTED].dropna()
        measured += (f"; with the pretraining paid from C: answered at {len(counted)} pairs, gain > 0 in "
                     f"{int((counted > 0).sum())}, median {counted.median():.3f} nats" if len(counted) else
                     "; with the pretraining paid from C: no pair answered")
    return Finding(claim, bool((gain > 0).all()), measured)


def best_loss_per_model(context: AnalysisContext, epsilon: float, users: float) -> pd.Series:
    """Each measured model's (name → loss, smallest first) best loss over every (B, T) of the compute range:
    compute not binding."""
    best = {}
    for name, size in context.trained_models().items():
        per_budget = context.best_per_compute(epsilon, users, model_sizes=np.array([float(size)]))
        best[name] = float(per_budget[CROSS_ENTROPY].min()) if len(per_budget) else np.nan
    return pd.Series(best, dtype=float)


def falls_with_size(losses: pd.Series) -> bool:
    """Every larger model strictly better than the next smaller (all answered)."""
    values = losses.to_numpy(float)
    return bool(np.isfinite(values).all() and len(values) >= 2 and (np.diff(values) < 0).all())


def larger_pretrained_models_learn_better(scratch: AnalysisContext, finetuned: AnalysisContext, epsilons,
                                          users: float) -> Finding:
    """(g) With compute not binding, the fine-tuned loss falls with model size at every ε (the DP fine-tuning
    literature's "larger pretrained models are better DP learners"); the from-scratch law beside it."""
    claim = "larger pretrained models are better DP learners (compute not binding, every eps)"
    falls, details = {SCRATCH: 0, FINETUNED: 0}, []
    for epsilon in epsilons:
        per_model = {regime: best_loss_per_model(context, epsilon, users)
                     for regime, context in ((SCRATCH, scratch), (FINETUNED, finetuned))}
        for regime, losses in per_model.items():
            falls[regime] += falls_with_size(losses)
        tuned = per_model[FINETUNED]
        details.append(f"eps={epsilon:g}: " + ", ".join(f"{name} {loss:.3f}" for name, loss in tuned.items())
                       + f" (scratch: {', '.join(f'{loss:.3f}' for loss in per_model[SCRATCH])})")
    count = len(list(epsilons))
    measured = (f"N={users:g}, best loss per model over the compute range: falls with size at {falls[FINETUNED]} "
                f"of {count} eps fine-tuned, {falls[SCRATCH]} of {count} from scratch; " + "; ".join(details))
    return Finding(claim, falls[FINETUNED] == count, measured)


def optimal_model_is_larger(table: pd.DataFrame) -> Finding:
    """(h) At equal (C, ε, N) the fine-tuned compute-optimal model is larger than the from-scratch one."""
    claim = "the compute-optimal model is larger when fine-tuning than from scratch"
    compared = answered_by_both(table, FINETUNED, SCRATCH)
    if compared.empty:
        return Finding(claim, False, "no (C, eps) is answered by both laws")
    ratio = compared[column(MODEL_SIZE, FINETUNED)] / compared[column(MODEL_SIZE, SCRATCH)]
    tokens = compared[column(TOKENS_PER_PARAMETER, FINETUNED)] / compared[column(TOKENS_PER_PARAMETER, SCRATCH)]
    batch = compared[column(BATCH_SIZE, FINETUNED)] / compared[column(BATCH_SIZE, SCRATCH)]
    steps = compared[column(ITERATIONS, FINETUNED)] / compared[column(ITERATIONS, SCRATCH)]
    larger, smaller = int((ratio > 1.001).sum()), int((ratio < 0.999).sum())
    measured = (f"over {len(compared)} (C, eps) pairs: fine-tuned M* larger in {larger}, smaller in {smaller}, "
                f"equal in {len(compared) - larger - smaller}; fine-tuned / scratch medians: M* {ratio.median():.3g}, "
                f"tokens per parameter {tokens.median():.3g}, B* {batch.median():.3g}, T* {steps.median():.3g}")
    return Finding(claim, larger > len(compared) / 2, measured)


def check_finetune_findings(
        scratch: AnalysisContext, finetuned: AnalysisContext, table: pd.DataFrame | None = None,
        pretraining_tokens: Mapping[str, float] | None = None) -> tuple[list[Finding], pd.DataFrame]:
    """Claims (a)-(h) (module docstring) and the comparison table they read (with ``pretraining_tokens``,
    model → D_pre, also the fine-tuned answers that pay their pretraining)."""
    settings = scratch.settings
    users, epsilons = settings.allocation_data_budget, settings.privacy_budgets
    if table is None:
        table = comparison_table(scratch, finetuned, epsilons, users, pretraining_tokens=pretraining_tokens)
    findings = [*check_findings(finetuned), pretraining_lowers_the_loss(table),
                larger_pretrained_models_learn_better(scratch, finetuned, epsilons, users),
                optimal_model_is_larger(table)]
    return findings, table


FINDING_NAMES = list("abcdefgh")
