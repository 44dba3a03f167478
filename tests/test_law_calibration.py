"""Calibrated intervals (docs/fit.md, "Calibrated intervals"): the conformal quantile, leave-one-set-out
coverage, the distance-scaled half-width, each interval's width, calibration.json (old files too) and its
mode rule. Hand-built numbers only: no fit, no JAX."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from dpscaling.core.errors import UserError
from dpscaling.law import LawSettings
from dpscaling.law.calibration import (
    ANSWERED, CALIBRATED_COVERAGE, CALIBRATED_WIDTH, DISTANCE_METHOD, HALF_WIDTH, IN_POOL, METHOD, POINTS,
    SEED_COVERAGE, SEED_WIDTH, SET, Calibration, calibrated_interval, conformal_quantile, coverage,
    half_width_and_level, interval_scale, load_calibration, measured_as_law, write_calibration)
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO
from dpscaling.law.distance import DistanceScale, MeasuredPoints
from dpscaling.law.validation import (
    DISTANCE, HELD_OUT, HORIZON, INTERIOR_MODEL, KIND, MODE, MODEL_EXTRAPOLATION, NOISE, PREDICTED, SEED_HIGH,
    SEED_LOW)

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
    # Fewer sets than 90% needs (K / (K + 1) < 0.9): no finite quantile; half_width_and_level then says what it can guarantee.
    five = nine[:5]
    assert conformal_quantile(five, 0.9) == math.inf
    assert half_width_and_level(five, 0.9) == (5.0, pytest.approx(5 / 6))
    assert half_width_and_level(nine, 0.9) == (9.0, 0.9)


def test_nan_scores_and_empty_sets_are_dropped() -> None:
    # K = 2 (F: 1/3 at 1.0); were the NaN-only and empty sets counted, K = 4 and 1.0 would reach only 1/5.
    assert conformal_quantile([[1.0, np.nan], [], [np.nan], [2.0]], 0.3) == 1.0
    assert math.isnan(half_width_and_level([[], [np.nan]])[0])
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
            # Measured 0 (a loss shifted by a constant): the scores are exactly these numbers. Each point is a
            # curve of its own (its model size), so the trailing mean has one measurement to average.
            rows.append({HELD_OUT: name, KIND: kind, MODE: mode, CROSS_ENTROPY: 0.0, PREDICTED: sign * score,
                         SEED_LOW: sign * score - 0.15, SEED_HIGH: sign * score + 0.15, ITERATIONS: 100,
                         MODEL_SIZE: 1000 + index})
        # A point right after the warm-up (T below a quarter of the horizon): not scored.
        rows.append({HELD_OUT: name, KIND: kind, MODE: mode, CROSS_ENTROPY: 0.0, PREDICTED: 5.0,
                     SEED_LOW: 0.0, SEED_HIGH: 0.0, ITERATIONS: 20, MODEL_SIZE: 1000})
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


def test_calibrated_interval_is_the_prediction_plus_minus_q() -> None:
    calibration = Calibration("paper", False, 0.25, ("H",), 0.5, math.nan, 0.0)
    assert calibrated_interval(3.0, calibration) == (2.75, 3.25)
    low, high = calibrated_interval(np.array([1.0, 2.0]), 0.5)
    np.testing.assert_array_equal(low, [0.5, 1.5])
    np.testing.assert_array_equal(high, [1.5, 2.5])


# ------------------------------------------------------------------------------ the distance-scaled interval

def _grid(sizes=(1e4, 1e5, 1e6), ratios=(2.0 ** -12, 2.0 ** -10, 2.0 ** -8), horizon=400.0) -> pd.DataFrame:
    """A measured grid: every size × σ̄ (and σ̄ = 0) at T = 100 and at the horizon."""
    rows = [{MODEL_SIZE: m, NOISE_BATCH_RATIO: s, ITERATIONS: t, CROSS_ENTROPY: 5.0}
            for m in sizes for s in (0.0, *ratios) for t in (100.0, horizon)]
    return pd.DataFrame(rows)


def test_the_distance_is_zero_at_measured_points_and_counts_grid_gaps() -> None:
    scale = DistanceScale.of(_grid())
    assert scale.model_size_gap == pytest.approx(math.log(10)) and scale.noise_batch_ratio_gap == pytest.approx(
        math.log(4))
    assert scale.measured == MeasuredPoints((1e4, 1e5, 1e6), (2.0 ** -12, 2.0 ** -10, 2.0 ** -8), 400.0)
    at = scale.distance([1e5, 1e5, 1e5], [300.0, 400.0, 100.0], [2.0 ** -10, 0.0, 2.0 ** -8])
    np.testing.assert_array_equal(at, [0.0, 0.0, 0.0])  # measured points, inside the horizon; σ̄ = 0 is measured
    # Half a gap in log M (√10 · 1e5 lies between 1e5 and 1e6), a quarter of a gap in log σ̄ (2^-9.5), one
    # doubling beyond the horizon: each alone, then all three together (Euclidean).
    assert scale.distance(10 ** 5.5, 300.0, 2.0 ** -10) == pytest.approx(0.5)
    assert scale.distance(1e5, 300.0, 2.0 ** -9.5) == pytest.approx(0.25)
    assert scale.distance(1e5, 800.0, 2.0 ** -10) == pytest.approx(1.0)
    assert scale.distance(10 ** 5.5, 800.0, 2.0 ** -9.5) == pytest.approx(math.sqrt(0.25 + 0.0625 + 1.0))
    assert np.isnan(scale.distance(1e5, 300.0, np.nan))
    # A held-out fit that saw fewer points measures in the full grid's gaps: the held-out σ̄ = 2^-10 column
    # lies one gap from its nearest neighbours, the held-out horizon half-way (T = 400 from a fit to T = 200)
    # one doubling away.
    without_column = MeasuredPoints.of(_grid(ratios=(2.0 ** -12, 2.0 ** -8)))
    assert scale.distance(1e5, 300.0, 2.0 ** -10, measured=without_column) == pytest.approx(1.0)
    assert scale.distance(1e5, 400.0, 2.0 ** -10, measured=MeasuredPoints.of(_grid(horizon=200.0))) == 1.0


def test_a_distance_scaled_interval_is_narrow_near_measured_points_and_wide_far_away() -> None:
    scale = DistanceScale.of(_grid())
    calibration = Calibration("paper", False, 0.05, ("H", "N"), 2 / 3, 1.0, 0.5, method=DISTANCE_METHOD,
                              scale=scale)
    measured_point = calibrated_interval(5.0, calibration, 1e5, 300.0, 2.0 ** -10)
    assert measured_point == pytest.approx((4.95, 5.05))  # q at a measured point
    between = calibrated_interval(5.0, calibration, 10 ** 5.5, 300.0, 2.0 ** -10)
    assert between == pytest.approx((5.0 - 0.075, 5.0 + 0.075))  # half a gap: q · 1.5
    far = calibrated_interval(5.0, calibration, 10 ** 5.5, 1600.0, 2.0 ** -9)
    assert far[1] - far[0] > between[1] - between[0] > measured_point[1] - measured_point[0]
    # Arrays: one half-width per point.
    low, high = calibrated_interval(np.array([5.0, 5.0]), calibration, [1e5, 10 ** 5.5], [300.0, 300.0],
                                    [2.0 ** -10, 2.0 ** -10])
    np.testing.assert_allclose(high - low, [0.1, 0.15])
    with pytest.raises(UserError, match="model_size, iterations and noise_batch_ratio"):
        calibrated_interval(5.0, calibration)
    # A constant calibration needs no point, and ignores one.
    constant = Calibration("paper", False, 0.05, ("H",), 0.5, 1.0, 0.0)
    assert calibrated_interval(5.0, constant) == calibrated_interval(5.0, constant, 10 ** 5.5, 1600.0, 2.0 ** -9)


def test_the_extrapolation_is_the_distance_outside_the_measured_range_and_the_default_rule_charges_it() -> None:
    """Between measured points the extrapolation is 0 (the distance is not); past the largest model, the largest
    σ̄ or the horizon it counts in the same gaps and doublings; a σ̄ below the smallest measured one lies towards
    the measured non-private plane and is not counted. ``extrapolation_charged`` adds q · it to the prediction,
    ``calibrated_upper`` q · (1 + distance), and a constant calibration leaves the charge to ``point``."""
    from dpscaling.law.decision import DEFAULT_DECISION_RULE, DecisionRule

    scale = DistanceScale.of(_grid())  # models 1e4..1e6 (gap ln 10), σ̄ 2^-12..2^-8 (gap ln 4), horizon 400
    inside = ([10 ** 5.5, 1e5, 1e4], [300.0, 400.0, 10.0], [2.0 ** -9.5, 0.0, 2.0 ** -13])
    np.testing.assert_array_equal(scale.extrapolation(*inside), [0.0, 0.0, 0.0])
    assert scale.distance(*inside)[0] > 0
    assert scale.extrapolation(10 ** 6.5, 300.0, 2.0 ** -10) == pytest.approx(0.5)  # half a gap past 1e6
    assert scale.extrapolation(10 ** 3.5, 300.0, 2.0 ** -10) == pytest.approx(0.5)  # half a gap below 1e4
    assert scale.extrapolation(1e5, 300.0, 2.0 ** -6) == pytest.approx(1.0)  # one gap past 2^-8
    assert scale.extrapolation(1e5, 1600.0, 2.0 ** -10) == pytest.approx(2.0)  # two doublings past 400
    assert scale.extrapolation(10 ** 6.5, 800.0, 2.0 ** -10) == pytest.approx(math.sqrt(1.25))
    assert np.isnan(scale.extrapolation(1e5, 300.0, np.nan))

    calibration = Calibration("paper", False, 0.05, ("H", "N"), 2 / 3, 1.0, 0.5, method=DISTANCE_METHOD,
                              scale=scale)
    charged, upper = DecisionRule(), DecisionRule("calibrated_upper")
    assert charged.name == DEFAULT_DECISION_RULE == "extrapolation_charged"
    between = charged.decide(5.0, calibration, 10 ** 5.5, 300.0, 2.0 ** -10)
    assert between.score == 5.0 and between.charge == 0.0 and between.applied == "extrapolation_charged"
    assert upper.decide(5.0, calibration, 10 ** 5.5, 300.0, 2.0 ** -10).score == pytest.approx(5.075)
    past = charged.decide(5.0, calibration, 1e5, 1600.0, 2.0 ** -10)
    assert past.charge == pytest.approx(0.1) and past.to_json()["charge_is"] == "extrapolation charge"
    np.testing.assert_allclose(charged.scores([5.0, 5.0], calibration, [1e5, 1e5], [300.0, 1600.0],
                                              [2.0 ** -10, 2.0 ** -10]), [5.0, 5.1])
    constant = Calibration("paper", False, 0.05, ("H",), 0.5, 1.0, 0.0)
    fallback = charged.decide(5.0, constant, 1e5, 1600.0, 2.0 ** -10)
    assert fallback.applied == "point" and fallback.score == 5.0 and fallback.charge is None
    assert "cannot price" in fallback.to_json()["description"]
    assert upper.decide(5.0, constant, 1e5, 1600.0, 2.0 ** -10).score == pytest.approx(5.05)


def _distance_points() -> pd.DataFrame:
    """Two sets, each error 0.2 nats: A one gap from what its fit saw (s = 2), B at a measured point (s = 1)."""
    rows = [{HELD_OUT: name, KIND: NOISE, MODE: "paper", CROSS_ENTROPY: 5.0, PREDICTED: 5.2, ITERATIONS: 100.0,
             MODEL_SIZE: 1e5, NOISE_BATCH_RATIO: 2.0 ** -10, DISTANCE: distance, SEED_LOW: 5.1, SEED_HIGH: 5.3}
            for name, distance in (("A", 1.0), ("B", 0.0))]
    return pd.DataFrame(rows)


def test_coverage_normalizes_the_scores_by_the_distance_and_reports_each_interval_s_width() -> None:
    points = _distance_points()
    scale = DistanceScale.of(_grid())
    table, calibrations = coverage(points, {"paper": LawSettings()}, level=0.5, scale=scale)
    table = table.set_index(SET)
    # Normalized scores: A 0.2 / 2 = 0.1, B 0.2 / 1 = 0.2. Each scored with the other's q.
    assert table.loc["A", HALF_WIDTH] == pytest.approx(0.2) and table.loc["B", HALF_WIDTH] == pytest.approx(0.1)
    assert table.loc["A", CALIBRATED_WIDTH] == pytest.approx(0.4)  # q · s = 0.2 · 2
    assert table.loc["B", CALIBRATED_WIDTH] == pytest.approx(0.1)
    assert table.loc["A", CALIBRATED_COVERAGE] == 1.0 and table.loc["B", CALIBRATED_COVERAGE] == 0.0
    # The seed-only interval 5.1–5.3 misses the measured 5.0; its half-width is 0.1.
    np.testing.assert_allclose(table[SEED_WIDTH], 0.1)
    assert (table[SEED_COVERAGE] == 0.0).all()
    paper = calibrations["paper"]
    assert paper.scale == scale and paper.method == DISTANCE_METHOD
    assert paper.leave_one_set_out_half_width == pytest.approx(0.25)
    # Constant: the same raw scores, 0.2 each.
    table, calibrations = coverage(points, {"paper": LawSettings()}, level=0.5)
    np.testing.assert_allclose(table[CALIBRATED_WIDTH], 0.2)
    assert calibrations["paper"].scale is None
    with pytest.raises(UserError, match="'Distance' column"):
        coverage(points.drop(columns=DISTANCE), {"paper": LawSettings()}, scale=scale)


def test_the_coverage_table_has_a_width_beside_each_coverage() -> None:
    table, _ = coverage(_points(), MODES)
    columns = list(table.columns)
    assert columns.index(SEED_WIDTH) == columns.index(SEED_COVERAGE) + 1
    assert columns.index(CALIBRATED_WIDTH) == columns.index(CALIBRATED_COVERAGE) + 1
    # Constant q = 1.0 (the largest of the others' scores): every set's mean half-width is its q.
    assert (table[CALIBRATED_WIDTH] == table[HALF_WIDTH]).all()
    np.testing.assert_allclose(table[SEED_WIDTH], 0.15)


def test_the_measured_loss_is_the_trailing_mean_over_the_mode_s_rolling_window() -> None:
    losses = [6.0, 5.0, 4.0, 3.0]
    curve = pd.DataFrame({ITERATIONS: [10.0, 20.0, 30.0, 40.0], CROSS_ENTROPY: losses, MODEL_SIZE: 1e5,
                          NOISE_BATCH_RATIO: 0.0, HELD_OUT: "H", PREDICTED: 0.0})
    points = pd.concat([curve.assign(**{MODE: "paper"}), curve.assign(**{MODE: "reference-compatible"})],
                       ignore_index=True).sample(frac=1.0, random_state=0)  # any row order
    modes = {"paper": LawSettings(rolling_window=2), "reference-compatible": LawSettings.reference()}
    measured = measured_as_law(points, modes)
    paper = measured[points[MODE] == "paper"].set_axis(points.loc[points[MODE] == "paper", ITERATIONS])
    assert paper.sort_index().tolist() == [6.0, 5.5, 4.5, 3.5]
    reference = measured[points[MODE] == "reference-compatible"]  # no rolling mean: the measurements as they are
    assert sorted(reference.tolist()) == sorted(losses)


def test_a_distance_calibration_round_trips_and_an_old_file_still_loads(tmp_path) -> None:
    scale = DistanceScale.of(_grid())
    calibration = Calibration("paper", False, 0.05, ("H", "N"), 2 / 3, 1.0, 0.5, method=DISTANCE_METHOD,
                              iterations_from=100.0, scale=scale, window=3, leave_one_set_out_half_width=0.08)
    path = tmp_path / "calibration.json"
    write_calibration({"paper": calibration}, path)
    document = json.loads(path.read_text())
    assert document["format_version"] == 2 and document["modes"]["paper"]["interval_scale"]["kind"] == "distance"
    assert load_calibration(path, LawSettings()) == calibration
    # A calibration.json written before the distance scale (format version 1): constant q, raw measurements.
    old = {"format_version": 1, "method": METHOD, "modes": {"paper": {
        "mode": "paper", "reference_compatible": False, "method": METHOD, "level": 0.9, "guaranteed_level": 0.875,
        "half_width": 0.195, "calibration_sets": ["H"], "count": 1, "iterations_from": 100.0,
        "leave_one_set_out": {"mean_coverage": 0.999, "guaranteed_level": 0.857, "holds": True}}}}
    path.write_text(json.dumps(old))
    loaded = load_calibration(path, LawSettings())
    assert loaded.scale is None and loaded.window == 1 and math.isnan(loaded.leave_one_set_out_half_width)
    assert calibrated_interval(5.0, loaded) == pytest.approx((4.805, 5.195))
    assert loaded.half_width_at(1e5, 300.0, 2.0 ** -10) == pytest.approx(0.195)
    path.write_text(json.dumps({**old, "format_version": 3}))
    with pytest.raises(UserError, match="format_version 3 is not one of 1, 2"):
        load_calibration(path, LawSettings())


def test_the_interval_scale_option_names_its_accepted_values() -> None:
    assert interval_scale("constant", _grid()) is None
    assert interval_scale("distance", _grid()) == DistanceScale.of(_grid())
    with pytest.raises(UserError, match=r"fit.validation.interval_scale: 'nearest' is not one of distance, constant"):
        interval_scale("nearest", _grid())
