"""The privacy unit as an axis, end to end on the smoke config (docs/private-training.md "User-level sampling",
docs/query.md "A budget per user"): users dealt out of the packed stream, DP-SGD's runs and user-level DP-SGD's
(ULS, two sequences per drawn user) with a law each, answers per user that choose between ULS and ELS (DP-SGD's
law priced for the user's k), each answer's ε recomputed with dp-accounting, and finding:user-level."""

from __future__ import annotations

import json
import math
from pathlib import Path

import dp_accounting
import pandas as pd
import pytest
from dp_accounting.pld import pld_privacy_accountant
from scipy import stats

from conftest import REPO, run_snakemake

CONFIGS = REPO / "tests" / "configs"
# finding:user-level's first budget, at the data's users and cap: the query reuses its ELS σ tables
COMPUTE, EPSILON = 1e11, 16.0
PRIVATE_USERS = 300  # the private budget's N users (of the smoke's ~1,200), each of up to k = 8 sequences

pytestmark = pytest.mark.slow(minutes=5)


@pytest.fixture(scope="module")
def userlevel_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("userlevel")
    import os

    # ELS's on-demand σ tables: the workflow keeps them under the run's results, and the queries below read them
    # there; the cache the session set for other tests is not the run's
    os.environ["DPSCALING_CACHE"] = str(tmp_path_factory.mktemp("not-the-run-s-cache"))
    # one private budget per user (instead of the smoke's per sequence), planned by both laws
    per_user = workdir / "per-user.yaml"
    per_user.write_text(f"private_model:\n  budgets:\n    - {{epsilon: {EPSILON}, data_budget: {PRIVATE_USERS}, "
                        f"compute: {COMPUTE}, examples_per_user: 8, mechanism: choose}}\n")
    run_snakemake("mechanisms", "private_model", "--cores", "2", "--configfile", str(CONFIGS / "smoke.yaml"),
                  str(CONFIGS / "smoke-userlevel.yaml"), str(per_user), cwd=workdir, timeout=1500)
    return workdir / "results" / "smoke-userlevel"


def _epsilon(event, steps: int, delta: float) -> float:
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    accountant.compose(event, steps)
    return accountant.get_epsilon(delta)


def test_uls_trains_its_own_runs_over_users(userlevel_run: Path) -> None:
    uls = sorted((userlevel_run / "runs" / "mech=uls-m2").rglob("metrics.parquet"))
    dpsgd = sorted((userlevel_run / "runs" / "mech=dpsgd").rglob("metrics.parquet"))
    # 2 models x 3 noise levels each: without noise a user's two sequences clipped as one are not one sequence,
    # so ULS trains its own sigma-bar = 0 runs
    assert len(uls) == 6 and len(dpsgd) == 6 and any("nbr=0/" in str(path) for path in uls)
    meta = json.loads((userlevel_run / "data" / "packed" / "seq=64" / "meta.json").read_text())["users"]
    for path in uls:
        curve = pd.read_parquet(path)
        assert set(curve["sampler"]) == {"user_shuffle"} and set(curve["examples_per_user_per_batch"]) == {2}
        assert set(curve["users"]) == {meta["n_users"]} and set(curve["mechanism"]) == {"uls-m2"}
    assert "users" not in pd.read_parquet(dpsgd[0]).columns  # a sequence-level curve is as it was


