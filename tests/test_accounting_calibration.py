"""Calibration: closed forms, both readings of deterministic batching, the paper's rule (pricing.paper_sigma),
monotonicity, edges."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpscaling.accounting import calibration, composition, gaussian, hockey_stick, pld, pricing
from dpscaling.accounting.validation import AccountingRefused
from dpscaling.core.errors import UserError
from dpscaling.privacy.samplers import paper_participations

DELTA = 1e-8


def paper(epsilon, q, steps, delta=DELTA, sampling="min"):
    """The paper's rule at a rate: (σ, branch)."""
    return pricing.paper_sigma("dpsgd", sampling, epsilon, delta, q, steps)


@pytest.mark.parametrize("epsilon,steps", [(0.25, 100), (1.0, 1000), (4.0, 16000), (64.0, 500)])
def test_unamplified_closed_form_matches_dp_accounting_pld(epsilon, steps):
    """T Gaussians with noise σ = one Gaussian with noise σ/√T: √T·s_AG vs a fine PLD at q = 1."""
    sigma = gaussian.sigma_every_step(epsilon, DELTA, steps)
    mechanism = pld_lib.from_gaussian_mechanism(sigma, value_discretization_interval=1e-4)
    epsilon_pld = mechanism.self_compose(steps).get_epsilon_for_delta(DELTA)
    assert epsilon_pld == pytest.approx(epsilon, rel=2e-3)
    assert gaussian.gaussian_delta(sigma / math.sqrt(steps), epsilon) == pytest.approx(DELTA, rel=1e-6)


def test_q_one_uses_exact_closed_form():
    assert calibration.calibrate_poisson(4.0, 1.0, 1000) == pytest.approx(
        math.sqrt(1000) * dp_accounting.get_sigma_gaussian(4.0, DELTA), rel=1e-12)


def test_participations_rounds_float_products():
    assert paper_participations(0.1, 1000) == 100
    assert paper_participations(1e-6, 10) == 1
    assert paper_participations(0.5, 3) == 2


@pytest.mark.parametrize("epsilon,q,steps", [(1.0, 2**-6, 1000), (4.0, 2**-3, 2000), (8.0, 2**-10, 16000),
                                             (0.5, 0.5, 100)])
def test_every_step_deterministic_is_never_below_poisson(epsilon, q, steps):
    """Notes: with 'every example in every step', tight Poisson σ is ≥ 1.98× lower."""
    poisson = calibration.calibrate_poisson(epsilon, q, steps)
    assert gaussian.sigma_every_step(epsilon, DELTA, steps) >= 1.9 * poisson


def test_k_participation_deterministic_beats_poisson_at_large_epsilon_so_min_matters():
    """With k = ⌈qT⌉ participations, deterministic can win at large ε (and loses at small ε)."""
    large, branch = paper(1e5, 2**-3, 100)
    assert branch == "deterministic"
    assert large < 0.7 * calibration.calibrate_poisson(1e5, 2**-3, 100)
    small, branch = paper(1.0, 2**-6, 1000)
    assert branch == "poisson"
    assert small < gaussian.fixed_batch_sigma(1.0, DELTA, paper_participations(2**-6, 1000))


def test_min_is_the_lower_of_both_branches():
    for epsilon in (2.0, 300.0):
        both = paper(epsilon, 2**-2, 400, sampling="min")[0]
        poisson = paper(epsilon, 2**-2, 400, sampling="poisson")[0]
        det = paper(epsilon, 2**-2, 400, sampling="deterministic")[0]
        assert both == min(poisson, det)


def test_monotonicity():
    """σ decreases in ε and in N (q = B/N), increases in T and in B."""
    by_epsilon = [paper(e, 2**-5, 500)[0] for e in (0.5, 2, 8, 32)]
    assert np.all(np.diff(by_epsilon) < 0)
    by_steps = [paper(2.0, 2**-5, t)[0] for t in (200, 500, 1000)]
    assert np.all(np.diff(by_steps) > 0)
    batch = 512
    by_users = [paper(2.0, batch / n, 500)[0] for n in (2**12, 2**14, 2**16)]
    assert np.all(np.diff(by_users) < 0)
    users = 2**16
    by_batch = [paper(2.0, b / users, 500)[0] for b in (256, 1024, 4096)]
    assert np.all(np.diff(by_batch) > 0)


