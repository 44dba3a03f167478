"""What the budgets below a query's say (paper §3.4 and Table 2): the saturating compute (the smallest budget
whose best predicted loss is within the saturation tolerance of the best up to C) and, for an optimum past the
validated horizon, the best configuration inside it and the largest budget whose optimum stays inside it
(the refusal's alternatives, :mod:`dpscaling.law.range_checks`).

Both scan the budgets C·2^(-k/2) downwards, one chunk at a time, and stop as soon as they know; each budget's
optimum (:func:`dpscaling.law.queries.best_loss_per_compute`) is computed once per law and remembered
(:class:`BudgetScan`), so queries on a lattice of budgets (the explorer's sweep) share their scans.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.law.answer_types import Configuration
from dpscaling.law.budget import PricedSurface
from dpscaling.law.columns import COMPUTE, CROSS_ENTROPY, ITERATIONS
from dpscaling.law.queries import (
    DECISION_SCORE, DEFAULT_BATCH_SIZES, SATURATION_TOLERANCE, ComputeOptimal, compute_cost, saturating_compute)
from dpscaling.law.range_checks import ExtrapolationRefused, ValidatedRanges, iteration_flags, refusal

# Budgets of the scan: C·2^(-k/2) down to the law's smallest budget (at most 40 octaves), one octave first (most
# queries stop there: their best loss still falls with compute), then chunks twice as deep each time, up to 8
# octaves.
SATURATION_STEPS_PER_OCTAVE = 2
SATURATION_OCTAVES = 40
SATURATION_FIRST_CHUNK_OCTAVES = 1
SATURATION_CHUNK_OCTAVES = 8
# Per-budget optima a law remembers across queries (:meth:`BudgetScan._remembered`) before forgetting them.
OPTIMA_REMEMBERED = 100_000


class BudgetScan:
    """The per-budget optima of one law, remembered across its queries."""

    def __init__(self) -> None:
        self._optima: dict[tuple, pd.Series | None] = {}

    def refuse_beyond_validation(self, answer: ComputeOptimal, compute: float, priced: PricedSurface,
                                 ranges: ValidatedRanges, allow_extrapolation: bool) -> None:
        """The policy (:mod:`dpscaling.law.range_checks`): an optimum beyond the validated T is refused, naming
        the best configuration inside the validated range at this budget and the largest budget whose
        optimum stays inside it."""
        flag = refusal(iteration_flags(_chosen_iterations(answer), ranges, allow_extrapolation))
        if flag is None:
            return
        surface = priced.surface
        limit = min(ranges.validated_iterations, surface.iteration_bounds[1])
        inside_bounds = (surface.iteration_bounds[0], limit)
        within = None
        if limit > surface.iteration_bounds[0]:
            try:
                within = priced.search(compute, inside_bounds).optimum
            except UserError:
                within = None
        parts = []
        if within is not None:
            best = Configuration.from_row(within, surface.seq_len, surface.sequences_per_unit)
            parts.append(f"inside it the best at this budget is M = {best.model_size:,.0f}, B = {best.batch_size:,.0f}, "
                         f"T = {best.iterations:,.0f}, predicted loss {best.predicted_loss:.4g} (the extrapolated "
                         f"optimum: {float(answer.optimum[CROSS_ENTROPY]):.4g})")
        else:
            parts.append("no configuration at this budget stays inside it")
        smaller = self.largest_budget_inside(compute, priced, limit)
        if smaller is not None:
            parts.append(f"the largest budget whose optimum stays inside it is about {smaller.compute:.3g} FLOPs "
                         f"(M = {smaller.model_size:,.0f}, B = {smaller.batch_size:,.0f}, T = {smaller.iterations:,.0f}, "
                         f"predicted loss {smaller.predicted_loss:.4g})")
        raise ExtrapolationRefused(
            f"{flag.message}. Refused: {'; '.join(parts)}; --allow-extrapolation answers anyway, flagged "
            "(docs/query.md)", answer=answer, within=within)

    def largest_budget_inside(self, compute: float, priced: PricedSurface, limit: float) -> Configuration | None:
        """The largest budget C·2^(-k/2) below C whose compute-optimal T is at most ``limit``, or None."""
        for _, per_compute in self.optima_below(compute, priced, first=1):
            inside = per_compute[per_compute[ITERATIONS] <= limit * (1 + 1e-9)]
            if len(inside):  # chunks come highest budget first: the first hit holds the largest
                return Configuration.from_row(inside.loc[inside[COMPUTE].idxmax()], priced.surface.seq_len,
                                              priced.surface.sequences_per_unit)
        return None

    def optima_below(self, compute: float, priced: PricedSurface, first: int = 0):
        """The compute-optimal configuration of each budget C·2^(-k/2), k from ``first`` down to the law's
        smallest budget (at most :data:`SATURATION_OCTAVES` octaves), one chunk at a time
        (:data:`SATURATION_FIRST_CHUNK_OCTAVES`, then twice as deep up to :data:`SATURATION_CHUNK_OCTAVES`
        octaves): (budgets, their
        :func:`dpscaling.law.queries.best_loss_per_compute` frame) per chunk, highest budgets first; callers
        stop as soon as they have what they need."""
        surface = priced.surface
        lowest = float(compute_cost(priced.sizes[0], DEFAULT_BATCH_SIZES[0], surface.iteration_bounds[0],
                                    surface.step_tokens))
        deepest = int(math.floor(min(SATURATION_OCTAVES, max(0.0, math.log2(compute / lowest)))
                                 * SATURATION_STEPS_PER_OCTAVE))
        start, octaves = first, SATURATION_FIRST_CHUNK_OCTAVES
        while start <= deepest:
            stop = min(deepest, start + octaves * SATURATION_STEPS_PER_OCTAVE)
            octaves = min(2 * octaves, SATURATION_CHUNK_OCTAVES)
            budgets = compute * 2.0 ** (-np.arange(start, stop + 1) / SATURATION_STEPS_PER_OCTAVE)
            yield budgets, self._remembered(budgets, priced)
            start = stop + 1

    @staticmethod
    def _budget_key(budget: float) -> float:
        return float(f"{budget:.12g}")

    def remember(self, answer: ComputeOptimal, compute: float, priced: PricedSurface) -> None:
        """The search's optimum is the saturation scan's row at its own budget (the same candidates)."""
        self._optima[(priced.scan_key(), self._budget_key(compute))] = answer.optimum.copy()

    def _remembered(self, budgets: np.ndarray, priced: PricedSurface) -> pd.DataFrame:
        """:func:`best_loss_per_compute` at ``budgets``, each budget's row computed once per law: queries on a
        lattice of budgets a factor 2^(1/2) apart (a sweep, :mod:`dpscaling.report.explorer`) share their saturation
        scans. Budgets are matched to 12 significant digits (the same budget reached by different products)."""
        scan = priced.scan_key()
        keys = [(scan, self._budget_key(budget)) for budget in budgets]
        missing = [budget for budget, key in zip(budgets, keys) if key not in self._optima]
        if missing:
            if len(self._optima) > OPTIMA_REMEMBERED:
                self._optima.clear()
            found = priced.best_per_compute(np.array(missing))
            rows = {self._budget_key(row[COMPUTE]): row for _, row in found.iterrows()}
            for budget in missing:
                self._optima[(scan, self._budget_key(budget))] = rows.get(self._budget_key(budget))
        rows = [self._optima[key] for key in keys if self._optima[key] is not None]
        if not rows:
            return pd.DataFrame(columns=[COMPUTE, CROSS_ENTROPY])
        return pd.DataFrame(rows).reset_index(drop=True).infer_objects()

    def saturation(self, compute: float, priced: PricedSurface) -> dict | None:
        """The smallest budget ≤ C within the saturation tolerance of the best loss up to C (paper Table 2's
        saturating compute), over the budgets C·2^(-k/2), further down only while the lowest budget scanned
        is still within the tolerance."""
        frames, scanned = [], 0
        for budgets, chunk in self.optima_below(compute, priced):
            scanned += len(budgets)
            frames.append(chunk)
            per_compute = pd.concat([frame for frame in frames if len(frame)] or frames, ignore_index=True)
            if per_compute.empty:
                break
            row = saturating_compute(per_compute, SATURATION_TOLERANCE)
            if float(row[COMPUTE]) > float(budgets[-1]) * (1 + 1e-9):
                break  # the saturating budget lies above the lowest one scanned: found
        if per_compute.empty:
            return None
        row = saturating_compute(per_compute.sort_values(COMPUTE), SATURATION_TOLERANCE)
        return {"compute": float(row[COMPUTE]), "tolerance": SATURATION_TOLERANCE, "budgets_scanned": scanned,
                "resolution": f"2^(1/{SATURATION_STEPS_PER_OCTAVE}) in compute",
                "answer": Configuration.from_row(row, priced.surface.seq_len,
                                                 priced.surface.sequences_per_unit).to_json()}


def _chosen_iterations(answer: ComputeOptimal) -> float:
    """T of the candidate the decision rule ranked first (the search's optimum when it ranked by loss)."""
    leading = answer.leading
    if leading is not None and DECISION_SCORE in leading and len(leading):
        return float(leading.iloc[0][ITERATIONS])
    return float(answer.optimum[ITERATIONS])
