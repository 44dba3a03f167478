"""Where the workflow's outputs live (dpscaling.workflow.layout): run ids built from the declared run axes, and the
files beside a fitted law."""

from __future__ import annotations

from pathlib import Path

from dpscaling.workflow.grid import TrainPoint
from dpscaling.workflow.layout import (
    ABLATION, CALIBRATION, FIT, ONE_LENGTH_AXES, PRIMARY_LAW, REPLICATES, RUN_AXES, calibration_beside,
    bootstrap_beside, run_constraints, run_id, run_paths)

GRID_RUN = TrainPoint("BertNano", 32, 0, 0.25, 0.5, 128)
ABLATION_RUN = TrainPoint("BertNano", 64, 1, 0.0, 0.5)


def test_the_declared_axes_give_the_run_paths_results_were_written_at() -> None:
    run = "mech=dpsgd/seq=128/model=BertNano/batch=32/seed=0/nbr=0.25/lr=0.5"
    paths = run_paths(run_id(RUN_AXES))
    assert paths.curve.format(**GRID_RUN.wildcards) == f"runs/{run}/metrics.parquet"
    assert paths.checkpoints.format(**GRID_RUN.wildcards) == f"checkpoints/{run}"
    assert paths.log.format(**GRID_RUN.wildcards) == f"logs/train/{run}.log"
    ablation = run_paths(run_id(ONE_LENGTH_AXES), ABLATION)
    one_length = "mech=dpsgd/model=BertNano/batch=64/seed=1/nbr=0/lr=0.5"
    assert ablation.curve.format(**ABLATION_RUN.wildcards) == f"ablation/runs/{one_length}/metrics.parquet"
    assert ablation.checkpoints.format(**ABLATION_RUN.wildcards) == f"ablation/checkpoints/{one_length}"
    assert ablation.log.format(**ABLATION_RUN.wildcards) == f"logs/ablation/train/{one_length}.log"


def test_a_runs_path_depends_on_its_own_values_only() -> None:
    """Another mechanism (or any other value) beside a run leaves the run's path as it was."""
    bandmf = TrainPoint("BertNano", 32, 0, 0.25, 0.5, 128, "bandmf-b4")
    curve = run_paths(run_id(RUN_AXES)).curve
    assert curve.format(**GRID_RUN.wildcards) == \
        "runs/mech=dpsgd/seq=128/model=BertNano/batch=32/seed=0/nbr=0.25/lr=0.5/metrics.parquet"
    assert curve.format(**bandmf.wildcards).startswith("runs/mech=bandmf-b4/seq=128/")
    assert [axis.name for axis in RUN_AXES] == ["mech", "seq", "model", "batch", "seed", "nbr", "lr"]


def test_the_constraints_are_the_values_the_runs_take() -> None:
    constraints = run_constraints(RUN_AXES, [GRID_RUN.wildcards, ABLATION_RUN.wildcards])
    assert constraints == {"mech": "dpsgd", "seq": "128", "model": "BertNano", "batch": "32|64", "seed": "0|1", "nbr": r"0|0\.25",
                           "lr": r"0\.5"}


def test_a_fitted_laws_replicates_and_calibration_are_where_the_workflow_writes_them(tmp_path: Path) -> None:
    law = tmp_path / PRIMARY_LAW / FIT
    assert bootstrap_beside(law) / "replicates.parquet" == tmp_path / PRIMARY_LAW / REPLICATES
    assert calibration_beside(law) == tmp_path / CALIBRATION
    assert bootstrap_beside(tmp_path / "law" / "lengths" / "seq=64" / "fit") == \
        tmp_path / "law" / "lengths" / "seq=64" / "bootstrap"