def test_calibrated_sigma_spends_at_most_epsilon_and_is_tight():
    sigma = calibration.calibrate_poisson(2.0, 2**-7, 3000)
    assert calibration.poisson_epsilon(sigma, 2**-7, 3000) <= 2.0
    assert calibration.poisson_epsilon(sigma * 0.995, 2**-7, 3000) > 2.0


def test_epsilon_spent_inverts_calibration_for_every_sampling():
    for sampling in ("poisson", "deterministic", "min"):
        sigma = paper(3.0, 2**-5, 800, sampling=sampling)[0]
        spent, _ = pricing.paper_epsilon("dpsgd", sampling, sigma, DELTA, 2**-5, 800)
        assert spent == pytest.approx(3.0, rel=2e-3)


def test_rdp_is_an_explicit_loose_upper_bound():
    tight = calibration.calibrate_poisson(1.0, 2**-6, 2000)
    loose = calibration.calibrate_poisson(1.0, 2**-6, 2000, accountant="rdp")
    assert loose >= tight


@pytest.mark.parametrize("sigma,q,steps,interval", [
    (0.5, 2**-10, 1000, 7e-4), (1.0, 2**-10, 20000, 1e-4), (5.0, 2**-4, 1000, 1e-3),
    (50.0, 0.5, 100, 1e-3), (0.8, 0.3, 7, 1e-3)])
def test_vectorised_composition_and_hockey_stick_match_dp_accounting(sigma, q, steps, interval):
    single = pld.poisson_gaussian_pld(sigma, q, interval)
    composed = single.self_compose(steps)
    expected = composed.get_epsilon_for_delta(DELTA)
    assert hockey_stick.epsilon_for_delta(composed, DELTA) == pytest.approx(expected, rel=1e-9)
    assert pld.composed_epsilon(single, steps, DELTA) == pytest.approx(expected, rel=1e-5)
    remove = composition.dense_losses(composed._pmf_remove)
    assert hockey_stick.losses_delta_for_epsilon(remove, 0.5) == pytest.approx(
        composed._pmf_remove.get_delta_for_epsilon(0.5), rel=1e-9)


def test_huge_epsilon_is_finite_and_no_overflow():
    sigma = paper(1e6, 2**-3, 100)[0]
    assert 0 < sigma < 0.1 and math.isfinite(sigma)
    assert paper(1e6, 1.0, 128000)[0] == pytest.approx(
        math.sqrt(128000) * dp_accounting.get_sigma_gaussian(1e6, DELTA))


def test_hard_corner_is_refused_not_approximated():
    with pytest.raises(AccountingRefused, match="corner"):
        paper(2**-6, 2**-20, 100000, sampling="poisson")
    # min cannot silently fall back to deterministic either
    with pytest.raises(AccountingRefused):
        paper(2**-6, 2**-20, 100000, sampling="min")
    # deterministic remains available
    assert paper(2**-6, 2**-20, 100000, sampling="deterministic")[0] > 0


@pytest.mark.parametrize("kwargs,flag", [
    (dict(epsilon=0.0, q=0.1, steps=10), "epsilon"), (dict(epsilon=math.nan, q=0.1, steps=10), "epsilon"),
    (dict(epsilon=1e9, q=0.1, steps=10), "epsilon"), (dict(epsilon=1.0, q=0.0, steps=10), "sampling probability"),
    (dict(epsilon=1.0, q=1.5, steps=10), "sampling probability"), (dict(epsilon=1.0, q=0.1, steps=0), "steps"),
    (dict(epsilon=1.0, q=0.1, steps=10.5), "steps"), (dict(epsilon=1.0, q=0.1, steps=10, delta=0), "delta"),
    (dict(epsilon=1.0, q=0.1, steps=10, sampling="uniform"), "sampling")])
