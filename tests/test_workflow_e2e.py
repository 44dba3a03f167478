"""The workflow end to end on the smoke config: data -> DP training -> fitted law -> accounting -> figures, tables."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from dpscaling.workflow.grid import canonical

SMOKE = REPO / "tests" / "configs" / "smoke.yaml"

pytestmark = pytest.mark.slow(minutes=8)  # the smoke fixture runs the whole workflow (minutes)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("smoke")
    # Target `all`, and private_model (not part of `all`), which reuses this run's law.
    run_snakemake("all", "private_model", "savings", "--cores", "2", "--configfile", str(SMOKE), cwd=workdir,
                  timeout=1800)
    return workdir / "results" / "smoke"


def test_every_grid_point_has_a_real_curve(smoke_run: Path) -> None:
    curves = sorted((smoke_run / "runs").rglob("metrics.parquet"))
    # models x noise-batch ratios x learning rates, + 1 repeat seed, + 1 at the physical-batch correction's batch
    assert len(curves) == 2 * 3 + 1 + 1
    assert sum("batch=32" in str(path) for path in curves) == 1
    for path in curves:
        curve = pd.read_parquet(path)
        assert curve["step"].tolist() == [10, 20, 30, 40]
        assert (curve["status"] == "finished").all()
        assert curve["loss"].iloc[-1] < curve["loss"].iloc[0]  # it learns
        wildcards = dict(part.split("=", 1) for part in path.parent.relative_to(smoke_run / "runs").parts)
        assert wildcards["seq"] == "64" == str(curve["seq_len"].iloc[0])
        assert wildcards["nbr"] == canonical(curve["noise_batch_ratio"].iloc[0])
        assert wildcards["lr"] == canonical(curve["learning_rate"].iloc[0])
        assert wildcards["model"] == curve["model"].iloc[0]


def test_each_model_s_noise_levels_trained_in_one_job_each_run_with_its_own_log(smoke_run: Path) -> None:
    """training.runs_per_job: shape (smoke.yaml): one job per model for its two noisy σ̄ of the main seed at the
    physical batch; σ̄ = 0, the repeat seed and the correction's batch are one job each. Every run logs to its own
    file."""
    record = "".join(path.read_text() for path in (smoke_run.parent.parent / ".snakemake" / "log").glob("*.log"))
    grouped = re.findall(r"^(?:local)?rule train_noise_levels:\n(?:.*\n)*?\s+wildcards: (.*)$", record, flags=re.MULTILINE)
    assert sorted(re.search(r"model=(\w+)", job).group(1) for job in grouped) == ["BertMicro", "BertNano"]
    assert all("seed=0" in job and "batch=8" in job for job in grouped)
    assert len(re.findall(r"^(?:local)?rule train_run:$", record, flags=re.MULTILINE)) == 2 + 2
    for path in (smoke_run / "runs").rglob("metrics.parquet"):
        run = path.parent.relative_to(smoke_run / "runs")
        assert "step 40/40" in (smoke_run / "logs" / "train" / f"{run}.log").read_text()


def test_more_noise_means_higher_final_loss(smoke_run: Path) -> None:
    frames = [pd.read_parquet(p) for p in (smoke_run / "runs").rglob("metrics.parquet")]
    final = pd.concat(frames).query("step == 40").set_index(["model", "noise_batch_ratio"])["loss"]
    for model in ("BertNano", "BertMicro"):
        assert final[(model, 0.0)] < final[(model, 0.015625)]


def test_the_law_is_fitted_and_reported(smoke_run: Path) -> None:
    manifest = json.loads((smoke_run / "law" / "fit" / "manifest.json").read_text())
    assert manifest["seq_len"] == 64 and manifest["physical_batch"] == 8
    assert manifest["report"]["measurements"] == 6 * 4
    grid = pd.read_parquet(smoke_run / "law" / "fit" / "grid.parquet")
    assert grid["Noise Batch Ratio"].nunique() == 3
    assert (smoke_run / "logs" / "fit" / "fit_law.log").read_text().strip()
    # The law points to its run's accounting table, relative to itself, with the config's sampling rule.
    assert manifest["sigma_table"] == {"path": "../../accounting/sigma_table.parquet", "sampling": "min"}


def test_validate_scores_held_out_measurements_in_both_modes(smoke_run: Path) -> None:
    table = pd.read_csv(smoke_run / "validate" / "validation.csv")
    # Smoke: 2 models and 2 noisy columns leave only the horizon set (model and noise sets need 3).
    assert list(table["held-out set"]) == ["horizon (fit T <= 20, predict the rest)"]
    assert {"points (paper)", "points (reference-compatible)"} <= set(table.columns)
    points = pd.read_csv(smoke_run / "validate" / "predicted_vs_measured.csv")
    assert set(points["Iterations"]) == {30, 40} and len(points) == 2 * table["points (paper)"].item()
    assert (smoke_run / "validate" / "predicted_vs_measured.png").stat().st_size > 0
    # The intervals' coverage (docs/fit.md "Calibrated intervals"): the one set per mode, q per mode.
    covered = pd.read_csv(smoke_run / "validate" / "coverage.csv")
    assert list(covered["mode"]) == ["paper", "reference-compatible"]
    calibration = json.loads((smoke_run / "validate" / "calibration.json").read_text())
    assert set(calibration["modes"]) == {"paper", "reference-compatible"}
    assert all(entry["level"] == 0.9 and entry["count"] <= 1 for entry in calibration["modes"].values())


def test_rerun_has_nothing_to_do(smoke_run: Path) -> None:
    result = run_snakemake("--cores", "2", "--configfile", str(SMOKE), cwd=smoke_run.parent.parent)
    assert "Nothing to be done" in result.stdout + result.stderr


def test_results_of_the_older_layouts_are_moved_not_retrained(smoke_run: Path) -> None:
    """A results directory written before sequence length was an axis and before every run id named its mechanism
    (runs/model=..., data/packed/meta.json, and Snakemake's records naming those paths, as that code left them) is
    moved into the current layout by the next run, which then has nothing to do: no run is retrained, no
    analysis redone."""
    import os

    from dpscaling.workflow.migration import Move, move_snakemake_records

    workdir, root = smoke_run.parent.parent, "results/smoke"
    moves = [Move(f"{root}/{tree}/mech=dpsgd/seq=64/{path.name}", f"{root}/{tree}/{path.name}")
             for tree in ("runs", "checkpoints", "logs/train")
             for path in (smoke_run / tree / "mech=dpsgd" / "seq=64").iterdir()]
    moves += [Move(f"{root}/data/packed/seq=64/{name}", f"{root}/data/packed/{name}")
              for name in ("meta.json", "train", "heldout", "public_unigram.json")]
    moves.append(Move(f"{root}/logs/data/pack_sequences/seq=64.log", f"{root}/logs/data/pack_sequences.log"))
    for move in moves:  # back to the one-length layout, records included
        os.replace(workdir / move.old, workdir / move.new)
    for emptied in ("runs/mech=dpsgd/seq=64", "runs/mech=dpsgd", "checkpoints/mech=dpsgd/seq=64",
                    "checkpoints/mech=dpsgd", "logs/train/mech=dpsgd/seq=64", "logs/train/mech=dpsgd",
                    "data/packed/seq=64", "logs/data/pack_sequences"):
        (smoke_run / emptied).rmdir()
    assert move_snakemake_records(workdir / ".snakemake", moves) > 0
    assert (smoke_run / "runs" / "model=BertNano").is_dir() and not (smoke_run / "runs" / "mech=dpsgd").exists()

    result = run_snakemake("--cores", "2", "--configfile", str(SMOKE), cwd=workdir)
    assert re.search(r"dpscaling: moved \d+ paths of an older layout", result.stderr), result.stderr[-2000:]
    assert "Nothing to be done" in result.stdout + result.stderr
    assert len(list((smoke_run / "runs" / "mech=dpsgd" / "seq=64").rglob("metrics.parquet"))) == 8
    assert not list((smoke_run / "runs").glob("model=*")) and (smoke_run / "data" / "packed" / "seq=64" / "train").is_dir()


def test_one_more_mechanism_schedules_only_its_own_runs(smoke_run: Path, tmp_path: Path) -> None:
    """A run's path depends on its own values only: the finished smoke run's config with one more mechanism
    plans that mechanism's runs, accounting table, law and comparison, and retrains no DP-SGD run."""
    layer = tmp_path / "bandmf.yaml"
    layer.write_text(yaml.safe_dump({"training": {"mechanisms": ["dpsgd", "bandmf-b4"]}}))
    result = run_snakemake("-n", "all", "--configfile", str(SMOKE), str(layer), cwd=smoke_run.parent.parent)
    outputs = [path for paths in re.findall(r"^\s+output: (.*)$", result.stdout, flags=re.MULTILINE)
               for path in paths.split(", ")]
    curves = [path for path in outputs if path.endswith("metrics.parquet")]
    assert curves and all(path.startswith("results/smoke/runs/mech=bandmf-b4/") for path in curves), curves
    assert not [path for path in outputs if "mech=dpsgd" in path]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)\s*$", result.stdout, flags=re.MULTILINE))
    # DP-SGD's own law, its accounting and its data stand: nothing upstream of the new mechanism reruns
    assert not {"fit_law", "accounting_chunk", "accounting_table", "pack_sequences", "bootstrap"} & set(jobs), jobs


