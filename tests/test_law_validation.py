"""Held-out validation of the law (docs/fit.md, `validate`): held-out sets, predictions, the table and figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpscaling.law import LawSettings
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, NOISE_BATCH_RATIO
from dpscaling.law.synthetic import TrueLaw, synthetic_results
from dpscaling.law.validation import (
    HELD_OUT, INTERIOR_MODEL, KIND, MODE, PREDICTED, SEED_HIGH, SEED_LOW, error_table, held_out_sets, pooled_error, validate)

MODES = {"paper": LawSettings(warmup_steps=100, rolling_window=None),
         "reference-compatible": LawSettings.reference(warmup_steps=100)}


@pytest.fixture(scope="module")
def exact_points() -> pd.DataFrame:
    """Noise-free curves of the synthetic true law: every error below is the law's own, not noise."""
    return validate(synthetic_results(noise=0.0), MODES, seq_len=128, physical_batch=32)


def test_held_out_sets_never_fit_on_what_they_predict() -> None:
    results = synthetic_results()
    sets = held_out_sets(results, warmup_steps=100)
    assert [s.name.split(" (")[0] for s in sets] == [
        "horizon", "largest model", "smallest model", "interior model", "noise sigma-bar 2^-10",
        "noise sigma-bar 2^-8"]
    horizon, largest, smallest, interior, *noise = sets
    assert horizon.fit_on[ITERATIONS].max() == 1000 and horizon.targets[ITERATIONS].min() > 1000
    assert "Synthetic2" not in set(largest.fit_on[MODEL]) and set(largest.targets[MODEL]) == {"Synthetic2"}
    assert "Synthetic0" not in set(smallest.fit_on[MODEL]) and set(smallest.targets[MODEL]) == {"Synthetic0"}
    # The interior model is left out and predicted inside the remaining model range: no extrapolation.
    assert interior.name == "interior model (Synthetic1)" and interior.kind == INTERIOR_MODEL
    assert "Synthetic1" not in set(interior.fit_on[MODEL]) and set(interior.targets[MODEL]) == {"Synthetic1"}
    assert not interior.extrapolate_model_size and largest.extrapolate_model_size
    for held, nbr in zip(noise, (2.0**-10, 2.0**-8)):
        assert nbr not in set(held.fit_on[NOISE_BATCH_RATIO]) and set(held.targets[NOISE_BATCH_RATIO]) == {nbr}
    # Targets: one learning rate per curve, the one ending lowest (the synthetic 2^-7; 2^-8 is 2% worse).
    assert set(horizon.targets[LEARNING_RATE]) == {2.0**-7}


def test_model_size_extrapolation_error_is_the_interpolants_known_one(exact_points) -> None:
    """Continuing a multilinear interpolant in log M misses A·M^-α by A·M₁^-α·(1 − r^-α)² (r = 4 here)."""
    law = TrueLaw()
    expected = law.A * 1e5 ** -law.alpha * (1 - 4.0 ** -law.alpha) ** 2
    paper = exact_points[exact_points[MODE] == "paper"]
    for name in ("largest", "smallest"):
        rows = paper[paper[HELD_OUT].str.startswith(name)]
        np.testing.assert_allclose(rows[CROSS_ENTROPY] - rows[PREDICTED], expected, rtol=1e-9)


def test_interior_model_is_predicted_by_the_laws_own_interpolation_in_log_m(exact_points) -> None:
    """Linear interpolation in log M of A·M^-α between M₁/r and M₁·r misses by A·M₁^-α·(cosh(α ln r) − 1),
    r = 4 (the extrapolation's error, A·M₁^-α·(1 − r^-α)², is another number: this set is interpolated)."""
    law = TrueLaw()
    expected = -law.A * 4e5 ** -law.alpha * (np.cosh(law.alpha * np.log(4.0)) - 1)
    paper = exact_points[exact_points[MODE] == "paper"]
    rows = paper[paper[HELD_OUT] == "interior model (Synthetic1)"]
    assert len(rows) and set(rows[KIND]) == {INTERIOR_MODEL}
    np.testing.assert_allclose(rows[CROSS_ENTROPY] - rows[PREDICTED], expected, rtol=1e-9)


