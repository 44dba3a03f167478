"""The law at one sequence length, as a query reads it (:func:`surface_at`): its loss, the ranges it was fitted
on, its bootstrap replicates and held-out calibration, and what the replicates say of an optimum
(:meth:`Surface.optimum_band`). :meth:`dpscaling.law.answers.ScalingLaw.query` reads one per length."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dpscaling.law.bootstrap import Replicates, band, optimum_intervals
from dpscaling.law.bundle import Bundle
from dpscaling.law.calibration import Calibration
from dpscaling.law.columns import BATCH_SIZE, CROSS_ENTROPY, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO
from dpscaling.law.physical_batch import PhysicalBatchCorrection
from dpscaling.law.queries import ComputeOptimal
from dpscaling.privacy.mechanisms import mechanism_named


@dataclass(frozen=True)
class Surface:
    """The law at one sequence length: its loss, ranges, replicates and calibration."""

    seq_len: int
    loss: Callable
    iteration_bounds: tuple[float, float]
    model_size_range: tuple[float, float]
    replicates: Replicates | None
    calibration: Calibration | None
    calibration_note: str
    # Sequences one sampled unit brings to a step: m for a user-level mechanism's law (N, B count users), else 1.
    sequences_per_unit: int = 1

    @property
    def step_tokens(self) -> int:
        """Tokens per sampled unit and step, S·m: compute is 6·M·B·(S·m)·T."""
        return self.seq_len * self.sequences_per_unit

    def optimum_band(self, searched: ComputeOptimal, correction: PhysicalBatchCorrection | None,
                     notes: Mapping[str, str]) -> tuple[dict[str, tuple[float, float]] | None, str]:
        """The seed-only 90% band of the optimum (each replicate's own optimum), or why there is none
        (``notes``: the bundle's, which say why it holds no replicates)."""
        if self.replicates is None:
            return None, notes.get("bootstrap", "no interval: no bootstrap replicates in this law")
        candidates = searched.evaluated  # the search's candidates: σ is the same for every replicate
        table = optimum_intervals(candidates.dropna(subset=[NOISE_BATCH_RATIO]), self.replicates,
                                  correction=correction)
        count = len(self.replicates)
        if table.empty:
            return None, f"no interval: none of the {count} replicates answers this query"
        row = table.iloc[0]
        bands = {key: (float(row[band(column)[0]]), float(row[band(column)[1]])) for column, key in (
            (CROSS_ENTROPY, "seed_only_interval_90"), (MODEL_SIZE, "model_size_5_95"),
            (BATCH_SIZE, "batch_size_5_95"), (ITERATIONS, "iterations_5_95"))}
        return bands, f"90% over {count} bootstrap replicates (seed noise only)"


def surface_at(bundle: Bundle, seq_len: int) -> Surface:
    """The bundle's law at ``seq_len``: its own law at the primary length, else the law across lengths there
    (calibrated only at the primary length, where validate measured it)."""
    primary = int(bundle.law.seq_len)
    lengths = bundle.lengths
    at_primary = seq_len == primary and (lengths is None or primary in lengths.laws)
    if lengths is not None and not (at_primary and bundle.replicates is not None):
        iteration_bounds, model_range = lengths.across.bounds_at(float(seq_len))
        replicates = (Replicates([replicate.loss_at(float(seq_len)) for replicate in lengths.replicates])
                      if lengths.replicates else None)
        loss = lengths.across.loss_at(float(seq_len))
    else:
        law = bundle.law
        iteration_bounds, model_range, replicates, loss = (law.iteration_bounds(), law.model_size_range(),
                                                            bundle.replicates, law.loss)
    if at_primary:
        calibration, note = bundle.calibration, bundle.notes.get("calibration", "")
    else:
        calibration, note = None, (f"no calibrated interval at S = {seq_len}: validate calibrates the law at "
                                   f"S = {primary} only")
    if calibration is not None and not math.isfinite(calibration.half_width):
        calibration, note = None, (f"no calibrated interval: its calibration ({Path(calibration.source).name}) "
                                   "pools no answered held-out set")
    return Surface(int(seq_len), loss, iteration_bounds, model_range, replicates, calibration,
                   note or "no calibration in this law",
                   mechanism_named(bundle.law.mechanism).sequences_per_unit)
