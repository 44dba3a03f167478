"""Calibrated intervals (docs/fit.md, "Calibrated intervals"): the conformal quantile, leave-one-set-out
coverage, calibration.json and its mode rule. Hand-built numbers only: no fit, no JAX."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from dpscaling.errors import UserError
from dpscaling.law import LawSettings
from dpscaling.law.calibration import (
    ANSWERED, CALIBRATED_COVERAGE, HALF_WIDTH, IN_POOL, POINTS, SEED_COVERAGE, SET, Calibration, calibrated_interval, calibration_file,
    conformal_quantile, coverage, half_width, load_calibration, write_calibration)
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS
from dpscaling.law.validation import (
    HELD_OUT, HORIZON, INTERIOR_MODEL, KIND, MODE, MODEL_EXTRAPOLATION, NOISE, PREDICTED, SEED_HIGH, SEED_LOW)

MODES = {"paper": LawSettings(), "reference-compatible": LawSettings.reference()}


def test_each_set_weighs_one_whatever_its_size() -> None:
    # Weights 1/4 and 1/2, total over K + 1 = 3: F reaches 4/12 at 4, then 6/12 = 0.5 at 5.
    assert conformal_quantile([[1, 2, 3, 4], [5, 6]], 0.5) == 5
    # Pooled as 5 points of weight 1 (n + 1 = 6) it would be 1 (4/6 >= 0.5): one big set must not outvote a
    # small one. Set-weighted: 1 reaches 1/3, 10 reaches 2/3.
    assert conformal_quantile([[1, 1, 1, 1], [10]], 0.5) == 10


def test_the_finite_sample_correction_counts_sets_not_points() -> None:
    nine = [[float(k)] for k in range(1, 10)]  # K = 9 single-score sets
    # (K + 1) correction: k / 10 >= 0.85 first at k = 9; without it (k / 9) it would be 8.
    assert conformal_quantile(nine, 0.85) == 9
    assert conformal_quantile(nine, 0.8) == 8
    assert conformal_quantile(nine, 0.9) == 9  # K / (K + 1) = 0.9 exactly: the largest score
    # Fewer sets than 90% needs (K / (K + 1) < 0.9): no finite quantile; half_width then says what it can guarantee.
    five = nine[:5]
    assert conformal_quantile(five, 0.9) == math.inf
    assert half_width(five, 0.9) == (5.0, pytest.approx(5 / 6))
    assert half_width(nine, 0.9) == (9.0, 0.9)


def test_nan_scores_and_empty_sets_are_dropped() -> None:
    # K = 2 (F: 1/3 at 1.0); were the NaN-only and empty sets counted, K = 4 and 1.0 would reach only 1/5.
    assert conformal_quantile([[1.0, np.nan], [], [np.nan], [2.0]], 0.3) == 1.0
    assert math.isnan(half_width([[], [np.nan]])[0])
    with pytest.raises(UserError, match="level"):
        conformal_quantile([[1.0]], 1.0)


def _points(mode: str = "paper") -> pd.DataFrame:
    """Scores |measured - predicted| per set: H [0.1, 0.2], I [0.3], N [0.05, 0.4, 0.5, 0.6], E [0.2, 1.0]."""
    sets = [("H", HORIZON, [0.1, 0.2]), ("I", INTERIOR_MODEL, [0.3]), ("N", NOISE, [0.05, 0.4, 0.5, 0.6]),
            ("E", MODEL_EXTRAPOLATION, [0.2, 1.0])]
    rows = []
    for name, kind, scores in sets:
        for index, score in enumerate(scores):
            sign = 1 if index % 2 else -1
            # Measured 0 (a loss shifted by a constant): the scores are exactly these numbers.
            rows.append({HELD_OUT: name, KIND: kind, MODE: mode, CROSS_ENTROPY: 0.0, PREDICTED: sign * score,
                         SEED_LOW: sign * score - 0.15, SEED_HIGH: sign * score + 0.15, ITERATIONS: 100})
        # A point right after the warm-up (T below a quarter of the horizon): not scored.
        rows.append({HELD_OUT: name, KIND: kind, MODE: mode, CROSS_ENTROPY: 0.0, PREDICTED: 5.0,
                     SEED_LOW: 0.0, SEED_HIGH: 0.0, ITERATIONS: 20})
    return pd.DataFrame(rows)


def test_leave_one_set_out_coverage_on_a_hand_built_residual_table() -> None:
    table, calibrations = coverage(_points(), MODES, level=0.5)
    table = table.set_index(SET)
    # Every set is pooled, each scored with the q of the other three (K + 1 = 4). H from I (weight 1),
    # N (1/4 each) and E (1/2 each): 0.05: 1/16, 0.2: 3/16, 0.3: 7/16, 0.4: 8/16 -> q = 0.4; H inside.
    assert table.loc["H", HALF_WIDTH] == 0.4 and table.loc["H", CALIBRATED_COVERAGE] == 1.0
    assert table.loc["I", HALF_WIDTH] == 0.4 and table.loc["I", CALIBRATED_COVERAGE] == 1.0
    # N from H, I and E: 0.1: 2/16, 0.2: 6/16, 0.3: 10/16 -> q = 0.3; only N's 0.05 is inside.
    assert table.loc["N", HALF_WIDTH] == 0.3 and table.loc["N", CALIBRATED_COVERAGE] == 0.25
    # E from H, I and N: 0.05: 1/16, 0.1: 3/16, 0.2: 5/16, 0.3: 9/16 -> q = 0.3; its 0.2 in, its 1.0 out.
    assert table.loc["E", HALF_WIDTH] == 0.3 and table.loc["E", CALIBRATED_COVERAGE] == 0.5
    assert table[IN_POOL].all() and (table[ANSWERED] == table[POINTS]).all()
    # Seed-only: measured ± 0.15 around each prediction -> the scores <= 0.15 are inside.
    assert table[SEED_COVERAGE].to_dict() == {"H": 0.5, "I": 0.0, "N": 0.25, "E": 0.0}
    paper = calibrations["paper"]
    # The whole pool (K + 1 = 5): 0.05: .25, 0.1: .75, 0.2: 1.75, 0.3: 2.75 -> 2.75/5 >= 0.5 -> q = 0.3.
    assert paper.sets == ("H", "I", "N", "E") and paper.half_width == 0.3 and paper.guaranteed_level == 0.5
    assert paper.leave_one_set_out_coverage == pytest.approx((1.0 + 1.0 + 0.25 + 0.5) / 4)
    assert paper.leave_one_set_out_level == 0.5 and not paper.reference_compatible
    assert paper.iterations_from == 25.0  # a quarter of the horizon: the T = 20 points are not scored


def test_at_ninety_percent_four_sets_guarantee_four_fifths_with_the_largest_score() -> None:
    table, calibrations = coverage(_points(), MODES)
    assert calibrations["paper"].half_width == 1.0 and calibrations["paper"].guaranteed_level == 0.8
    assert table.set_index(SET).loc["N", HALF_WIDTH] == 1.0  # max of H, I and E's scores


def test_calibration_json_round_trips_and_refuses_the_other_mode(tmp_path) -> None:
    both = pd.concat([_points("paper"), _points("reference-compatible")], ignore_index=True)
    _, calibrations = coverage(both, MODES)
    path = tmp_path / "validate" / "calibration.json"
    path.parent.mkdir()
    write_calibration(calibrations, path)
    document = json.loads(path.read_text())
    entry = document["modes"]["paper"]
    assert entry["level"] == 0.9 and entry["count"] == 4 and entry["calibration_sets"] == ["H", "I", "N", "E"]
    assert entry["half_width"] == 1.0 and entry["method"].startswith("split-conformal")
    assert entry["iterations_from"] == 25.0
    assert entry["leave_one_set_out"]["holds"] in (True, False)
    loaded = load_calibration(path, LawSettings.reference())
    assert loaded == calibrations["reference-compatible"] and loaded.source == str(path)
    # A file of one mode only refuses a law of the other.
    write_calibration({"paper": calibrations["paper"]}, path)
    with pytest.raises(UserError, match="not measured in this law's reference-compatible mode"):
        load_calibration(path, LawSettings.reference())
    path.write_text("{}")
    with pytest.raises(UserError, match="not a calibration file"):
        load_calibration(path, LawSettings())
    assert calibration_file(tmp_path / "law" / "fit") == path


def test_calibrated_interval_is_the_prediction_plus_minus_q() -> None:
    calibration = Calibration("paper", False, 0.25, ("H",), 0.5, math.nan, 0.0)
    assert calibrated_interval(3.0, calibration) == (2.75, 3.25)
    low, high = calibrated_interval(np.array([1.0, 2.0]), 0.5)
    np.testing.assert_array_equal(low, [0.5, 1.5])
    np.testing.assert_array_equal(high, [1.5, 2.5])