def test_seed_only_intervals_of_held_out_fits_use_the_full_results_seed_noise() -> None:
    from dpscaling.law.synthetic import seeded_results

    # Repeats at the smallest model only: its held-out set removes them, yet gets an interval.
    results = seeded_results(steps=600, log_every=30, learning_rates=(2.0**-7,))
    modes = {"paper": LawSettings(warmup_steps=60, rolling_window=None)}
    points = validate(results, modes, seq_len=128, physical_batch=32, replicates=3)
    for _, rows in points.groupby(HELD_OUT):
        answered = rows.dropna(subset=[PREDICTED])
        assert (answered[SEED_LOW] <= answered[SEED_HIGH]).all() and answered[SEED_LOW].notna().all()
    assert (points[SEED_HIGH] > points[SEED_LOW]).any()
    off = validate(results, modes, seq_len=128, physical_batch=32)
    assert off[[SEED_LOW, SEED_HIGH]].isna().all().all()
    np.testing.assert_array_equal(off[PREDICTED], points[PREDICTED])  # the point predictions are unchanged


def test_horizon_and_noise_predictions_are_close_on_exact_curves(exact_points) -> None:
    table = error_table(exact_points).set_index("held-out set")
    horizon = table.loc[table.index.str.startswith("horizon")].iloc[0]
    assert horizon["unanswered (paper)"] == 0 and horizon["max_abs_error (paper)"] < 0.03
    noise = table.loc[table.index.str.startswith("noise")]
    assert (noise["mean_abs_error (paper)"] < 0.1).all()
    # The two modes differ (log vs linear interpolation, E tied vs free): side by side, not the same numbers.
    assert not np.allclose(table["mean_abs_error (paper)"], table["mean_abs_error (reference-compatible)"])


def test_error_table_is_computed_from_the_points(exact_points) -> None:
    table = error_table(exact_points)
    assert list(table["held-out set"]) == list(dict.fromkeys(exact_points[HELD_OUT]))
    name = table["held-out set"].iloc[3]
    rows = exact_points[(exact_points[HELD_OUT] == name) & (exact_points[MODE] == "reference-compatible")]
    error = (rows[PREDICTED] - rows[CROSS_ENTROPY]).abs()
    row = table.iloc[3]
    assert row["points (reference-compatible)"] == len(rows)
    assert row["mean_abs_error (reference-compatible)"] == pytest.approx(error.mean())
    assert row["max_abs_error (reference-compatible)"] == pytest.approx(error.max())
    assert row["mean_relative_error (reference-compatible)"] == pytest.approx((error / rows[CROSS_ENTROPY]).mean())


def test_pooled_error_weighs_every_answered_point_of_one_mode_once(exact_points) -> None:
    points = exact_points.copy()
    paper = points.index[points[MODE] == "paper"]
    points.loc[paper[:3], PREDICTED] = np.nan  # unanswered points are not scored
    error, scored = pooled_error(points, "paper")
    kept = points.loc[paper[3:]]
    assert scored == len(kept)
    assert error == pytest.approx(float((kept[PREDICTED] - kept[CROSS_ENTROPY]).abs().sum()) / len(kept))
    assert error != pytest.approx(pooled_error(points, "reference-compatible")[0])
    with pytest.raises(Exception, match="modes: \\['paper', 'reference-compatible'\\]"):
        pooled_error(points, "papr")


def test_a_held_out_set_the_law_cannot_fit_is_reported_not_fatal(tmp_path) -> None:
    from dpscaling.report.figures.validation import predicted_vs_measured

    short = synthetic_results(steps=100, log_every=20)  # 2 measurements per curve up to the horizon cut
    points = validate(short, {"paper": LawSettings(warmup_steps=20, rolling_window=None)}, seq_len=128,
                      physical_batch=32)
    table = error_table(points)
    horizon = table[table["held-out set"].str.startswith("horizon")].iloc[0]
    # Too few points to fit a power law: every held-out point beyond the cut is counted unanswered.
    assert horizon["points (paper)"] == horizon["unanswered (paper)"] > 0
    assert table["unanswered (paper)"].iloc[1:].eq(0).all()  # the other sets still answer
    written = predicted_vs_measured(points, tmp_path / "validation")
    assert [p.suffix for p in written] == [".pdf", ".png", ".csv"] and all(p.stat().st_size > 0 for p in written)
    assert len(pd.read_csv(tmp_path / "validation.csv")) == len(points)
