"""The law across sequence lengths on a length it was not fitted on (dpscaling.law.heldout_length), and the
trade-off over compute and the DP-versus-non-private finding drawn from it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from dpscaling.core.errors import UserError
from dpscaling.law import LawSettings
from dpscaling.law.heldout_length import LONGER, PREDICTORS, SHORTER, error_table, held_out_length_points
from dpscaling.law.synthetic import TrueLaw, synthetic_results
from dpscaling.law.validation import MODE, PREDICTED

# The per-token loss falls by 0.3 nats per doubling of S (a longer context helps), linearly in log S.
PER_DOUBLING = 0.3


def _curves(seq_len: int) -> pd.DataFrame:
    law = dataclasses.replace(TrueLaw(), E=TrueLaw().E - PER_DOUBLING * np.log2(seq_len / 32))
    return synthetic_results(law, steps=1000, log_every=50, noise=0.005, seed=seq_len)


def test_the_middle_length_is_predicted_from_its_neighbours_blended_in_log_length() -> None:
    results = {length: _curves(length) for length in (32, 64, 128)}
    modes = {"paper": LawSettings.create(False, warmup_steps=100, rolling_window=None)}  # no smoothing lag
    points = held_out_length_points(results, modes, physical_batch=32)
    assert set(points["Sequence Length"]) == {64} and set(points[MODE]) == {"paper"}
    assert (points[f"{SHORTER} Length"] == 32).all() and (points[f"{LONGER} Length"] == 128).all()
    error = (points[PREDICTED] - points["Cross Entropy"]).dropna()
    assert len(error) > 0.9 * len(points)
    assert error.abs().mean() < 0.05  # the blend recovers the loss a length it never saw
    # Each neighbour used as is misses by about one doubling's worth, with opposite signs.
    assert (points[SHORTER] - points["Cross Entropy"]).mean() == pytest.approx(PER_DOUBLING, abs=0.05)
    assert (points[LONGER] - points["Cross Entropy"]).mean() == pytest.approx(-PER_DOUBLING, abs=0.05)
    table = error_table(points)
    assert list(table["predictor"]) == list(PREDICTORS.values()) and set(table["neighbours"]) == {"32 and 128"}
    blend, shorter, longer = table["mean_abs_error"]
    assert blend < 0.5 * min(shorter, longer)
    assert table["mean_error"].iloc[1] > 0 > table["mean_error"].iloc[2]


def test_two_lengths_have_no_interior_length_to_hold_out() -> None:
    with pytest.raises(UserError, match="three or more measured lengths"):
        held_out_length_points({32: _curves(32), 64: _curves(64)}, {"paper": LawSettings()}, physical_batch=32)