# One key per block changed on the finished smoke run: the rules a dry run of `all` plans. A job's params hold
# exactly what decides its output, so a change reruns its stage and what reads it, never an unrelated stage.
# (run_config is every target's record of the config: it is rewritten by any change.)
ONLY_RECORD = {"run_config"}
PER_BLOCK = [
    ({"data": {"shard_sequences": 4096}}, "pack_sequences", {"prepare_documents", "accounting_chunk"}),
    ({"training": {"clip_norm": 0.5}}, "train_noise_levels", {"pack_sequences", "accounting_chunk", "unigram_floor"}),
    ({"accounting": {"check_points": 4}}, "accounting_check",
     {"train_run", "train_noise_levels", "fit_law", "accounting_chunk", "figure"}),
    ({"fit": {"extension_doublings": 5}}, "fit_law", {"train_run", "train_noise_levels", "collect_curves", "accounting_chunk"}),
    ({"analysis": {"compute_count": 7}}, "figure",
     {"train_run", "train_noise_levels", "fit_law", "accounting_chunk", "validate_law"}),
    # the blocks `all` does not read (the learning-rate protocol's, with rates given), and an unused model, in one
    # layer: nothing but the record reruns
    ({"ablation_batch": {"seeds": [0, 2]}, "audit": {"n_canaries": 400}, "private_model": {"learning_rate": 0.001},
      "learning_rate_protocol": {"steps": 20},
      "models": {"custom": {"Unused": {"layers": 1, "heads": 1, "hidden": 8}}}}, None, None),
]


