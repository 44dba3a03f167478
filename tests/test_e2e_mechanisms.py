"""DP-BandMF as an axis of the grid, end to end on the smoke config (docs/mechanisms.md): DP-SGD and BandMF
b = 4 runs, an accounting table, law and validation per mechanism, mechanisms.json, and answers that choose."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import dp_accounting
import pandas as pd
import pytest

from conftest import REPO, run_snakemake

CONFIGS = REPO / "tests" / "configs"

pytestmark = pytest.mark.slow(minutes=3)


@pytest.fixture(scope="module")
def mechanisms_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("mechanisms")
    run_snakemake("mechanisms", "private_model", "--cores", "2", "--configfile", str(CONFIGS / "smoke.yaml"),
                  str(CONFIGS / "smoke-mechanisms.yaml"), cwd=workdir, timeout=1200)
    return workdir / "results" / "smoke-mechanisms"


def _query(run: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpscaling.cli", "query", "--law", str(run / "law" / "mechanisms"),
                           "--compute", "1e11", "--epsilon", "16", "--users", "1000", *extra],
                          capture_output=True, text=True, timeout=600, cwd=run.parent.parent)


def test_each_mechanism_trains_its_own_runs(mechanisms_run: Path) -> None:
    bandmf = sorted((mechanisms_run / "runs" / "mech=bandmf-b4").rglob("metrics.parquet"))
    dpsgd = sorted((mechanisms_run / "runs" / "mech=dpsgd").rglob("metrics.parquet"))
    # 2 models x 3 noise-batch ratios; sigma-bar = 0 adds no noise, so BandMF's law shares DP-SGD's runs there
    assert len(dpsgd) == 6 and len(bandmf) == 4
    assert not any("nbr=0/" in str(path) for path in bandmf)
    curve = pd.read_parquet(bandmf[0])
    assert set(curve["mechanism"]) == {"bandmf-b4"} and set(curve["bands"]) == {4}
    coefficients = json.loads(curve["bandmf_coefficients"].iloc[0])
    assert len(coefficients) == 4 and math.isclose(sum(c * c for c in coefficients), 1.0, rel_tol=1e-9)
    assert "mechanism" not in pd.read_parquet(dpsgd[0]).columns  # a DP-SGD curve is as it always was


def test_the_bandmf_table_is_dpsgd_at_the_reduced_coordinates(mechanisms_run: Path) -> None:
    """Entries recomputed independently: ε of jax-privacy's amplified BandMF event at the table's σ is the
    table's ε; a group smaller than the batch (b·q > 1) has no entry."""
    from jax_privacy.experimental.accounting import amplified_bandmf_event

    table = pd.read_parquet(mechanisms_run / "accounting" / "mech=bandmf-b4" / "sigma_table.parquet")
    assert table.loc[table["sampling_probability"] * 4 > 1, "sigma"].isna().all()
    inside = table[(table["sampling_probability"] * 4 <= 1) & table["sigma"].notna()]
    rows = inside[(inside["sampling_probability"] == 2.0**-6) & inside["steps"].isin([40, 160])
                  & inside["epsilon"].isin([1.0, 16.0])]
    assert len(rows) == 4
    for row in rows.itertuples():
        event = amplified_bandmf_event(row.sigma, int(row.steps), num_bands=4, sampling_prob=4 * row.sampling_probability)
        epsilon = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4).compose(event).get_epsilon(row.delta)
        assert epsilon == pytest.approx(row.epsilon, rel=0.02), row
    dpsgd = pd.read_parquet(mechanisms_run / "accounting" / "sigma_table.parquet")
    assert not dpsgd["sigma"].equals(table["sigma"])


def test_each_mechanism_has_its_law_and_validation(mechanisms_run: Path) -> None:
    index = json.loads((mechanisms_run / "law" / "mechanisms" / "mechanisms.json").read_text())
    entries = index["mechanisms"]
    assert index["order"] == ["dpsgd", "bandmf-b4"] and entries["bandmf-b4"]["bands"] == 4
    for entry in entries.values():
        assert (mechanisms_run / "law" / "mechanisms" / entry["law"]).is_dir()
        assert (mechanisms_run / "law" / "mechanisms" / entry["calibration"]).is_file()
    assert (mechanisms_run / "validate" / "mech=bandmf-b4" / "validation.csv").is_file()
    from dpscaling.law.artifact import read_law

    law = read_law(mechanisms_run / "law" / "mechanisms" / "mech=bandmf-b4" / "fit")
    assert law.sigma_table["path"].endswith("accounting/mech=bandmf-b4/sigma_table.parquet")


