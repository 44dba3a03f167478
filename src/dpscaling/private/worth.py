"""What an answer is worth across budgets (not in the paper; docs/savings.md): the law's answer against the fixed
rules a practitioner would use without a law, each trained privately at every budget of a savings study.

A rule of thumb (the DP expert's smallest model at a very large batch, Chinchilla's 20 tokens per parameter, the
grid's middle model) can be right at one budget; the law's claim is that no single rule is right everywhere.
Per budget, each way of choosing (``law``: the answer's mean held-out loss over its seeds; each baseline rule:
its run) has a **regret**, its held-out loss minus the lowest of them at that budget (0 for the best), beside the rule the law predicted
best there. Per rule, its **worst regret** over the budgets and its mean regret. The answer's seed spread (max − min of its
seeds' held-out losses) is stated per budget and as its largest: a regret below it is not told apart from 0.
"""

from __future__ import annotations

import pandas as pd

from dpscaling.private.savings_plan import ANSWER, BASELINE

LAW = "law"
LABEL = "table:worth"
CAPTION = ("What an answer is worth: per budget, the held-out loss of each way of choosing the configuration "
           "(the law's answer, mean over its seeds; each fixed rule, at the same compute) minus the lowest of them "
           "(its regret), the answer's seed spread beside it; the last rows give each rule's worst and mean regret "
           "over the budgets.")
WORST, MEAN = "worst", "mean"
_NOT_RULES = ("budget", "epsilon", "data_budget", "compute", "best", "predicted_best", "seed_spread")


def rule_of(row: pd.Series) -> str:
    """The way of choosing that produced a run: ``law`` or the baseline's name."""
    return LAW if row["kind"] == ANSWER else str(row["role"]).removeprefix("baseline_")


def worth_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per budget (ε, N, C, each rule's regret, the best rule, the answer's seed spread), then the rows
    ``worst`` and ``mean`` (each rule's worst and mean regret over the budgets; the largest and mean spread)."""
    chosen = runs[runs["kind"].isin([ANSWER, BASELINE])]
    chosen = chosen.assign(rule=chosen.apply(rule_of, axis=1))
    losses = chosen.pivot_table(index=["budget", "epsilon", "data_budget", "compute"], columns="rule",
                                values="heldout_loss", aggfunc="mean", sort=False)
    rules = [LAW, *sorted(rule for rule in losses.columns if rule != LAW)]
    losses = losses[[rule for rule in rules if rule in losses.columns]]
    regrets = losses.sub(losses.min(axis=1), axis=0)
    predicted = chosen.pivot_table(index=["budget", "epsilon", "data_budget", "compute"], columns="rule",
                                   values="predicted_loss", aggfunc="mean", sort=False)[list(losses.columns)]
    answers = chosen[chosen["rule"] == LAW].groupby("budget")["heldout_loss"]
    spread = (answers.max() - answers.min()).rename("seed_spread")
    table = regrets.reset_index()
    table["best"] = losses.idxmin(axis=1).to_numpy()
    # the rule the law predicted best at the budget (the same prediction every answer's margins read)
    table["predicted_best"] = predicted.idxmin(axis=1).to_numpy()
    table = table.merge(spread, left_on="budget", right_index=True, how="left")
    columns = list(losses.columns)
    summary = [{"budget": WORST, **regrets.max().to_dict(), "seed_spread": spread.max(),
                "best": ", ".join(f"{rule}@{regrets[rule].idxmax()[0]}" for rule in columns)},
               {"budget": MEAN, **regrets.mean().to_dict(), "seed_spread": spread.mean(),
                "best": ", ".join(f"{rule} {int((regrets[rule] == 0).sum())}" for rule in columns),
                "predicted_best": f"{int((table['predicted_best'] == table['best']).sum())} of {len(table)} as measured"}]
    return pd.concat([table, pd.DataFrame(summary)], ignore_index=True)


def rules(table: pd.DataFrame) -> list[str]:
    """The ways of choosing that a worth table compares (its regret columns), the law's first."""
    return [column for column in table.columns if column not in _NOT_RULES]


def shown(table: pd.DataFrame) -> dict[str, str]:
    """The table's columns as the Markdown and LaTeX tables name them."""
    names = {"epsilon": "ε", "data_budget": "N", "compute": "C"}
    return {"budget": "budget", **names, **{rule: f"regret {rule}" for rule in rules(table)},
            "best": "best (worst row: where; mean row: budgets won)", "predicted_best": "law predicted best",
            "seed_spread": "answer's seed spread"}