@pytest.mark.parametrize("change, reruns, untouched", PER_BLOCK, ids=["+".join(c) for c, _, _ in PER_BLOCK])
def test_a_change_reruns_only_the_stages_its_block_decides(smoke_run: Path, tmp_path: Path, change, reruns,
                                                          untouched) -> None:
    import yaml

    smoke = yaml.safe_load(SMOKE.read_text())
    layered = {}
    for block, values in change.items():
        merged = {**smoke.get(block, {}), **values}
        if block == "models":
            merged["custom"] = {**smoke["models"]["custom"], **values["custom"]}
        layered[block] = merged
    layer = tmp_path / "layer.yaml"
    layer.write_text(yaml.safe_dump(layered))
    result = run_snakemake("-n", "--cores", "2", "--configfile", str(SMOKE), str(layer), cwd=smoke_run.parent.parent)
    planned = set(re.findall(r"^(?:local)?rule (\w+):$", result.stdout, flags=re.MULTILINE))
    planned -= {"all"}
    if reruns is None:
        assert planned <= ONLY_RECORD, planned
    else:
        assert reruns in planned and not planned & untouched, planned


def test_accounting_target_builds_a_checked_table(smoke_run: Path) -> None:
    run_snakemake("accounting", "--cores", "2", "--configfile", str(SMOKE), cwd=smoke_run.parent.parent)
    import yaml

    from dpscaling.accounting.table import plan_table
    from dpscaling.accounting.table_spec import TableSpec

    spec = TableSpec.from_mapping(yaml.safe_load(SMOKE.read_text())["accounting"]["table"])
    chunks = sorted((smoke_run / "accounting" / "chunks").glob("chunk-*.parquet"))
    assert len(chunks) == len(plan_table(spec))  # one job per chunk of sampling probabilities
    amplified = pd.read_csv(smoke_run / "accounting" / "accounting_amplified.csv", header=None,
                            names=["Iterations", "Sampling Probability", "Epsilon", "Delta", "Noise Multiplier"])
    assert len(amplified) == spec.size() and (amplified["Delta"] == 1e-8).all()
    by_cell = amplified.set_index(["Iterations", "Sampling Probability", "Epsilon"])["Noise Multiplier"].unstack()
    assert (by_cell.diff(axis=1).iloc[:, 1:] < 0).all().all()  # more epsilon, less noise
    errors = pd.read_csv(smoke_run / "accounting" / "interpolation_errors.csv")
    assert len(errors) == 3 and errors["sigma_direct"].gt(0).all()