def test_a_budget_per_user_chooses_between_uls_and_els(userlevel_run: Path, capsys, monkeypatch) -> None:
    """Both laws answer N users of up to k sequences holding S in all (the data's, far below N·k: ``--sequences``);
    the decision rule's choice is the lower score; each answer names its unit and sampler, its compute counts the
    sequences a step computes (B·m for ULS), and each σ spends the asked ε as recomputed with dp-accounting: over
    the N users for ULS, the k-sequence mixture over the S sequences for ELS. S is finding:user-level's, so the
    queries read its ELS tables."""
    from dpscaling.cli import main

    packed = json.loads((userlevel_run / "data" / "packed" / "seq=64" / "meta.json").read_text())
    users, k, sequences = packed["users"]["n_users"], packed["users"]["max_examples"], packed["n_train"]
    assert users < sequences < users * k
    monkeypatch.chdir(userlevel_run.parent.parent)
    run_cache = userlevel_run / "accounting" / "sigma_cache"
    assert list(run_cache.rglob("*.parquet"))  # the workflow's ELS slabs are kept with the run
    monkeypatch.setenv("DPSCALING_CACHE", str(run_cache))
    capsys.readouterr()
    budget = ["--compute", str(COMPUTE), "--epsilon", str(EPSILON), "--users", str(users)]
    status = main(["query", "--law", str(userlevel_run / "law" / "bundle"), *budget, "--examples-per-user", str(k),
                   "--sequences", str(sequences), "--json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    answer = json.loads(captured.out)
    rows = {row["mechanism"]: row for row in answer["mechanisms"]}
    assert set(rows) == {"dpsgd", "uls-m2"}, answer["mechanisms_without_answer"]
    assert answer["mechanism"] == min(rows, key=lambda name: rows[name]["decision_score"])
    assert answer["query"]["privacy_unit"] == "user" and answer["query"]["examples_per_user"] == k
    # ELS is priced for Poisson batches only; ULS under the law's rule (min) by either of its samplers
    assert rows["dpsgd"]["sampler"] == "els_poisson" and rows["uls-m2"]["sampler"] in ("user_poisson", "user_shuffle")
    assert rows["uls-m2"]["sequences_per_unit"] == 2 and rows["dpsgd"]["sequences_per_unit"] == 1

    import dpscaling

    laws = dpscaling.load_law(userlevel_run / "law" / "bundle")
    for mechanism in ("dpsgd", "uls-m2"):
        runnable = laws.law(mechanism).query(COMPUTE, EPSILON, users=users, examples_per_user=k, sequences=sequences,
                                             optimum_interval=False, sampling="poisson").runnable
        price, m = runnable.price, runnable.sequences_per_unit
        assert runnable.privacy_unit == "user"
        assert math.isclose(runnable.compute, 6 * runnable.model_size * runnable.batch_size * m * 64 *
                            runnable.iterations)
        assert abs(math.log(runnable.compute / COMPUTE)) < 0.5  # C up to the rounding of whole steps
        if mechanism == "uls-m2":  # Poisson over the N users, whatever they hold
            assert price.dataset_size == users and price.sampler == "user_poisson"
            event = dp_accounting.PoissonSampledDpEvent(runnable.batch_size / users,
                                                        dp_accounting.GaussianDpEvent(price.sigma))
            spent = _epsilon(event, runnable.iterations, price.delta)
        else:  # ELS: Poisson over the S sequences, the mixture for the user's k at 90% of δ
            assert price.dataset_size == sequences and price.event.examples_per_user == k
            q = runnable.batch_size / sequences
            probs = [float(stats.binom.pmf(j, k, q)) for j in range(k + 1)]
            event = dp_accounting.dp_event.MixtureOfGaussiansDpEvent(price.sigma, list(range(k + 1)), probs)
            spent = _epsilon(event, runnable.iterations, 0.9 * price.delta)
        assert spent == pytest.approx(EPSILON, rel=5e-3), mechanism

    # without --sequences ELS is priced at S = N, one sequence a user (the conservative end), and says so; asked
    # of N = the data's S users, it samples what the tables above were built for (at N = 1,230 its σ̄ is past the
    # smoke law's noise range: refused)
    capsys.readouterr()
    assert main(["query", "--law", str(userlevel_run / "law" / "bundle"), "--compute", str(COMPUTE), "--epsilon",
                 str(EPSILON), "--users", str(sequences), "--examples-per-user", str(k), "--mechanism", "dpsgd",
                 "--json"]) == 0
    assumed = json.loads(capsys.readouterr().out)
    assert (assumed["query"]["sequences"], assumed["query"]["sequences_assumed"]) == (sequences, True)
    event = assumed["accounting_event"]
    assert assumed["sampler"] == "els_poisson" and event["population"] == sequences
    q = assumed["batch_size"] / sequences
    probs = [float(stats.binom.pmf(j, k, q)) for j in range(k + 1)]
    spent = _epsilon(dp_accounting.dp_event.MixtureOfGaussiansDpEvent(assumed["sigma"], list(range(k + 1)), probs),
                     assumed["iterations"], 0.9 * assumed["delta"])
    assert spent == pytest.approx(EPSILON, rel=0.02)

    # S outside N..N·k, or without k, is refused naming the flag
    for flags in (["--examples-per-user", str(k), "--sequences", str(users * k + 1)],
                  ["--examples-per-user", str(k), "--sequences", str(users - 1)]):
        assert main(["query", "--law", str(userlevel_run / "law" / "bundle"), *budget, *flags]) == 2
        assert "--sequences: the sequences the" in capsys.readouterr().err
    assert main(["query", "--law", str(userlevel_run / "law" / "bundle"), *budget, "--sequences", str(users)]) == 2
    assert "give --examples-per-user" in capsys.readouterr().err

    # a budget per sequence is DP-SGD's alone; ULS's law asked for it directly refuses, naming the flag
    capsys.readouterr()
    assert main(["query", "--law", str(userlevel_run / "law" / "bundle"), "--compute", str(COMPUTE), "--epsilon",
                 str(EPSILON), "--tokens", "64000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mechanism"] == "dpsgd"
    assert main(["query", "--law", str(userlevel_run / "law" / "bundle"), "--mechanism", "uls-m2", "--compute",
                 str(COMPUTE), "--epsilon", str(EPSILON), "--tokens", "64000"]) == 2
    assert "uls-m2's law samples users" in capsys.readouterr().err


def test_the_user_level_finding_comes_from_the_laws(userlevel_run: Path) -> None:
    findings = pd.read_csv(userlevel_run / "tables" / "finding-user-level.csv")
    assert list(findings["finding"]) == list("abcde")
    comparison = pd.read_csv(userlevel_run / "tables" / "table-uls_vs_els.csv")
    packed = json.loads((userlevel_run / "data" / "packed" / "seq=64" / "meta.json").read_text())
    meta = packed["users"]
    assert len(comparison) == 2 and set(comparison["Data Budget"]) == {meta["n_users"]}
    assert set(comparison["Sequences"]) == {packed["n_train"]}  # ELS samples the users' own sequences
    assert set(comparison["Examples per User"]) == {meta["max_examples"]}
    answered = comparison.dropna(subset=["Gain (nats)"])
    assert len(answered)
    assert (answered["Gain (nats)"] == answered["Predicted Loss (ELS)"] - answered["Predicted Loss (ULS)"]).all()
    assert set(answered["Sampler (ULS)"]) == {"user_poisson"} and set(answered["Sampler (ELS)"]) == {"els_poisson"}
    # the mechanism finding compares noise mechanisms only: with DP-SGD and ULS there is none to compare
    assert not (userlevel_run / "tables" / "finding-mechanism.csv").exists()


def test_a_budget_per_user_is_trained_on_its_users_and_spends_its_epsilon(userlevel_run: Path) -> None:
    """private_model at a budget per user: both laws plan it, the chosen one trains on N users with its unit's
    sampler, and the run's ε is recomputed with dp-accounting from its record (over users for ULS, the
    k-sequence mixture for ELS); the audit's canaries are users and the report names the unit."""
    budget_dir, = (userlevel_run / "private_model").glob("eps=*_k=8")
    plan = json.loads((budget_dir / "plan.json").read_text())
    assert {row["mechanism"] for row in plan["mechanisms_compared"]} == {"dpsgd", "uls-m2"}
    assert plan["sampler"] == {"uls-m2": "user_poisson", "dpsgd": "els_poisson"}[plan["mechanism"]]
    row = pd.read_parquet(budget_dir / "metrics.parquet").iloc[-1]
    assert (row["sampler"], row["privacy_unit"], int(row["users"]), int(row["examples_per_user"])) == (
        plan["sampler"], "user", PRIVATE_USERS, 8)
    q, steps, sigma, delta = (float(row["sampling_probability"]), int(row["accounted_steps"]), float(row["sigma"]),
                              float(row["delta"]))
    assert sigma == pytest.approx(plan["sigma"], rel=1e-9) and float(row["epsilon"]) <= EPSILON * (1 + 1e-9)
    if plan["sampler"] == "user_poisson":
        assert int(row["dataset_size"]) == PRIVATE_USERS  # N counts users
        epsilon = _epsilon(dp_accounting.TruncatedSubsampledGaussianDpEvent(
            dataset_size=PRIVATE_USERS, sampling_probability=q, truncated_batch_size=int(row["truncated_batch_size"]),
            noise_multiplier=sigma), steps, delta)
    else:
        assert int(row["dataset_size"]) == plan["dataset_size"] < PRIVATE_USERS * 8  # the users' own sequences
        probs = [float(stats.binom.pmf(j, 8, q)) for j in range(9)]
        epsilon = _epsilon(dp_accounting.dp_event.MixtureOfGaussiansDpEvent(sigma, list(range(9)), probs), steps,
                           0.9 * delta)
    assert epsilon == pytest.approx(EPSILON, rel=5e-3)
    audit = json.loads((budget_dir / "audit.json").read_text())
    assert audit["runs"][0]["n_canaries"] == 2 * PRIVATE_USERS and audit["private_run_passes"]
    report = pd.read_csv(userlevel_run / "private_model" / "table.csv")
    assert list(report["privacy_unit"]) == ["user"] and list(report["sampler"]) == [plan["sampler"]]
    assert report["epsilon_spent"].iloc[0] == pytest.approx(float(row["epsilon"]))
