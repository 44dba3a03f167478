"""Every entry point that prints or returns σ or ε prices the sampler that runs: each number recomputed here with
dp-accounting (and SciPy's binomial) directly, without dpscaling's accountants, for DP-SGD, BandMF, ULS and ELS
(docs/accounting.md, "Pricing a configuration"). The query's answers and the private runs, plans and audit are
recomputed the same way in tests/test_law_answers.py, tests/test_pricing.py, tests/test_private_training.py,
tests/test_e2e_mechanisms.py and tests/test_workflow_e2e.py."""

from __future__ import annotations

import json
import math

import dp_accounting
import pytest
from scipy import stats

from dpscaling import cli
from dpscaling.accounting import pricing

DELTA = 1e-8
# A small configuration (seconds per price): N 5,000 units, B 100, T 60.
USERS, BATCH, STEPS = 5000, 100, 60
CONFIG = ["--users", str(USERS), "--batch", str(BATCH), "--steps", str(STEPS)]


def run(capsys, *argv) -> dict:
    status = cli.main([str(a) for a in argv] + ["--json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return json.loads(captured.out)


def accounted(event, compositions: int, delta: float = DELTA, interval: float = 1e-3) -> float:
    """ε(δ) of ``compositions`` of ``event``, dp-accounting's PLD accountant."""
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=interval)
    return accountant.compose(event, compositions).get_epsilon(delta)


def truncated(population: int, q: float, size: int, sigma: float):
    return dp_accounting.TruncatedSubsampledGaussianDpEvent(population, q, size, sigma)


@pytest.mark.parametrize("mechanism,population,rounds", [
    ("dpsgd", USERS, STEPS),  # truncated Poisson over sequences
    ("uls-m2", USERS, STEPS),  # the same event over users: N and B count users
    ("bandmf-b4", USERS // 4, math.ceil(STEPS / 4)),  # cyclic Poisson: one group of N/4 at 4q, ⌈T/4⌉ times
])
def test_dpscaling_sigma_prints_the_truncated_run_s_price(capsys, mechanism, population, rounds) -> None:
    printed = run(capsys, "sigma", "--epsilon", 4, *CONFIG, "--mechanism", mechanism)
    assert printed["rule"] == "runnable" and printed["accountant"] == "truncated_poisson"
    assert "noisy steps" in printed["epsilon_covers"] and "not the choices" in printed["epsilon_covers"]
    assert printed["sampler"] == ("user_poisson" if mechanism.startswith("uls") else "truncated_poisson")
    size, q = printed["truncated_batch_size"], BATCH / population
    assert printed["sampling_probability"] == pytest.approx(q) and size >= BATCH
    assert accounted(truncated(population, q, size, printed["sigma"]), rounds) == pytest.approx(4.0, rel=5e-3)
    # untruncated Poisson at the same σ spends less: the printed σ pays for the truncation
    untruncated = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(printed["sigma"]))
    assert accounted(untruncated, rounds) < 4.0


def test_dpscaling_epsilon_is_the_truncated_run_s_spend(capsys) -> None:
    printed = run(capsys, "epsilon", "--sigma", 1.2, *CONFIG)
    size = printed["truncated_batch_size"]
    assert printed["epsilon"] == pytest.approx(accounted(truncated(USERS, BATCH / USERS, size, 1.2), STEPS),
                                               rel=5e-3)
    given = run(capsys, "epsilon", "--sigma", 1.2, *CONFIG, "--truncated-batch-size", BATCH + 5)
    assert given["truncated_batch_size"] == BATCH + 5 and given["epsilon"] > printed["epsilon"]  # cut more often
    assert given["epsilon"] == pytest.approx(accounted(truncated(USERS, BATCH / USERS, BATCH + 5, 1.2), STEPS),
                                             rel=5e-3)


def test_fixed_batches_are_priced_with_the_shuffle_s_participations(capsys) -> None:
    """The issue's example: B 3,000 of N 10,000 over 10 steps is 4 epochs of a shuffle (⌊N/B⌋ = 3 steps each),
    so 4 participations, not the paper's ⌈qT⌉ = 3: the paper rule's σ 2.417 spends ε 4.68 on that sampler."""
    argv = ["--users", 10000, "--batch", 3000, "--steps", 10, "--sampling", "deterministic"]
    printed = run(capsys, "sigma", "--epsilon", 4, *argv)
    assert printed["sampler"] == "shuffle" and printed["max_participations"] == 4
    assert dp_accounting.get_epsilon_gaussian(printed["sigma"] / 2.0, DELTA) == pytest.approx(4.0, rel=1e-6)
    paper = run(capsys, "sigma", "--epsilon", 4, *argv, "--rule", "paper")
    assert paper["sigma"] == pytest.approx(2.417, abs=1e-3) and paper["sampler"] is None
    assert dp_accounting.get_epsilon_gaussian(paper["sigma"] / 2.0, DELTA) == pytest.approx(4.68, abs=0.01)
    spent = run(capsys, "epsilon", "--sigma", paper["sigma"], *argv)
    assert spent["epsilon"] == pytest.approx(4.68, abs=0.01)  # what that σ costs the sampler that runs
    bandmf = run(capsys, "sigma", "--epsilon", 4, "--users", 10000, "--batch", 1000, "--steps", 30,
                 "--sampling", "deterministic", "--mechanism", "bandmf-b4")
    assert bandmf["sampler"] == "cyclic" and bandmf["max_participations"] == 3  # ⌈30 / ⌊10000/1000⌋⌉
    assert dp_accounting.get_epsilon_gaussian(bandmf["sigma"] / math.sqrt(3), DELTA) == pytest.approx(4.0, rel=1e-6)


def test_els_is_priced_for_a_user_of_k_sequences(capsys) -> None:
    """ELS: the mixture of Gaussians of sensitivity Binomial(k, q) at the mixture's share of δ, and the truncation's
    total-variation term within the rest, recomputed with SciPy's binomial tail."""
    k = 4
    printed = run(capsys, "sigma", "--epsilon", 4, *CONFIG, "--examples-per-user", k)
    assert printed["sampler"] == "els_poisson" and printed["examples_per_user"] == k
    q, sigma, size = BATCH / USERS, printed["sigma"], printed["truncated_batch_size"]
    mixture = dp_accounting.dp_event.MixtureOfGaussiansDpEvent(
        sigma, list(range(k + 1)), [float(stats.binom.pmf(j, k, q)) for j in range(k + 1)])
    spent = accounted(mixture, STEPS, DELTA - printed["truncation_delta"])
    assert spent == pytest.approx(printed["epsilon"], rel=5e-3) and printed["epsilon"] <= 4.0
    term = (1 + math.exp(printed["epsilon"])) * STEPS * float(stats.binom.sf(size, USERS + k, q))
    assert term == pytest.approx(printed["truncation_delta"], rel=1e-9) and term <= 0.1 * DELTA * (1 + 1e-9)
    # no sampler trains ELS's fixed batches
    assert cli.main(["sigma", "--epsilon", "4", *CONFIG, "--examples-per-user", str(k), "--sampling",
                     "deterministic"]) == 2
    assert "Poisson sampling only" in capsys.readouterr().err


def test_truncation_and_vulnerability_print_the_run_s_numbers(capsys) -> None:
    trade = run(capsys, "truncation", "--epsilon", 4, *CONFIG)
    assert accounted(truncated(USERS, BATCH / USERS, trade["truncated_batch_size"], trade["sigma"]), STEPS) == \
        pytest.approx(4.0, rel=5e-3)
    printed = run(capsys, "vulnerability", "--sigma", 1.2, *CONFIG, "--truncated-batch-size",
                  trade["truncated_batch_size"])
    event = truncated(USERS, BATCH / USERS, trade["truncated_batch_size"], 1.2)
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    assert printed["mia_advantage"] == pytest.approx(accountant.compose(event, STEPS).get_delta(0.0), rel=5e-3)


def test_the_pricing_functions_agree_with_the_cli_and_refuse_what_no_sampler_runs() -> None:
    run_price = pricing.price_run("dpsgd", 4.0, DELTA, USERS, BATCH, STEPS)
    spent = pricing.price_run("dpsgd", None, DELTA, USERS, BATCH, STEPS, sigma=run_price.sigma,
                              truncated_batch_size=run_price.truncated_batch_size)
    assert spent.epsilon == pytest.approx(4.0, rel=5e-3) and spent.epsilon <= 4.0 * (1 + 1e-3)
    lower = pricing.price_run("dpsgd", 4.0, DELTA, USERS, BATCH, STEPS, sampling="min")
    assert lower.sigma == min(run_price.sigma, pricing.price_run("dpsgd", 4.0, DELTA, USERS, BATCH, STEPS,
                                                                  sampling="deterministic").sigma)
    sigma, branch = pricing.paper_sigma("dpsgd", "poisson", 4.0, DELTA, BATCH / USERS, STEPS)
    untruncated = dp_accounting.PoissonSampledDpEvent(BATCH / USERS, dp_accounting.GaussianDpEvent(sigma))
    assert branch == "poisson" and accounted(untruncated, STEPS) == pytest.approx(4.0, rel=5e-3)