def test_every_figure_is_drawn_with_its_data(smoke_run: Path) -> None:
    from dpscaling.report.figures import FIGURES
    from dpscaling.report.figures.common import FLOOR, UNIGRAM_FLOOR

    floor = json.loads((smoke_run / "data" / "unigram_floor.json").read_text())["nats"]
    for name in FIGURES:
        for suffix in (".pdf", ".png", ".csv"):
            path = smoke_run / "figures" / f"{name}{suffix}"
            assert path.is_file() and path.stat().st_size > 0, path
        assert (smoke_run / "logs" / "figures" / f"{name}.log").is_file()
        if FLOOR in FIGURES[name].needs:  # loss figures draw the data stage's held-out unigram entropy
            assert (pd.read_csv(smoke_run / "figures" / f"{name}.csv")[UNIGRAM_FLOOR] == floor).all(), name


def test_tables_satisfy_their_identities(smoke_run: Path) -> None:
    tables = smoke_run / "tables"
    for stem in ("table-models", "tab-throughput", "table-inflection_points"):
        for suffix in (".csv", ".md", ".tex"):
            assert (tables / f"{stem}{suffix}").stat().st_size > 0
    seq_len = 64
    points = pd.read_csv(tables / "table-inflection_points.csv")
    assert len(points) == 2 * 2  # smoke analysis: 2 data budgets x 2 privacy budgets
    answered = points.dropna(subset=["Cross Entropy"])
    assert len(answered) >= 1
    m, b, t = answered["Model Size"], answered["Batch Size"], answered["Iterations"]
    assert ((answered["Token / Model Ratio"] - b * t * seq_len / m).abs() <= 1e-9 * answered["Token / Model Ratio"]).all()
    assert ((answered["Compute"] - 6 * m * b * seq_len * t).abs() <= 1e-9 * answered["Compute"]).all()
    assert ((answered["Noise Batch Ratio"] - answered["Sigma"] / b).abs() <= 1e-12).all()
    models = pd.read_csv(tables / "table-models.csv").set_index("Model")
    curves = pd.concat(pd.read_parquet(p) for p in (smoke_run / "runs").rglob("metrics.parquet"))
    assert models["Params"].to_dict() == curves.groupby("model")["n_params"].first().to_dict()
    throughput = pd.read_csv(tables / "tab-throughput.csv")
    ours = throughput[throughput["Source"].str.startswith("this run")].set_index("Model")
    assert set(ours.index) == {"BertNano", "BertMicro"}
    assert ((ours["Records/sec"] - ours["Steps/sec"] * 8).abs() < 1e-9 * ours["Records/sec"]).all()


def test_findings_are_checked_on_the_run(smoke_run: Path) -> None:
    findings = pd.read_csv(smoke_run / "tables" / "findings.csv")
    assert list(findings["finding"]) == ["a", "b", "c", "d", "e"]
    assert set(findings["verdict"]) <= {"holds", "does not hold"}
    assert findings["measured"].str.len().min() > 0
    assert (smoke_run / "tables" / "findings.md").read_text().startswith("**findings**")


def test_report_has_every_figure_and_table(smoke_run: Path) -> None:
    from dpscaling.report.figures import FIGURES

    run_snakemake("report", "--cores", "2", "--configfile", str(SMOKE), cwd=smoke_run.parent.parent)
    html = (smoke_run / "report.html").read_text(errors="replace")
    for name in FIGURES:
        assert f"{name}.pdf" in html, name
    for stem in ("table-models", "tab-throughput", "table-inflection_points", "findings", "validation"):
        assert f"{stem}.csv" in html
    assert "predicted_vs_measured.pdf" in html
    assert "explorer.html" in html
    page = (smoke_run / "explorer.html").read_text()
    payload = re.search(r'id="explorer-data" type="application/octet-stream">(.*?)</script>', page, re.S).group(1)
    explorer = json.loads(gzip.decompress(base64.b64decode(payload)))
    axes = explorer["axes"]
    assert (axes["epsilon"], axes["data"]) == ([4.0, 16.0], [300.0, 1000.0])
    assert len(explorer["nodes"]) == 4 * len(axes["compute"]) and any("none" not in n for n in explorer["nodes"])
    assert "run_name: smoke" in (smoke_run / "config.yaml").read_text()


