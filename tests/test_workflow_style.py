"""The workflow stays snakefmt-formatted and `snakemake --lint` clean."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO, run_snakemake


def test_snakefmt_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_snakemake_lint_clean(tmp_path) -> None:
    result = run_snakemake("--lint", cwd=tmp_path, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "good condition" in output


def test_named_targets_exist(tmp_path) -> None:
    result = run_snakemake("--list-rules", cwd=tmp_path)
    rules = set(result.stdout.split())
    assert {"all", "data", "train", "accounting", "fit", "figures", "tables", "report"} <= rules


def test_results_csv_is_fitted_and_unbuilt_stages_fail_loudly(tmp_path) -> None:
    """With the authors' results.csv the law is fitted without training; figures are not built yet."""
    from dpscaling.law.synthetic import synthetic_results

    names = {"Synthetic0": "BertTiny", "Synthetic1": "BertMini", "Synthetic2": "BertSmall"}
    results = synthetic_results(model_sizes=(4.5e6, 11.4e6, 29e6), steps=4000, log_every=100)
    results = results.assign(Model=results["Model"].map(names))
    csv = tmp_path / "results.csv"
    results[["Model", "Learning Rate", "Iterations", "Noise Batch Ratio", "Cross Entropy"]].to_csv(csv, index=False)
    config = REPO / "tests" / "configs" / "smoke.yaml"
    args = ["--cores", "1", "--configfile", str(config), "--config", f"results_csv={csv}"]
    run_snakemake("fit", *args, cwd=tmp_path)
    assert (tmp_path / "results" / "smoke" / "law" / "fit" / "manifest.json").is_file()
    assert not (tmp_path / "results" / "smoke" / "runs").exists()  # nothing was trained
    result = run_snakemake("figures", *args, cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert "not built yet" in result.stdout + result.stderr
    assert not (tmp_path / "results" / "smoke" / "figures").exists()
