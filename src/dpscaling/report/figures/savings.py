"""The ``savings`` report's figures (docs/savings.md), drawn from its tables (:mod:`dpscaling.private.savings_report`):

* ``fig:baseline_compare_measured`` — the paper's ``fig:baseline_compare`` (§4.4) measured: per data budget,
  the law's predicted loss of the baselines and of its answer over the privacy budget (top) beside the loss the
  private runs measured (bottom, held-out; the answer's seed range as a bar);
* ``fig:savings`` — per budget, the answer re-optimised at C/k against compute, measured and predicted, with
  the best baseline's measured loss and the seed noise around it, the other baselines and the neighbours at C;
* ``fig:regret_by_budget`` — per budget, the regret of each way of choosing (the law's answer, each fixed
  rule; :mod:`dpscaling.private.worth`), with the answer's seed spread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.report.figures.common import FigureSpec, budget_label, colours, footnote, subplots
from dpscaling.private.savings_plan import ANSWER, BASELINE, FRACTION, NEIGHBOUR
from dpscaling.private.worth import LAW, MEAN, WORST, worth_table
from dpscaling.private.worth import rules as worth_rules

REPORT = "savings"  # what the figures need: the report's tables


@dataclass
class SavingsContext:
    """The report's tables: every run's row, every budget's row, and the plans."""

    runs: pd.DataFrame
    budgets: pd.DataFrame
    plans: list[dict[str, Any]]


def _configuration(row: pd.Series) -> str:
    return "compute-optimal (law)" if row["kind"] == ANSWER else row["role"].removeprefix("baseline_")


def _compare_data(context: SavingsContext) -> pd.DataFrame:
    runs = context.runs[context.runs["kind"].isin([ANSWER, BASELINE])]
    runs = runs.assign(configuration=runs.apply(_configuration, axis=1))
    grouped = runs.groupby(["data_budget", "epsilon", "configuration"], as_index=False).agg(
        predicted=("predicted_loss", "first"), measured=("heldout_loss", "mean"),
        measured_low=("heldout_loss", "min"), measured_high=("heldout_loss", "max"), runs=("heldout_loss", "size"),
        model=("model", "first"), batch_size=("batch_size", "first"), iterations=("iterations", "first"))
    return grouped


def _draw_compare(data: pd.DataFrame, context: SavingsContext):
    budgets = sorted(data["data_budget"].unique())
    figure, axes = subplots(2, len(budgets), width=4.0, height=3.2, sharey=True)
    names = sorted(data["configuration"].unique(), key=lambda name: (name.startswith("compute-optimal"), name))
    palette = dict(zip(names, colours(len(names), "plasma")))
    for column, budget in enumerate(budgets):
        for row, (value, title) in enumerate((("predicted", "predicted (law)"), ("measured", "measured (held-out)"))):
            ax = axes[row, column]
            ax.set_xscale("log", base=2)
            for name in names:
                line = data[(data["data_budget"] == budget) & (data["configuration"] == name)].sort_values("epsilon")
                optimal = name.startswith("compute-optimal")
                colour = "black" if optimal else palette[name]
                ax.plot(line["epsilon"], line[value], "-" if optimal else "--", marker="o", markersize=3,
                        color=colour, linewidth=1.8 if optimal else 1.2, label=name)
                if value == "measured":
                    ax.vlines(line["epsilon"], line["measured_low"], line["measured_high"], color=colour)
            ax.set_title(f"N = {budget_label(budget)}, {title}", fontsize=9)
            ax.set_xlabel(r"Privacy budget $\varepsilon$")
            if column == 0:
                ax.set_ylabel("final cross entropy (nats)")
    axes[0, 0].legend(fontsize=6)
    footnote(figure, "Every configuration of a budget spends the answer's compute (to 1%); bars: the answer's "
             "seed range.")
    return figure


def _savings_data(context: SavingsContext) -> pd.DataFrame:
    runs = context.runs.assign(trained_fraction=np.where(context.runs["kind"] == FRACTION,
                                                         context.runs["fraction"], 1.0))
    return runs[["budget", "epsilon", "data_budget", "compute", "role", "kind", "model", "batch_size",
                 "iterations", "trained_fraction", "trained_compute", "predicted_loss", "heldout_loss"]]


