"""The law across sequence lengths (docs/fit.md "Sequence length"): privacy units, log-S interpolation,
refusal outside the measured range, and the compute-optimal length."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from dpscaling.errors import UserError
from dpscaling.law.columns import BATCH_SIZE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO, SIGMA
from dpscaling.law.interpolation import LossFunction
from dpscaling.law.sequence_length import (
    SEQ_LEN, LawAcrossLengths, candidate_lengths, compute_optimal_across_lengths, privacy_units)
from dpscaling.law.synthetic import DeterministicGaussianSigma, TrueLaw

SIGMA_FN = DeterministicGaussianSigma()


def _loss(true_law: TrueLaw) -> LossFunction:
    sizes, iterations = np.geomspace(1e5, 1e8, 13), np.geomspace(100, 1e6, 17)
    nbrs = np.array([0.0, *np.geomspace(2.0**-24, 2.0**-4, 21)])
    m, t, s = (a.ravel() for a in np.meshgrid(sizes, iterations, nbrs, indexing="ij"))
    return LossFunction.from_grid(pd.DataFrame({MODEL_SIZE: m, ITERATIONS: t, NOISE_BATCH_RATIO: s,
                                                CROSS_ENTROPY: true_law(m, t, s)}))


def _across(laws: dict[int, TrueLaw]) -> LawAcrossLengths:
    return LawAcrossLengths({s: _loss(law) for s, law in laws.items()}, {s: (100.0, 1e6) for s in laws},
                            {s: (1e5, 1e8) for s in laws})


def test_the_data_budget_in_units_follows_the_privacy_unit() -> None:
    assert privacy_units("sequence", 64, tokens=1e6) == 15625  # N = tokens / S
    assert privacy_units("sequence", 100, tokens=1e6 + 99) == 10000  # whole sequences
    assert privacy_units("user", 64, users=5000) == privacy_units("user", 512, users=5000) == 5000
    with pytest.raises(UserError, match="privacy_unit: must be one of"):
        privacy_units("document", 64, tokens=1e6)
    with pytest.raises(UserError, match="--tokens"):
        privacy_units("sequence", 64, users=5000)
    with pytest.raises(UserError, match="--users"):
        privacy_units("user", 64, tokens=1e6)


def test_between_measured_lengths_the_loss_is_linear_in_log_length() -> None:
    law = _across({32: TrueLaw(), 128: dataclasses.replace(TrueLaw(), E=1.0)})
    point = (np.array([1e6]), np.array([1e4]), np.array([2.0**-10]))
    low, high = law.loss_at(32)(*point)[0], law.loss_at(128)(*point)[0]
    assert low - high == pytest.approx(0.8, rel=1e-6)
    assert law.loss_at(64)(*point)[0] == pytest.approx((low + high) / 2)  # ln 2 / ln 4 of the way
    assert law.loss_at(32) is law.losses[32]
    for outside in (16, 129):
        with pytest.raises(UserError, match=r"outside the measured range \[32, 128\]"):
            law.loss_at(outside)
    assert list(candidate_lengths([32, 128], per_octave=2)) == [32, 45, 64, 91, 128]


def test_the_query_picks_the_shorter_length_when_context_buys_nothing() -> None:
    # The same per-token law at both lengths: a shorter S buys more steps or batch at the same C and, under
    # the sequence unit, more units (a smaller q, less noise); the shortest length must win.
    same = _across({32: TrueLaw(), 128: TrueLaw()})
    answer = compute_optimal_across_lengths(1e16, 8.0, same, SIGMA_FN, "sequence", tokens=1e9)
    assert answer.seq_len == 32 and answer.privacy_unit == "sequence"
    losses = answer.per_length.set_index(SEQ_LEN)[CROSS_ENTROPY]
    assert losses.idxmin() == 32 and losses.is_monotonic_increasing
    # Each length's σ is calibrated for q = B / N with N = tokens / S.
    table = answer.per_length
    assert (table[DATA_BUDGET] == np.floor(1e9 / table[SEQ_LEN])).all() and len(table) == 9
    expected = SIGMA_FN(8.0, table[ITERATIONS].to_numpy(), table[BATCH_SIZE].to_numpy() / table[DATA_BUDGET].to_numpy())
    assert table[SIGMA].to_numpy() == pytest.approx(expected)
    # ... and where the longer context is worth 0.8 nats per token, the longest length wins.
    context = _across({32: TrueLaw(), 128: dataclasses.replace(TrueLaw(), E=1.0)})
    assert compute_optimal_across_lengths(1e16, 8.0, context, SIGMA_FN, "sequence", tokens=1e9).seq_len == 128
    # A fixed length is answered there, and only there; outside the measured range it is refused.
    fixed = compute_optimal_across_lengths(1e16, 8.0, same, SIGMA_FN, "user", users=1e7, seq_len=64)
    assert fixed.seq_len == 64 and list(fixed.per_length[SEQ_LEN]) == [64]
    with pytest.raises(UserError, match=r"outside the measured range \[32, 128\]"):
        compute_optimal_across_lengths(1e16, 8.0, same, SIGMA_FN, "user", users=1e7, seq_len=256)
