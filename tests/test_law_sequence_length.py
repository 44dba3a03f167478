"""The law across sequence lengths (docs/fit.md "Sequence length"): privacy units, log-S interpolation,
refusal outside the measured range, and the compute-optimal length."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from dpscaling.core.errors import UserError
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


def test_the_tradeoff_over_compute_answers_each_budget_and_bands_it_over_replicates() -> None:
    from dpscaling.law.bootstrap import band
    from dpscaling.law.columns import COMPUTE
    from dpscaling.law.queries import DEFAULT_BATCH_SIZES
    from dpscaling.law.sequence_length import DataBudget, length_tradeoff

    law = _across({32: TrueLaw(), 128: dataclasses.replace(TrueLaw(), E=TrueLaw().E - 0.3)})
    shifted = _across({32: dataclasses.replace(TrueLaw(), E=TrueLaw().E + 0.1),
                       128: dataclasses.replace(TrueLaw(), E=TrueLaw().E - 0.2)})
    budgets = np.geomspace(1e14, 1e18, 5)
    data = DataBudget("sequence", tokens=1e9)
    table = length_tradeoff(law, SIGMA_FN, budgets, 8.0, data, DEFAULT_BATCH_SIZES, [law, shifted])
    assert list(table[COMPUTE]) == pytest.approx(list(budgets)) and table.attrs["budgets_without_answer"] == 0
    assert table["All Lengths Answered"].all()  # the synthetic law covers every candidate length
    s, m, b, t = (table[c].to_numpy(float) for c in (SEQ_LEN, MODEL_SIZE, BATCH_SIZE, ITERATIONS))
    assert 6 * m * b * s * t == pytest.approx(budgets, rel=1e-9)  # C = 6·M·B·S·T at each answer
    assert (table[DATA_BUDGET] == np.floor(1e9 / table[SEQ_LEN])).all()  # N = tokens / S at the chosen S
    assert (table["Privacy Unit"] == "sequence").all()
    # Two replicates: the law itself and one 0.1 nats worse at every length (same optima): the 5% and 95%
    # quantiles of their optimal losses are 0.005 and 0.095 above the law's.
    low, high = band(CROSS_ENTROPY)
    assert (table[low] - table[CROSS_ENTROPY]).to_numpy() == pytest.approx([0.005] * 5, abs=1e-9)
    assert (table[high] - table[CROSS_ENTROPY]).to_numpy() == pytest.approx([0.095] * 5, abs=1e-9)
    assert (table[band(SEQ_LEN)[0]] <= table[SEQ_LEN]).all() and (table[band(SEQ_LEN)[1]] >= table[SEQ_LEN]).all()
    # The user unit: N users at every length.
    users = length_tradeoff(law, SIGMA_FN, budgets, 8.0, DataBudget("user", users=1e6), DEFAULT_BATCH_SIZES)
    assert (users[DATA_BUDGET] == 1e6).all() and band(CROSS_ENTROPY)[0] not in users
    with pytest.raises(UserError, match="--users"):
        DataBudget("user", tokens=1e9)


def test_the_finding_counts_where_dp_shortens_the_optimal_length() -> None:
    from dpscaling.findings.paper import shorter_length_under_dp
    from dpscaling.report.figures.seq_len_tradeoff import DATA_BUDGET_NOTE, MEASURED_LENGTHS
    from dpscaling.law.columns import COMPUTE, PRIVACY_BUDGET
    from dpscaling.law.sequence_length import ALL_LENGTHS_ANSWERED

    def table(private: list[int], public: list[int], forced: tuple[int, ...] = ()) -> pd.DataFrame:
        rows = [{PRIVACY_BUDGET: 4.0, COMPUTE: c, SEQ_LEN: s, CROSS_ENTROPY: 5.0} for c, s in zip((1, 2, 3, 4), private)]
        rows += [{PRIVACY_BUDGET: np.inf, COMPUTE: c, SEQ_LEN: s, CROSS_ENTROPY: 4.0}
                 for c, s in zip((1, 2, 3, 4), public)]
        return pd.DataFrame(rows).assign(**{
            DATA_BUDGET_NOTE: "privacy unit: one sequence", MEASURED_LENGTHS: "32 64 128",
            ALL_LENGTHS_ANSWERED: [row[COMPUTE] not in forced for row in rows]})

    shorter = shorter_length_under_dp(table([32, 32, 64, 128], [64, 128, 64, 32], forced=(4,)))
    assert shorter.holds and "shorter in 2, equal in 1, longer in 0" in shorter.measured  # budget 4 left out
    assert "(1 more answered at some only, left out)" in shorter.measured
    assert "privacy unit: one sequence" in shorter.measured and "S = 32: 2 DP and 0 non-private" in shorter.measured
    assert not shorter_length_under_dp(table([32, 64, 64, 32], [32, 64, 32, 32])).holds  # longer 1, equal 3
    forced = shorter_length_under_dp(table([32] * 4, [64] * 4, forced=(1, 2, 3, 4)))
    assert not forced.holds and "no compute budget is answered at every candidate length" in forced.measured
