"""Intervals by bootstrap over seed-to-seed noise (docs/fit.md, 'Intervals'): the library, the CLI and the grid."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dpscaling import cli
from dpscaling.core.errors import UserError
from dpscaling.law import LawSettings, fit_law
from dpscaling.law.bootstrap import (
    LOSS_HIGH, LOSS_LOW, NO_REPEATS, REPLICATE, Replicates, chunk_count, chunk_replicates, interval,
    load_replicates, replicate_grids, seed_noise, write_replicates)
from dpscaling.law.conversion import convert_to_bundle
from dpscaling.law.columns import SEED
from dpscaling.law.interpolation import LossFunction
from dpscaling.law.synthetic import DeterministicGaussianSigma, TrueLaw, seeded_results

SETTINGS = LawSettings(warmup_steps=100, rolling_window=None)
# Query points on the measured part of the grid: every model × 4 σ̄ × 3 horizons.
M = np.repeat([1e5, 4e5, 1.6e6], 12)
T = np.tile([300.0, 600.0, 1000.0] * 4, 3)
S = np.tile(np.repeat([2.0**-12, 2.0**-10, 2.0**-8, 2.0**-6], 3), 3)


def synthetic(seed: int, noise: float = 0.03) -> pd.DataFrame:
    """One learning rate, every σ̄ of every model repeated with 2 extra seeds, 1000 steps."""
    return seeded_results(seed_noise=noise, seed=seed, repeat_points=5, repeat_models=3, repeat_seeds=(1, 2),
                          steps=1000, learning_rates=(2.0**-7,))


def replicate_losses(results: pd.DataFrame, replicates: int) -> Replicates:
    grids = replicate_grids(results, SETTINGS, range(replicates))
    return Replicates([LossFunction.from_grid(grid) for _, grid in grids.groupby(REPLICATE)])


def test_main_fit_uses_the_primary_seed_only() -> None:
    results = synthetic(0)
    assert set(results[SEED]) == {0, 1, 2}
    law = fit_law(results, SETTINGS)
    alone = fit_law(results[results[SEED] == 0], SETTINGS)
    pd.testing.assert_frame_equal(law.grid, alone.grid)
    assert law.report["repeat_seed_runs_set_aside"] == 2 * 15


def test_seed_noise_is_measured_from_the_repeats() -> None:
    assert seed_noise(synthetic(0, noise=0.03)) == pytest.approx(0.03, rel=0.4)
    assert seed_noise(synthetic(0)[lambda f: f[SEED] == 0]) == 0.0


def test_the_90_percent_interval_covers_the_true_law() -> None:
    """Coverage: over 3 synthetic data sets with known noise, the interval holds the truth at >= 80% of points."""
    truth = TrueLaw()(M, T, S)
    hits = []
    for seed in (10, 11, 12):
        low, high = interval(replicate_losses(synthetic(seed), 20).loss_matrix(M, T, S))
        hits.append((low <= truth) & (truth <= high))
    coverage = float(np.mean(hits))
    assert coverage >= 0.8, coverage


def test_the_interval_widens_with_more_seed_noise() -> None:
    widths = []
    for noise in (0.01, 0.05):
        low, high = interval(replicate_losses(synthetic(3, noise), 10).loss_matrix(M, T, S))
        widths.append(float(np.nanmean(high - low)))
    assert widths[1] > 2.5 * widths[0], widths


def test_replicates_do_not_depend_on_the_chunking() -> None:
    results = synthetic(4)
    whole = replicate_grids(results, SETTINGS, range(3), seed=7)
    split = pd.concat([replicate_grids(results, SETTINGS, ids, seed=7)
                       for ids in (chunk_replicates(3, 2, 0), chunk_replicates(3, 2, 1))], ignore_index=True)
    pd.testing.assert_frame_equal(whole, split)
    assert chunk_count(5, 2) == 3 and chunk_replicates(5, 2, 2) == [4]


def test_no_repeated_seeds_is_a_clear_error() -> None:
    results = synthetic(0)
    with pytest.raises(UserError, match=NO_REPEATS):
        replicate_grids(results[results[SEED] == 0], SETTINGS, range(2))


# ------------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def run(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("dpscaling.cli.law",))

    def invoke(*argv):
        status = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return status, out, err
    return invoke


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """<run>/accounting/sigma_table.parquet, <run>/law/fit and <run>/law/bootstrap/chunk*.parquet, and the bundle
    of them, <run>/law/bundle."""
    from dpscaling.accounting.table import COLUMNS, STATUS_OK, save_table

    root = tmp_path_factory.mktemp("run")
    e, t, q = (a.ravel() for a in np.meshgrid(2.0 ** np.arange(-1, 6), np.geomspace(10, 2e5, 16),
                                              2.0 ** np.arange(-16, 1), indexing="ij"))
    frame = pd.DataFrame({"epsilon": e, "steps": t, "sampling_probability": q, "delta": 1e-8,
                          "sigma": DeterministicGaussianSigma()(e, t, q), "status": STATUS_OK})[list(COLUMNS)]
    (root / "accounting").mkdir()
    save_table(frame, root / "accounting" / "sigma_table.parquet")
    results = synthetic(5)
    fit_law(results, SETTINGS, seq_len=128, sigma_table=root / "accounting" / "sigma_table.parquet",
            sampling="poisson").save(root / "law" / "fit")
    for chunk in range(2):
        write_replicates(replicate_grids(results, SETTINGS, chunk_replicates(6, 3, chunk)),
                         root / "law" / "bootstrap" / f"chunk{chunk}.parquet")
    convert_to_bundle(root / "law" / "fit", root / "law" / "bundle")
    return root


# Just past the 1,000-step horizon of a law without calibration: answered, flagged.
QUERY = ("--compute", 1e13, "--epsilon", 4, "--users", 1e5, "--allow-extrapolation")


def test_query_prints_a_90_percent_interval_and_the_spread_of_the_optimum(run, run_dir) -> None:
    law = run_dir / "law" / "bundle"  # law/fit with its σ table and the replicates beside it
    status, out, err = run("query", "--law", law, *QUERY, "--json")
    assert status == 0, err
    answer = json.loads(out)
    optimum = answer["law_optimum"]
    assert "6 bootstrap replicates" in answer["interval"]
    low, high = optimum["seed_only_interval_90"]  # each replicate's own optimum
    assert low <= high and abs(optimum["predicted_loss"] - (low + high) / 2) < 0.2
    for key in ("model_size_5_95", "batch_size_5_95", "iterations_5_95"):
        assert optimum[key][0] <= optimum[key][1]
    low, high = answer["seed_only_interval_90"]  # the runnable configuration's loss over the replicates
    assert low <= high
    status, out, _ = run("query", "--law", law, *QUERY)
    assert status == 0 and "seed-only 90% [" in out and "6 bootstrap replicates" in out


def test_query_without_replicates_says_why(run, run_dir, tmp_path) -> None:
    import shutil

    (tmp_path / "law").mkdir()
    shutil.copytree(run_dir / "law" / "fit", tmp_path / "law" / "fit")
    shutil.copytree(run_dir / "accounting", tmp_path / "accounting")
    assert run("law", "bundle", "--law", tmp_path / "law" / "fit", "--out", tmp_path / "alone")[0] == 0
    status, out, err = run("query", "--law", tmp_path / "alone", *QUERY, "--json")
    assert status == 0, err
    answer = json.loads(out)
    assert "no bootstrap replicates" in answer["interval"] and answer["seed_only_interval_90"] is None
    assert "seed_only_interval_90" not in answer["law_optimum"]
    assert run("law", "bundle", "--law", tmp_path / "law" / "fit", "--out", tmp_path / "given", "--bootstrap",
               run_dir / "law" / "bootstrap")[0] == 0
    status, out, _ = run("query", "--law", tmp_path / "given", *QUERY, "--json")
    assert status == 0 and "6 bootstrap replicates" in json.loads(out)["interval"]
    status, _, err = run("law", "bundle", "--law", tmp_path / "law" / "fit", "--out", tmp_path / "none",
                         "--bootstrap", tmp_path / "none")
    assert status == 2 and "--bootstrap" in err


def test_replicates_of_the_other_mode_are_refused(run, run_dir, tmp_path) -> None:
    results = synthetic(5)
    write_replicates(replicate_grids(results, LawSettings.reference(warmup_steps=100), [0]),
                     tmp_path / "chunk0.parquet")
    with pytest.raises(UserError, match="paper mode"):
        load_replicates(tmp_path, SETTINGS)
    status, _, err = run("law", "bundle", "--law", run_dir / "law" / "fit", "--out", tmp_path / "b",
                         "--bootstrap", tmp_path)
    assert status == 2 and "mode" in err


def test_query_configs_rows_carry_the_interval(run, run_dir, tmp_path) -> None:
    configs = tmp_path / "configs.csv"
    pd.DataFrame({"Model Size": [2e5, 8e5], "Batch Size": [108, 108], "Iterations": [800, 1100],
                  "Privacy Budget": [4, 4], "Data Budget": [1e5, 1e5]}).to_csv(configs, index=False)
    status, out, err = run("query", "--law", run_dir / "law" / "bundle", "--configs", configs, "--json")
    assert status == 0, err
    rows = json.loads(out)["rows"]
    assert len(rows) == 2
    for row in rows:
        assert row[LOSS_LOW] < row[LOSS_HIGH] and abs(row["Cross Entropy"] - row[LOSS_LOW]) < 0.2


# ---------------------------------------------------------------------------------------------- figures

BAND_FIGURES = ("fig-vary_compute_and_privacy", "fig-compute_allocation_selection")


@pytest.fixture(scope="module")
def band_contexts():
    """(with replicates, without): the same law on seeded synthetic curves, scaled like tests/figure_context."""
    from figure_context import PHYSICAL_BATCH, SEQ_LEN, SETTINGS

    from dpscaling.report.figures.context import AnalysisContext

    results = seeded_results(steps=2000, log_every=20, seed=6)
    law = fit_law(results, SETTINGS_LAW, seq_len=SEQ_LEN, physical_batch=PHYSICAL_BATCH)
    grids = replicate_grids(results, SETTINGS_LAW, range(4))
    replicates = Replicates([LossFunction.from_grid(grid) for _, grid in grids.groupby(REPLICATE)])
    common = dict(sigma=DeterministicGaussianSigma(), settings=SETTINGS, delta=1e-8, sampling="deterministic")
    return (AnalysisContext(law, replicates=replicates, interval_note="90% band over 4 bootstrap replicates",
                            **common),
            AnalysisContext(law, **common))


SETTINGS_LAW = LawSettings(warmup_steps=100, rolling_window=3)


@pytest.mark.parametrize("name", BAND_FIGURES)
def test_figures_draw_the_band_and_carry_it_in_their_csv(band_contexts, name, tmp_path) -> None:
    from dpscaling.report.figures import render
    from dpscaling.law.bootstrap import INTERVAL_NOTE, band

    with_band, without = band_contexts
    data = pd.read_csv(render(name, with_band, tmp_path / "with")[-1])
    column = "Best Cross Entropy" if "vary" in name else "Model Size"
    low, high = band(column)
    answered = data.dropna(subset=[column])
    assert len(answered) and answered[low].notna().mean() > 0.9
    assert (answered[low] <= answered[high]).all()
    assert set(data[INTERVAL_NOTE]) == {"90% band over 4 bootstrap replicates"}
    if "vary" in name:  # the band holds the main law's line at most budgets
        inside = (answered[low] - 0.05 <= answered[column]) & (answered[column] <= answered[high] + 0.05)
        assert inside.mean() > 0.8
    data = pd.read_csv(render(name, without, tmp_path / "without")[-1])
    assert data[low].isna().all() and set(data[INTERVAL_NOTE]) == {NO_REPEATS}


# ---------------------------------------------------------------------------------------- grid, workflow


def grid_config(**training):
    from test_config_schema import validated

    return validated({"models": {"names": ["BertNano", "BertMicro"]},
                      "training": {"noise_batch_ratios": [0.0, 0.25], "learning_rates": [0.5], "physical_batch": 8,
                                   "seed": 0, **training}})


def test_repeat_grid_adds_the_extra_seeds_at_the_chosen_points() -> None:
    from dpscaling.workflow.grid import TrainPoint, repeat_grid

    point = {"model": "BertNano", "noise_batch_ratio": 0.25, "learning_rate": 0.5}
    assert repeat_grid(grid_config()) == []
    assert repeat_grid(grid_config(repeat_seeds=[1, 2], repeat_points=[point])) == [
        TrainPoint("BertNano", 8, 1, 0.25, 0.5, 512), TrainPoint("BertNano", 8, 2, 0.25, 0.5, 512)]
    with pytest.raises(UserError, match=r"training.repeat_points\[0\].noise_batch_ratio"):
        repeat_grid(grid_config(repeat_seeds=[1], repeat_points=[{**point, "noise_batch_ratio": 0.3}]))
    with pytest.raises(UserError, match="training.repeat_seeds"):
        repeat_grid(grid_config(repeat_seeds=[0], repeat_points=[point]))


def test_repeat_keys_are_no_training_jobs_param() -> None:
    """Adding repeats must not rerun the existing training jobs (their params stay the same)."""
    from dpscaling.workflow.params import training_params

    config = grid_config()
    repeated = {**config, "training": {**config["training"], "repeat_seeds": [1], "repeat_points": []}}
    assert training_params(repeated) == training_params(config)


def test_snakemake_plans_the_repeat_runs_and_the_bootstrap_jobs(tmp_path) -> None:
    import re

    from conftest import REPO, run_snakemake

    smoke = str(REPO / "tests" / "configs" / "smoke.yaml")

    def planned(*config: str) -> dict[str, int]:
        result = run_snakemake("-n", "fit", "figures", "--configfile", smoke, *config, cwd=tmp_path)
        return {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)\s*$", result.stdout, flags=re.MULTILINE)}

    jobs = planned()
    # smoke: 2 models x 2 noisy sigma-bar x 1 LR (a job per model: training.runs_per_job), + sigma-bar 0 of each
    # model, + 1 repeat seed, + 1 at the physical-batch correction's batch; 4 replicates in chunks of 2, then one
    # combine job.
    assert jobs["train_noise_levels"] == 2 and jobs["train_run"] == 2 + 1 + 1
    assert jobs["bootstrap_chunk"] == 2 and jobs["bootstrap"] == 1
    assert jobs["physical_batch_correction"] == 1
    off = tmp_path / "off.yaml"
    off.write_text("fit:\n  rolling_window: null\n  bootstrap: {replicates: 0}\n")
    jobs = planned(str(off))  # a second --configfile
    assert jobs["train_noise_levels"] == 2 and jobs["train_run"] == 2 + 1 + 1
    assert "bootstrap_chunk" not in jobs and "bootstrap" not in jobs
    assert not (tmp_path / "results").exists()
