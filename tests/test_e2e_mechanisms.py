"""DP-BandMF as an axis of the grid, end to end on the smoke config (docs/mechanisms.md): DP-SGD and BandMF
b = 4 runs, an accounting table, law and validation per mechanism, the bundle of both, finding:mechanism, answers
that choose and private budgets planned by the mechanism's law (a private BandMF run is trained, resumed and
audited in tests/test_mechanisms.py)."""

from __future__ import annotations

import json
import math
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
    run_snakemake("mechanisms", "--cores", "2", "--configfile", str(CONFIGS / "smoke.yaml"),
                  str(CONFIGS / "smoke-mechanisms.yaml"), cwd=workdir, timeout=1200)
    return workdir / "results" / "smoke-mechanisms"


def _query(run: Path, capsys, *extra: str, law: str = "bundle") -> tuple[int, str, str]:
    """``dpscaling query`` in this process (the laws name their tables relative to the workflow's directory)."""
    from dpscaling.cli import main

    capsys.readouterr()
    status = main(["query", "--law", str(run / "law" / law), "--compute", "1e11", "--epsilon", "16", "--users",
                   "1000", *extra])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_each_mechanism_trains_its_own_runs(mechanisms_run: Path) -> None:
    bandmf = sorted((mechanisms_run / "runs" / "mech=bandmf-b4").rglob("metrics.parquet"))
    dpsgd = sorted((mechanisms_run / "runs" / "mech=dpsgd").rglob("metrics.parquet"))
    # 2 models x 3 noise-batch ratios; sigma-bar = 0 adds no noise, so BandMF's law shares DP-SGD's runs there
    assert len(dpsgd) == 6 and len(bandmf) == 4
    assert not any("nbr=0/" in str(path) for path in bandmf)
    # each mechanism's noisy runs at its own learning rate (training.mechanism_learning_rates)
    assert all(path.parent.name == "lr=0.03125" for path in bandmf)
    assert all(path.parent.name == "lr=0.0078125" for path in dpsgd)
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
        epsilon = dp_accounting.pld.PLDAccountant(value_discretization_interval=3e-4).compose(event).get_epsilon(row.delta)
        assert epsilon == pytest.approx(row.epsilon, rel=0.02), row
    dpsgd = pd.read_parquet(mechanisms_run / "accounting" / "sigma_table.parquet")
    assert not dpsgd["sigma"].equals(table["sigma"])


def test_each_mechanism_has_its_law_and_validation(mechanisms_run: Path) -> None:
    from dpscaling.law.artifact import read_law
    from dpscaling.law.bundle import read_bundle

    bundle = mechanisms_run / "law" / "bundle"
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["format_version"] == 2 and manifest["contents"]["mechanisms"] == ["dpsgd", "bandmf-b4"]
    other = read_bundle(bundle).mechanisms["bandmf-b4"]  # a bundle of its own under mechanisms/bandmf-b4
    assert other.provenance["mechanism"] == "bandmf-b4" and other.provenance["bands"] == 4
    assert other.calibration is not None and (bundle / "mechanisms" / "bandmf-b4" / "calibration.json").is_file()
    assert other.provenance["config_sha256"] == manifest["provenance"]["config_sha256"]  # the run's, shared
    assert (mechanisms_run / "validate" / "mech=bandmf-b4" / "validation.csv").is_file()
    law = read_law(mechanisms_run / "law" / "mechanisms" / "mech=bandmf-b4" / "fit")
    assert law.sigma_table["path"].endswith("accounting/mech=bandmf-b4/sigma_table.parquet")
    inside = (bundle / "mechanisms" / "bandmf-b4" / "sigma_table.parquet").resolve()
    assert Path(other.law.sigma_table["path"]).resolve() == inside


