"""Unamplified Gaussian compositions: fixed batches and GDP helpers.

Fixed batches (the "deterministic batching" branch of the paper's calibration rule, appendix "Notes on
Generalized DP-SGD": noise is calibrated "under both the Poisson sampling assumption and the deterministic
batching strategy, picking the lower noise multiplier"): an example in k of the T steps, sensitivity 1
each, is exactly one Gaussian mechanism of sensitivity √k, so

    σ(ε, δ, k) = √k · s_AG(ε, δ)          (:func:`fixed_batch_sigma`)

with s_AG the analytic Gaussian mechanism (Balle & Wang 2018), computed by
``dp_accounting.get_sigma_gaussian``. Which k: the paper's hypothetical ``k = ⌈q·T⌉``
(:func:`dpscaling.privacy.samplers.paper_participations`) for its rule, a sampler's own bound (:mod:`dpscaling.privacy.samplers`) for a run.
The other reading, "every example in every step" (k = T), is :func:`sigma_every_step`; with it a tight
Poisson σ is always lower, so the paper's min rule would never pick it.
"""

from __future__ import annotations

import functools
import math

import numpy as np


@functools.lru_cache(maxsize=65536)
def analytic_gaussian_sigma(epsilon: float, delta: float) -> float:
    """s_AG(ε, δ): the smallest noise for one sensitivity-1 Gaussian release to be (ε, δ)-DP."""
    import dp_accounting  # here: it costs most of a second, and most importers never call this

    return float(dp_accounting.get_sigma_gaussian(epsilon, delta))


def gaussian_epsilon(noise: float, delta: float) -> float:
    """ε(δ) of one sensitivity-1 Gaussian release with standard deviation ``noise``."""
    import dp_accounting

    return float(dp_accounting.get_epsilon_gaussian(noise, delta))


def gaussian_delta(noise: float, epsilon: float) -> float:
    """δ(ε) of one Gaussian release (Balle & Wang 2018, Theorem 8), in log space for large ε."""
    from scipy import stats  # here: SciPy's statistics cost a training job's start-up most of a second

    mu = 1.0 / noise
    log_upper = stats.norm.logcdf(-epsilon / mu + mu / 2)
    log_lower = epsilon + stats.norm.logcdf(-epsilon / mu - mu / 2)
    if log_lower >= log_upper:
        return 0.0
    return float(math.exp(log_upper) * -math.expm1(log_lower - log_upper))


def gaussian_total_variation(noise: float) -> float:
    """δ(ε=0) of one Gaussian release = total variation = 2Φ(1/(2·noise)) − 1."""
    from scipy import stats

    return float(2 * stats.norm.cdf(0.5 / noise) - 1)


def fixed_batch_sigma(epsilon, delta: float, participations):
    """√k · s_AG(ε, δ): σ on the sum when an example joins k steps (sensitivity √k). Vectorised over ε and k
    (s_AG once per distinct ε); a scalar in, a NumPy scalar out."""
    eps, k = np.broadcast_arrays(np.asarray(epsilon, float), np.asarray(participations, float))
    distinct, inverse = np.unique(eps, return_inverse=True)
    s_ag = np.array([analytic_gaussian_sigma(float(e), delta) for e in distinct])
    return np.sqrt(k) * s_ag[inverse].reshape(eps.shape)


def fixed_batch_epsilon(sigma: float, delta: float, participations: float) -> float:
    """ε(δ) spent by noise σ when an example joins k steps: one Gaussian release of noise σ/√k."""
    return gaussian_epsilon(sigma / math.sqrt(participations), delta)


def sigma_every_step(epsilon: float, delta: float, steps: int) -> float:
    """σ if every example were in every one of the T steps (the other reading of 'deterministic')."""
    return math.sqrt(steps) * analytic_gaussian_sigma(epsilon, delta)


def gdp_mu(epsilon: float, delta: float) -> float:
    """μ of the μ-GDP mechanism that is exactly (ε, δ)-DP: μ = 1/s_AG(ε, δ)."""
    return 1.0 / analytic_gaussian_sigma(epsilon, delta)


def clt_sigma(epsilon: float, delta: float, q: float, steps: int) -> float:
    """Warm start for Poisson calibration from the GDP central limit theorem.

    Bu et al. (2020): T steps of the Poisson-subsampled Gaussian approach
    μ-GDP with μ = q·√(T·(exp(1/σ²) − 1)); solving for the μ that gives (ε, δ)
    yields σ = 1/√log(1 + μ²/(q²T)). Exact at q = 1, an approximation elsewhere
    (used only to place search brackets).
    """
    mu = gdp_mu(epsilon, delta)
    return 1.0 / math.sqrt(math.log1p(mu * mu / (q * q * steps)))

