"""What the adaptive design aims at: the answers at its target budgets, as a committee of laws gives them.

A target is a practitioner's budget (ε, N, C) (the config's ``private_model`` and ``savings`` budgets, the
explorer's grid). Each member of the committee (a bootstrap replicate of the law, :mod:`dpscaling.law.bootstrap`)
answers it with its own compute-optimal loss over the same candidate configurations, priced once
(:meth:`dpscaling.report.figures.context.AnalysisContext.replicate_optima`); the spread of those answers is the
uncertainty the design's runs are chosen to shrink (:mod:`dpscaling.design.choice`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dpscaling.law.bootstrap import REPLICATE
from dpscaling.law.columns import COMPUTE, CROSS_ENTROPY, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO

if TYPE_CHECKING:
    from dpscaling.report.figures.context import AnalysisContext


@dataclass(frozen=True, order=True)
class Target:
    """One budget the design's answers are for: privacy ε, data N (privacy units), compute C (FLOPs)."""

    epsilon: float
    data_budget: float
    compute: float


def target_optima(context: AnalysisContext, targets: Sequence[Target]) -> list[pd.DataFrame]:
    """Per target, every committee member's optimum there: rows of
    :func:`dpscaling.law.bootstrap.replicate_optima` (loss, M, B, T, σ̄, the member's index), none for a member
    without one."""
    if context.replicates is None:
        raise ValueError("the design's committee is the law's bootstrap replicates, and this law has none")
    optima = [pd.DataFrame()] * len(targets)
    order = sorted(range(len(targets)), key=lambda index: targets[index])
    for (epsilon, users), members in groupby(order, key=lambda index: (targets[index].epsilon,
                                                                        targets[index].data_budget)):
        members = list(members)
        budgets = np.unique([targets[index].compute for index in members])
        table = context.replicate_optima(epsilon, users, budgets)
        for index in members:
            optima[index] = table[table[COMPUTE] == targets[index].compute].drop_duplicates(REPLICATE)
    return optima


def answers_of(optima: Sequence[pd.DataFrame], members: int) -> np.ndarray:
    """``members`` × targets: the optimal losses of :func:`target_optima`'s frames, NaN where a member has none."""
    answers = np.full((members, len(optima)), np.nan)
    for index, frame in enumerate(optima):
        answers[frame[REPLICATE].to_numpy(int), index] = frame[CROSS_ENTROPY].to_numpy(float)
    return answers


def contenders(optima: Sequence[pd.DataFrame], limit: int) -> np.ndarray:
    """The configurations that compete for one target's answer: each distinct (M, T, σ̄) the members chose there
    (``optima``: one frame per set of members, as :func:`target_optima` gives them), most often chosen first, at
    most ``limit`` + 1. The first is the consensus; the rest are what a run must tell it from. Rows (M, T, σ̄)."""
    point = [MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO]
    frames = [frame[point] for frame in optima if len(frame)]
    if not frames:  # no member answers this target
        return np.empty((0, 3))
    chosen = pd.concat(frames)
    counts = chosen.value_counts(sort=False).reset_index(name="members")
    counts = counts.sort_values("members", ascending=False, kind="stable")
    return counts[point].to_numpy(float)[: limit + 1]