def test_query_compares_the_mechanisms_and_keeps_the_best(mechanisms_run: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(mechanisms_run.parent.parent)
    status, out, err = _query(mechanisms_run, capsys, "--json")
    assert status == 0, err
    answer = json.loads(out)
    compared = {row["mechanism"]: row for row in answer["mechanisms"]}
    assert set(compared) | set(answer["mechanisms_without_answer"]) == {"dpsgd", "bandmf-b4"}
    assert answer["mechanism"] == min(compared, key=lambda name: compared[name]["predicted_loss"])
    assert answer["predicted_loss"] == compared[answer["mechanism"]]["predicted_loss"]
    assert answer["bands"] == (4 if answer["mechanism"] == "bandmf-b4" else 1)
    # --mechanism answers with that law alone: DP-SGD's is the primary law's answer.
    fixed = json.loads(_query(mechanisms_run, capsys, "--json", "--mechanism", "dpsgd")[1])
    from dpscaling.law.loading import load_primary_law

    direct = load_primary_law(mechanisms_run / "law" / "bundle").query(1e11, 16.0, 1000).to_json()
    assert fixed["mechanism"] == "dpsgd" and fixed["predicted_loss"] == direct["predicted_loss"]
    status, out, _ = _query(mechanisms_run, capsys)
    assert status == 0 and "mechanisms compared:" in out and "bandmf-b4" in out
    status, _, err = _query(mechanisms_run, capsys, "--mechanism", "bandmf-b9")
    assert status == 2 and "--mechanism: must be one of ['dpsgd', 'bandmf-b4']" in err


def test_the_mechanism_finding_and_its_comparison_come_from_the_laws(mechanisms_run: Path) -> None:
    findings = pd.read_csv(mechanisms_run / "tables" / "finding-mechanism.csv")
    assert list(findings["finding"]) == ["a", "b", "c", "d"]
    assert set(findings["verdict"]) <= {"holds", "does not hold"}
    comparison = pd.read_csv(mechanisms_run / "tables" / "table-mechanism_vs_dpsgd.csv")
    answered = comparison.dropna(subset=["Cross Entropy (dpsgd)", "Cross Entropy (Mechanism)"])
    assert len(answered) and set(comparison["Mechanism"]) == {"bandmf-b4"}
    assert (answered["Gain (nats)"] == answered["Cross Entropy (dpsgd)"] - answered["Cross Entropy (Mechanism)"]).all()
    assert (mechanisms_run / "figures" / "fig-mechanism_vs_dpsgd.png").is_file()


def test_private_budgets_are_planned_by_the_mechanisms_laws(mechanisms_run: Path, monkeypatch) -> None:
    """`mechanism: choose` plans with every mechanism's law and keeps the lowest predicted loss; a named
    mechanism with its own law, priced by its cyclic Poisson accountant (a private BandMF run is trained,
    resumed and audited in tests/test_mechanisms.py)."""
    from dpscaling.accounting.matched import account_run
    from dpscaling.private.plans import Budget
    from dpscaling.private.model import plan_mechanisms

    monkeypatch.chdir(mechanisms_run.parent.parent)  # the laws name their tables relative to the workflow's
    laws, models = mechanisms_run / "law" / "bundle", ["BertNano", "BertMicro"]
    chosen = plan_mechanisms(laws, Budget(16.0, 1e-8, 1000, 1e11, mechanism="choose"), models)
    rows = {row["mechanism"]: row for row in chosen.mechanisms_compared}
    assert set(rows) == {"dpsgd", "bandmf-b4"}
    planned = {name: row["predicted_loss"] for name, row in rows.items() if row["planned"]}
    assert chosen.mechanism == min(planned, key=planned.get)
    assert chosen.predicted_loss == planned[chosen.mechanism]
    named = plan_mechanisms(laws, Budget(16.0, 1e-8, 1000, 1e11, mechanism="bandmf-b4"), models)
    assert named.mechanism == "bandmf-b4" and [row["mechanism"] for row in named.mechanisms_compared] == ["bandmf-b4"]
    spent = account_run("truncated_poisson", None, dataset_size=1000, expected_batch_size=named.batch_size,
                        steps=named.iterations, delta=1e-8, noise_batch_ratio=named.noise_batch_ratio,
                        truncated_batch_size=named.truncated_batch_size, mechanism="bandmf-b4")
    assert spent.epsilon <= 16.0 * 1.001 and spent.group_size == 250
    # recomputed with dp-accounting directly: one group of 250 at q_g = B/250 over ⌈T/4⌉ steps, truncated at L
    event = dp_accounting.TruncatedSubsampledGaussianDpEvent(250, named.batch_size / 250, named.truncated_batch_size,
                                                             named.sigma)
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    assert accountant.compose(event, -(-named.iterations // 4)).get_epsilon(1e-8) == pytest.approx(16.0, rel=5e-3)
    assert named.to_json()["budget"]["mechanism"] == "bandmf-b4"
    assert named.learning_rate == 0.03125  # the rate BandMF's own runs trained at