def test_bad_inputs_raise_user_errors_naming_the_field(kwargs, flag):
    with pytest.raises(UserError, match=flag):
        paper(**kwargs)
    with pytest.raises(UserError, match="accountant"):
        calibration.calibrate_poisson(1.0, 0.1, 10, accountant="gdp")


@pytest.mark.parametrize("sigma,q,interval", [
    (0.5, 2**-10, 7e-4), (1.0, 2**-10, 1e-4), (5.0, 2**-4, 1e-3), (50.0, 0.5, 1e-3), (0.8, 0.3, 1e-3),
    (2.0, 1.0, 1e-3), (30.0, 2**-17, 0.5)])
def test_single_step_masses_are_dp_accountings_bit_for_bit(sigma, q, interval):
    """The calibration's single-step build (no dict round trip, no scipy distribution per loss) gives every
    direction's masses, lowest loss and mass at +∞ exactly as dp-accounting's connect-the-dots build of the
    same privacy loss, and dp-accounting's own Gaussian mechanism to rounding (its per-point δ(ε) differs
    in the last bits, which the second differences of connect-the-dots amplify to 1e-12)."""
    expected = composition.directions(pld.poisson_gaussian_pld(sigma, q, interval))
    reference = composition.directions(pld_lib.from_gaussian_mechanism(
        sigma, value_discretization_interval=interval, sampling_prob=q, use_connect_dots=True))
    built = pld.poisson_gaussian_losses(sigma, q, interval)
    assert len(built) == len(expected) == len(reference) == (1 if q == 1.0 else 2)
    for ours, theirs, dp_accountings in zip(built, expected, reference):
        assert (ours.lower, ours.step, ours.infinity_mass) == (theirs.lower, theirs.step, theirs.infinity_mass)
        assert np.array_equal(ours.probs, theirs.probs)
        assert ours.lower == dp_accountings.lower and ours.probs.shape == dp_accountings.probs.shape
        np.testing.assert_allclose(ours.probs, dp_accountings.probs, rtol=1e-6, atol=1e-10)


def test_the_copied_gaussian_loss_is_dp_accountings_at_that_sigma():
    """Every attribute of the copied privacy loss is that of dp-accounting's constructor at that σ, and its
    normal answers as scipy's frozen one, bit for bit (infinities, NaN and the ends of ppf included)."""
    from dp_accounting.pld import privacy_loss_mechanism as mechanisms
    from scipy import stats

    for adjacency in (mechanisms.AdjacencyType.REMOVE, mechanisms.AdjacencyType.ADD):
        copied = pld._gaussian_loss(0.7, 0.01, adjacency)
        fresh = pld._VectorisedGaussianLoss(0.7, sampling_prob=0.01, adjacency_type=adjacency)
        mine, theirs = dict(vars(copied)), dict(vars(fresh))
        assert isinstance(mine.pop("_gaussian_random_variable"), pld._Normal)
        theirs.pop("_gaussian_random_variable")
        assert mine == theirs
    normal, frozen = pld._Normal(0.37), stats.norm(scale=0.37)
    x = np.array([-np.inf, -40.0, -1.5, -0.0, 0.0, 1e-300, 2.5, 60.0, np.inf, np.nan])
    p = np.array([0.0, 1e-300, 0.3, 0.5, 1.0 - 1e-16, 1.0, np.nan, 1.5])
    for ours, scipys in ((normal.cdf(x), frozen.cdf(x)), (normal.logcdf(x), frozen.logcdf(x)),
                         (normal.ppf(p), frozen.ppf(p))):
        assert np.array_equal(ours, scipys, equal_nan=True)
    assert normal.cdf(0.3) == frozen.cdf(0.3) and np.ndim(normal.ppf(0.2)) == 0
    with pytest.raises(ValueError, match="Standard deviation"):
        pld._gaussian_loss(0.0, 0.01, mechanisms.AdjacencyType.REMOVE)
