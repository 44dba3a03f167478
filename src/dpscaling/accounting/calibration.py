"""Poisson calibration: the σ on the SUM of clipped gradients for which T Poisson-subsampled Gaussian steps
at rate q are (ε, δ)-DP (dp-accounting's PLD, add/remove adjacency; ``accountant="rdp"`` a loose RDP bound), and
its inverse, ε spent at a σ.

The primitive every Poisson price composes: the paper's rule at a rate
(:func:`dpscaling.accounting.pricing.paper_sigma`, appendix "Notes on Generalized DP-SGD"; §2 "Noise-Batch
Ratio": σ̄ = σ/B; §3.4), the price of a configuration (:func:`dpscaling.accounting.pricing.price`), the warm
start of a truncated-Poisson run (:mod:`dpscaling.accounting.truncation`) and of ELS's
(:mod:`dpscaling.accounting.user_level`). Which events a sampler composes, and the paper's min rule over
Poisson and fixed batches, live in :mod:`dpscaling.accounting.pricing` alone.
"""

from __future__ import annotations

import math

from dpscaling.accounting import gaussian, pld, rdp
from dpscaling.accounting.search import DEFAULT_RELATIVE_TOLERANCE, solve_decreasing
from dpscaling.accounting.validation import DEFAULT_DELTA
from dpscaling.core.errors import UserError
from dpscaling.privacy.samplers import paper_participations

# The Poisson branch's accountants: tight PLD, or a loose RDP bound asked for by name.
ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp")

# When the discretisation picked at the warm start differs from the one the
# converged σ would pick by more than this factor, calibrate again with the latter.
_DISCRETISATION_DRIFT = 2.0


def poisson_epsilon(sigma: float, q: float, steps: int, delta: float = DEFAULT_DELTA,
                    accountant: str = "pld", max_points: int = pld.DEFAULT_MAX_POINTS) -> float:
    """ε spent by T steps of Poisson-sampled DP-SGD with noise σ on the sum."""
    if q == 1.0:  # no sampling: exactly a Gaussian with noise σ/√T
        return gaussian.gaussian_epsilon(sigma / math.sqrt(steps), delta)
    if accountant == "rdp":
        return rdp.poisson_epsilon_rdp(sigma, q, steps, delta)
    return pld.poisson_epsilon(sigma, q, steps, delta, max_points=max_points)


def poisson_warm_start(epsilon: float, delta: float, q: float, steps: int) -> float:
    """Starting σ for the Poisson search.

    The CLT/GDP σ is good when many steps each leak little (small ε); at large ε
    the Poisson σ sits just above the deterministic-batching σ (measured 1.2–1.6×
    at ε = 1e6), where the CLT σ is off by 100×.
    """
    fixed = gaussian.fixed_batch_sigma(epsilon, delta, paper_participations(q, steps))
    return min(gaussian.clt_sigma(epsilon, delta, q, steps), 1.3 * float(fixed))


def _calibrate_poisson_pld(epsilon: float, delta: float, q: float, steps: int,
                           relative_tolerance: float, max_points: int, fraction: float) -> float:
    step_mu = gaussian.gdp_mu(epsilon, delta) / math.sqrt(steps)
    sigma = poisson_warm_start(epsilon, delta, q, steps)
    used_interval = math.inf
    for _ in range(3):
        interval = pld.choose_discretisation(sigma, q, gdp_step_mu=step_mu, fraction=fraction,
                                             max_points=max_points).interval
        if max(interval / used_interval, used_interval / interval) < _DISCRETISATION_DRIFT:
            break
        used_interval = interval

        def epsilon_of(candidate: float, interval: float = interval) -> float:
            single = pld.poisson_gaussian_losses(candidate, q, interval)
            return pld.composed_epsilon(single, steps, delta)

        sigma = solve_decreasing(epsilon_of, epsilon, start=sigma,
                                 relative_tolerance=relative_tolerance)
    return sigma


def calibrate_poisson(epsilon: float, q: float, steps: int, delta: float = DEFAULT_DELTA,
                      accountant: str = "pld",
                      relative_tolerance: float = DEFAULT_RELATIVE_TOLERANCE,
                      max_points: int = pld.DEFAULT_MAX_POINTS,
                      discretisation_fraction: float = pld.DISCRETISATION_FRACTION) -> float:
    """Smallest σ with T Poisson-subsampled Gaussian steps (rate q) being (ε, δ)-DP.

    q = 1 uses the exact closed form √T·s_AG (PLD agrees to ≤ 1e-5). A smaller
    ``discretisation_fraction`` gives a finer (slower, tighter) reference.
    """
    if accountant not in ACCOUNTANTS:
        raise UserError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}")
    if q == 1.0:
        return gaussian.sigma_every_step(epsilon, delta, steps)
    if accountant == "rdp":
        return solve_decreasing(lambda s: rdp.poisson_epsilon_rdp(s, q, steps, delta), epsilon,
                                start=poisson_warm_start(epsilon, delta, q, steps),
                                relative_tolerance=relative_tolerance)
    return _calibrate_poisson_pld(epsilon, delta, q, steps, relative_tolerance, max_points,
                                  discretisation_fraction)