def test_private_model_closes_the_loop(smoke_run: Path) -> None:
    import dp_accounting
    import yaml

    from dpscaling.law.physical_batch import PhysicalBatchCorrection

    smoke = yaml.safe_load(SMOKE.read_text())
    budgets = smoke["private_model"]["budgets"]
    out = smoke_run / "private_model"
    table = pd.read_csv(out / "table.csv")
    correction = json.loads((smoke_run / "law" / "physical_batch" / "correction.json").read_text())
    calibration = json.loads((smoke_run / "validate" / "calibration.json").read_text())["modes"]["paper"]
    assert correction["slope"] >= 0 and correction["pairs"] > 0 and correction["grid_batch"] == 8
    assert len(table) == len(budgets)  # every budget answered, trained and reported
    assert sorted(zip(table["epsilon"], table["data_budget"], table["compute"])) == sorted(
        (b["epsilon"], b["data_budget"], b["compute"]) for b in budgets)
    assert set(table["model"]) <= set(smoke["models"]["names"])  # a model the workflow built
    seq_len = smoke["data"]["seq_len"]
    for row in table.itertuples():
        assert row.status == "finished" and row.accountant == "truncated_poisson"
        assert row.dataset_size == row.data_budget  # trained on exactly N sequences, accounted with N
        assert row.trained_compute == pytest.approx(6 * row.model_size * row.batch_size * seq_len * row.iterations)
        assert row.trained_compute == pytest.approx(row.compute, rel=0.1)  # the budget, up to whole steps
        assert row.sigma == pytest.approx(row.planned_sigma)  # the plan priced what the run calibrated
        # L priced by the accountant: truncation costs the run at most ~1% of noise
        assert row.sigma == pytest.approx(row.untruncated_sigma, rel=0.02) and row.sigma >= row.untruncated_sigma
        assert 0 < row.padding_share < 1 and row.truncation_probability < 1e-3
        for value in (row.predicted_loss, row.predicted_loss_5, row.predicted_loss_95, row.achieved_train_loss,
                      row.achieved_heldout_loss, row.audited_epsilon):
            assert np.isfinite(value)
        assert row.predicted_loss_5 <= row.predicted_loss_95
        assert 0 < row.achieved_train_loss < 20 and 0 < row.achieved_heldout_loss < 20
        assert row.audited_epsilon <= row.epsilon  # the matched audit does not flag the private run
        # ε spent, from the run's own curve, recomputed with dp-accounting alone.
        curve = pd.read_parquet(out / row.budget / "metrics.parquet").iloc[-1]
        assert int(curve["accounted_steps"]) == row.iterations and int(curve["dataset_size"]) == row.data_budget
        assert curve["sampling_probability"] == pytest.approx(row.batch_size / row.data_budget, rel=1e-12)
        event = dp_accounting.SelfComposedDpEvent(
            dp_accounting.TruncatedSubsampledGaussianDpEvent(
                dataset_size=int(curve["dataset_size"]), sampling_probability=float(curve["sampling_probability"]),
                truncated_batch_size=int(curve["truncated_batch_size"]), noise_multiplier=float(curve["sigma"])),
            int(curve["accounted_steps"]))
        epsilon = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3).compose(event).get_epsilon(
            float(curve["delta"]))
        assert row.epsilon_spent == pytest.approx(epsilon, rel=5e-3)
        assert row.epsilon_spent <= row.epsilon * (1 + 1e-9) and epsilon <= row.epsilon * 1.005
        evaluation = json.loads((out / row.budget / "evaluation.json").read_text())
        assert evaluation["split"] == "heldout" and evaluation["step"] == row.iterations
        # The cause split: two study twins of the plan (shuffled batches, the private run's σ̄ as the noise on
        # the mean, its T), at the grid's physical batch and at B; the three parts add up to achieved − law.
        for twin, batch in (("grid_batch", smoke["training"]["physical_batch"]),
                            ("recommended_batch", row.twin_recommended_batch)):
            twin_curve = pd.read_parquet(out / row.budget / f"twin_{twin}" / "metrics.parquet").iloc[-1]
            assert (twin_curve["sampler"], int(twin_curve["step"]), int(twin_curve["batch_size"])) == (
                "shuffle", row.iterations, batch)
            assert twin_curve["noise_batch_ratio"] == pytest.approx(row.noise_batch_ratio, rel=1e-12)
        multiple = smoke["training"].get("microbatch_size") or 1  # B rounded to whole microbatches
        assert abs(row.twin_recommended_batch - row.batch_size) <= multiple / 2
        assert row.law_error + row.physical_batch_effect + row.sampler_effect == pytest.approx(
            row.achieved_train_loss - row.law_loss)
        # The physical-batch correction (enabled in the smoke config): the prediction is the law's minus Δ(B).
        plan = json.loads((out / row.budget / "plan.json").read_text())
        assert plan["physical_batch_correction"] == correction
        # What its ε covers (the bundle's record of the smoke config): the vocabulary trained on the public domain,
        # the rate given (one, training.learning_rates), the configuration the law's choice on the private domain;
        # the plan's record in its audit's report and the table.
        covers = plan["epsilon_covers"]
        assert {name: choice["domain"] for name, choice in covers["chosen_on"].items()} == {
            "vocabulary": "public", "output_bias": "no data", "learning_rate": "no data", "configuration": "private"}
        assert json.loads((out / row.budget / "audit.json").read_text())["epsilon_covers"] == covers
        assert row.epsilon_covers == covers["statement"]
        shift = float(PhysicalBatchCorrection(**correction).shift(row.batch_size, row.noise_batch_ratio,
                                                                   row.model_size))
        assert row.predicted_loss == pytest.approx(row.law_loss - shift, abs=1e-12)
        # The calibrated interval: none here (the smoke's one held-out set, the horizon, is not answered: its
        # fit on T <= 20 has too few points to extrapolate), so NaN and never "inside" (tests/test_private_model.py
        # checks the interval itself).
        assert calibration["half_width"] is None and np.isnan(row.calibrated_low) and not row.inside_calibrated
    markdown = (out / "table.md").read_text()
    assert "ε covers only the private run's own noisy steps" in markdown  # the caption says it once
    assert "bootstrap replicates" in markdown and markdown.count("| BertNano") + markdown.count("| BertMicro") == len(budgets)
    for suffix in ("pdf", "png", "csv"):
        assert (out / f"predicted_vs_achieved.{suffix}").stat().st_size > 0


