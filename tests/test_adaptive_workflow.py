"""The adaptive design end to end on the smoke grid (docs/adaptive-design.md): the seed design, a round chosen by
the committee, runs continued from the run one horizon shorter, every round recorded, the design's law bundle
answering queries, and the stopped design continued to one more round from its records."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, run_snakemake

CONFIGS = REPO / "tests" / "configs"
CONFIG_FILES = ("--configfile", str(CONFIGS / "smoke.yaml"), str(CONFIGS / "smoke-adaptive.yaml"))

pytestmark = pytest.mark.slow(minutes=4)


@pytest.fixture(scope="module")
def design_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("adaptive")
    run_snakemake("adaptive", "--cores", "2", *CONFIG_FILES, cwd=workdir, timeout=1200)
    return workdir


def _results(workdir: Path) -> Path:
    return workdir / "results" / "smoke-adaptive"


def _records(workdir: Path) -> list[dict]:
    paths = sorted((_results(workdir) / "design" / "rounds").glob("round-*.json"),
                   key=lambda path: int(path.stem.split("-")[1]))
    return [json.loads(path.read_text()) for path in paths]


def _curve(workdir: Path, run: dict) -> pd.DataFrame:
    from dpscaling.design.plan import run_of_record
    from dpscaling.design.rounds import design_wildcards

    wildcards = design_wildcards(run_of_record(run), 8)
    path = ("design/runs/model={model}/batch={batch}/seed={seed}/nbr={nbr}/lr={lr}/steps={steps}/metrics.parquet"
            .format(**wildcards))
    return pd.read_parquet(_results(workdir) / path)


def test_the_design_runs_its_rounds_and_stops_at_the_limit(design_run: Path) -> None:
    records = _records(design_run)
    # the seed design, a round that chooses, and the round that stops at the limit with the final law's answers
    assert [record["round"] for record in records] == [0, 1, 2]
    assert all(c["kind"] == "seed design" for c in records[0]["chosen"]) and not records[0]["answers"]
    assert [bool(record["stopped"]) for record in records] == [False, False, True]
    assert records[-1]["stopped"] == "the round limit (1)"
    for before, after in zip(records, records[1:]):
        # what a round trained is what the rounds before it chose, and it never chose a run twice
        chosen = {json.dumps({k: c[k] for k in after["trained"][0]}, sort_keys=True) for c in before["chosen"]}
        trained = {json.dumps(r, sort_keys=True) for r in after["trained"]}
        earlier = {json.dumps(r, sort_keys=True) for r in before["trained"]}
        assert trained == earlier | chosen and not earlier & chosen
    for record in records[1:]:
        assert len(record["answers"]) == len(record["targets"]) == 1 and record["widths"][0] > 0
        assert len(record["chosen"]) <= 2
        assert all(c["kind"] in {"new point", "longer horizon", "repeated seed"} for c in record["chosen"])
        assert all(c["variance_reduction"] > 0 for c in record["chosen"])


def test_the_recorded_flops_are_the_runs_own(design_run: Path) -> None:
    """Each round's FLOPs, recomputed from the trained curves' own parameter counts: 6 M B S T per point and
    seed at its longest horizon (an extension pays only its added steps)."""
    final = _records(design_run)[-1]
    longest: dict[tuple, dict] = {}
    for run in final["trained"]:
        key = (run["model"], run["noise_batch_ratio"], run["learning_rate"], run["seed"])
        if key not in longest or run["steps"] > longest[key]["steps"]:
            longest[key] = run
    total = 0.0
    for run in longest.values():
        curve = _curve(design_run, run)
        assert int(curve["step"].max()) == run["steps"]
        total += 6 * float(curve["n_params"].iloc[0]) * 8 * 64 * run["steps"]
    assert final["flops"] == pytest.approx(total, rel=1e-12)
    assert 0 < final["flops"] <= final["compute_cap"]
    assert final["seconds"] > 0


def test_a_longer_horizon_continues_the_shorter_run(design_run: Path) -> None:
    """An extension's first steps are the shorter run's own (it continued from its checkpoint), and the rest
    of its curve is its own."""
    extended = [c for record in _records(design_run) for c in record["chosen"] if c["kind"] == "longer horizon"]
    assert extended
    for run in extended:
        longer = _curve(design_run, run)
        shorter = _curve(design_run, {**run, "steps": 40})
        head = longer[longer["step"] <= 40].reset_index(drop=True)
        pd.testing.assert_series_equal(head["loss"], shorter["loss"])
        assert len(longer) == 8


def test_the_report_and_the_bundle(design_run: Path, capsys) -> None:
    from dpscaling.cli import main

    results = _results(design_run)
    table = pd.read_csv(results / "design" / "rounds.csv")
    assert list(table["round"]) == [1, 2]
    assert table["FLOPs share of grid"].is_monotonic_increasing
    assert (results / "design" / "intervals.pdf").stat().st_size > 0
    capsys.readouterr()
    status = main(["query", "--law", str(results / "design" / "law" / "bundle"), "--compute", "1e11", "--epsilon",
                   "16", "--users", "1000", "--json"])
    answer = json.loads(capsys.readouterr().out)
    assert status == 0 and answer["model_size"] > 0 and answer["iterations"] > 0


def test_a_stopped_design_continues_from_its_records(design_run: Path, tmp_path: Path) -> None:
    """Done is done (nothing to rerun); a lost record is planned again from the one before it. With one more round
    (adaptive_design.rounds 1 -> 2) the round that stopped at the limit is planned again from the same runs, to the
    same answers, and now chooses; only its runs train, and the next round stops at the new limit. (The last test of
    the design run: it leaves the design one round longer.)"""
    import shutil

    dry = run_snakemake("adaptive", "-n", *CONFIG_FILES, cwd=design_run)
    assert "Nothing to be done" in dry.stdout + dry.stderr
    design = _results(design_run) / "design"
    stopped = design / "rounds" / "round-2.json"
    kept = json.loads(stopped.read_text())
    earlier = {path.name: path.read_bytes() for path in (design / "rounds").glob("round-*.json") if path != stopped}
    aside = tmp_path / "round-2.json"
    shutil.move(stopped, aside)  # a lost record is planned again from the one before it, retraining nothing
    lost = run_snakemake(str(stopped.relative_to(design_run)), "-n", *CONFIG_FILES, cwd=design_run).stdout
    assert "design_round:" in lost and "wildcards: round=2" in lost and "design_train" not in lost
    shutil.move(aside, stopped)
    longer = tmp_path / "longer.yaml"
    longer.write_text("adaptive_design:\n  rounds: 2\n")
    rerun = run_snakemake("adaptive", "--cores", "2", *CONFIG_FILES, str(longer), cwd=design_run)
    continued = json.loads(stopped.read_text())
    assert continued["trained"] == kept["trained"] and continued["answers"] == pytest.approx(kept["answers"], abs=1e-9)
    assert kept["stopped"] == "the round limit (1)" and not continued["stopped"] and continued["chosen"]
    trained = re.findall(r"^(?:local)?rule design_train:$", rerun.stdout + rerun.stderr, flags=re.MULTILINE)
    assert len(trained) == len(continued["chosen"])  # only round 2's runs; no earlier run is trained again
    last = json.loads((design / "rounds" / "round-3.json").read_text())
    assert last["stopped"] == "the round limit (2)" and len(last["trained"]) == len(kept["trained"]) + len(trained)
    assert {path.name: path.read_bytes() for path in (design / "rounds").glob("round-[0-1].json")} == earlier


def test_a_design_that_cannot_continue_its_runs_is_refused() -> None:
    import yaml

    from dpscaling.config.schema import validate_config
    from dpscaling.core.errors import UserError
    from dpscaling.config.checks import check_config

    base = {**yaml.safe_load((CONFIGS / "smoke.yaml").read_text()), "design": "adaptive"}
    for change, key in (({"sampling": "truncated_poisson"}, "training.sampling"),
                        ({"seed": 1}, "adaptive_design.repeat_seeds"),
                        ({"steps": 45, "decay_steps": 45}, "training.steps"),
                        ({"schedule": "constant_cooldown"}, "training.schedule")):
        config = {**base, "training": {**base["training"], **change}}
        validate_config(config, REPO / "workflow" / "schemas" / "config.schema.yaml")
        with pytest.raises(UserError, match=key.replace(".", r"\.")):
            check_config(config)
    config = {**base, "design": "sometimes"}
    with pytest.raises(Exception, match="design"):
        validate_config(config, REPO / "workflow" / "schemas" / "config.schema.yaml")


def test_the_paper_grid_plans_its_seed_design_on_slurm(tmp_path: Path) -> None:
    """config/paper.yaml with design: adaptive: round 0 (the seed design, which needs no data) runs here, then a
    dry run on profiles/slurm-gpu plans its training jobs with the cluster's resources."""
    paper = ("--configfile", str(REPO / "config" / "paper.yaml"), "--config", "design=adaptive")
    run_snakemake("results/paper/design/rounds/round-0.json", "--cores", "1", *paper, cwd=tmp_path)
    record = json.loads((tmp_path / "results/paper/design/rounds/round-0.json").read_text())
    assert record["horizons"] == [32000, 64000, 128000]
    # corners and centre of 6 models x 18 noisy sigma-bar, sigma-bar = 0 at three models, the smallest's 3 twice more
    assert len(record["chosen"]) == 14 and {c["steps"] for c in record["chosen"]} == {32000}
    assert sum(c["flops"] for c in record["chosen"]) < 0.02 * record["grid_flops"]
    dry = run_snakemake("-n", "adaptive", "--profile", str(REPO / "profiles" / "slurm-gpu"), *paper, cwd=tmp_path)
    out = dry.stdout + dry.stderr
    assert out.count("rule design_train:") == 14 and "gpu=1" in out
