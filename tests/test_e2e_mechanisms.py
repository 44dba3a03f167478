"""Every mechanism axis at once, end to end on the smoke config (docs/mechanisms.md; docs/private-training.md
"User-level sampling"; docs/query.md "A budget per user"): users dealt out of the packed stream; DP-SGD's runs,
DP-BandMF b = 4's and user-level DP-SGD's (ULS, two sequences per drawn user), each with its accounting table, law
and validation, in one bundle; finding:mechanism (BandMF against DP-SGD) and finding:user-level; answers that
choose, per sequence and per user (ELS: DP-SGD's law priced for the user's k), each ε recomputed with
dp-accounting; a private budget per user trained, audited and reported (a private BandMF run is trained, resumed
and audited in tests/test_mechanisms.py)."""

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

pytestmark = pytest.mark.slow(minutes=6)


@pytest.fixture(scope="module")
def mechanisms_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("mechanisms")
    # one private budget per user (instead of the smoke's per sequence), planned by every law
    per_user = workdir / "per-user.yaml"
    per_user.write_text(f"private_model:\n  budgets:\n    - {{epsilon: {EPSILON}, data_budget: {PRIVATE_USERS}, "
                        f"compute: {COMPUTE}, examples_per_user: 8, mechanism: choose}}\n")
    with pytest.MonkeyPatch.context() as patch:
        # ELS's on-demand σ tables: the workflow keeps them under the run's results, and the queries below read
        # them there; the cache the session set for other tests is not the run's
        patch.setenv("DPSCALING_CACHE", str(tmp_path_factory.mktemp("not-the-run-s-cache")))
        run_snakemake("mechanisms", "private_model", "--cores", "2", "--configfile", str(CONFIGS / "smoke.yaml"),
                      str(CONFIGS / "smoke-mechanisms.yaml"), str(per_user), cwd=workdir, timeout=1500)
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
    assert manifest["format_version"] == 2 and manifest["contents"]["mechanisms"] == ["dpsgd", "bandmf-b4", "uls-m2"]
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
    assert set(compared) | set(answer["mechanisms_without_answer"]) == {"dpsgd", "bandmf-b4", "uls-m2"}
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
    assert status == 2 and "--mechanism: must be one of ['dpsgd', 'bandmf-b4', 'uls-m2']" in err


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
    # N = 1,000 units: every law plans it (ULS's over 1,000 users, a guarantee per user)
    assert set(rows) == {"dpsgd", "bandmf-b4", "uls-m2"}
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


def _epsilon(event, steps: int, delta: float) -> float:
    # A pessimistic PLD at 1e-2 nats: within 3e-4 of 1e-3's ε here (16 asked), 7x faster on ELS's mixture.
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-2)
    accountant.compose(event, steps)
    return accountant.get_epsilon(delta)


def test_uls_trains_its_own_runs_over_users(mechanisms_run: Path) -> None:
    uls = sorted((mechanisms_run / "runs" / "mech=uls-m2").rglob("metrics.parquet"))
    dpsgd = sorted((mechanisms_run / "runs" / "mech=dpsgd").rglob("metrics.parquet"))
    # 2 models x 3 noise levels each: without noise a user's two sequences clipped as one are not one sequence,
    # so ULS trains its own sigma-bar = 0 runs
    assert len(uls) == 6 and len(dpsgd) == 6 and any("nbr=0/" in str(path) for path in uls)
    meta = json.loads((mechanisms_run / "data" / "packed" / "seq=64" / "meta.json").read_text())["users"]
    for path in uls:
        curve = pd.read_parquet(path)
        assert set(curve["sampler"]) == {"user_shuffle"} and set(curve["examples_per_user_per_batch"]) == {2}
        assert set(curve["users"]) == {meta["n_users"]} and set(curve["mechanism"]) == {"uls-m2"}
    assert "users" not in pd.read_parquet(dpsgd[0]).columns  # a sequence-level curve is as it was


