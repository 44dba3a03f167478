"""The explorer's numbers: the law's answer at every node of a grid of budgets (paper §3.4, "Using the Fitted
Functions", asked many times), each computed by :meth:`dpscaling.law.answers.ScalingLaw.query`, the code
behind ``dpscaling query`` (docs/explorer.md).

The grid is the product of its axes: privacy unit × sequence length (several only for a law across lengths)
× ε × data budget × compute. Compute steps by powers of 2^(1/2) (by default 2), on the saturation scan's own
lattice, so the queries of one (ε, N) column share their scans (``dpscaling.law.budget_scan.BudgetScan``). Every node is queried with
``allow_extrapolation``: a node beyond the validated range keeps its answer, flagged, and the refusal that
``dpscaling query`` gives there without the flag. Columns run in parallel processes, each with its own law.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpscaling.core.errors import UserError
from dpscaling.law.answers import Answer, ScalingLaw
from dpscaling.law.loading import load_primary_law
from dpscaling.law.columns import (
    BATCH_SIZE, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO, TOKENS_PER_PARAMETER)

DEFAULT_EPSILONS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
# Data budgets 10^3 … 10^9 privacy units, two per decade.
DEFAULT_DATA_DECADES = (3, 9)
DATA_STEPS_PER_DECADE = 2
# Compute budgets a factor 2 apart: the saturation scan's lattice (2^(1/2)) holds them, so the queries of one
# column share their scans.
COMPUTE_STEPS_PER_OCTAVE = 1
# The compute axis: from the smallest model at its physical batch and first measured T, to the largest at
# this many times its physical batch and the validated T (beyond, every optimum is past the validated range).
COMPUTE_BATCH_MULTIPLE = 64
# Numbers are stored to this many significant digits: the page's agreement with `dpscaling query`.
SIGNIFICANT_DIGITS = 7
RELATIVE_TOLERANCE = 0.5 * 10.0 ** (1 - SIGNIFICANT_DIGITS)


@dataclass(frozen=True)
class ExplorerGrid:
    """The budgets the page answers: ε, data budget (privacy units), compute (FLOPs), and for a law across
    sequence lengths the lengths (None: the best S) and privacy units."""

    epsilons: tuple[float, ...]
    data: tuple[float, ...]
    computes: tuple[float, ...]
    seq_lens: tuple[int | None, ...] = (None,)
    privacy_units: tuple[str, ...] = ("user",)

    @property
    def size(self) -> int:
        return (len(self.epsilons) * len(self.data) * len(self.computes) * len(self.seq_lens)
                * len(self.privacy_units))

    def to_json(self) -> dict[str, Any]:
        return {"epsilon": list(self.epsilons), "data": list(self.data), "compute": list(self.computes),
                "seq_len": list(self.seq_lens), "privacy_unit": list(self.privacy_units),
                "order": ["privacy_unit", "seq_len", "epsilon", "data", "compute"]}


def compute_axis(low: float, high: float, steps_per_octave: int = COMPUTE_STEPS_PER_OCTAVE) -> tuple[float, ...]:
    """Budgets 2^(k/steps) from the first at or below ``low`` to the first at or above ``high``."""
    if not 0 < low < high:
        raise UserError(f"explorer compute range: must satisfy 0 < min < max, got [{low:g}, {high:g}]")
    if steps_per_octave < 1:
        raise UserError(f"explorer compute_steps_per_octave: must be a positive integer, got {steps_per_octave}")
    first = math.floor(math.log2(low) * steps_per_octave)
    last = math.ceil(math.log2(high) * steps_per_octave)
    return tuple(float(2.0 ** (k / steps_per_octave)) for k in range(first, last + 1))


def default_compute_range(law: ScalingLaw) -> tuple[float, float]:
    """From the smallest model at the law's physical batch and first measured T to the largest model at
    :data:`COMPUTE_BATCH_MULTIPLE` physical batches and the validated T."""
    ranges, fitted = law.ranges, law.bundle.law
    per_step = 6.0 * fitted.seq_len * fitted.physical_batch
    return (per_step * ranges.model_size[0] * ranges.first_iteration,
            per_step * COMPUTE_BATCH_MULTIPLE * ranges.model_size[1] * ranges.validated_iterations)


def default_grid(law: ScalingLaw, *, epsilons: Sequence[float] | None = None, data: Sequence[float] | None = None,
                 compute_range: tuple[float, float] | None = None,
                 compute_steps_per_octave: int = COMPUTE_STEPS_PER_OCTAVE) -> ExplorerGrid:
    """The grid for ``law``: the given axes, else the defaults above; a law across lengths adds its lengths
    and both privacy units."""
    epsilons = tuple(float(e) for e in (epsilons or DEFAULT_EPSILONS))
    if data is None:
        low, high = DEFAULT_DATA_DECADES
        data = [float(f"{10.0 ** (k / DATA_STEPS_PER_DECADE):.3g}")
                for k in range(low * DATA_STEPS_PER_DECADE, high * DATA_STEPS_PER_DECADE + 1)]
    data = [float(v) for v in data]
    for name, values in (("epsilons", epsilons), ("data", data)):
        if len(values) == 0 or not all(v > 0 and math.isfinite(v) for v in values):
            raise UserError(f"explorer {name}: must be positive finite numbers, got {list(values)}")
    computes = compute_axis(*(compute_range or default_compute_range(law)), compute_steps_per_octave)
    lengths = law.bundle.lengths
    seq_lens: tuple[int | None, ...] = (None,)
    units: tuple[str, ...] = ("user",)
    if lengths is not None and len(lengths.across.lengths) > 1:
        seq_lens = (None, *(int(s) for s in lengths.across.lengths))
        units = ("user", "sequence")
    return ExplorerGrid(tuple(sorted(epsilons)), tuple(sorted(float(v) for v in data)), computes, seq_lens, units)


def _round(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def _pair(values) -> list[float | None] | None:
    return None if values is None else [_round(float(values[0])), _round(float(values[1]))]


def node_record(answer: Answer) -> dict[str, Any]:
    """What the page shows of one answer (numbers to :data:`SIGNIFICANT_DIGITS` digits)."""
    runnable, optimum = answer.runnable, answer.optimum
    shape = runnable.model
    near = {key: _pair(answer.near_optimal[column]) for key, column in (
        ("M", MODEL_SIZE), ("B", BATCH_SIZE), ("T", ITERATIONS), ("nbr", NOISE_BATCH_RATIO),
        ("tpp", TOKENS_PER_PARAMETER)) if column in answer.near_optimal}
    return {
        "M": runnable.model_size, "B": runnable.batch_size, "T": runnable.iterations, "S": runnable.seq_len,
        "mb": runnable.microbatch_size, "shape": None if shape is None else
        [shape.name, shape.layers, shape.heads, shape.hidden, shape.measured],
        "sigma": _round(runnable.sigma), "nbr": _round(runnable.noise_batch_ratio), "C": _round(runnable.compute),
        "tpp": _round(runnable.tokens / runnable.model_size), "loss": _round(runnable.predicted_loss),
        "ci": _pair(runnable.calibrated_interval), "seed": _pair(runnable.seed_only_interval),
        "lr": _round(runnable.learning_rate), "units": _round(runnable.data_budget),
        "flags": [[flag.code, flag.message] for flag in answer.flags], "refusal": answer.refusal or None,
        "opt": {"M": _round(optimum.model_size), "B": _round(optimum.batch_size), "T": _round(optimum.iterations),
                "nbr": _round(optimum.noise_batch_ratio), "loss": _round(optimum.predicted_loss),
                "tpp": _round(optimum.tokens_per_parameter)},
        "near": {"count": answer.near_optimal_count, "tolerance": answer.query["tolerance"], **near},
        "model_note": runnable.model_note or None,
        # the predicted margin over each rule of thumb: [rule, margin, its 90% interval, verdict]
        "vs": [[margin.rule, _round(margin.margin) if math.isfinite(margin.margin) else None,
                _pair(margin.interval), margin.verdict] for margin in answer.margins],
    }


def data_budget(unit: str, data: float, seq_len: int) -> dict[str, float]:
    """The query's data budget for ``data`` privacy units: N users, or (one sequence per unit) the tokens of N
    sequences at the law's own length ``seq_len``, which every length then divides by its S."""
    return {"users": data} if unit == "user" else {"tokens": data * seq_len}


