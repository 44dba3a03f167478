"""A measured correction of the law for the physical batch (not in the paper: an extension, off unless
``fit.physical_batch_correction.enabled``).

Documented in docs/fit.md, "The physical-batch correction".

The paper's law reads the loss off (M, T, σ̄) alone (§3.1): the noise-batch ratio σ̄ = σ/B is the only
way the batch enters. That holds where the DP noise dominates the update. Each clipped per-example
gradient has norm at most 1 (normalized clipping), so the clipped mean of B examples carries sampling
noise of variance at most 1/B, beside the DP noise's σ̄²·d over d parameters. The grid trains every
curve at one physical batch B_g; a configuration trained at B ≠ B_g has a different sampling share.
Where σ̄²·d is not large against 1/B_g (here σ̄ ≤ 2^-10 at d ≈ 5e4, B_g = 32), the law's curve is
biased for it: a larger batch sees more data per step and ends lower.

The correction subtracts a shift that is a slope λ times the log-ratio of the two batches' total
gradient noise, in units of the DP noise:

    Δ(B) = λ · ln[(1 + r(B_g)) / (1 + r(B))],   r(B) = 1 / (B · σ̄² · κ·M),

so Δ(B_g) = 0, Δ → 0 as the DP noise dominates (r → 0), and Δ → λ·ln(B/B_g) without DP noise (the
non-private gain of a larger batch at a fixed number of steps). κ ∈ (0, 1] is the share of the M
parameters the sampling noise competes in (it is concentrated on few coordinates, which Adam's
per-coordinate normalisation weighs as much as the rest; κ = 1 would spread it evenly). Both are fitted
on pairs of curves trained at the same (model, σ̄, learning rate, seed) at B_g and at a larger physical
batch, compared step by step after the warm-up (seed means): λ by least squares (Δ is linear in it)
at each κ of a log grid, κ where that fit's residual is smallest. The prediction at a configuration
trained at B is the law's loss minus Δ(B).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dpscaling.errors import UserError
from dpscaling.io import write_json_atomic
from dpscaling.law.columns import (
    BATCH_SIZE, CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO)

METHOD = ("physical-batch correction: law - lambda * ln[(1 + r(B_grid)) / (1 + r(B))], "
          "r(B) = 1 / (B sigma-bar^2 kappa M)")
FILE = "correction.json"
DIRECTORY = "physical_batch"
GRID_LOSS, LARGE_LOSS = "Grid Batch Loss", "Large Batch Loss"


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
    dimension_share: float = 1.0  # κ: the share of the parameters the sampling noise competes in
    method: str = METHOD

    def shift(self, batch, noise_batch_ratio, model_size) -> np.ndarray:
        """Δ(B): how much lower than the law a run at physical batch B ends."""
        effective = self.dimension_share * np.asarray(model_size, float)
        return self.slope * noise_log_ratio(batch, self.grid_batch, noise_batch_ratio, effective)

    def apply(self, loss, batch, noise_batch_ratio, model_size) -> np.ndarray:
        """The law's loss corrected to physical batch ``batch``."""
        return np.asarray(loss, float) - self.shift(batch, noise_batch_ratio, model_size)

    def to_json(self) -> dict:
        return asdict(self)


def paired_losses(results: pd.DataFrame, grid_batch: int, warmup_steps: float) -> pd.DataFrame:
    """Per (model, σ̄, learning rate, T ≥ warm-up, larger batch): the seed-mean loss at the grid's batch
    and at the larger batch. Only points measured at both."""
    finite = results.dropna(subset=[CROSS_ENTROPY])
    finite = finite[finite[ITERATIONS] >= warmup_steps]
    keys = [MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, LEARNING_RATE, ITERATIONS]
    mean = finite.groupby(keys + [BATCH_SIZE], as_index=False)[CROSS_ENTROPY].mean()
    grid = mean[mean[BATCH_SIZE] == grid_batch].drop(columns=BATCH_SIZE).rename(columns={CROSS_ENTROPY: GRID_LOSS})
    large = mean[mean[BATCH_SIZE] > grid_batch].rename(columns={CROSS_ENTROPY: LARGE_LOSS})
    return large.merge(grid, on=keys)


# The log grid κ is searched on: 10^-4 … 1, 20 points per decade.
DIMENSION_SHARES = np.logspace(-4.0, 0.0, 81)


def fit_correction(pairs: pd.DataFrame, grid_batch: int) -> PhysicalBatchCorrection:
    """(λ ≥ 0, κ) minimising the squared error of (grid loss − large-batch loss) against Δ: λ by least
    squares at each κ of :data:`DIMENSION_SHARES`, the κ with the smallest residual (the first, on ties)."""
    if pairs.empty:
        raise UserError("fit.physical_batch_correction: no curve measured at both the grid's physical batch "
                        f"({grid_batch}) and a larger one; list its points in fit.physical_batch_correction.points")
    y = (pairs[GRID_LOSS] - pairs[LARGE_LOSS]).to_numpy(float)
    batch, nbr, size = (pairs[c].to_numpy(float) for c in (BATCH_SIZE, NOISE_BATCH_RATIO, MODEL_SIZE))
    best = None
    for share in DIMENSION_SHARES:
        x = noise_log_ratio(batch, grid_batch, nbr, share * size)
        slope = max(0.0, float(x @ y / (x @ x))) if x @ x > 0 else 0.0
        rms = float(np.sqrt(np.mean((y - slope * x) ** 2)))
        if best is None or rms < best[2] - 1e-15:
            best = (float(share), slope, rms)
    share, slope, rms = best
    return PhysicalBatchCorrection(slope, int(grid_batch), len(pairs), rms, share)


def correction_path(law_directory: str | os.PathLike[str]) -> Path:
    """Where the workflow writes a law's correction: ``<run>/law/physical_batch/correction.json``."""
    return Path(law_directory).resolve().parent / DIRECTORY / FILE


def load_correction(path: str | os.PathLike[str]) -> PhysicalBatchCorrection | None:
    """The correction saved at ``path``; None when there is none."""
    path = Path(path)
    if not path.is_file():
        return None
    values = json.loads(path.read_text(encoding="utf-8"))
    return PhysicalBatchCorrection(float(values["slope"]), int(values["grid_batch"]), int(values["pairs"]),
                                   float(values["residual_rms"]), float(values.get("dimension_share", 1.0)),
                                   str(values.get("method", METHOD)))


def correction_from_files(results: list[str], grid_batch: int, warmup_steps: float,
                          out: str | os.PathLike[str], pairs_out: str | os.PathLike[str]) -> PhysicalBatchCorrection:
    """Rule ``physical_batch_correction``: the paired curves' table and the fitted correction."""
    from dpscaling.io import atomic_path
    from dpscaling.law.collect import read_curve, tidy_training_curve

    curves = [read_curve(path) for path in results]
    table = pd.concat([tidy_training_curve(curve).assign(**{BATCH_SIZE: int(curve["batch_size"].iloc[0])})
                       for curve in curves], ignore_index=True)
    pairs = paired_losses(table, grid_batch, warmup_steps)
    correction = fit_correction(pairs, grid_batch)
    with atomic_path(pairs_out) as tmp:
        pairs.to_csv(tmp, index=False)
    write_json_atomic(out, correction.to_json())
    return correction
