"""A measured correction of the law for the physical batch (not in the paper: an extension, off unless
``fit.physical_batch_correction.enabled``).

Documented in docs/fit.md, "The physical-batch correction".

The paper's law reads the loss off (M, T, σ̄) alone (§3.1): the noise-batch ratio σ̄ = σ/B is the only
way the batch enters. That holds where the DP noise dominates the update. Each clipped per-example
gradient has norm at most 1 (normalized clipping), so the clipped mean of B examples carries sampling
noise of variance at most 1/B, beside the DP noise's σ̄²·M over the model's M parameters. The grid trains every
curve at one physical batch B_g; a configuration trained at B ≠ B_g has a different sampling share.
Where σ̄²·M is not large against 1/B_g (here σ̄ ≤ 2^-10 at M ≈ 5e4, B_g = 32), the law's curve is
biased for it: a larger batch sees more data per step and ends lower.

The correction subtracts a shift that is one parameter λ times the log-ratio of the two batches'
total noise, in units of the DP noise:

    Δ(B) = λ · ln[(1 + r(B_g)) / (1 + r(B))],   r(B) = 1 / (B · σ̄² · M),

so Δ(B_g) = 0, Δ → 0 as the DP noise dominates (r → 0), and Δ → λ·ln(B/B_g) without DP noise (the
non-private gain of a larger batch at a fixed number of steps). λ is fitted by least squares (Δ is
linear in it) on pairs of curves trained at the same (model, σ̄, learning rate, seed) at B_g and at a
larger physical batch, compared step by step after the warm-up (seed means). The prediction at a
configuration trained at B is the law's loss minus Δ(B). A second parameter (an effective share κ of
the M parameters the sampling noise competes in) fitted the default's four single-seed pairs better
and predicted its private runs worse (docs/fit.md): one slope is what those pairs can carry.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.law.columns import (
    BATCH_SIZE, CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO)

METHOD = "physical-batch correction: law - lambda * ln[(1 + r(B_grid)) / (1 + r(B))], r(B) = 1 / (B sigma-bar^2 M)"
GRID_LOSS, LARGE_LOSS, REGRESSOR = "Grid Batch Loss", "Large Batch Loss", "Noise Log Ratio"


def noise_log_ratio(batch, grid_batch, noise_batch_ratio, model_size) -> np.ndarray:
    """ln[(1 + r(B_g)) / (1 + r(B))] with r(B) = 1/(B·σ̄²·M), finite at σ̄ = 0 (= ln(B/B_g))."""
    batch, grid = np.asarray(batch, float), float(grid_batch)
    dp = np.asarray(noise_batch_ratio, float) ** 2 * np.asarray(model_size, float)  # σ̄²·d
    return np.log(batch / grid) + np.log1p(grid * dp) - np.log1p(batch * dp)


@dataclass(frozen=True)
class PhysicalBatchCorrection:
    """The fitted correction: slope λ (nats per unit of noise log-ratio) at the grid's physical batch."""

    slope: float
    grid_batch: int
    pairs: int
    residual_rms: float
    method: str = METHOD

    def shift(self, batch, noise_batch_ratio, model_size) -> np.ndarray:
        """Δ(B): how much lower than the law a run at physical batch B ends."""
        return self.slope * noise_log_ratio(batch, self.grid_batch, noise_batch_ratio, model_size)

    def apply(self, loss, batch, noise_batch_ratio, model_size) -> np.ndarray:
        """The law's loss corrected to physical batch ``batch``."""
        return np.asarray(loss, float) - self.shift(batch, noise_batch_ratio, model_size)

    def to_json(self) -> dict:
        return asdict(self)


def paired_losses(results: pd.DataFrame, grid_batch: int, warmup_steps: float) -> pd.DataFrame:
    """Per (model, σ̄, learning rate, T ≥ warm-up, larger batch): the seed-mean loss at the grid's batch
    and at the larger batch, and the correction's regressor. Only points measured at both."""
    finite = results.dropna(subset=[CROSS_ENTROPY])
    finite = finite[finite[ITERATIONS] >= warmup_steps]
    keys = [MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, LEARNING_RATE, ITERATIONS]
    mean = finite.groupby(keys + [BATCH_SIZE], as_index=False)[CROSS_ENTROPY].mean()
    grid = mean[mean[BATCH_SIZE] == grid_batch].drop(columns=BATCH_SIZE).rename(columns={CROSS_ENTROPY: GRID_LOSS})
    large = mean[mean[BATCH_SIZE] > grid_batch].rename(columns={CROSS_ENTROPY: LARGE_LOSS})
    pairs = large.merge(grid, on=keys)
    return pairs.assign(**{REGRESSOR: noise_log_ratio(pairs[BATCH_SIZE], grid_batch, pairs[NOISE_BATCH_RATIO],
                                                      pairs[MODEL_SIZE])})


def fit_correction(pairs: pd.DataFrame, grid_batch: int) -> PhysicalBatchCorrection:
    """λ ≥ 0 by least squares of (grid loss − large-batch loss) on the noise log-ratio."""
    if pairs.empty:
        raise UserError("fit.physical_batch_correction: no curve measured at both the grid's physical batch "
                        f"({grid_batch}) and a larger one; list its points in fit.physical_batch_correction.points")
    x = pairs[REGRESSOR].to_numpy(float)
    y = (pairs[GRID_LOSS] - pairs[LARGE_LOSS]).to_numpy(float)
    slope = max(0.0, float(x @ y / (x @ x))) if x @ x > 0 else 0.0
    rms = float(np.sqrt(np.mean((y - slope * x) ** 2)))
    return PhysicalBatchCorrection(slope, int(grid_batch), len(pairs), rms)


def load_correction(path: str | os.PathLike[str]) -> PhysicalBatchCorrection | None:
    """The correction saved at ``path``; None when there is none."""
    path = Path(path)
    if not path.is_file():
        return None
    values = json.loads(path.read_text(encoding="utf-8"))
    return PhysicalBatchCorrection(float(values["slope"]), int(values["grid_batch"]), int(values["pairs"]),
                                   float(values["residual_rms"]), str(values.get("method", METHOD)))


def correction_from_curves(curves: Sequence[pd.DataFrame], grid_batch: int,
                           warmup_steps: float) -> tuple[pd.DataFrame, PhysicalBatchCorrection]:
    """Rule ``physical_batch_correction``: from the paired runs' training curves (as logged), the pairs'
    table and the fitted correction."""
    from dpscaling.law.collect import tidy_training_curve

    table = pd.concat([tidy_training_curve(curve).assign(**{BATCH_SIZE: int(curve["batch_size"].iloc[0])})
                       for curve in curves], ignore_index=True)
    pairs = paired_losses(table, grid_batch, warmup_steps)
    return pairs, fit_correction(pairs, grid_batch)