def _draw_savings(data: pd.DataFrame, context: SavingsContext):
    labels = list(dict.fromkeys(data["budget"]))
    columns = min(2, len(labels))
    rows = -(-len(labels) // columns)
    figure, axes = subplots(rows, columns, width=4.2, height=3.3)
    for index, label in enumerate(labels):
        ax = axes[index // columns, index % columns]
        mine = data[data["budget"] == label]
        summary = context.budgets[context.budgets["budget"] == label].iloc[0]
        curve = mine[mine["kind"].isin([ANSWER, FRACTION])].groupby("trained_compute", as_index=False).agg(
            measured=("heldout_loss", "mean"), predicted=("predicted_loss", "first")).sort_values("trained_compute")
        ax.set_xscale("log")
        ax.plot(curve["trained_compute"], curve["measured"], "-o", color="black", markersize=3,
                label="answer at C/k, measured")
        ax.plot(curve["trained_compute"], curve["predicted"], ":", color="black", label="answer at C/k, predicted")
        baselines = mine[mine["kind"] == BASELINE]
        for (_, run), colour in zip(baselines.iterrows(), colours(len(baselines), "plasma")):
            ax.plot(run["trained_compute"], run["heldout_loss"], "s", color=colour,
                    label=f"{run['role'].removeprefix('baseline_')} ({run['model']}, B = {run['batch_size']})")
        if "best_baseline_heldout" in summary and np.isfinite(summary["best_baseline_heldout"]):
            level, noise = float(summary["best_baseline_heldout"]), float(summary["seed_noise"])
            ax.axhspan(level - noise, level + noise, color="grey", alpha=0.2, label="best baseline ± seed noise")
        neighbours = mine[mine["kind"] == NEIGHBOUR]
        ax.plot(neighbours["trained_compute"], neighbours["heldout_loss"], "x", color="C2", label="neighbours")
        ax.set_title(f"ε = {summary['epsilon']:g}, N = {budget_label(summary['data_budget'])}, "
                     f"C = {summary['compute']:.2g}", fontsize=8)
        ax.set_xlabel("compute (FLOPs)")
        ax.set_ylabel("held-out cross entropy (nats)")
        ax.legend(fontsize=5)
    for extra in range(len(labels), rows * columns):
        axes[extra // columns, extra % columns].set_visible(False)
    footnote(figure, "Measured saving: C over the smallest C/k whose answer reaches the band.")
    return figure


def _regret_data(context: SavingsContext) -> pd.DataFrame:
    table = worth_table(context.runs)
    per_budget = table[~table["budget"].isin([WORST, MEAN])]
    return per_budget.melt(id_vars=["budget", "epsilon", "data_budget", "compute", "seed_spread"],
                           value_vars=worth_rules(table),
                           var_name="rule", value_name="regret")


def _draw_regret(data: pd.DataFrame, context: SavingsContext):
    budgets = list(dict.fromkeys(data["budget"]))
    figure, axes = subplots(1, 2, width=5.0, height=3.6, gridspec_kw={"width_ratios": [3, 1]})
    ax, worst = axes[0]
    rules = list(dict.fromkeys(data["rule"]))
    palette = dict(zip([r for r in rules if r != LAW], colours(max(1, len(rules) - 1), "plasma")))
    positions = {label: index for index, label in enumerate(budgets)}
    for offset, rule in zip(np.linspace(-0.2, 0.2, len(rules)), rules):
        mine = data[data["rule"] == rule]
        colour = "black" if rule == LAW else palette[rule]
        ax.plot([positions[b] + offset for b in mine["budget"]], mine["regret"], "o" if rule == LAW else "s",
                color=colour, markersize=4, label="law's answer" if rule == LAW else rule)
        worst.bar(rule, mine["regret"].max(), color=colour)
    spread = data.drop_duplicates("budget")
    ax.bar(range(len(budgets)), spread["seed_spread"], width=0.8, color="grey", alpha=0.2,
           label="answer's seed spread")
    first = data.drop_duplicates("budget").set_index("budget")
    ax.set_xticks(range(len(budgets)),
                  [f"ε {first.loc[b, 'epsilon']:g}\nN {budget_label(first.loc[b, 'data_budget'])}\n"
                   f"C {first.loc[b, 'compute']:.0e}" for b in budgets], fontsize=5)
    ax.set_ylabel("regret: held-out loss − best at the budget (nats)")
    ax.legend(fontsize=6)
    worst.set_ylabel("worst regret over the budgets (nats)")
    worst.tick_params(axis="x", labelsize=6, rotation=30)
    footnote(figure, "Each rule trained at the budget's compute (the answer's); the law's answer: the mean of its "
             "seeds.")
    return figure


BASELINE_COMPARE_MEASURED = FigureSpec(
    label="fig:baseline_compare_measured",
    caption=("The paper's comparison of the compute-optimal configuration to natural baselines, predicted by the "
             "law (top) and measured on private runs (bottom), per data budget over the privacy budget; every "
             "configuration of a budget spends the same compute."),
    needs=(REPORT,),
    compute=_compare_data,
    draw=_draw_compare,
)
SAVINGS = FigureSpec(
    label="fig:savings",
    caption=("Per budget, the law's answer re-optimised at fractions of the compute, measured and predicted, "
             "against the best baseline's measured loss (band: the seed noise), the other baselines and the "
             "answer's neighbours at the full compute."),
    needs=(REPORT,),
    compute=_savings_data,
    draw=_draw_savings,
)
REGRET_BY_BUDGET = FigureSpec(
    label="fig:regret_by_budget",
    caption=("What an answer is worth: at each budget, the regret of the law's answer and of each fixed rule a "
             "practitioner would use without a law (held-out loss minus the best of them), and each one's worst "
             "regret over the budgets."),
    needs=(REPORT,),
    compute=_regret_data,
    draw=_draw_regret,
)
FIGURES = (BASELINE_COMPARE_MEASURED, SAVINGS, REGRET_BY_BUDGET)
