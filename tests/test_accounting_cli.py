"""`dpscaling sigma | epsilon | vulnerability | truncation`: output and errors."""

from __future__ import annotations

import argparse
import json

import pytest

from dpscaling import cli
from dpscaling.accounting import pricing
from dpscaling.accounting.calibration import calibrate_poisson
from dpscaling.cli import accounting as accounting_commands
from dpscaling.core.errors import UserError

CONFIG = ["--users", "1e6", "--batch", "1e4", "--steps", "1000"]


def run(argv: list[str]) -> int:
    """Parse with a parser holding only these subcommands (the lead wires them into cli.py)."""
    parser = argparse.ArgumentParser(prog="dpscaling")
    accounting_commands.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_sigma_json_has_the_documented_keys(capsys):
    assert run(["sigma", "--epsilon", "4", *CONFIG, "--rule", "paper", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"sigma", "noise_batch_ratio", "epsilon", "delta", "rule", "sampler", "note"} <= result.keys()
    assert result["sigma"] == pytest.approx(pricing.paper_sigma("dpsgd", "min", 4.0, 1e-8, 0.01, 1000)[0], rel=1e-9)
    assert result["noise_batch_ratio"] == pytest.approx(result["sigma"] / 1e4)
    assert result["delta"] == 1e-8 and result["rule"] == "paper" and result["sampler"] is None
    assert "no sampler runs it" in result["note"]


def test_sigma_text_output_and_sampling_flag(capsys):
    run(["sigma", "--epsilon", "4", *CONFIG, "--sampling", "deterministic", "--delta", "1e-6"])
    out = capsys.readouterr().out
    assert "noise_batch_ratio" in out and "shuffle" in out and "max_participations" in out
    assert "None" not in out  # the text leaves out what a run of this sampler has not


def test_epsilon_round_trips_sigma(capsys):
    run(["sigma", "--epsilon", "2", *CONFIG, "--json", "--rule", "paper", "--sampling", "poisson"])
    sigma = json.loads(capsys.readouterr().out)["sigma"]
    run(["epsilon", "--sigma", str(sigma), *CONFIG, "--json", "--rule", "paper", "--sampling", "poisson"])
    assert json.loads(capsys.readouterr().out)["epsilon"] == pytest.approx(2.0, rel=2e-3)


def test_vulnerability_reports_advantage(capsys):
    run(["vulnerability", "--epsilon", "8", *CONFIG, "--rule", "paper", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert 0 < result["mia_advantage"] < 1
    run(["vulnerability", "--sigma", "100", "--users", "1", "--batch", "1", "--steps", "100", "--rule", "paper",
         "--json"])
    assert json.loads(capsys.readouterr().out)["mia_advantage"] == pytest.approx(0.0398776, rel=1e-4)


@pytest.mark.parametrize("argv,flag", [
    (["sigma", "--epsilon", "-1", *CONFIG], "--epsilon"),
    (["sigma", "--epsilon", "1", "--users", "10", "--batch", "100", "--steps", "10"], "--batch"),
    (["sigma", "--epsilon", "1", "--users", "0", "--batch", "1", "--steps", "10"], "--users"),
    (["sigma", "--epsilon", "1", *CONFIG[:4], "--steps", "1.5"], "--steps"),
    (["sigma", "--epsilon", "1", *CONFIG, "--delta", "2"], "--delta"),
    (["epsilon", "--sigma", "0", *CONFIG], "--sigma"),
    (["vulnerability", *CONFIG], "--epsilon"),
    (["truncation", "--epsilon", "4", "--users", "2000.5", "--batch", "50", "--steps", "10"], "--users"),
    (["truncation", "--epsilon", "4", "--users", "2000", "--batch", "50", "--steps", "10", "--lengths", "40"],
     "--lengths"),
])
def test_errors_name_the_flag(argv, flag):
    with pytest.raises(UserError, match=flag):
        run(argv)


def test_truncation_prices_l_and_shows_the_trade(capsys):
    argv = ["truncation", "--epsilon", "4", "--users", "20000", "--batch", "181", "--steps", "289",
            "--multiple", "8", "--lengths", "240"]
    assert run([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    priced = result["truncated_batch_size"]
    assert priced % 8 == 0 and priced > 240
    assert result["sigma"] == pytest.approx(result["untruncated_sigma"], rel=0.02)
    assert result["untruncated_sigma"] == pytest.approx(calibrate_poisson(4.0, 181 / 20000, 289), rel=1e-9)
    by_length = {row["truncated_batch_size"]: row for row in result["trade"]}
    assert set(by_length) == {240, priced}
    assert by_length[240]["extra_noise"] > 0.2 > by_length[priced]["extra_noise"]
    assert by_length[240]["padding_share"] < by_length[priced]["padding_share"] == result["padding_share"]
    assert run(argv) == 0
    assert "extra noise" in capsys.readouterr().out


def test_unknown_sampling_is_rejected_by_argparse():
    with pytest.raises(SystemExit):
        run(["sigma", "--epsilon", "1", *CONFIG, "--sampling", "uniform"])


def test_wired_into_main_cli_exit_status(capsys):
    assert cli.main(["sigma", "--epsilon", "-1", *CONFIG]) == 2
    assert "--epsilon" in capsys.readouterr().err


def test_accounting_table_steps_build_a_table(tmp_path, capsys):
    spec = json.dumps({"epsilon_min": 2.0, "epsilon_max": 8.0, "steps_min": 1000, "steps_max": 1500,
                       "q_min_log2": -2, "q_per_octave": 1})
    run(["accounting-table", "plan", "--spec-json", spec, "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert plan["chunks"] == 3
    chunks = [str(tmp_path / f"c{i}.parquet") for i in range(plan["chunks"])]
    for index, path in enumerate(chunks):
        run(["accounting-table", "chunk", "--spec-json", spec, "--index", str(index), "--output", path])
    out = str(tmp_path / "table.parquet")
    run(["accounting-table", "merge", *chunks, "--output", out,
         "--amplified-csv", str(tmp_path / "a.csv"), "--unamplified-csv", str(tmp_path / "u.csv")])
    run(["accounting-table", "check", "--table", out, "--points", "3", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["points"] == 3 and report["max_relative_error"] < 0.05
    with pytest.raises(UserError, match="chunk index"):
        run(["accounting-table", "chunk", "--spec-json", spec, "--index", "9", "--output", chunks[0]])
    with pytest.raises(UserError, match="unknown"):
        run(["accounting-table", "plan", "--spec-json", '{"epsilon_maximum": 3}'])
