"""The truncation length L of truncated Poisson runs, chosen by its privacy price: checked against
dp-accounting alone, with the default's ε = 4 private budget (N = 20,000, B = 181, T = 289)."""

from __future__ import annotations

import logging
import math
import re

import dp_accounting
import numpy as np
import pytest

from dpscaling.accounting.matched import account_run
from dpscaling.accounting.truncation import (
    computed_batch,
    EPSILON_TOLERANCE,
    padding_share,
    tail_truncated_batch_size,
)
from dpscaling.train.sampling import PADDING_INDEX, PoissonBatches, secret_key

N, B, T, DELTA, EPSILON = 20_000, 181, 289, 1e-8, 4.0
Q = B / N
INTERVAL = 1e-3  # dp-accounting's PLD discretisation for the independent checks


def truncated_epsilon(sigma: float, truncated: int) -> float:
    """dp-accounting alone: T steps of the truncated subsampled Gaussian."""
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.TruncatedSubsampledGaussianDpEvent(
            dataset_size=N, sampling_probability=Q, truncated_batch_size=truncated, noise_multiplier=sigma), T)
    return dp_accounting.pld.PLDAccountant(value_discretization_interval=INTERVAL).compose(event).get_epsilon(DELTA)


def poisson_epsilon(sigma: float) -> float:
    """dp-accounting alone: T steps of the (untruncated) Poisson-subsampled Gaussian."""
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(Q, dp_accounting.GaussianDpEvent(sigma)), T)
    return dp_accounting.pld.PLDAccountant(value_discretization_interval=INTERVAL).compose(event).get_epsilon(DELTA)


@pytest.fixture(scope="module")
def priced():
    """The default's ε = 4 budget, L priced at multiples of 1 (its smallest passing value)."""
    return account_run("truncated_poisson", None, dataset_size=N, expected_batch_size=B, steps=T, delta=DELTA,
                       target_epsilon=EPSILON)


def test_priced_l_costs_at_most_the_tolerance_at_the_runs_sigma(priced):
    assert priced.truncation_priced
    size, sigma = priced.truncated_batch_size, priced.sigma
    truncated, untruncated = truncated_epsilon(sigma, size), poisson_epsilon(sigma)
    assert truncated <= untruncated * (1 + EPSILON_TOLERANCE) + 2 * INTERVAL
    assert truncated <= EPSILON * (1 + 1e-3)  # and the run keeps its promise
    # L is the smallest such length: one less costs more than the tolerance where it was priced
    # (the untruncated sigma), so the rule is not a generous fixed margin.
    at = priced.untruncated_sigma
    assert truncated_epsilon(at, size - 1) > poisson_epsilon(at) * (1 + EPSILON_TOLERANCE)
    # the old rule's L = ceil(B + 4 sqrt(B)) = 235 is far below it, and far costlier
    assert size > 240 and truncated_epsilon(sigma, 240) > 1.5 * untruncated


def test_calibrated_sigma_is_within_two_percent_of_untruncated_poisson(priced):
    reference = dp_accounting.calibrate_dp_mechanism(
        lambda: dp_accounting.pld.PLDAccountant(value_discretization_interval=INTERVAL),
        lambda s: dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(Q, dp_accounting.GaussianDpEvent(s)), T),
        EPSILON, DELTA, bracket_interval=dp_accounting.LowerEndpointAndGuess(0.3, 0.8), tol=1e-4)
    assert priced.sigma == pytest.approx(reference, rel=0.02)
    assert priced.untruncated_sigma == pytest.approx(reference, rel=0.005)
    assert priced.sigma >= priced.untruncated_sigma  # truncation never buys noise back


def test_an_explicit_l_that_costs_privacy_warns_with_the_cost(caplog):
    with caplog.at_level(logging.WARNING, logger="dpscaling.accounting.truncation"):
        run = account_run("truncated_poisson", None, dataset_size=N, expected_batch_size=B, steps=T, delta=DELTA,
                          target_epsilon=EPSILON, truncated_batch_size=240)
    assert run.truncated_batch_size == 240 and not run.truncation_priced  # the user's L is kept
    (message,) = [r.getMessage() for r in caplog.records]
    assert "training.truncated_batch_size" in message and "L=240" in message
    noise = float(re.search(r"\(\+([\d.]+)% noise\)", message).group(1))
    assert noise == pytest.approx(100 * (run.sigma / run.untruncated_sigma - 1), abs=0.1)
    assert noise > 20  # measured: 30% more noise than epsilon = 4 needs (docs/private-training.md)
    # An explicit L at or above the priced one costs nothing and says nothing.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dpscaling.accounting.truncation"):
        account_run("truncated_poisson", None, dataset_size=N, expected_batch_size=B, steps=T, delta=DELTA,
                    noise_batch_ratio=0.75 / B, truncated_batch_size=300)
    assert not caplog.records


def test_a_fixed_sigma_run_records_the_sigma_untruncated_poisson_would_need():
    sigma = 0.977
    run = account_run("truncated_poisson", None, dataset_size=N, expected_batch_size=B, steps=T, delta=DELTA,
                      noise_batch_ratio=sigma / B, multiple=8)
    assert run.sigma == pytest.approx(sigma) and run.truncated_batch_size % 8 == 0
    assert run.epsilon == pytest.approx(poisson_epsilon(sigma), rel=0.02)  # ~1.84, not the 3.99 of L = 240
    assert poisson_epsilon(run.untruncated_sigma) == pytest.approx(run.epsilon, rel=0.01)


