"""What differential privacy implies about the answers, checked over a lattice of budgets (not in the paper).

A private answer is never better than the non-private law at its compute (:meth:`ScalingLaw.nonprivate_floor`; the
query raises it to that floor and says so), and its predicted loss should not rise when ε, N or C grows with the
other two fixed: a larger budget can always be spent as a smaller one. :func:`sweep` answers every budget of the
lattice; :func:`rises` lists each step along one axis where the answer's loss went up. ``benchmarks/
answer_monotonicity.py`` runs both on a bundle.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.law.range_checks import BELOW_NONPRIVATE_LAW

AXES = ("epsilon", "users", "compute")


def sweep(law: Any, epsilons: Sequence[float], users: Sequence[float], computes: Sequence[float]) -> pd.DataFrame:
    """One row per budget (ε, N, C) of the lattice: the answer's predicted loss (NaN where the law cannot answer, with
    the reason), the non-private floor at C, and whether the floor bound it (the query's flag)."""
    floors = dict(zip(map(float, computes), law.nonprivate_floor(np.asarray(computes, float))))
    rows = []
    for epsilon, n, compute in product(map(float, epsilons), map(float, users), map(float, computes)):
        row: dict[str, Any] = {"epsilon": epsilon, "users": n, "compute": compute, "floor": float(floors[compute])}
        try:
            answer = law.query(compute, epsilon, users=n, allow_extrapolation=True, optimum_interval=False)
        except UserError as error:
            rows.append({**row, "predicted_loss": np.nan, "floor_bound": False, "unanswered": str(error)[:200]})
            continue
        rows.append({**row, "predicted_loss": float(answer.predicted_loss),
                     "floor_bound": BELOW_NONPRIVATE_LAW in {flag.code for flag in answer.flags}, "unanswered": ""})
    return pd.DataFrame(rows)


def rises(frame: pd.DataFrame, axis: str, tolerance: float = 1e-6) -> pd.DataFrame:
    """Each step to the next larger value of ``axis`` (the other two fixed, both ends answered) whose predicted loss
    rose by more than ``tolerance`` nats: the budget before, the loss before and after, and the rise."""
    if axis not in AXES:
        raise ValueError(f"axis: must be one of {AXES}, got {axis!r}")
    others = [name for name in AXES if name != axis]
    found = []
    for _, line in frame.dropna(subset=["predicted_loss"]).sort_values(axis).groupby(others):
        loss = line["predicted_loss"].to_numpy(float)
        for index in np.flatnonzero(np.diff(loss) > tolerance):
            before = line.iloc[index]
            found.append({**{name: before[name] for name in AXES}, "next": float(line.iloc[index + 1][axis]),
                          "loss": float(loss[index]), "next_loss": float(loss[index + 1]),
                          "rise": float(loss[index + 1] - loss[index])})
    return pd.DataFrame(found, columns=[*AXES, "next", "loss", "next_loss", "rise"])