def test_savings_trains_the_answer_its_fraction_a_baseline_and_a_neighbour_privately(smoke_run: Path) -> None:
    import dp_accounting
    import yaml

    smoke = yaml.safe_load(SMOKE.read_text())
    out = smoke_run / "savings"
    runs, table = pd.read_csv(out / "runs.csv"), pd.read_csv(out / "table.csv")
    assert sorted(runs["role"]) == ["answer", "answer_seed1", "baseline_dp_expert", "batch_x2"]
    seq_len = smoke["data"]["seq_len"]
    answer = runs[runs["role"] == "answer"].iloc[0]
    for row in runs.itertuples():
        assert (row.status, row.accountant, row.sampler) == ("finished", "truncated_poisson", "truncated_poisson")
        assert row.trained_compute == pytest.approx(6 * row.model_size * row.batch_size * seq_len * row.iterations)
        # the baseline and the neighbour spend the answer's compute
        assert row.trained_compute == pytest.approx(answer.trained_compute, rel=0.01)
        # ε: the run's accountant, the report's recomputation and dp-accounting here agree on the budget's ε
        curve = pd.read_parquet(out / row.budget / row.role / "metrics.parquet").iloc[-1]
        assert int(curve["dataset_size"]) == row.data_budget and int(curve["accounted_steps"]) == row.iterations
        event = dp_accounting.SelfComposedDpEvent(dp_accounting.TruncatedSubsampledGaussianDpEvent(
            int(curve["dataset_size"]), float(curve["sampling_probability"]), int(curve["truncated_batch_size"]),
            float(curve["sigma"])), int(curve["accounted_steps"]))
        epsilon = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3).compose(event).get_epsilon(
            float(curve["delta"]))
        assert row.epsilon_spent == pytest.approx(epsilon, rel=5e-3) == pytest.approx(row.epsilon_recomputed, rel=5e-3)
        assert epsilon == pytest.approx(row.epsilon, rel=5e-3) and row.epsilon_spent <= row.epsilon * (1 + 1e-9)
        assert 0 < row.heldout_loss < 20 and np.isfinite(row.train_loss)
        assert row.epsilon_covers.startswith("ε covers only") and "configuration" in row.epsilon_covers
    seeds = runs[runs["kind"] == "answer"]
    assert sorted(seeds["seed"]) == [0, 1] and seeds["batch_size"].nunique() == seeds["iterations"].nunique() == 1
    row = table.iloc[0]
    assert row.seed_spread == pytest.approx(seeds["heldout_loss"].max() - seeds["heldout_loss"].min())
    assert row.answer_heldout == pytest.approx(seeds["heldout_loss"].mean())
    assert row.best_baseline == "dp_expert" and row.regret >= 0
    neighbour = runs.loc[runs["role"] == "batch_x2", "heldout_loss"].iloc[0]
    assert row.regret == pytest.approx(max(0.0, row.answer_heldout - neighbour))
    assert np.isnan(row.measured_saving) or row.measured_saving == 1.0  # no fraction of C was trained
    for stem in ("baseline_compare_measured", "savings", "regret_by_budget"):
        for suffix in ("pdf", "png", "csv"):
            assert (out / f"{stem}.{suffix}").stat().st_size > 0
    worth = pd.read_csv(out / "worth.csv").set_index("budget")  # the law's answer against the one rule
    assert list(worth.index) == [row.budget, "worst", "mean"]
    law, expert = row.answer_heldout, runs.loc[runs["role"] == "baseline_dp_expert", "heldout_loss"].iloc[0]
    assert worth.loc[row.budget, "law"] == pytest.approx(law - min(law, expert))
    assert worth.loc[row.budget, "dp_expert"] == pytest.approx(expert - min(law, expert))


