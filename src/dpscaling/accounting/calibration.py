"""Noise calibration: σ on the SUM of clipped gradients for (ε, δ, q = B/N, T).

Implements the paper's calibration rule (appendix "Notes on Generalized
DP-SGD"; §2 "Noise-Batch Ratio": σ̄ = σ/B; §3.4): the tight Poisson-subsampled
σ (dp-accounting PLD, add/remove adjacency), the deterministic-batching σ
(:mod:`dpscaling.accounting.gaussian`: k = ⌈qT⌉ participations, no
amplification), and ``"min"``, the lower of the two — the paper's rule, and the
default. ``accountant="rdp"`` swaps the Poisson branch for a loose RDP bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from dpscaling.accounting import gaussian, pld, rdp
from dpscaling.accounting.branches import DETERMINISTIC_BRANCH, MIN_RULE, POISSON_BRANCH, SAMPLINGS
from dpscaling.accounting.search import DEFAULT_RELATIVE_TOLERANCE, solve_decreasing
from dpscaling.accounting.validation import (
    DEFAULT_DELTA, check_delta, check_epsilon, check_sampling_probability, check_sigma, check_steps)
from dpscaling.errors import UserError

Sampling = Literal["poisson", "deterministic", "min"]
Accountant = Literal["pld", "rdp"]
# The study's accounting rules (paper §3.1), not the samplers a run trains with (dpscaling.samplers):
# σ of amplified Poisson batches, of deterministic batches, or the lower of the two (the paper's rule).
ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp")

# When the discretisation picked at the warm start differs from the one the
# converged σ would pick by more than this factor, calibrate again with the latter.
_DISCRETISATION_DRIFT = 2.0


@dataclass(frozen=True)
class Calibration:
    """A calibrated configuration: σ and which batching achieved it."""
    sigma: float
    sampling: str  # POISSON_BRANCH or DETERMINISTIC_BRANCH: the branch that gave σ
    epsilon: float
    delta: float
    q: float
    steps: int

    def noise_batch_ratio(self, batch_size: float) -> float:
        return self.sigma / batch_size


def _check_choice(value: str, allowed: tuple[str, ...], name: str) -> str:
    if value not in allowed:
        raise UserError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


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
    return min(gaussian.clt_sigma(epsilon, delta, q, steps),
               1.3 * gaussian.sigma_deterministic(epsilon, delta, q, steps))


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
    if q == 1.0:
        return gaussian.sigma_every_step(epsilon, delta, steps)
    if accountant == "rdp":
        return solve_decreasing(lambda s: rdp.poisson_epsilon_rdp(s, q, steps, delta), epsilon,
                                start=poisson_warm_start(epsilon, delta, q, steps),
                                relative_tolerance=relative_tolerance)
    return _calibrate_poisson_pld(epsilon, delta, q, steps, relative_tolerance, max_points,
                                  discretisation_fraction)


def calibrate(epsilon: float, q: float, steps: int, delta: float = DEFAULT_DELTA,
              sampling: str = "min", accountant: str = "pld",
              relative_tolerance: float = DEFAULT_RELATIVE_TOLERANCE,
              max_points: int = pld.DEFAULT_MAX_POINTS) -> Calibration:
    """σ under ``sampling`` ∈ {poisson, deterministic, min}; see module docstring."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    q, steps = check_sampling_probability(q), check_steps(steps)
    _check_choice(sampling, SAMPLINGS, "sampling")
    _check_choice(accountant, ACCOUNTANTS, "accountant")
    candidates: dict[str, float] = {}
    if sampling in (DETERMINISTIC_BRANCH, MIN_RULE):
        candidates[DETERMINISTIC_BRANCH] = gaussian.sigma_deterministic(epsilon, delta, q, steps)
    if sampling in (POISSON_BRANCH, MIN_RULE):
        candidates[POISSON_BRANCH] = calibrate_poisson(epsilon, q, steps, delta, accountant,
                                                  relative_tolerance, max_points)
    branch = min(candidates, key=candidates.__getitem__)
    return Calibration(candidates[branch], branch, epsilon, delta, q, steps)


def calibrate_sigma(epsilon: float, q: float, steps: int, delta: float = DEFAULT_DELTA,
                    sampling: str = "min", accountant: str = "pld") -> float:
    """Convenience: just σ of :func:`calibrate`."""
    return calibrate(epsilon, q, steps, delta, sampling, accountant).sigma


def epsilon_spent(sigma: float, q: float, steps: int, delta: float = DEFAULT_DELTA,
                  sampling: str = "min", accountant: str = "pld") -> float:
    """ε(δ) spent with noise σ; ``"min"`` gives the smaller ε of the two batchings."""
    sigma, delta = check_sigma(sigma), check_delta(delta)
    q, steps = check_sampling_probability(q), check_steps(steps)
    _check_choice(sampling, SAMPLINGS, "sampling")
    _check_choice(accountant, ACCOUNTANTS, "accountant")
    values = []
    if sampling in (DETERMINISTIC_BRANCH, MIN_RULE):
        values.append(gaussian.epsilon_deterministic(sigma, delta, q, steps))
    if sampling in (POISSON_BRANCH, MIN_RULE):
        values.append(poisson_epsilon(sigma, q, steps, delta, accountant))
    return min(values)
