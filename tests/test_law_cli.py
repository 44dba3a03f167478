"""The law artifact and the `dpscaling fit / query / table saturating` commands, errors included."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from dpscaling import cli
from dpscaling.cli.law import default_compute_range
from dpscaling.core.errors import UserError
from dpscaling.law import LawSettings, fit_law, read_law
from dpscaling.law.collect import REFERENCE_RESULTS_COLUMNS
from dpscaling.law.columns import BERT_MODEL_SIZES, CROSS_ENTROPY, ITERATIONS, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO
from dpscaling.law.synthetic import DeterministicGaussianSigma, accounting_table, synthetic_results
from law_bundle_data import bundled

ACCOUNTING = dict(epsilons=2.0 ** np.arange(-2, 8), iterations=np.geomspace(10, 2e5, 30),
                  sampling_probabilities=2.0 ** np.arange(-24, 1))


@pytest.fixture
def run(monkeypatch, capsys):
    """Run the real CLI entry point with this module's commands registered; return (status, stdout, stderr)."""
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("dpscaling.cli.law",))

    def invoke(*argv: str) -> tuple[int, str, str]:
        status = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return status, out, err
    return invoke


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("law_inputs")
    synthetic_results().to_parquet(directory / "results.parquet")
    table = accounting_table(DeterministicGaussianSigma(), **ACCOUNTING)
    table.to_csv(directory / "unamplified.csv", header=False, index=False)
    return directory


@pytest.fixture
def law_dir(run, inputs, tmp_path):
    status, out, err = run("fit", "--results", inputs / "results.parquet", "--warmup-steps", 100, "--seq-len", 128,
                           "--physical-batch", 32, "--accounting-unamplified", inputs / "unamplified.csv",
                           "--out", tmp_path / "law", "--json")
    assert status == 0, err
    assert json.loads(out)["failed_fits"] == 0
    return tmp_path / "law"


def test_law_round_trips_through_its_directory(tmp_path) -> None:
    results = synthetic_results()
    results.loc[results[NOISE_BATCH_RATIO] == 2.0**-6, "Status"] = "diverged"
    results.loc[(results[NOISE_BATCH_RATIO] == 0) & (results["Learning Rate"] == 2.0**-8), "Status"] = "running"
    law = fit_law(results, LawSettings(warmup_steps=100), seq_len=128, physical_batch=32)
    excluded = pd.DataFrame(law.report["runs_excluded"])
    # every model × learning rate at σ̄ = 2^-6, and the unfinished noise-free runs at one learning rate
    assert excluded["Status"].value_counts().to_dict() == {"diverged": 3 * 2, "running": 3}
    law.save(tmp_path / "law")
    loaded = read_law(tmp_path / "law")
    pd.testing.assert_frame_equal(loaded.grid, law.grid)
    assert loaded.settings == law.settings and loaded.seq_len == 128
    points = law.grid.dropna(subset=[CROSS_ENTROPY])
    args = points[MODEL_SIZE], points[ITERATIONS], points[NOISE_BATCH_RATIO]
    np.testing.assert_allclose(loaded.loss(*args), law.loss(*args))
    manifest = json.loads((tmp_path / "law" / "manifest.json").read_text())
    assert manifest["format_version"] == 1 and {"scipy", "numpy", "pandas"} <= set(manifest["versions"])


def test_fit_then_query_compute_optimal(run, law_dir) -> None:
    status, out, err = run("query", "--law", law_dir, "--compute", 1e13, "--epsilon", 4, "--users", 1e6, "--json")
    assert status == 0, err
    answer = json.loads(out)
    assert {"model_size", "batch_size", "iterations", "sigma", "noise_batch_ratio", "tokens_per_parameter",
            "predicted_loss", "flags", "law_optimum", "loss_units", "provenance"} <= set(answer)
    optimum = answer["law_optimum"]  # the paper's continuous search
    assert optimum["model_size"] * optimum["batch_size"] * optimum["iterations"] * 6 * 128 == pytest.approx(1e13)
    low, high = optimum["near_optimal_model_size"]
    assert low <= optimum["model_size"] <= high
    assert optimum["noise_batch_ratio"] == pytest.approx(optimum["sigma"] / optimum["batch_size"])
    # the runnable answer: whole batches and steps, its own σ, the same compute up to the rounding
    assert isinstance(answer["batch_size"], int) and isinstance(answer["iterations"], int)
    assert answer["noise_batch_ratio"] == pytest.approx(answer["sigma"] / answer["batch_size"])
    assert answer["compute"] == pytest.approx(1e13, rel=0.02)
    assert "nats" in answer["loss_units"]


