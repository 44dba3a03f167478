"""Interpolation (paper §3.3 "Scaling Law Fitting"): exact at grid points, multilinear in logs, σ̄ fill, reasons."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpscaling.core.errors import UserError
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, SOURCE
from dpscaling.law.interpolation import MISSING_VALUE, LossFunction, fill_missing_noise_batch_ratios

SIZES = {"Small": 1e6, "Medium": 4e6, "Large": 1.6e7}
ITERS = [1000.0, 2000.0, 4000.0, 8000.0]
NBRS = [0.0, 2.0**-12, 2.0**-10, 2.0**-9, 2.0**-6]


def value(m, t, s):
    return 2 + 30 * np.asarray(m) ** -0.3 + 10 * np.asarray(t) ** -0.4 + 50 * np.asarray(s)


def grid() -> pd.DataFrame:
    rows = [{MODEL: name, MODEL_SIZE: m, ITERATIONS: t, NOISE_BATCH_RATIO: s, CROSS_ENTROPY: value(m, t, s),
             SOURCE: "measured"} for name, m in SIZES.items() for t in ITERS for s in NBRS]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("log_loss", [False, True])
def test_exact_at_grid_points(log_loss: bool) -> None:
    table = grid()
    loss = LossFunction.from_grid(table, log_loss=log_loss)
    np.testing.assert_allclose(loss(table[MODEL_SIZE], table[ITERATIONS], table[NOISE_BATCH_RATIO]),
                               table[CROSS_ENTROPY], rtol=1e-12)


def test_linear_in_logs_between_grid_points() -> None:
    loss = LossFunction.from_grid(grid())
    middle = np.sqrt(1e6 * 4e6)  # halfway in log M
    expected = (value(1e6, 2000, 2.0**-10) + value(4e6, 2000, 2.0**-10)) / 2
    np.testing.assert_allclose(loss(middle, 2000, 2.0**-10), expected, rtol=1e-12)
    # the paper interpolates cross entropy; the code its log: geometric mean instead
    log_loss = LossFunction.from_grid(grid(), log_loss=True)
    geometric = np.sqrt(value(1e6, 2000, 2.0**-10) * value(4e6, 2000, 2.0**-10))
    np.testing.assert_allclose(log_loss(middle, 2000, 2.0**-10), geometric, rtol=1e-12)


def test_noise_free_queries_use_the_separate_non_private_function() -> None:
    loss = LossFunction.from_grid(grid())
    np.testing.assert_allclose(loss(4e6, 4000, 0.0), value(4e6, 4000, 0.0))


def test_out_of_range_is_nan_with_a_reason() -> None:
    loss = LossFunction.from_grid(grid())
    values, reasons = loss.evaluate([1e5, 4e6, 4e6, 4e6, 4e6], [2000, 100, 2000, 2000, 2000],
                                    [2.0**-10, 2.0**-10, 2.0**-30, 0.5, 2.0**-10])
    assert np.isnan(values[:4]).all() and np.isfinite(values[4])
    assert "model size outside" in reasons[0] and "iterations outside" in reasons[1]
    assert "noise-batch ratio outside" in reasons[2] and "noise-batch ratio outside" in reasons[3]
    assert reasons[4] == ""


def test_missing_nbr_is_filled_in_log_nbr_not_by_position() -> None:
    table = grid()
    gap = (table[MODEL] == "Medium") & (table[NOISE_BATCH_RATIO] == 2.0**-9)
    filled = fill_missing_noise_batch_ratios(table[~gap], "log_nbr")
    cells = filled[(filled[MODEL] == "Medium") & (filled[NOISE_BATCH_RATIO] == 2.0**-9)]
    assert (cells[SOURCE] == "filled").all() and len(cells) == len(ITERS)
    below, above = value(4e6, cells[ITERATIONS], 2.0**-10), value(4e6, cells[ITERATIONS], 2.0**-6)
    # log2 σ̄: -10 → -9 is a quarter of the way to -6
    np.testing.assert_allclose(cells[CROSS_ENTROPY], below + (above - below) / 4)
    positional = fill_missing_noise_batch_ratios(table[~gap], "positional")
    cells = positional[(positional[MODEL] == "Medium") & (positional[NOISE_BATCH_RATIO] == 2.0**-9)]
    np.testing.assert_allclose(cells[CROSS_ENTROPY], below + (above - below) / 2)  # the authors' code


def test_trailing_gap_stays_missing_in_log_mode_and_is_held_flat_by_position() -> None:
    table = grid()
    gap = (table[MODEL] == "Large") & (table[NOISE_BATCH_RATIO] == 2.0**-6)
    log_filled = fill_missing_noise_batch_ratios(table[~gap], "log_nbr")
    assert not ((log_filled[MODEL] == "Large") & (log_filled[NOISE_BATCH_RATIO] == 2.0**-6)).any()
    loss = LossFunction.from_grid(log_filled)
    values, reasons = loss.evaluate(1.6e7, 2000, 2.0**-6)
    assert np.isnan(values[0]) and reasons[0] == MISSING_VALUE
    positional = fill_missing_noise_batch_ratios(table[~gap], "positional")
    cells = positional[(positional[MODEL] == "Large") & (positional[NOISE_BATCH_RATIO] == 2.0**-6)]
    np.testing.assert_allclose(cells[CROSS_ENTROPY], value(1.6e7, cells[ITERATIONS], 2.0**-9))


def test_one_model_cannot_be_interpolated() -> None:
    table = grid()
    with pytest.raises(UserError, match="two distinct model size"):
        LossFunction.from_grid(table[table[MODEL] == "Small"])


@pytest.mark.parametrize("log_loss", [False, True])
def test_a_failed_cell_silences_only_the_queries_that_weigh_it_when_asked(log_loss: bool) -> None:
    # One failed extrapolation: Medium's σ̄ = 2^-9 cell at T = 4000 and 8000 has no value, and Medium's
    # σ̄ = 0 curve at T = 8000.
    table = grid()
    failed = ((table[MODEL] == "Medium") & (table[ITERATIONS] >= 4000)
              & np.isin(table[NOISE_BATCH_RATIO], [2.0**-9, 0.0]))
    table.loc[failed & ((table[NOISE_BATCH_RATIO] > 0) | (table[ITERATIONS] == 8000)), CROSS_ENTROPY] = np.nan
    scipy_like = LossFunction.from_grid(table, log_loss=log_loss)
    weighted = LossFunction.from_grid(table, log_loss=log_loss, ignore_zero_weight_nan=True)
    # At Small's and Large's own nodes, and at Medium's σ̄ = 2^-10 node: the failed cells are corners of
    # weight 0. The one between 2^-10 and 2^-9 and the one between Small and Medium weigh them.
    m = [1e6, 1.6e7, 4e6, 4e6, 4e6, np.sqrt(1e6 * 4e6), 1e6, 4e6]
    t = [6000, 6000, 6000, 4000, 8000, 6000, 8000, 8000]
    s = [2.0**-9, 2.0**-9, 2.0**-10, 2.0**-10, 2.0**-10, 2.0**-9, 0.0, 0.0]
    zero_weight = np.array([True, True, True, True, True, False, True, False])
    before, after = scipy_like(m, t, s), weighted(m, t, s)
    assert np.isnan(before[zero_weight]).all()  # scipy's interpolant: a NaN corner is NaN at any weight
    assert np.isnan(after[~zero_weight]).all()
    # The answered ones are the interpolation over the corners that carry weight, i.e. the complete grid's.
    complete = LossFunction.from_grid(grid(), log_loss=log_loss)(m, t, s)
    np.testing.assert_allclose(after[zero_weight], complete[zero_weight], rtol=1e-12)
    # Outside the grid nothing changes: still NaN, with the reason.
    values, reasons = weighted.evaluate([1e5], [2000], [2.0**-10])
    assert np.isnan(values).all() and "model size outside" in reasons[0]
    # Where nothing is NaN the two are the same function, bit for bit.
    whole = grid()
    np.testing.assert_array_equal(
        LossFunction.from_grid(whole, log_loss=log_loss, ignore_zero_weight_nan=True)(m, t, s),
        LossFunction.from_grid(whole, log_loss=log_loss)(m, t, s))
