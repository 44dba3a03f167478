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
    assert {"ablation_batch", "lr_curves", "throughput", "nonprivate"} <= rules  # docs/appendix-experiments.md


def test_results_csv_is_fitted_and_tabulated_without_training(tmp_path) -> None:
    """With the authors' results.csv the law is fitted and queried without training anything."""
    import pandas as pd

    from dpscaling.law.synthetic import synthetic_results

    names = {"Synthetic0": "BertTiny", "Synthetic1": "BertMini", "Synthetic2": "BertSmall"}
    results = synthetic_results(model_sizes=(4.5e6, 11.4e6, 29e6), steps=4000, log_every=100)
    results = results.assign(Model=results["Model"].map(names))
    csv = tmp_path / "results.csv"
    results[["Model", "Learning Rate", "Iterations", "Noise Batch Ratio", "Cross Entropy"]].to_csv(csv, index=False)
    config = REPO / "tests" / "configs" / "smoke.yaml"
    args = ["--cores", "2", "--configfile", str(config), "--config", f"results_csv={csv}"]
    run_snakemake("tables", "results/smoke/figures/fig-nonprivate_reproduction.pdf", *args, cwd=tmp_path,
                  timeout=1200)
    run_dir = tmp_path / "results" / "smoke"
    # A loss figure without this run's data: no unigram floor, and its CSV says why (docs/data.md).
    figure = pd.read_csv(run_dir / "figures" / "fig-nonprivate_reproduction.csv")
    assert figure["Unigram Floor"].isna().all() and figure["Unigram Floor Note"].str.contains("results.csv").all()
    assert not (run_dir / "data").exists()
    assert (run_dir / "law" / "fit" / "manifest.json").is_file()
    assert not (run_dir / "runs").exists()  # nothing was trained
    # Only the law's table: the models and throughput tables describe training runs there are none of.
    assert sorted(p.name for p in (run_dir / "tables").glob("*.csv")) == ["table-inflection_points.csv"]
    table = pd.read_csv(run_dir / "tables" / "table-inflection_points.csv")
    assert len(table) == 2 * 2  # smoke: 2 data budgets x 2 privacy budgets, answered or with a reason