def test_query_configs_gives_a_reason_for_every_unanswered_row(run, law_dir, tmp_path) -> None:
    configs = tmp_path / "configs.csv"
    configs.write_text("Model Size,Batch Size,Iterations,Privacy Budget,Data Budget\n"
                       "4e5,256,1000,4,1e6\n1e9,256,1000,4,1e6\n")
    out_csv = tmp_path / "evaluated.csv"
    status, _, err = run("query", "--law", law_dir, "--configs", configs, "--out", out_csv)
    assert status == 0
    evaluated = pd.read_csv(out_csv, keep_default_na=False)
    assert evaluated["Cross Entropy"].iloc[0] != "" and evaluated["Reason"].iloc[0] == ""
    assert evaluated["Cross Entropy"].iloc[1] == "" and "model size outside" in evaluated["Reason"].iloc[1]
    assert "1 row(s) without a predicted loss" in err


def test_budget_outside_the_law_is_a_clear_error(run, law_dir) -> None:
    status, out, err = run("query", "--law", law_dir, "--compute", 1e30, "--epsilon", 4, "--users", 1e6)
    assert status == 2 and out == ""
    assert "admits no configuration" in err and "the law covers about" in err


@pytest.mark.parametrize("argv, message", [
    (["--compute", 1e13, "--epsilon", 4], "missing --users"),
    (["--compute", 1e13, "--epsilon", -1, "--users", 1e6], "--epsilon must be positive"),
    (["--compute", 1e13, "--epsilon", 4, "--users", 1e6, "--tokens", 1e8], "exactly one of --users"),
    (["--compute", 1e13, "--epsilon", 4, "--users", 1e6, "--out", "x.csv"], "--out is for --configs"),
    (["--compute", 1e13, "--epsilon", 4, "--users", 1e6, "--configs", "x.csv"], "not both"),
])
def test_query_flag_errors(run, law_dir, argv, message) -> None:
    status, _, err = run("query", "--law", law_dir, *argv)
    assert status == 2 and message in err


def test_not_a_law_directory(run, tmp_path) -> None:
    status, _, err = run("query", "--law", tmp_path, "--compute", 1e13, "--epsilon", 4, "--users", 1e6)
    assert status == 2 and "not a law bundle" in err and "dpscaling fit" in err


def test_query_configs_without_tables_calibrates_with_dpscaling_accounting(run, inputs, tmp_path) -> None:
    from dpscaling.accounting.pricing import paper_sigma

    assert run("fit", "--results", inputs / "results.parquet", "--warmup-steps", 100, "--seq-len", 128,
               "--out", tmp_path / "law")[0] == 0
    configs = tmp_path / "configs.csv"
    configs.write_text("Model Size,Batch Size,Iterations,Privacy Budget,Data Budget\n4e5,256,1000,4,1e6\n")
    status, out, err = run("query", "--law", tmp_path / "law", "--configs", configs, "--json")
    assert status == 0, err
    answer = json.loads(out)
    assert answer["accounting"] == "dpscaling.accounting (min)"
    row = answer["rows"][0]
    assert row["Sigma"] == pytest.approx(paper_sigma("dpsgd", "min", 4.0, 1e-8, 256 / 1e6, 1000)[0], rel=1e-12)
    assert row["Noise Batch Ratio"] == pytest.approx(row["Sigma"] / 256, rel=1e-12)


def test_table_saturating(run, law_dir, tmp_path) -> None:
    out_csv = tmp_path / "saturating.csv"
    status, out, err = run("table", "saturating", "--law", law_dir, "--users", 1e6, 1e7, "--epsilons", 1, 8,
                           "--compute-range", 1e12, 1e16, "--compute-count", 12, "--out", out_csv, "--json")
    assert status == 0, err
    table = pd.read_csv(out_csv)
    assert len(table) == 4 and table["Cross Entropy"].notna().all()
    assert json.loads(out)["rows"] == 4