def _column(task: tuple[str, int | None, float, float, tuple[float, ...], str]) -> list[dict[str, Any]]:
    """One (privacy unit, S, ε, data) column of nodes, smallest budget first (its saturation scans reuse the
    smaller budgets'), from this process's law."""
    unit, seq_len, epsilon, data, computes, bundle = task
    law = _worker_law(bundle)
    budget = data_budget(unit, data, law.seq_len)
    records = []
    for compute in computes:
        try:
            answer = law.query(compute=compute, epsilon=epsilon, privacy_unit=unit, seq_len=seq_len,
                               allow_extrapolation=True, optimum_interval=False, **budget)
            records.append(node_record(answer))
        except UserError as error:
            records.append({"none": str(error)})
    return records


_LAWS: dict[str, ScalingLaw] = {}


def _worker_law(path: str) -> ScalingLaw:
    if path not in _LAWS:
        _LAWS[path] = load_primary_law(path)
    return _LAWS[path]


def sweep(bundle: str | os.PathLike[str], grid: ExplorerGrid, workers: int = 1) -> list[dict[str, Any]]:
    """Every node's record, in the grid's order (compute fastest)."""
    tasks = [(unit, seq_len, epsilon, data, grid.computes, str(bundle))
             for unit in grid.privacy_units for seq_len in grid.seq_lens
             for epsilon in grid.epsilons for data in grid.data]
    if workers <= 1:
        columns = [_column(task) for task in tasks]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            columns = list(pool.map(_column, tasks, chunksize=max(1, len(tasks) // (4 * workers))))
    return [record for column in columns for record in column]


def nonprivate_curve(law: ScalingLaw, computes: Sequence[float]) -> list[float | None]:
    """The law without privacy at each budget, the best up to it (:meth:`ScalingLaw.nonprivate_floor`, the floor
    every answer respects); None below the first answered budget."""
    return [_round(value) for value in law.nonprivate_floor(np.asarray(computes, float))]
