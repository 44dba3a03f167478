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