def test_fit_authors_results_csv_in_reference_mode(run, tmp_path) -> None:
    names = {1e5: "BertTiny", 4e5: "BertMini", 1.6e6: "BertSmall"}
    results = synthetic_results().assign(**{MODEL: lambda f: f[MODEL_SIZE].map(names)})
    results[REFERENCE_RESULTS_COLUMNS].to_csv(tmp_path / "results.csv", index=False)
    status, out, err = run("fit", "--results", tmp_path / "results.csv", "--results-format", "reference",
                           "--reference-compatible", "--warmup-steps", 100, "--out", tmp_path / "law", "--json")
    assert status == 0, err
    law = read_law(tmp_path / "law" / "law")  # fit writes a bundle
    assert law.settings.reference_compatible and law.settings.rolling_window is None
    assert law.settings.interpolate_log_loss and law.settings.accounting_rule == "amplified"
    assert list(law.loss.model_sizes) == [BERT_MODEL_SIZES[n] for n in names.values()]
    assert law.seq_len == 512
    # Table 2's budget grid starts at the notebook's 6·512·4e6·1000·1024 ≈ 1.3e16 (its first row's budget)
    assert default_compute_range(law, law.loss.model_sizes)[0] == pytest.approx(1.2582912e16)


def test_fit_errors(run, inputs, tmp_path) -> None:
    status, _, err = run("fit", "--results", tmp_path / "nothing.csv", "--out", tmp_path / "law")
    assert status == 2 and "no such file" in err
    status, _, err = run("fit", "--results", inputs / "results.parquet", "--out", tmp_path / "law",
                         "--warmup-steps", 1e9)
    assert status == 2 and "warm-up" in err


@pytest.mark.parametrize(("rule", "sampling"), [("min", "min"), ("amplified", "poisson")])
def test_context_reports_the_rule_of_the_laws_own_tables(tmp_path, rule, sampling) -> None:
    from dpscaling.report.figures.context import load_context
    from dpscaling.report.figures.settings import AnalysisSettings

    table = accounting_table(DeterministicGaussianSigma(), **ACCOUNTING)
    law = fit_law(synthetic_results(), LawSettings(warmup_steps=100, accounting_rule=rule), seq_len=128,
                  physical_batch=32, accounting_amplified=table, accounting_unamplified=table)
    law.save(tmp_path / "law")
    # The workflow's own setting ("deterministic" here) must not relabel σ taken from the law's tables.
    context = load_context(tmp_path / "law", AnalysisSettings(), sampling="deterministic")
    assert context.sampling == sampling
    assert f"{rule} rule" in context.accounting_source