def test_a_budget_per_user_chooses_between_uls_and_els(mechanisms_run: Path, capsys, monkeypatch) -> None:
    """Both laws answer N users of up to k sequences holding S in all (the data's, far below N·k: ``--sequences``);
    the decision rule's choice is the lower score; each answer names its unit and sampler, its compute counts the
    sequences a step computes (B·m for ULS), and each σ spends the asked ε as recomputed with dp-accounting: over
    the N users for ULS, the k-sequence mixture over the S sequences for ELS. S is finding:user-level's, so the
    queries read its ELS tables."""
    from dpscaling.cli import main

    packed = json.loads((mechanisms_run / "data" / "packed" / "seq=64" / "meta.json").read_text())
    users, k, sequences = packed["users"]["n_users"], packed["users"]["max_examples"], packed["n_train"]
    assert users < sequences < users * k
    monkeypatch.chdir(mechanisms_run.parent.parent)
    run_cache = mechanisms_run / "accounting" / "sigma_cache"
    assert list(run_cache.rglob("*.parquet"))  # the workflow's ELS slabs are kept with the run
    monkeypatch.setenv("DPSCALING_CACHE", str(run_cache))
    capsys.readouterr()
    budget = ["--compute", str(COMPUTE), "--epsilon", str(EPSILON), "--users", str(users)]
    status = main(["query", "--law", str(mechanisms_run / "law" / "bundle"), *budget, "--examples-per-user", str(k),
                   "--sequences", str(sequences), "--json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    answer = json.loads(captured.out)
    rows = {row["mechanism"]: row for row in answer["mechanisms"]}
    assert set(rows) == {"dpsgd", "uls-m2"}, answer["mechanisms_without_answer"]
    assert "bandmf-b4" in answer["mechanisms_without_answer"]  # no user-level accountant: refused, not guessed
    assert answer["mechanism"] == min(rows, key=lambda name: rows[name]["decision_score"])
    assert answer["query"]["privacy_unit"] == "user" and answer["query"]["examples_per_user"] == k
    # ELS is priced for Poisson batches only; ULS under the law's rule (min) by either of its samplers
    assert rows["dpsgd"]["sampler"] == "els_poisson" and rows["uls-m2"]["sampler"] in ("user_poisson", "user_shuffle")
    assert rows["uls-m2"]["sequences_per_unit"] == 2 and rows["dpsgd"]["sequences_per_unit"] == 1

    import dpscaling

    laws = dpscaling.load_law(mechanisms_run / "law" / "bundle")
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
    assert main(["query", "--law", str(mechanisms_run / "law" / "bundle"), "--compute", str(COMPUTE), "--epsilon",
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
        assert main(["query", "--law", str(mechanisms_run / "law" / "bundle"), *budget, *flags]) == 2
        assert "--sequences: the sequences the" in capsys.readouterr().err
    assert main(["query", "--law", str(mechanisms_run / "law" / "bundle"), *budget, "--sequences", str(users)]) == 2
    assert "give --examples-per-user" in capsys.readouterr().err

    # a budget per sequence is the sequence-level mechanisms' alone; ULS's law asked for it directly refuses,
    # naming the flag
    capsys.readouterr()
    assert main(["query", "--law", str(mechanisms_run / "law" / "bundle"), "--compute", str(COMPUTE), "--epsilon",
                 str(EPSILON), "--tokens", "64000", "--json"]) == 0
    per_sequence = json.loads(capsys.readouterr().out)
    assert [row["mechanism"] for row in per_sequence["mechanisms"]] == ["dpsgd", "bandmf-b4"]
    assert per_sequence["mechanism"] in {"dpsgd", "bandmf-b4"}
    assert main(["query", "--law", str(mechanisms_run / "law" / "bundle"), "--mechanism", "uls-m2", "--compute",
                 str(COMPUTE), "--epsilon", str(EPSILON), "--tokens", "64000"]) == 2
    assert "uls-m2's law samples users" in capsys.readouterr().err


def test_the_user_level_finding_comes_from_the_laws(mechanisms_run: Path) -> None:
    findings = pd.read_csv(mechanisms_run / "tables" / "finding-user-level.csv")
    assert list(findings["finding"]) == list("abcde")
    comparison = pd.read_csv(mechanisms_run / "tables" / "table-uls_vs_els.csv")
    packed = json.loads((mechanisms_run / "data" / "packed" / "seq=64" / "meta.json").read_text())
    meta = packed["users"]
    assert len(comparison) == 2 and set(comparison["Data Budget"]) == {meta["n_users"]}
    assert set(comparison["Sequences"]) == {packed["n_train"]}  # ELS samples the users' own sequences
    assert set(comparison["Examples per User"]) == {meta["max_examples"]}
    answered = comparison.dropna(subset=["Gain (nats)"])
    assert len(answered)
    assert (answered["Gain (nats)"] == answered["Predicted Loss (ELS)"] - answered["Predicted Loss (ULS)"]).all()
    assert set(answered["Sampler (ULS)"]) == {"user_poisson"} and set(answered["Sampler (ELS)"]) == {"els_poisson"}
    # the mechanism finding compares noise mechanisms only: BandMF against DP-SGD, never ULS
    assert set(pd.read_csv(mechanisms_run / "tables" / "table-mechanism_vs_dpsgd.csv")["Mechanism"]) == {"bandmf-b4"}


def test_a_budget_per_user_is_trained_on_its_users_and_spends_its_epsilon(mechanisms_run: Path) -> None:
    """private_model at a budget per user: both laws plan it, the chosen one trains on N users with its unit's
    sampler, and the run's ε is recomputed with dp-accounting from its record (over users for ULS, the
    k-sequence mixture for ELS); the audit's canaries are users and the report names the unit."""
    budget_dir, = (mechanisms_run / "private_model").glob("eps=*_k=8")
    plan = json.loads((budget_dir / "plan.json").read_text())
    compared = {row["mechanism"]: row for row in plan["mechanisms_compared"]}
    assert set(compared) == {"dpsgd", "bandmf-b4", "uls-m2"}
    assert not compared["bandmf-b4"]["planned"] and "--examples-per-user" in compared["bandmf-b4"]["reason"]
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
    report = pd.read_csv(mechanisms_run / "private_model" / "table.csv")
    assert list(report["privacy_unit"]) == ["user"] and list(report["sampler"]) == [plan["sampler"]]
    assert report["epsilon_spent"].iloc[0] == pytest.approx(float(row["epsilon"]))
    # private_model.cause_split: false (smoke-mechanisms.yaml): no study twin trained, the split left empty
    assert not list(budget_dir.glob("twin_*"))
    assert report[["twin_grid_batch", "law_error", "physical_batch_effect", "sampler_effect"]].isna().all(axis=None)