def test_a_savings_plan_spends_the_answer_s_compute_in_every_kind_of_run(smoke_run: Path) -> None:
    import dpscaling
    from dpscaling.law.queries import compute_cost
    from dpscaling.private.savings_plan import SavingsSettings, plan_savings

    block = {"budgets": [{"epsilon": 16.0, "data_budget": 1000, "compute": 1e11}], "fractions": [0.5],
             "seeds": [0, 3], "neighbours": ["model_x", "model_div", "batch_x", "batch_div"],
             "baselines": [{"name": "chinchilla", "tokens_per_parameter": 20, "iterations": 30},
                           {"name": "expert", "model": "BertNano", "iterations": 10}]}
    settings = SavingsSettings.from_mapping(block, 1e-8)
    bundle = smoke_run / "law" / "bundle"
    plan = plan_savings(bundle, settings, settings.budgets[0].label, None)
    runs, law = plan["runs"], dpscaling.load_law(bundle)
    assert list(runs) == settings.roles()
    answer = runs["answer"]
    assert (answer["model_size"], answer["batch_size"], answer["iterations"]) == (
        plan["answer"]["model_size"], plan["answer"]["batch_size"], plan["answer"]["iterations"])
    assert [run.get("seed") for run in runs.values()][:2] == [0, 3]
    for role, run in runs.items():
        if "skipped" in run:  # said why, and only a neighbour the family's shapes cannot reach
            assert role.startswith("model_") and "shape" in run["skipped"]
            continue
        assert compute_cost(run["model_shape"]["param_count"], run["batch_size"], run["iterations"],
                          run["seq_len"]) == pytest.approx(run["compute"], rel=1e-12)
        if run["kind"] != "fraction":
            assert run["compute"] == pytest.approx(plan["answer_compute"], rel=0.01), role
        assert run["noise_batch_ratio"] == pytest.approx(run["sigma"] / run["batch_size"])
    assert runs["baseline_chinchilla"]["model_size"] == law.shape_near((plan["answer_compute"] / 120) ** 0.5).param_count
    assert runs["baseline_expert"]["model"] == "BertNano"
    assert runs["batch_x2"]["batch_size"] > answer["batch_size"] > runs["batch_div2"]["batch_size"]
    assert runs["batch_div2"]["iterations"] > answer["iterations"] > runs["batch_x2"]["iterations"]
    half = law.query(5e10, 16.0, users=1000, physical_batch_correction=True, allow_extrapolation=True).runnable
    assert (runs["answer_c2"]["batch_size"], runs["answer_c2"]["iterations"]) == (half.batch_size, half.iterations)