def test_fit_flags_choose_the_authors_smoothing_and_asymptote(run, inputs, tmp_path) -> None:
    common = ("fit", "--results", inputs / "results.parquet", "--warmup-steps", 100, "--seq-len", 128)
    assert run(*common, "--out", tmp_path / "paper")[0] == 0
    status, _, err = run(*common, "--smooth-nonprivate-along-nbr", "--extrapolation-asymptote", "nonprivate",
                         "--out", tmp_path / "authors")
    assert status == 0, err
    paper, authors = read_law(tmp_path / "paper" / "law"), read_law(tmp_path / "authors" / "law")
    assert (paper.settings.smooth_nonprivate_along_nbr, paper.settings.extrapolation_asymptote) == (False, "per_curve")
    assert (authors.settings.smooth_nonprivate_along_nbr, authors.settings.extrapolation_asymptote) == (
        True, "nonprivate")
    assert set(authors.fits["kind"]) == {"asymptote", "curve"} and set(paper.fits["kind"]) == {"curve"}
    status, _, err = run(*common, "--reference-compatible", "--extrapolation-asymptote", "per_curve",
                         "--out", tmp_path / "bad")
    assert status == 2 and "--reference-compatible fixes" in err


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory as the workflow lays it out: accounting/sigma_table.parquet and law/fit.

    The table's Poisson column is the closed-form unamplified σ (the wiring, not the accountant, is tested).
    """
    from dpscaling.accounting.table import COLUMNS, STATUS_OK, save_table
    from dpscaling.law.pipeline import fit_from_files

    root = tmp_path_factory.mktemp("run")
    e, t, q = (a.ravel() for a in np.meshgrid(2.0 ** np.arange(-1, 6), np.geomspace(10, 2e5, 16),
                                              2.0 ** np.arange(-16, 1), indexing="ij"))
    frame = pd.DataFrame({"epsilon": e, "steps": t, "sampling_probability": q, "delta": 1e-8,
                          "sigma": DeterministicGaussianSigma()(e, t, q), "status": STATUS_OK})[list(COLUMNS)]
    synthetic_results().to_parquet(root / "results.parquet")
    for sampling in ("poisson", "deterministic"):  # one run directory each: <run>/{accounting,law}
        (root / sampling / "accounting").mkdir(parents=True)
        table = root / sampling / "accounting" / "sigma_table.parquet"
        save_table(frame, table)
        law = fit_from_files(root / "results.parquet", LawSettings(warmup_steps=100), seq_len=128,
                             sigma_table=table, sampling=sampling)
        law.save(root / sampling / "law" / "fit")
    return root


@pytest.mark.parametrize("sampling", ["poisson", "deterministic"])
def test_query_on_a_workflow_law_uses_its_runs_sigma_table_without_flags(run, run_dir, sampling) -> None:
    from dpscaling.accounting.table import SigmaTable

    fit = run_dir / sampling / "law" / "fit"
    manifest = json.loads((fit / "manifest.json").read_text())
    # Relative to the law directory, so the run directory can move.
    assert manifest["sigma_table"] == {"path": "../../accounting/sigma_table.parquet", "sampling": sampling}
    status, _, err = run("query", "--law", fit, "--compute", 1e13, "--epsilon", 4, "--users", 1e5)
    assert status == 2 and "not a law bundle" in err and f"dpscaling law bundle --law {fit}" in err
    law = run_dir / sampling / "bundle"
    status, out, err = run("law", "bundle", "--law", fit, "--out", law, "--json")  # the run's table, carried inside
    assert status == 0 and json.loads(out)["sigma_table"] == "sigma_table.parquet", err
    status, out, err = run("query", "--law", law, "--compute", 1e13, "--epsilon", 4, "--users", 1e5, "--json")
    assert status == 0, err
    answer = json.loads(out)
    assert answer["sampling_rule"] == sampling and sampling in answer["accounting"]
    assert "sigma_table.parquet" in answer["accounting"]
    table = SigmaTable.load(law / "sigma_table.parquet")
    optimum = answer["law_optimum"]
    expected = table.sigma(4.0, optimum["iterations"], optimum["batch_size"] / 1e5, sampling=sampling)
    assert optimum["sigma"] == pytest.approx(float(np.squeeze(expected)), rel=1e-9)
    # the runnable answer's σ is recomputed by the accountant under the same rule
    assert answer["sampling"] in (("poisson", "deterministic") if sampling == "min" else (sampling,))
    status, out, _ = run("query", "--law", law, "--compute", 1e13, "--epsilon", 4, "--users", 1e5)
    assert status == 0 and sampling in out


def test_query_names_the_missing_sigma_table_of_a_workflow_law(run, run_dir, tmp_path) -> None:
    import shutil

    moved = tmp_path / "law"
    shutil.copytree(run_dir / "poisson" / "law" / "fit", moved)  # no accounting/ two levels up
    status, _, err = run("law", "bundle", "--law", moved, "--out", tmp_path / "bundle")
    assert status == 2 and "sigma_table.parquet" in err and "snakemake accounting" in err
    assert not (tmp_path / "bundle").exists()


@pytest.fixture(scope="module")
def calibrated_run(tmp_path_factory):
    """A run laid out as the workflow writes it: law/fit, law/bootstrap/replicates.parquet (4 replicates) and
    validate/calibration.json (paper mode, q = 0.05 nats)."""
    from dpscaling.law.bootstrap import replicate_grids, write_replicates
    from dpscaling.law.calibration import Calibration, write_calibration
    from dpscaling.law.synthetic import seeded_results

    root = tmp_path_factory.mktemp("calibrated_run")
    results = seeded_results(steps=2000, log_every=50, learning_rates=(2.0**-7,))
    settings = LawSettings.create(False, warmup_steps=100)
    fit_law(results, settings, seq_len=128, physical_batch=32).save(root / "law" / "fit")
    (root / "law" / "bootstrap").mkdir()
    write_replicates(replicate_grids(results, settings, range(4), seq_len=128, physical_batch=32),
                     root / "law" / "bootstrap" / "replicates.parquet")
    (root / "validate").mkdir()
    write_calibration({"paper": Calibration("paper", False, 0.05, ("horizon", "noise"), 2 / 3, 0.9, 0.5)},
                      root / "validate" / "calibration.json")
    bundled(root / "law" / "fit", root / "law" / "bundle")  # the replicates and calibration beside law/fit
    return root


def test_query_prints_the_seed_only_and_the_calibrated_interval(run, inputs, calibrated_run, tmp_path) -> None:
    query = ("query", "--compute", 1e13, "--epsilon", 4, "--users", 1e6,
             "--accounting-unamplified", inputs / "unamplified.csv", "--json")
    status, out, err = run(*query, "--law", calibrated_run / "law" / "bundle")  # both bundled from beside law/fit
    assert status == 0, err
    answer = json.loads(out)
    low, high = answer["law_optimum"]["seed_only_interval_90"]  # each replicate's own optimum
    assert low <= high and "4 bootstrap replicates" in answer["interval"]
    low, high = answer["seed_only_interval_90"]  # the runnable configuration's loss over the replicates
    assert low <= high
    predicted = answer["predicted_loss"]
    assert answer["calibrated_interval_90"] == pytest.approx([predicted - 0.05, predicted + 0.05], abs=1e-12)
    assert answer["calibration"]["half_width"] == 0.05
    assert answer["calibration"]["method"].startswith("split-conformal")
    # Given explicitly, the same answer.
    status, _, err = run("law", "bundle", "--law", calibrated_run / "law" / "fit", "--out", tmp_path / "given",
                         "--calibration", calibrated_run / "validate" / "calibration.json")
    assert status == 0, err
    status, out, err = run(*query, "--law", tmp_path / "given")
    assert status == 0, err
    assert json.loads(out)["calibrated_interval_90"] == answer["calibrated_interval_90"]


def test_query_without_a_calibration_says_why(run, law_dir) -> None:
    status, out, err = run("query", "--law", law_dir, "--compute", 1e13, "--epsilon", 4, "--users", 1e6, "--json")
    assert status == 0, err
    answer = json.loads(out)
    assert answer["calibrated_interval_90"] is None and "no calibration" in answer["calibration"]
    assert "snakemake validate" in answer["calibration"]


def test_query_refuses_a_calibration_of_the_other_mode(run, inputs, calibrated_run, tmp_path) -> None:
    from dpscaling.law.calibration import Calibration, write_calibration

    other = tmp_path / "calibration.json"
    write_calibration({"reference-compatible": Calibration("reference-compatible", True, 0.05, ("horizon",),
                                                           0.5, math.nan, 0.0)}, other)
    status, out, err = run("law", "bundle", "--law", calibrated_run / "law" / "fit", "--out", tmp_path / "bundle",
                           "--calibration", other)
    assert status == 2 and out == "" and not (tmp_path / "bundle").exists()
    assert "not measured in this law's paper mode" in err and "calibration" in err


def test_query_with_the_physical_batch_correction_lowers_the_loss_of_large_batches(run, inputs, calibrated_run,
                                                                                   tmp_path) -> None:
    from dpscaling.law.physical_batch import PhysicalBatchCorrection, noise_log_ratio

    query = ("query", "--compute", 1e13, "--epsilon", 4, "--users", 1e6,
             "--accounting-unamplified", inputs / "unamplified.csv", "--json")
    status, out, err = run(*query, "--law", calibrated_run / "law" / "bundle")
    assert status == 0, err
    plain = json.loads(out)
    assert plain["physical_batch_correction"] == "off (the paper's law)"
    path = tmp_path / "correction.json"
    correction = PhysicalBatchCorrection(slope=0.2, grid_batch=32, pairs=10, residual_rms=0.01)
    path.write_text(json.dumps(correction.to_json()))
    status, _, err = run("law", "bundle", "--law", calibrated_run / "law" / "bundle", "--out", tmp_path / "corrected",
                         "--physical-batch-correction", path)  # a bundle converts into one with the file added
    assert status == 0, err
    status, out, err = run(*query, "--law", tmp_path / "corrected", "--physical-batch-correction")
    assert status == 0, err
    corrected = json.loads(out)
    assert corrected["physical_batch_correction"]["slope"] == 0.2
    # The corrected optimum is no worse than the uncorrected one evaluated with the correction ...
    shift = 0.2 * float(noise_log_ratio(plain["batch_size"], 32, plain["noise_batch_ratio"], plain["model_size"]))
    assert corrected["predicted_loss"] <= plain["predicted_loss"] - shift + 1e-12
    # ... and the answer's intervals follow it.
    low, high = corrected["calibrated_interval_90"]
    assert low < corrected["predicted_loss"] < high
    status, _, err = run("law", "bundle", "--law", calibrated_run / "law" / "bundle", "--out", tmp_path / "absent",
                         "--physical-batch-correction", tmp_path / "absent.json")
    assert status != 0 and "--physical-batch-correction" in err


def test_query_across_sequence_lengths_returns_a_seq_len_and_refuses_outside_the_range(run, inputs,
                                                                                        tmp_path) -> None:
    from dpscaling.law.sequence_length import write_lengths

    laws = {}
    for length in (32, 128):  # the same per-token measurements at both lengths: context buys nothing
        status, _, err = run("fit", "--results", inputs / "results.parquet", "--warmup-steps", 100, "--seq-len",
                             length, "--physical-batch", 32, "--accounting-unamplified", inputs / "unamplified.csv",
                             "--out", tmp_path / "law" / f"seq={length}")
        assert status == 0, err
        laws[length] = tmp_path / "law" / f"seq={length}"  # a bundle each
    write_lengths(tmp_path / "law", {length: bundle / "law" for length, bundle in laws.items()})
    status, _, err = run("law", "bundle", "--law", tmp_path / "law", "--out", tmp_path / "bundle")
    assert status == 0, err
    # These laws have no calibration: nothing beyond their horizon is validated, so the T the law extrapolates to
    # is refused unless allowed.
    query = ("query", "--law", tmp_path / "bundle", "--compute", 1e14, "--epsilon", 8, "--json")
    status, out, err = run(*query, "--tokens", 1e8)
    assert status == 2 and "Refused" in err and "validated up to 1×" in err
    query = (*query, "--allow-extrapolation")
    status, out, err = run(*query, "--tokens", 1e8)
    assert status == 0, err
    answer = json.loads(out)
    assert answer["seq_len"] == 32 and answer["query"]["privacy_unit"] == "sequence"
    assert answer["query"]["data_budget_units"] == 1e8 / 32
    assert [row["seq_len"] for row in answer["per_length"]][::8] == [32, 128] and len(answer["per_length"]) == 9
    assert "iterations_beyond_validated" in {flag["code"] for flag in answer["flags"]}
    status, out, err = run(*query, "--tokens", 1e8, "--seq-len", 64)
    assert status == 0, err
    assert json.loads(out)["seq_len"] == 64 and json.loads(out)["query"]["data_budget_units"] == 1e8 / 64
    status, _, err = run(*query, "--tokens", 1e8, "--seq-len", 256)
    assert status != 0 and "outside the measured range [32, 128]" in err
    status, _, err = run(*query, "--tokens", 1e8, "--privacy-unit", "user")
    assert status != 0 and "--privacy-unit sequence" in err
    # One length's law: --tokens means N = tokens / S at its S; --seq-len needs a law across lengths.
    status, out, err = run("query", "--law", laws[128], "--compute", 1e14, "--epsilon", 8, "--tokens", 1e8, "--json",
                           "--allow-extrapolation")
    assert status == 0, err
    assert json.loads(out)["query"]["data_budget_units"] == 1e8 / 128
    status, _, err = run("query", "--law", laws[128], "--compute", 1e14, "--epsilon", 8, "--users", 1e6,
                         "--seq-len", 64)
    assert status != 0 and "--seq-len" in err


def test_query_across_lengths_bands_the_answer_with_every_lengths_replicates(run, inputs, tmp_path) -> None:
    from dpscaling.law.bootstrap import replicate_grids, write_replicates
    from dpscaling.law.sequence_length import write_lengths
    from dpscaling.law.synthetic import seeded_results

    settings = LawSettings.create(False, warmup_steps=100)
    laws = {}
    for length in (32, 128):  # each length's law and its bootstrap beside it, as the workflow lays them out
        results = seeded_results(steps=2000, log_every=50, learning_rates=(2.0**-7,), seed=length)
        laws[length] = tmp_path / "law" / f"seq={length}" / "fit"
        fit_law(results, settings, seq_len=length, physical_batch=32).save(laws[length])
        write_replicates(replicate_grids(results, settings, range(4), seq_len=length, physical_batch=32),
                         laws[length].parent / "bootstrap" / "replicates.parquet")
    write_lengths(tmp_path / "law", laws)
    query = ("query", "--compute", 1e14, "--epsilon", 8, "--tokens", 1e8,
             "--accounting-unamplified", inputs / "unamplified.csv", "--allow-extrapolation", "--json")
    status, out, err = run("law", "bundle", "--law", tmp_path / "law", "--out", tmp_path / "bundle")
    assert status == 0, err
    status, out, err = run(*query, "--law", tmp_path / "bundle")
    assert status == 0, err
    answer = json.loads(out)
    optimum = answer["law_optimum"]
    low, high = optimum["seed_only_interval_90"]
    assert low <= high and abs(optimum["predicted_loss"] - (low + high) / 2) < 0.5
    assert 32 <= optimum["seq_len_90"][0] <= optimum["seq_len_90"][1] <= 128
    assert "4 bootstrap replicates of every length's law" in answer["interval"]
    assert answer["calibrated_interval_90"] is None and "no calibrat" in answer["calibration"]
    low, high = answer["seed_only_interval_90"]  # the runnable configuration's, at its length
    assert low <= answer["predicted_loss"] + 0.5 and high >= answer["predicted_loss"] - 0.5
    (laws[128].parent / "bootstrap" / "replicates.parquet").unlink()  # one length without seed noise: no band
    status, out, err = run("law", "bundle", "--law", tmp_path / "law", "--out", tmp_path / "bundle")
    assert status == 0, err
    status, out, err = run(*query, "--law", tmp_path / "bundle")
    assert status == 0, err
    answer = json.loads(out)
    # the optimum across lengths has no band (the primary length's own replicates still band an answer at S = 32)
    assert "seed_only_interval_90" not in answer["law_optimum"] and "at S = 128" in answer["interval"]


def test_the_documented_example_curves_fit_and_answer(run, tmp_path) -> None:
    """docs/results-format.md's commands on docs/examples/results.csv: any model names with a size column,
    S and the physical batch from the file. Without an accounting table σ is built on demand (and cached);
    the runnable answer's σ spends exactly ε, by dp-accounting's own PLD accountant at a finer discretisation."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    from conftest import REPO

    status, out, err = run("fit", "--results", REPO / "docs" / "examples" / "results.csv", "--warmup-steps", 40,
                           "--rolling-window", 3, "--out", tmp_path / "my-law", "--json")
    assert status == 0, err
    assert json.loads(out)["models"] == 3 and json.loads(out)["failed_fits"] == 0
    law = read_law(tmp_path / "my-law" / "law")  # a bundle
    assert (law.seq_len, law.physical_batch) == (64, 32) and law.model_size_range()[0] == 49760
    query = ("query", "--law", tmp_path / "my-law", "--compute", 1e12, "--epsilon", 8, "--users", 1e5, "--json")
    status, out, err = run(*query)
    assert status == 0, err
    assert "computing" in err  # the slabs were built ...
    answer = json.loads(out)
    assert "on demand" in answer["accounting"] and answer["delta"] == 1e-8
    assert answer["model"] is None and answer["model_size"] > 0  # no recorded shapes: M as a count
    sigma, steps, q = answer["sigma"], answer["iterations"], answer["batch_size"] / 1e5
    if answer["sampling"] == "poisson":
        event, count = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    else:  # fixed batches: each example in ⌈qT⌉ steps
        event, count = dp_accounting.GaussianDpEvent(sigma), math.ceil(q * steps)
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(event, count)
    assert accountant.get_epsilon(1e-8) == pytest.approx(8.0, rel=5e-3)
    status, again, err = run(*query)
    assert status == 0 and "computing" not in err  # ... and cached
    assert json.loads(again)["law_optimum"] == answer["law_optimum"]


def test_the_reference_format_takes_any_model_with_a_size_column(tmp_path) -> None:
    from dpscaling.law.collect import read_reference_results

    rows = "Model,Learning Rate,Iterations,Noise Batch Ratio,Cross Entropy{}\n"
    (tmp_path / "named.csv").write_text(rows.format("") + "BertTiny,0.0078125,1000,0,5.0\n")
    assert read_reference_results(tmp_path / "named.csv")["Model Size"].iloc[0] == 4.5e6
    (tmp_path / "sized.csv").write_text(rows.format(",Model Size") + "Mine,0.0078125,1000,0,5.0,123456\n")
    assert read_reference_results(tmp_path / "sized.csv")["Model Size"].iloc[0] == 123456
    (tmp_path / "unknown.csv").write_text(rows.format("") + "Mine,0.0078125,1000,0,5.0\n")
    with pytest.raises(UserError, match="add a 'Model Size' column"):
        read_reference_results(tmp_path / "unknown.csv")