def test_query_compares_the_mechanisms_and_keeps_the_best(mechanisms_run: Path) -> None:
    chosen = _query(mechanisms_run, "--json")
    assert chosen.returncode == 0, chosen.stderr
    answer = json.loads(chosen.stdout)
    compared = {row["mechanism"]: row for row in answer["mechanisms"]}
    assert set(compared) | set(answer["mechanisms_without_answer"]) == {"dpsgd", "bandmf-b4"}
    assert answer["mechanism"] == min(compared, key=lambda name: compared[name]["predicted_loss"])
    assert answer["predicted_loss"] == compared[answer["mechanism"]]["predicted_loss"]
    assert answer["bands"] == (4 if answer["mechanism"] == "bandmf-b4" else 1)
    # --mechanism answers with that law alone: DP-SGD's is the primary law's answer.
    fixed = json.loads(_query(mechanisms_run, "--json", "--mechanism", "dpsgd").stdout)
    direct = subprocess.run([sys.executable, "-m", "dpscaling.cli", "query", "--law", str(mechanisms_run / "law" / "fit"),
                             "--compute", "1e11", "--epsilon", "16", "--users", "1000", "--json"],
                            capture_output=True, text=True, timeout=600, cwd=mechanisms_run.parent.parent)
    assert fixed["mechanism"] == "dpsgd" and fixed["predicted_loss"] == json.loads(direct.stdout)["predicted_loss"]
    text = _query(mechanisms_run)
    assert text.returncode == 0 and "mechanisms compared:" in text.stdout and "bandmf-b4" in text.stdout
    wrong = _query(mechanisms_run, "--mechanism", "bandmf-b9")
    assert wrong.returncode != 0 and "--mechanism: must be one of ['dpsgd', 'bandmf-b4']" in wrong.stderr


def test_a_bandmf_budget_trains_privately_with_its_mechanism(mechanisms_run: Path) -> None:
    budget = next((mechanisms_run / "private_model").glob("*_mech=bandmf-b4"))
    plan = json.loads((budget / "plan.json").read_text())
    assert plan["mechanism"] == "bandmf-b4" and plan["budget"]["mechanism"] == "bandmf-b4"
    curve = pd.read_parquet(budget / "metrics.parquet")
    last = curve.iloc[-1]
    assert (last["mechanism"], int(last["bands"]), last["sampler"]) == ("bandmf-b4", 4, "poisson")
    assert int(last["group_size"]) == 1000 // 4 and int(last["accounted_rounds"]) == math.ceil(plan["iterations"] / 4)
    assert last["epsilon"] <= 16.0 * (1 + 1e-9) and last["sigma"] == pytest.approx(plan["sigma"], rel=1e-6)
    for twin in ("twin_grid_batch", "twin_recommended_batch"):  # the study twins run its noise too
        assert set(pd.read_parquet(budget / twin / "metrics.parquet")["mechanism"]) == {"bandmf-b4"}
    audit = json.loads((budget / "audit.json").read_text())
    private = next(run for run in audit["runs"] if run["run"] == "private")
    # audited with the run's own mechanism: cyclic Poisson at the group's rate, BandMF's calibrated noise
    assert private["sampling_probability"] == pytest.approx(plan["batch_size"] / (private["n_included"] // 4))
    assert audit["private_run_passes"]
    table = pd.read_csv(mechanisms_run / "private_model" / "table.csv")
    assert list(table["mechanism"]) == ["bandmf-b4"]
    assert "| mechanism" in (mechanisms_run / "private_model" / "table.md").read_text()


def test_a_budget_that_chooses_is_planned_by_every_mechanism(mechanisms_run: Path, monkeypatch) -> None:
    from dpscaling.plans import Budget
    from dpscaling.private_model import plan_mechanisms

    monkeypatch.chdir(mechanisms_run.parent.parent)  # the laws name their tables relative to the workflow's

    chosen = plan_mechanisms(mechanisms_run / "law" / "mechanisms",
                             Budget(16.0, 1e-8, 1000, 1e11, mechanism="choose"), ["BertNano", "BertMicro"])
    rows = {row["mechanism"]: row for row in chosen.mechanisms_compared}
    assert set(rows) == {"dpsgd", "bandmf-b4"}
    planned = {name: row["predicted_loss"] for name, row in rows.items() if row["planned"]}
    assert chosen.mechanism == min(planned, key=planned.get)
    assert chosen.predicted_loss == planned[chosen.mechanism]


def test_the_mechanism_finding_and_its_comparison_come_from_the_laws(mechanisms_run: Path) -> None:
    findings = pd.read_csv(mechanisms_run / "tables" / "finding-mechanism.csv")
    assert list(findings["finding"]) == ["a", "b", "c", "d"]
    assert set(findings["verdict"]) <= {"holds", "does not hold"}
    comparison = pd.read_csv(mechanisms_run / "tables" / "table-mechanism_vs_dpsgd.csv")
    answered = comparison.dropna(subset=["Cross Entropy (dpsgd)", "Cross Entropy (Mechanism)"])
    assert len(answered) and set(comparison["Mechanism"]) == {"bandmf-b4"}
    assert (answered["Gain (nats)"] == answered["Cross Entropy (dpsgd)"] - answered["Cross Entropy (Mechanism)"]).all()
    assert (mechanisms_run / "figures" / "fig-mechanism_vs_dpsgd.png").is_file()
