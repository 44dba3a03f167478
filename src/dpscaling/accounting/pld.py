"""Privacy-loss distributions of the Poisson-subsampled Gaussian (dp-accounting PLD).

The tight accountant behind the paper's Poisson branch (§3.4 "Using the Fitted
Functions": σ̄ from dp-accounting as a function of ε, N, B, T; appendix "Notes on
Generalized DP-SGD": sampling probability B/N, noise multiplier B·σ̄,
add/remove adjacency).

Why the discretisation is chosen here rather than left at dp-accounting's
default 1e-4: when the per-step privacy loss is tiny (small ε, many steps) 1e-4
is too coarse and σ comes out tens to thousands of percent too large; when it is
huge (large ε) 1e-4 wastes memory. The interval is a fixed fraction of μ/√T,
μ the GDP-equivalent of the target (ε, δ) (the rule measured to keep σ within
0.1% of a converged reference), and never more than SPREAD_SLACK times that
fraction of the spread of one step's privacy loss (the spread alone is used
before μ is known). The discretisation is pessimistic (connect-the-dots) at any
interval, so a coarser grid can only raise σ. A configuration whose single-step
PLD would exceed ``max_points`` bins is refused (:class:`AccountingRefused`),
never approximated.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as mechanisms
from scipy import special, stats

from dpscaling.accounting import composition
from dpscaling.accounting.hockey_stick import epsilon_for_delta
from dpscaling.accounting.validation import AccountingRefused

DISCRETISATION_FRACTION = 0.1
MAX_DISCRETISATION = 100.0
# Below ~1e-7 dp-accounting's PLD suffers cancellation (σ 182 → 210 was measured).
MIN_DISCRETISATION = 2e-7
# dp-accounting truncates each single-step noise distribution at mass e^-50.
_TAIL_STANDARD_DEVIATIONS = 10.0
# ~8 bytes x 2 adjacency directions x FFT padding: 4e6 bins stay well under 1 GB.
DEFAULT_MAX_POINTS = 4_000_000
# Samples of the noise density for the loss-spread estimate.
# How far μ/√T may exceed the per-step loss spread in the interval rule. At tiny q the
# spread is that of the bulk of steps an example sits out, far below μ/√T, while ε is
# set by the rare participations: at q = 2^-17, T = 1600 an interval 64× coarser than
# fraction·spread (but ≤ fraction·μ/√T) moved ε by ≤ 1e-5. Capping at fraction·spread
# instead made those PLDs 10^6–10^7 bins (and refused much of q ≤ 2^-16).
SPREAD_SLACK = 32.0
_SPREAD_GRID = 4001


def _remove_direction_loss(x: np.ndarray, sigma: float, q: float) -> np.ndarray:
    """Privacy loss log(P(x)/Q(x)) of the subsampled Gaussian, removal direction.

    P = (1−q)·N(0, σ²) + q·N(1, σ²), Q = N(0, σ²); written with logaddexp so
    q = 1 (log(1−q) = −inf) and large 1/σ² neither overflow nor give NaN.
    """
    with np.errstate(divide="ignore"):
        log_stay = math.log1p(-q) if q < 1 else -math.inf
    return np.logaddexp(log_stay, math.log(q) + (2 * x - 1) / (2 * sigma * sigma))


def step_loss_spread(sigma: float, q: float) -> tuple[float, float]:
    """(standard deviation, range) of one step's privacy loss under P.

    The spread sets the discretisation; the range (over the ±10σ support
    dp-accounting keeps) predicts the size of the single-step PLD.
    """
    x = np.linspace(-_TAIL_STANDARD_DEVIATIONS * sigma, 1 + _TAIL_STANDARD_DEVIATIONS * sigma,
                    _SPREAD_GRID)
    loss = _remove_direction_loss(x, sigma, q)
    density = (1 - q) * stats.norm.pdf(x, 0, sigma) + q * stats.norm.pdf(x, 1, sigma)
    weights = density / density.sum()
    mean = float(np.dot(weights, loss))
    std = math.sqrt(max(float(np.dot(weights, (loss - mean) ** 2)), 0.0))
    return std, float(loss[-1] - loss[0])


@dataclass(frozen=True)
class Discretisation:
    interval: float
    predicted_points: int


def interval_rule(step_spread: float, gdp_step_mu: float | None, fraction: float = DISCRETISATION_FRACTION) -> float:
    """fraction × min(μ/√T, SPREAD_SLACK × step loss spread), or × the spread while μ/√T
    is unknown; capped so exp(interval) stays finite inside dp-accounting (σ ≲ 1e-3 only)."""
    spread = step_spread if gdp_step_mu is None else min(SPREAD_SLACK * step_spread, gdp_step_mu)
    return min(fraction * spread, MAX_DISCRETISATION)


def choose_discretisation(sigma: float, q: float, gdp_step_mu: float | None = None,
                          fraction: float = DISCRETISATION_FRACTION,
                          max_points: int = DEFAULT_MAX_POINTS) -> Discretisation:
    """Interval from :func:`interval_rule` (μ/√T known: ``gdp_step_mu``; else the loss spread).

    Raises AccountingRefused when the interval would fall below the cancellation
    limit or the single-step PLD would exceed ``max_points`` bins.
    """
    std, loss_range = step_loss_spread(sigma, q)
    interval = interval_rule(std, gdp_step_mu, fraction)
    predicted = int(loss_range / interval) + 1 if interval > 0 else math.inf
    if interval < MIN_DISCRETISATION or predicted > max_points:
        if interval >= MIN_DISCRETISATION and loss_range > 1e3:
            reason = ("sigma is so small that one step's privacy loss spans "
                      f"{loss_range:.3g} nats; epsilon would be astronomically large")
        else:
            reason = ("this is the unsolved corner of tiny sampling probability, many steps and "
                      "small epsilon. Use sampling='deterministic' or accountant='rdp' (loose), "
                      "or raise max_points")
        raise AccountingRefused(
            f"Poisson accounting at sigma={sigma:.4g}, sampling probability={q:.3g} needs a PLD "
            f"discretisation of {interval:.2g} ({predicted:.3g} bins > {max_points:.3g}): {reason}.")
    return Discretisation(interval=interval, predicted_points=int(predicted))


class _VectorisedGaussianLoss(mechanisms.GaussianPrivacyLoss):
    """dp-accounting's subsampled-Gaussian privacy loss with a vectorised hockey-stick divergence.

    dp-accounting evaluates δ(ε) at every discretisation point through a Python
    loop over ``inverse_privacy_loss``; building one single-step PLD with 10^5–10^6
    bins then took 1–16 s. The inverse loss has a closed form (sensitivity 1):
    without subsampling ε ↦ x = −1/2 − ε·σ² (remove) or 1/2 − ε·σ² (add); with rate q
    ε is first mapped to log(1 + (e^ε − 1)/q) (remove) or −log(1 + (e^−ε − 1)/q)
    (add). Everything else (truncation, connect-the-dots) is dp-accounting's own;
    tests compare the PMFs with dp-accounting's.
    """

    def get_delta_for_epsilon(self, epsilon):  # type: ignore[override]
        epsilons = np.atleast_1d(np.asarray(epsilon, dtype=float))
        q, variance = self.sampling_prob, self._standard_deviation**2  # noqa: SLF001
        if self.adjacency_type == mechanisms.AdjacencyType.REPLACE:
            variance = variance  # the σ of this loss; its sensitivity enters below
        log_stay = math.log1p(-q) if q < 1 else -math.inf
        deltas = np.zeros_like(epsilons)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.adjacency_type == mechanisms.AdjacencyType.REMOVE:
                inside = epsilons > log_stay
                deltas[~inside] = -np.expm1(epsilons[~inside])
                e = epsilons[inside]
                unsampled = e + np.log(-np.expm1(log_stay - e)) - math.log(q)
                x = -0.5 - unsampled * variance
            elif self.adjacency_type == mechanisms.AdjacencyType.ADD:
                inside = epsilons < -log_stay
                e = epsilons[inside]
                unsampled = -(-e + np.log(-np.expm1(log_stay + e)) - math.log(q))
                x = 0.5 - unsampled * variance
            else:  # REPLACE (sensitivity s): x = σ²/s · (asinh(−sign(ε)·α·sinh(|ε|/2)) − ε/2), dp-accounting's form
                inside = np.ones(epsilons.shape, dtype=bool)
                e, s = epsilons, self.sensitivity
                x = np.zeros_like(e)
                if q == 1.0:
                    x = -e * variance / s / 2
                else:
                    moved = e != 0
                    half = np.abs(e[moved]) / 2
                    log_sinh = half + np.log1p(-np.exp(-2 * half)) - math.log(2)
                    log_term = 0.5 * (s / self._standard_deviation) ** 2 + math.log1p(-q) - math.log(q) + log_sinh  # noqa: SLF001
                    asinh = -np.where(e[moved] >= 0, 1.0, -1.0) * np.logaddexp(0.5 * np.logaddexp(0, 2 * log_term),
                                                                                log_term)
                    x[moved] = variance / s * (asinh - e[moved] / 2)
            deltas[inside] = self.mu_upper_cdf(x) - np.exp(e + self.mu_lower_log_cdf(x))
        deltas = np.clip(deltas, 0, 1)
        return float(deltas[0]) if np.ndim(epsilon) == 0 else deltas


class _Normal:
    """N(0, scale²) as scipy's frozen ``stats.norm(scale=…)`` computes what dp-accounting's Gaussian privacy loss
    asks of it (``cdf``, ``logcdf``, ``ppf``: ``ndtr``, ``log_ndtr`` at x/scale, ``ndtri(p)·scale``, the same
    special functions on the same arguments), without building a scipy distribution object per privacy loss
    (two per PLD evaluation: 40% of a single-step build)."""

    def __init__(self, scale: float):
        self.scale = scale

    @staticmethod
    def _out(values: np.ndarray):
        return values[()] if values.ndim == 0 else values

    def cdf(self, x):
        return self._out(special.ndtr(np.asarray(x, dtype=np.float64) / self.scale))

    def logcdf(self, x):
        return self._out(special.log_ndtr(np.asarray(x, dtype=np.float64) / self.scale))

    def ppf(self, p):
        return self._out(special.ndtri(np.asarray(p, dtype=np.float64)) * self.scale + 0.0)


@functools.lru_cache(maxsize=64)
def _loss_template(q: float, adjacency: mechanisms.AdjacencyType) -> _VectorisedGaussianLoss:
    return _VectorisedGaussianLoss(1.0, sampling_prob=q, adjacency_type=adjacency)


def _gaussian_loss(sigma: float, q: float, adjacency: mechanisms.AdjacencyType) -> _VectorisedGaussianLoss:
    """dp-accounting's Gaussian privacy loss at noise ``sigma``: a copy of one built by its own constructor at
    rate q (what a calibration's steps share), with σ and its :class:`_Normal` set (tests compare every
    attribute with a fresh instance's)."""
    if not sigma > 0:
        raise ValueError(f"Standard deviation is not a positive real number: {sigma}")
    loss = copy.copy(_loss_template(q, adjacency))
    loss._standard_deviation = sigma  # noqa: SLF001
    loss._gaussian_random_variable = _Normal(sigma)  # noqa: SLF001
    return loss


def poisson_gaussian_pld(sigma: float, q: float, interval: float) -> pld_lib.PrivacyLossDistribution:
    """Single-step PLD of the Poisson-subsampled Gaussian (add/remove adjacency), pessimistic
    connect-the-dots, as dp-accounting's own object: its ``from_gaussian_mechanism`` with the vectorised loss.
    The accountants use :func:`poisson_gaussian_losses` (the same masses, faster); this form is what checks
    them against dp-accounting's composition."""
    def single(adjacency: mechanisms.AdjacencyType):
        loss = _VectorisedGaussianLoss(sigma, sampling_prob=q, adjacency_type=adjacency)
        return pld_lib._create_pld_pmf_from_monotone_privacy_loss(  # noqa: SLF001
            loss, pessimistic_estimate=True, value_discretization_interval=interval, use_connect_dots=True)

    return pld_lib._pld_for_subsampled_mechanism(single, q)  # noqa: SLF001


def truncated_poisson_gaussian_pld(sigma: float, q: float, dataset_size: int, truncated_batch_size: int,
                                   interval: float) -> pld_lib.PrivacyLossDistribution:
    """Single-step PLD of truncated-Poisson DP-SGD (add/remove), as dp-accounting's
    ``from_truncated_subsampled_gaussian_mechanism`` builds it (the event jax-privacy's ``truncated_dpsgd_event``
    composes): the Poisson-subsampled Gaussian of sensitivity 1, mixed with probability P(the example's batch is
    cut) with a sensitivity-2 Gaussian (σ/2, replace-one) at the sampling probability conditioned on the cut.
    Its Gaussian losses are the vectorised ones (:class:`_VectorisedGaussianLoss`, the replace-one inverse in
    dp-accounting's closed form) where dp-accounting inverts one loss at a time in Python (three quarters of a
    truncated run's calibration); a test compares the distributions and their ε with dp-accounting's."""
    from scipy import stats as scipy_stats

    sensitivity_one = poisson_gaussian_pld(sigma, q, interval)
    cut = float(scipy_stats.binom.sf(truncated_batch_size - 1, dataset_size - 1, q))
    if cut == 0.0:
        return sensitivity_one
    conditional = float(scipy_stats.binom.sf(truncated_batch_size, dataset_size, q)) * truncated_batch_size / cut / \
        dataset_size
    replace = _VectorisedGaussianLoss(sigma / 2, sampling_prob=conditional, adjacency_type=mechanisms.AdjacencyType.REPLACE)
    sensitivity_two = pld_lib.PrivacyLossDistribution(pld_lib._create_pld_pmf_from_monotone_privacy_loss(  # noqa: SLF001
        replace, pessimistic_estimate=True, value_discretization_interval=interval, use_connect_dots=True))
    return sensitivity_two.compute_mixture(sensitivity_one, cut)


def poisson_gaussian_losses(sigma: float, q: float, interval: float) -> list[composition.DiscreteLosses]:
    """The masses of :func:`poisson_gaussian_pld`'s directions (remove, then add where q < 1), bit for bit,
    without its PMF objects: dp-accounting's connect-the-dots build (``create_pmf_pessimistic_connect_dots_
    fixed_gap``) passes every mass through a Python dict and back to a list, two thirds of a calibration's
    time. The formula is its own: p_1 = 1 − δ_1 + (δ_2 − δ_1)/(e^d − 1), p_i = ((δ_{i+1} − δ_i) −
    e^d (δ_i − δ_{i−1}))/(e^d − 1), p_n = (δ_n − δ_{n−1})/(e^{−d} − 1), clipped at 0, mass δ_n at +∞, on the
    deltas of the same (running-minimum) hockey-stick curve; tests compare it with dp-accounting's."""
    adjacencies = [mechanisms.AdjacencyType.REMOVE] + ([mechanisms.AdjacencyType.ADD] if q != 1.0 else [])
    parts = []
    for adjacency in adjacencies:
        loss = _gaussian_loss(sigma, q, adjacency)
        bounds = loss.connect_dots_bounds()
        upper = math.ceil(bounds.epsilon_upper / interval)
        lower = math.floor(bounds.epsilon_lower / interval)
        deltas = np.asarray(loss.get_delta_for_epsilon(np.arange(lower, upper + 1) * interval), dtype=np.float64)
        parts.append(_connect_dots(deltas, lower, interval))
    return parts


def _connect_dots(deltas: np.ndarray, lower: int, interval: float) -> composition.DiscreteLosses:
    """dp-accounting's pessimistic connect-the-dots masses for the losses (lower + i)·interval (see
    :func:`poisson_gaussian_losses`), with its checks."""
    if np.any(deltas < 0) or np.any(deltas > 1):
        raise ValueError(f"deltas are not between 0 and 1 : deltas={deltas}.")
    if deltas.size == 1:
        return composition.DiscreteLosses(np.array([1 - deltas[0]]), lower, interval, float(deltas[0]))
    if np.any(np.diff(deltas) > pld_pmf._DELTA_DIFF_TOLERANCE):  # noqa: SLF001
        raise ValueError(f"deltas are not in non-increasing order: deltas={deltas}.")
    deltas = np.minimum.accumulate(deltas)
    diffs = np.diff(deltas)
    probs = np.zeros_like(deltas)
    probs[0] = 1 - deltas[0] + diffs[0] / math.expm1(interval)
    probs[1:-1] = (diffs[1:] - diffs[:-1] * math.exp(interval)) / math.expm1(interval)
    probs[-1] = diffs[-1] / math.expm1(-interval)
    return composition.DiscreteLosses(np.maximum(0.0, probs), lower, interval, float(deltas[-1]))


def composed_epsilon(single_step: pld_lib.PrivacyLossDistribution | list[composition.DiscreteLosses], steps: int,
                     delta: float, max_points: int = composition.DEFAULT_MAX_COMPOSED_POINTS) -> float:
    """ε(δ) after ``steps`` self-compositions (one real-FFT exponentiation per direction) of a single-step PLD
    or its directions' masses (:func:`poisson_gaussian_losses`)."""
    parts = (single_step if isinstance(single_step, list) else composition.directions(single_step))
    composed = [composition.self_compose(part, steps, max_points=max_points) for part in parts]
    return epsilon_for_delta(composed, delta)


def poisson_epsilon(sigma: float, q: float, steps: int, delta: float,
                    fraction: float = DISCRETISATION_FRACTION,
                    max_points: int = DEFAULT_MAX_POINTS) -> float:
    """ε spent by T steps of the Poisson-subsampled Gaussian with noise σ on the sum."""
    discretisation = choose_discretisation(sigma, q, fraction=fraction, max_points=max_points)
    return composed_epsilon(poisson_gaussian_losses(sigma, q, discretisation.interval), steps, delta)