def test_the_law_bundle_answers_alone_with_a_runnable_configuration(smoke_run: Path, tmp_path: Path) -> None:
    """`all` writes law/bundle; copied elsewhere with the results directory gone, it gives the same answer, and
    the answer is runnable: a model shape of the run's family, whole microbatches and steps, σ, the flags."""
    import shutil
    import subprocess
    import sys

    bundle = smoke_run / "law" / "bundle"
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["provenance"]["models"]["BertNano"]["layers"] == 1 and info["provenance"]["vocab_size"] == 7680
    assert info["provenance"]["corpus"]["files_sha256"] and info["contents"]["bootstrap_replicates"] == 4

    def query(law: Path, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dpscaling.cli", "query", "--law", str(law), "--compute", "1e11",
                               "--epsilon", "16", "--users", "1000", "--allow-extrapolation", *extra],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)

    here = query(bundle, "--json")
    assert here.returncode == 0, here.stderr
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy)
    away = smoke_run.parent / "smoke-away"
    smoke_run.rename(away)
    try:
        there = query(copy, "--json")
    finally:
        away.rename(smoke_run)
    assert there.returncode == 0, there.stderr
    answer = json.loads(there.stdout)
    assert answer == json.loads(here.stdout)
    assert answer["model"]["family"] == "bert" and answer["batch_size"] % answer["microbatch_size"] == 0
    assert isinstance(answer["iterations"], int) and answer["sigma"] > 0 and isinstance(answer["flags"], list)
    text = query(copy, "--train-config", str(tmp_path / "train.yaml"))
    assert text.returncode == 0 and "train with   snakemake private_model" in text.stdout
    assert f"B = {answer['batch_size']:,} sequences" in text.stdout and "σ = " in text.stdout


def test_the_answer_s_config_trains_that_configuration(smoke_run: Path, tmp_path: Path) -> None:
    """The config block `dpscaling query --train-config` writes, layered over the run's config, makes
    private_model plan exactly the answer (its model, B, T, learning rate) and price its σ for truncated
    Poisson at the answer's (ε, δ); the grid is untouched."""
    import subprocess
    import sys

    import yaml

    workdir = smoke_run.parent.parent
    block = tmp_path / "answer.yaml"
    result = subprocess.run([sys.executable, "-m", "dpscaling.cli", "query", "--law", str(smoke_run / "law" / "bundle"),
                             "--compute", "1e11", "--epsilon", "16", "--users", "1000", "--allow-extrapolation",
                             "--train-config", str(block), "--json"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    layer = yaml.safe_load(block.read_text())
    smoke = yaml.safe_load(SMOKE.read_text())
    merged = {**layer, "models": {**smoke["models"], "custom": {**smoke["models"]["custom"],
                                                                  **layer.get("models", {}).get("custom", {})}}}
    merged["private_model"] = {**smoke["private_model"], "budgets": layer["private_model"]["budgets"]}
    (tmp_path / "layer.yaml").write_text(yaml.safe_dump(merged))
    planned = run_snakemake("-n", "private_model", "--cores", "2", "--configfile", str(SMOKE),
                            str(tmp_path / "layer.yaml"), cwd=workdir).stdout
    assert "rule train_run" not in planned and "rule private_model_plan" in planned  # the grid is untouched
    label = re.search(r"private_model/([^/\s]+)/plan\.json", planned).group(1)
    run_snakemake(f"results/smoke/private_model/{label}/plan.json", "--cores", "1", "--configfile", str(SMOKE),
                  str(tmp_path / "layer.yaml"), cwd=workdir)
    plan = json.loads((smoke_run / "private_model" / label / "plan.json").read_text())
    assert plan["model"] == answer["model"]["name"] and plan["model_size"] == answer["model_size"]
    assert (plan["batch_size"], plan["iterations"]) == (answer["batch_size"], answer["iterations"])
    assert plan["learning_rate"] == answer["learning_rate"] and plan["query"]["fixed"]
    if answer["sampling"] == "poisson":  # truncated Poisson at its priced L: at most ~1% more noise
        assert plan["sigma"] == pytest.approx(answer["sigma"], rel=0.02)
    else:  # the min rule answered with fixed batches' lower σ; the private run pays Poisson's
        assert plan["sigma"] >= answer["sigma"]
