"""What the adaptive design aims at: the answers at its target budgets, as a committee of laws gives them.

A target is a practitioner's budget (ε, N, C) (the config's ``private_model`` and ``savings`` budgets, the
explorer's grid). Each member of the committee (a bootstrap replicate of the law, :mod:`dpscaling.law.bootstrap`)
answers it with its own compute-optimal loss over the same candidate configurations, priced once
(:meth:`dpscaling.figures.context.AnalysisContext.replicate_optima`); the spread of those answers is the
uncertainty the design's runs are chosen to shrink (:mod:`dpscaling.design.choice`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING

import numpy as np

from dpscaling.law.bootstrap import REPLICATE
from dpscaling.law.columns import COMPUTE, CROSS_ENTROPY

if TYPE_CHECKING:
    from dpscaling.figures.context import AnalysisContext


@dataclass(frozen=True, order=True)
class Target:
    """One budget the design's answers are for: privacy ε, data N (privacy units), compute C (FLOPs)."""

    epsilon: float
    data_budget: float
    compute: float


def answer_matrix(context: AnalysisContext, targets: Sequence[Target]) -> np.ndarray:
    """Committee members × ``targets``: each replicate's optimal loss at each target, NaN where it has none."""
    if context.replicates is None:
        raise ValueError("the design's committee is the law's bootstrap replicates, and this law has none")
    answers = np.full((len(context.replicates), len(targets)), np.nan)
    order = sorted(range(len(targets)), key=lambda index: targets[index])
    for (epsilon, users), members in groupby(order, key=lambda index: (targets[index].epsilon,
                                                                        targets[index].data_budget)):
        members = list(members)
        budgets = np.array([targets[index].compute for index in members], float)
        optima = context.replicate_optima(epsilon, users, np.unique(budgets))
        table = optima.pivot_table(index=REPLICATE, columns=COMPUTE, values=CROSS_ENTROPY, aggfunc="first")
        for index in members:
            compute = targets[index].compute
            if compute in table.columns:
                column = table[compute]
                answers[column.index.to_numpy(int), index] = column.to_numpy(float)
    return answers
