"""The physical-batch correction (an extension, docs/fit.md "The physical-batch correction")."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dpscaling.core.errors import UserError
from dpscaling.law.columns import (
    BATCH_SIZE, CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, SEED)
from dpscaling.law.physical_batch import (
    PhysicalBatchCorrection, fit_correction, load_correction, noise_log_ratio, paired_losses)


def test_noise_log_ratio_vanishes_at_the_grid_batch_and_under_dominant_dp_noise() -> None:
    assert noise_log_ratio(32, 32, 1e-3, 5e4) == pytest.approx(0.0)
    # Without DP noise the whole gain of a larger batch: ln(B / B_g).
    assert noise_log_ratio(128, 32, 0.0, 5e4) == pytest.approx(math.log(4))
    # Total gradient-noise variance 1/B + σ̄²·d, in units of the DP noise, by hand.
    dp = 1e-3 ** 2 * 5e4
    by_hand = math.log((1 + 1 / (32 * dp)) / (1 + 1 / (128 * dp)))
    assert noise_log_ratio(128, 32, 1e-3, 5e4) == pytest.approx(by_hand)
    # Where the DP noise dominates the batch no longer matters; a smaller batch is worse.
    assert abs(noise_log_ratio(128, 32, 1.0, 5e4)) < 1e-4
    assert noise_log_ratio(16, 32, 1e-3, 5e4) < 0


def _pairs_table(slope: float, noise: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """Curves at the grid's batch 32 and at 256 whose gap follows the correction with ``slope``."""
    rng = np.random.default_rng(seed)
    rows = []
    for nbr in (0.0, 2.0 ** -12, 2.0 ** -10, 2.0 ** -8):
        for step in range(10, 110, 10):
            base = 6.0 - 0.002 * step + 10 * nbr
            gap = slope * float(noise_log_ratio(256, 32, nbr, 5e4))
            for batch, loss in ((32, base), (256, base - gap + noise * rng.normal())):
                rows.append({MODEL: "BertNano", MODEL_SIZE: 5e4, NOISE_BATCH_RATIO: nbr, LEARNING_RATE: 0.01,
                             ITERATIONS: step, CROSS_ENTROPY: loss, SEED: 0, BATCH_SIZE: batch})
    return pd.DataFrame(rows)


def test_the_fit_recovers_a_known_slope_after_the_warmup() -> None:
    pairs = paired_losses(_pairs_table(0.05), grid_batch=32, warmup_steps=20)
    assert len(pairs) == 4 * 9 and pairs[ITERATIONS].min() == 20
    correction = fit_correction(pairs, 32)
    assert correction.slope == pytest.approx(0.05) and correction.residual_rms < 1e-9
    assert correction.pairs == 36
    noisy = fit_correction(paired_losses(_pairs_table(0.05, noise=0.01), 32, 20), 32)
    assert abs(noisy.slope - 0.05) < 0.01 and noisy.residual_rms > 0.005
    # A larger batch that ends HIGHER gives no negative correction.
    assert fit_correction(paired_losses(_pairs_table(-0.05), 32, 20), 32).slope == 0.0


def test_applying_lowers_the_law_for_a_larger_batch_only(tmp_path) -> None:
    correction = PhysicalBatchCorrection(slope=0.1, grid_batch=32, pairs=3, residual_rms=0.0)
    loss = np.array([6.0, 6.0, 6.0])
    corrected = correction.apply(loss, np.array([32, 256, 256]), np.array([2.0 ** -10, 2.0 ** -10, 1.0]), 5e4)
    assert corrected[0] == pytest.approx(6.0) and corrected[1] < 6.0 - 0.01 and corrected[2] == pytest.approx(6.0)
    path = tmp_path / "correction.json"
    path.write_text(__import__("json").dumps(correction.to_json()))
    assert load_correction(path) == correction
    assert load_correction(tmp_path / "absent.json") is None


def test_no_pairs_is_refused_naming_the_key() -> None:
    table = _pairs_table(0.05)
    with pytest.raises(UserError, match="fit.physical_batch_correction"):
        fit_correction(paired_losses(table[table[BATCH_SIZE] == 32], 32, 20), 32)
