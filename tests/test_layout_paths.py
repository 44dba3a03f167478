"""Where the workflow's outputs live (dpscaling.layout): run ids built from the declared run axes, and the
files beside a fitted law."""

from __future__ import annotations

from pathlib import Path

from dpscaling.grid import TrainPoint
from dpscaling.layout import (
    ABLATION, CALIBRATION, FIT, ONE_LENGTH_AXES, PRIMARY_LAW, REPLICATES, RUN_AXES, Axis, calibration_beside,
    bootstrap_beside, run_constraints, run_id, run_paths)

GRID_RUN = TrainPoint("BertNano", 32, 0, 0.25, 0.5, 128)
ABLATION_RUN = TrainPoint("BertNano", 64, 1, 0.0, 0.5)
# A throw-away axis added after results exist, at the end of the id, left out at its default.
MECHANISM = Axis("mech", "mechanism", default="gaussian")


def _curve(axes: tuple[Axis, ...], point: dict[str, str]) -> str:
    return run_paths(run_id(axes, [point])).curve.format(**point)


def test_the_declared_axes_give_the_run_paths_results_were_written_at() -> None:
    run = "seq=128/model=BertNano/batch=32/seed=0/nbr=0.25/lr=0.5"
    paths = run_paths(run_id(RUN_AXES, [GRID_RUN.wildcards]))
    assert paths.curve.format(**GRID_RUN.wildcards) == f"runs/{run}/metrics.parquet"
    assert paths.checkpoints.format(**GRID_RUN.wildcards) == f"checkpoints/{run}"
    assert paths.log.format(**GRID_RUN.wildcards) == f"logs/train/{run}.log"
    ablation = run_paths(run_id(ONE_LENGTH_AXES), ABLATION)
    one_length = "model=BertNano/batch=64/seed=1/nbr=0/lr=0.5"
    assert ablation.curve.format(**ABLATION_RUN.wildcards) == f"ablation/runs/{one_length}/metrics.parquet"
    assert ablation.checkpoints.format(**ABLATION_RUN.wildcards) == f"ablation/checkpoints/{one_length}"
    assert ablation.log.format(**ABLATION_RUN.wildcards) == f"logs/ablation/train/{one_length}.log"


def test_a_new_axis_at_its_default_leaves_every_path_and_at_another_value_adds_a_level() -> None:
    axes = (*RUN_AXES, MECHANISM)
    before = GRID_RUN.wildcards
    # Runs that do not know the axis yet, or name its default: the paths of results already written.
    assert run_id(axes, [before]) == run_id(RUN_AXES)
    assert _curve(axes, {**before, "mechanism": "gaussian"}) == _curve(RUN_AXES, before)
    # Another value: a level of its own, after the existing ones.
    laplace = {**before, "mechanism": "laplace"}
    assert run_id(axes, [before, laplace]) == f"{run_id(RUN_AXES)}/mech={{mechanism}}"
    assert _curve(axes, laplace) == _curve(RUN_AXES, before).replace("/metrics.parquet", "/mech=laplace/metrics.parquet")
    assert run_constraints(axes, [laplace, {**before, "mechanism": "gaussian"}])["mechanism"] == "gaussian|laplace"


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


def test_the_mechanism_axis_leads_the_id_only_in_a_run_that_trains_another_mechanism() -> None:
    bandmf = TrainPoint("BertNano", 32, 0, 0.25, 0.5, 128, "bandmf-b4")
    assert run_id(RUN_AXES, [GRID_RUN.wildcards]) == run_id(RUN_AXES)  # DP-SGD only: the paths of before
    mixed = run_id(RUN_AXES, [GRID_RUN.wildcards, bandmf.wildcards])
    assert run_paths(mixed).curve.format(**bandmf.wildcards) == (
        "runs/mech=bandmf-b4/seq=128/model=BertNano/batch=32/seed=0/nbr=0.25/lr=0.5/metrics.parquet")
    assert run_paths(mixed).curve.format(**GRID_RUN.wildcards).startswith("runs/mech=dpsgd/seq=128/")
