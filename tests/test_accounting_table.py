"""The accounting table: chunks, merge, Parquet, interpolation error, authors' CSV format."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pandas as pd
import pytest

from dpscaling.accounting import calibration, interpolation_check, reference_csv
from dpscaling.accounting.table import (
    SigmaTable, compute_chunk, load_table, merge_chunks, plan_table, read_frame, save_table)
from dpscaling.accounting.table_spec import TableSpec
from dpscaling.accounting.validation import AccountingRefused
from dpscaling.core.errors import UserError

# Small, with 2^(1/4) steps in T and q (COARSE below has the production factor-2 steps).
SPEC = TableSpec(epsilon_min=1.0, epsilon_max=16.0, steps_min=1000, steps_max=2000, steps_per_octave=4,
                 q_min_log2=-5, q_per_octave=4, q_per_chunk=7)
INTERPOLATION_BOUND = 0.005


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    directory = tmp_path_factory.mktemp("accounting")
    paths = []
    for chunk in plan_table(SPEC):
        path = directory / f"chunk-{chunk.index}.parquet"
        save_table(compute_chunk(SPEC, chunk), path, SPEC)
        paths.append(path)
    table_path = directory / "table.parquet"
    save_table(merge_chunks(paths), table_path, SPEC)
    return directory, paths, table_path


def test_grids_are_logarithmic_and_cover_the_range():
    spec = TableSpec()
    assert spec.epsilons()[0] <= 2**-7 and spec.epsilons()[-1] >= 1e6
    assert spec.steps()[0] == 100 and spec.steps()[-1] == 128_000
    qs = spec.sampling_probabilities()
    assert qs[0] == 2**-20 and qs[-1] == 1.0 and 2**-10 in qs  # exact powers of two
    assert spec.size() == len(spec.epsilons()) * len(spec.steps()) * len(qs)


def test_spec_from_mapping_rejects_unknown_keys():
    assert TableSpec.from_mapping({"delta": 1e-6}).delta == 1e-6
    with pytest.raises(UserError, match="unknown"):
        TableSpec.from_mapping({"epsilon_maximum": 5})


def test_chunks_partition_the_q_grid():
    chunks = plan_table(SPEC)
    flat = [q for chunk in chunks for q in chunk.sampling_probabilities]
    assert flat == list(SPEC.sampling_probabilities())


def test_merge_is_complete_and_parquet_keeps_the_spec(built):
    _, paths, table_path = built
    frame, spec = read_frame(table_path)
    assert spec == SPEC
    assert len(frame) == SPEC.size()
    assert (frame["status"] == "ok").all()
    with pytest.raises(UserError, match="incomplete"):
        merge_chunks(paths[:-1])
    with pytest.raises(UserError, match="overlap"):
        merge_chunks([paths[0], paths[0], *paths[1:]])


def test_grid_points_match_direct_calibration(built):
    table = load_table(built[2])
    frame = table.frame.sample(6, random_state=1)
    for row in frame.itertuples():
        direct = calibration.calibrate_poisson(row.epsilon, row.sampling_probability, int(row.steps))
        assert row.sigma == pytest.approx(direct, rel=2e-3)


def test_interpolation_error_at_cell_midpoints_is_within_bound(built):
    table = load_table(built[2])
    measured = interpolation_check.measure(table, interpolation_check.off_grid_points(table, 12, seed=3))
    assert len(measured) == 12
    assert measured["relative_error"].abs().max() <= INTERPOLATION_BOUND
    assert measured["relative_error_min"].notna().all()
    assert measured["relative_error_min"].abs().max() <= INTERPOLATION_BOUND


def test_interpolation_report_accounts_for_every_drawn_point(built, tmp_path):
    summary = interpolation_check.report_interpolation_error(built[2], 20, tmp_path / "errors.csv", seed=5)
    saved = pd.read_csv(tmp_path / "errors.csv")
    assert summary["points"] + summary["skipped_refused"] == 20
    assert summary["points"] == len(saved)
    assert summary["poisson_refused"] == saved["sigma_table"].isna().sum()
    assert summary["max_relative_error_min_rule"] == pytest.approx(saved["relative_error_min"].abs().max())


def test_sigma_table_vectorised_sampling_rules(built):
    table = load_table(built[2])
    eps = np.array([1.5, 3.0, 12.0])
    poisson = table.sigma(eps, 1500, 0.1, sampling="poisson")
    det = table.sigma(eps, 1500, 0.1, sampling="deterministic")
    assert poisson.shape == (3,)
    np.testing.assert_allclose(table.sigma(eps, 1500, 0.1), np.minimum(poisson, det))
    # fixed batches of ⌈0.1 · 1500⌉ = 150 participations: one Gaussian of sensitivity √150 (dp-accounting)
    np.testing.assert_allclose(det, [math.sqrt(150) * dp_accounting.get_sigma_gaussian(e, table.delta)
                                     for e in eps], rtol=1e-12)
    np.testing.assert_allclose(table.noise_batch_ratio(3.0, 1e5, 1e4, 1500),
                               table.sigma(3.0, 1500, 0.1) / 1e4)


def test_out_of_range_queries_raise_or_give_nan(built):
    table = load_table(built[2])
    with pytest.raises(UserError, match="epsilon"):
        table.sigma(100.0, 1500, 0.1)
    with pytest.raises(UserError, match="steps"):
        table.sigma(2.0, 10, 0.1)
    assert np.isnan(table.sigma([2.0, 100.0], 1500, 0.1, on_missing="nan")[1])


def test_refused_cells_raise_unless_asked_for_nan():
    frame = pd.DataFrame({"epsilon": [1.0, 2.0] * 4, "steps": [10] * 4 + [20] * 4,
                          "sampling_probability": [0.5, 0.5, 1.0, 1.0] * 2, "delta": 1e-8,
                          "sigma": [np.nan, 1.0, 2.0, 1.5, 3.0, 2.0, 3.0, 2.5], "status": "ok"})
    table = SigmaTable(frame)
    with pytest.raises(AccountingRefused):
        table.sigma(1.5, 15, 0.7, sampling="poisson")
    assert np.isnan(table.sigma(1.5, 15, 0.7, sampling="min", on_missing="nan"))


def test_reference_csv_round_trip(built, tmp_path):
    table = load_table(built[2])
    amplified, unamplified = tmp_path / "amp.csv", tmp_path / "unamp.csv"
    reference_csv.export_reference_csv(table, amplified, unamplified)
    raw = pd.read_csv(amplified, header=None)
    assert raw.shape == (SPEC.size(), 5)
    assert set(raw[1]) == set(SPEC.sampling_probabilities())  # exact floats survive
    again = reference_csv.import_reference_csv(amplified)
    np.testing.assert_allclose(again.sigma([1.3, 7.0], 1234, 0.2), table.sigma([1.3, 7.0], 1234, 0.2))
    det = reference_csv.read_reference_csv(unamplified)
    np.testing.assert_allclose(det["sigma"], table.deterministic(det["epsilon"], det["steps"],
                                                                 det["sampling_probability"]))


def test_cells_beyond_the_memory_cap_are_marked_refused_not_filled():
    """With a tiny PLD cap some cells are refused (NaN, status refused); the rest stay tight."""
    spec = TableSpec(epsilon_min=0.25, epsilon_max=8.0, epsilon_per_octave=1, steps_min=1000, steps_max=2000,
                     steps_per_octave=1, q_min_log2=-6, q_per_octave=1, max_points=3000)
    chunk = plan_table(spec)[0]
    frame = compute_chunk(spec, chunk)
    refused = frame[frame["status"] == "refused"]
    assert len(refused) > 0 and refused["sigma"].isna().all()
    ok = frame[frame["status"] == "ok"].iloc[0]
    assert ok["sigma"] == pytest.approx(calibration.calibrate_poisson(
        ok["epsilon"], ok["sampling_probability"], int(ok["steps"])), rel=2e-3)


# The production resolution (TableSpec's per-octave defaults: factor-2 steps in T and q,
# cubic interpolation at fixed σ) on a small range, checked against direct calibration.
COARSE = TableSpec(epsilon_min=0.25, epsilon_max=64.0, steps_min=500, steps_max=4000, q_min_log2=-10,
                   q_per_chunk=11)


@pytest.fixture(scope="module")
def coarse_table():
    frame = pd.concat([compute_chunk(COARSE, chunk) for chunk in plan_table(COARSE)], ignore_index=True)
    return SigmaTable(frame), SigmaTable(frame, method="linear")


def test_cubic_table_on_factor_two_grid_is_within_half_a_percent_off_grid(coarse_table):
    cubic, linear = coarse_table
    rng = np.random.default_rng(7)
    eps = np.exp(rng.uniform(np.log(0.25), np.log(64.0), 10))
    steps = np.round(np.exp(rng.uniform(np.log(500), np.log(4000), 10))).astype(int)
    qs = 2.0 ** rng.uniform(-10, -0.25, 10)
    direct = np.array([calibration.calibrate_poisson(e, q, int(t), relative_tolerance=1e-5)
                       for e, t, q in zip(eps, steps, qs)])
    error = cubic.poisson(eps, steps, qs) / direct - 1
    assert np.abs(error).max() <= INTERPOLATION_BOUND
    # the authors' linear scheme is measurably worse on the same grid
    assert np.abs(linear.poisson(eps, steps, qs) / direct - 1).max() > np.abs(error).max()


def test_cubic_table_is_exact_at_grid_points(coarse_table):
    cubic, _ = coarse_table
    frame = cubic.frame
    np.testing.assert_allclose(cubic.poisson(frame["epsilon"], frame["steps"], frame["sampling_probability"]),
                               frame["sigma"], rtol=1e-9)


def test_queries_across_the_two_participation_jump_are_refused():
    eps, steps, qs = 2.0 ** np.arange(0, 9), 100 * 2 ** np.arange(7), 2.0 ** np.arange(-20, -12)
    e, t, q = np.meshgrid(eps, steps, qs, indexing="ij")
    frame = pd.DataFrame({"epsilon": e.ravel(), "steps": t.ravel(), "sampling_probability": q.ravel(),
                          "delta": 1e-8, "sigma": (np.sqrt(t) / e).ravel() * 1e-3, "status": "ok"})
    table = SigmaTable(frame)
    with pytest.raises(AccountingRefused, match="two steps"):
        table.sigma(100.0, 120, 2**-19.7)
    assert np.isfinite(table.sigma(8.0, 120, 2**-19.7))  # small epsilon: no jump there
    assert np.isfinite(table.sigma(100.0, 3000, 2**-14.5))  # stencil entirely above the jump


def test_poisson_branch_refuses_near_steps_where_min_rule_is_deterministic():
    eps, steps, qs = 2.0 ** np.arange(5, 12), 1000 * 2 ** np.arange(4), 2.0 ** np.arange(-14, -9)
    e, t, q = np.meshgrid(eps, steps, qs, indexing="ij")
    deterministic_like = np.sqrt(np.ceil(q * t)) * 1.5 * np.vectorize(
        lambda x: dp_accounting.get_sigma_gaussian(x, 1e-8))(e)
    frame = pd.DataFrame({"epsilon": e.ravel(), "steps": t.ravel(), "sampling_probability": q.ravel(),
                          "delta": 1e-8, "sigma": deterministic_like.ravel(), "status": "ok"})
    table = SigmaTable(frame)
    with pytest.raises(AccountingRefused, match="near-steps"):
        table.sigma(300.0, 3000, 2**-12.5, sampling="poisson")
    np.testing.assert_allclose(table.sigma(300.0, 3000, 2**-12.5),
                               table.deterministic(300.0, 3000, 2**-12.5))


def test_a_columns_node_found_from_a_guess_is_the_one_searched(coarse_table):
    """The root search's shortcut (keep the last step's node where it still brackets σ) finds, for any guess,
    the node the search finds, NaN prefixes, both ends and NaN σ included; and the table answers the same
    through it (its cubic is exact at grid points and within its bound between them, tested above)."""
    cubic, _ = coarse_table
    columns = cubic._columns
    assert columns.keys is not None  # the keyed search, which the guess short-cuts
    n_columns, n = columns.values.shape[0] * columns.values.shape[1], columns.values.shape[-1]
    rng = np.random.default_rng(3)
    column = rng.integers(0, n_columns, 20000)
    finite = columns.values.reshape(n_columns, n)
    y = rng.uniform(np.nanmin(finite) - 1, np.nanmax(finite) + 1, len(column))
    y[::97] = np.nan
    y[1::89] = finite[column[1::89], rng.integers(0, n, len(column[1::89]))]  # exactly at nodes (NaN among them)
    searched = columns.first_not_above(column, y)
    for guess in (rng.integers(0, n + 1, len(column)), np.clip(searched + rng.integers(-1, 2, len(column)), 0, n),
                  searched, np.zeros(len(column), dtype=np.int64), np.full(len(column), n)):
        np.testing.assert_array_equal(columns.first_not_above(column, y, guess), searched)