def test_recorded_padding_share_and_truncation_probability_match_the_sampler():
    n_rows, expected, steps = 1000, 50, 4000
    run = account_run("truncated_poisson", None, dataset_size=n_rows, expected_batch_size=expected, steps=100,
                      delta=DELTA, target_epsilon=2.0, multiple=4)
    size = run.truncated_batch_size
    sampler = PoissonBatches(n_rows, expected, size, secret_key())
    padded = np.array([np.mean(sampler.indices(s) == PADDING_INDEX) for s in range(steps)])
    standard_error = padded.std() / math.sqrt(steps)
    assert padded.mean() == pytest.approx(run.padding_share, abs=4 * standard_error)
    # No batch reached L in these steps, as a truncation probability this small says.
    assert run.truncation_probability * steps < 1e-2 and padded.min() > 0
    # A tiny L: nearly every step is cut, and its probability says so.
    tight = account_run("truncated_poisson", None, dataset_size=n_rows, expected_batch_size=expected, steps=100,
                        delta=DELTA, noise_batch_ratio=0.02, truncated_batch_size=expected)
    assert tight.truncation_probability == pytest.approx(0.47, abs=0.03)
    assert padding_share(n_rows, expected / n_rows, expected) == pytest.approx(
        1 - np.mean(np.minimum(np.random.default_rng(0).binomial(n_rows, expected / n_rows, 200_000),
                               expected)) / expected, abs=2e-3)


def test_the_tail_bound_sizes_jobs_above_the_priced_l(priced):
    bound = tail_truncated_batch_size(B, T, DELTA)  # what cluster sizing uses, without the data
    assert bound >= priced.truncated_batch_size
    assert bound < B + 10 * math.sqrt(B)


@pytest.mark.parametrize("mechanism", ["dpsgd", "bandmf-b16"])
def test_a_calibrated_run_records_an_epsilon_within_its_target_at_extreme_epsilon(mechanism):
    """At ε = 1024 the σ-only discretisation (2.5) is coarser than the calibration's: a record taken there
    read 1027.1 for a run calibrated for 1024. The record is taken at the calibration's interval, and
    dp-accounting alone at a finer one agrees that the run spends at most its target."""
    from jax_privacy.experimental import accounting

    n, batch, steps, target = 20_000, 108, 275, 1024.0
    run = account_run("truncated_poisson", None, dataset_size=n, expected_batch_size=batch, steps=steps, delta=DELTA,
                      target_epsilon=target, mechanism=mechanism, multiple=4)
    assert run.epsilon <= target
    bands = run.bands
    event = accounting.truncated_amplified_bandmf_event(
        run.sigma, steps, num_bands=bands, sampling_prob=run.sampling_probability,
        largest_group_size=n // bands, truncated_batch_size=run.truncated_batch_size)
    independent = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-2).compose(event).get_epsilon(DELTA)
    assert independent <= target and run.epsilon == pytest.approx(independent, rel=0.01)
    assert independent > 0.98 * target  # calibrated to the target, not far under it


@pytest.mark.parametrize("sigma,q,steps,dataset_size,size", [
    (0.754, 181 / 20000, 289, 20000, 258), (0.97, 1024 / 100000, 2000, 100000, 1193), (1.2, 0.02, 60, 5000, 105),
    (0.9, 0.05, 200, 600, 44), (1.34, 304 / 1250, 22, 1250, 330)])
def test_the_vectorised_truncated_pld_is_dp_accountings(sigma, q, steps, dataset_size, size):
    """The accountant's single-step PLD (losses vectorised, replace-one inverse in closed form) and its FFT
    composition give dp-accounting's own ε for jax-privacy's truncated event, and the same distribution."""
    import numpy as np
    from dp_accounting.pld import privacy_loss_distribution

    from dpscaling.accounting import pld
    from dpscaling.accounting.truncation import truncated_dpsgd_event, truncated_poisson_epsilon

    interval = 1e-3
    ours = pld.truncated_poisson_gaussian_pld(sigma, q, dataset_size, size, interval)
    theirs = privacy_loss_distribution.from_truncated_subsampled_gaussian_mechanism(
        dataset_size, q, size, sigma, value_discretization_interval=interval)
    for direction in ("_pmf_remove", "_pmf_add"):
        mine, reference = getattr(ours, direction), getattr(theirs, direction)
        assert mine._lower_loss == reference._lower_loss and len(mine._probs) == len(reference._probs)
        np.testing.assert_allclose(mine._probs, reference._probs, rtol=1e-5, atol=1e-11)
    event = truncated_dpsgd_event()(sigma, steps, sampling_prob=q, num_examples=dataset_size, truncated_batch_size=size)
    expected = dp_accounting.pld.PLDAccountant(value_discretization_interval=interval).compose(event).get_epsilon(DELTA)
    assert truncated_poisson_epsilon(sigma, q, steps, dataset_size, size, DELTA, interval) == pytest.approx(
        expected, rel=1e-4)


def test_a_step_skipping_its_padding_microbatches_computes_its_draw_and_under_one_microbatch_more() -> None:
    """m · E[⌈min(X, L)/m⌉] against 400,000 simulated binomial draws; between E[min(X, L)] and it plus m."""
    n, expected, size, microbatch = 20_000, 181, 240, 8
    draws = np.minimum(np.random.default_rng(0).binomial(n, expected / n, 400_000), size)
    computed = computed_batch(n, expected / n, size, microbatch)
    assert computed == pytest.approx(np.mean(microbatch * np.ceil(draws / microbatch)), rel=1e-3)
    assert np.mean(draws) < computed < np.mean(draws) + microbatch
    assert computed_batch(n, expected / n, size, size) == pytest.approx(size)  # one microbatch: always computed
