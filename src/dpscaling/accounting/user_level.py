"""Example-level sampling accounted per user (ELS; not in the paper): sequences drawn by truncated Poisson
sampling as in any private run, the guarantee for a user who contributed up to k of them.

**The untruncated part** is jax-privacy's ``DpsgdTrainingUserLevelAccountant`` (after Chua et al. 2024,
arXiv 2401.10294): each step is a mixture of Gaussians whose sensitivity is the number of the user's k
sequences that Poisson sampling at rate q drew, Binomial(k, q), composed by dp-accounting's PLD accountant
(add/remove of one user). It assumes no truncation.

**The truncation** is priced by a total-variation bound. The run executes M_L, which keeps a uniform L of a
batch above L; M, untruncated, differs from it only when some step's batch exceeds L, which on data of N'
sequences has probability η(N') ≤ T · P(Binomial(N', q) > L). So for neighbours D, D' and any outcome set S,
P[M_L(D) ∈ S] ≤ P[M(D) ∈ S] + η ≤ e^ε P[M(D') ∈ S] + δ_M + η ≤ e^ε P[M_L(D') ∈ S] + δ_M + (1 + e^ε) η,
with η taken at N + k (the tail grows with N, and a neighbour has at most k more sequences). The run's
δ is split: :data:`TRUNCATION_DELTA_SHARE` of it for (1 + e^ε) η, the rest for the mixture, and L is the
smallest multiple of the microbatch that keeps (1 + e^ε) η within its share. The bound is loose where the
truncated event of :mod:`dpscaling.accounting.truncation` is tight, so ELS pays for truncation in padding:
L sits far enough into the tail that truncation almost never happens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from dp_accounting.pld import privacy_loss_distribution, privacy_loss_mechanism
from scipy import stats

from dpscaling.accounting.calibration import calibrate_poisson
from dpscaling.accounting.search import solve_decreasing
from dpscaling.accounting.truncation import padding_share, round_up
from dpscaling.core.errors import UserError

# The share of the run's δ spent on the truncation's total-variation term (the rest is the mixture's).
TRUNCATION_DELTA_SHARE = 0.1
# PLD discretisation of the mixture, the run's and the σ table's alike. Pessimistic: ε is over-, never
# under-stated. At T = 1000, k = 16 it read 0.4% above jax-privacy's default of 1e-3 (3e-3: 0.03% above) and
# builds three times faster than 3e-3: a run's calibration and the query's ELS pricing take a few seconds.
DISCRETISATION = 1e-2


def els_epsilon(sigma: float, q: float, examples_per_user: int, steps: int, dataset_size: int,
                delta: float) -> float:
    """ε(δ) of T untruncated ELS steps: jax-privacy's user-level DP-SGD accountant (PLD, add/remove a user), i.e.
    T compositions of the mixture of Gaussians of sensitivity Binomial(k, q) at its rate B/N, composed by
    dp-accounting, its one-step distribution built by :func:`mixture_losses` (dp-accounting's, bit for bit, 10–40
    times sooner than the accountant's own build; a test compares the two ε)."""
    if sigma == 0:
        return math.inf
    rate = round(q * dataset_size) / dataset_size  # the accountant's batch_size / num_samples
    single = mixture_losses(sigma, rate, examples_per_user)
    return float(privacy_loss_distribution.identity(DISCRETISATION).compose(single.self_compose(steps))
                 .get_epsilon_for_delta(delta))


class MixtureLoss(privacy_loss_mechanism.MixtureGaussianPrivacyLoss):
    """dp-accounting's mixture-of-Gaussians privacy loss, inverted by one bisection over every loss at once.

    dp-accounting bisects recursively, calling the scalar loss once per node of the search (0.2M calls a
    build: 90% of an ELS σ table's time). Here each loss follows the same path, its midpoints compared with the
    same loss values, one array operation per level, and ends at the same multiple of ``precision``."""

    def _losses(self, x: np.ndarray) -> np.ndarray:
        """``privacy_loss`` at each of ``x``: its arithmetic in its order, a row per point."""
        x_loss = self.sensitivities[None, :] * x[:, None] / self._variance
        constants = self._precompute_privacy_loss_constants[None, :]
        if self.adjacency_type == privacy_loss_mechanism.AdjacencyType.ADD:
            return -np.logaddexp.reduce(constants + x_loss, axis=1)
        return np.logaddexp.reduce(constants - x_loss, axis=1)

    def _inverse_privacy_losses_with_range(self, privacy_losses, bounds, precision=1e-6):
        losses = np.asarray(privacy_losses, dtype=float)
        low, high = np.full(losses.shape, float(bounds[0])), np.full(losses.shape, float(bounds[1]))
        searching = np.flatnonzero(high - low > precision)
        while searching.size:
            middle = (low[searching] + high[searching]) / 2
            above = losses[searching] < self._losses(middle)  # the loss falls with x: its inverse lies above
            low[searching[above]], high[searching[~above]] = middle[above], middle[~above]
            searching = searching[high[searching] - low[searching] > precision]
        return np.floor(high / precision) * precision


def mixture_losses(sigma: float, q: float, examples_per_user: int) -> privacy_loss_distribution.PrivacyLossDistribution:
    """One ELS step's privacy-loss distribution (dp-accounting's, at :data:`DISCRETISATION`): the mixture of
    Gaussians of sensitivity j with probability Binomial(k, q)(j), what jax-privacy's accountant composes; the
    σ table walks σ with it (:mod:`dpscaling.accounting.sweep`). Built as dp-accounting's
    ``from_mixture_gaussian_mechanism`` builds it, with :class:`MixtureLoss`: the same distribution bit for bit
    (a test compares them), 10–40 times sooner."""
    sensitivities = list(range(examples_per_user + 1))
    probabilities = [float(p) for p in stats.binom.pmf(sensitivities, examples_per_user, q)]

    def one_direction(adjacency: privacy_loss_mechanism.AdjacencyType):
        loss = MixtureLoss(sigma, sensitivities, probabilities, pessimistic_estimate=True,
                           log_mass_truncation_bound=-50, adjacency_type=adjacency)
        return privacy_loss_distribution._create_pld_pmf_from_monotone_privacy_loss(
            loss, pessimistic_estimate=True, value_discretization_interval=DISCRETISATION, use_connect_dots=True)

    return privacy_loss_distribution.PrivacyLossDistribution(
        one_direction(privacy_loss_mechanism.AdjacencyType.REMOVE),
        one_direction(privacy_loss_mechanism.AdjacencyType.ADD))


def log_binomial_tail(size: int, trials: int, q: float) -> float:
    """log P(Binomial(``trials``, q) > ``size``), −inf where it is 0 (``size`` ≥ ``trials``).

    SciPy's ``binom.logsf`` is the log of its ``sf``, which underflows below 1e-308 (at N 4,000 and q 0.032,
    from L ≈ 740). There the tail is bounded by its first term and the geometric series of the ratios of the
    terms after it, which fall with j: P(X > L) ≤ P(X = L + 1) / (1 − r), r = (n − L − 1) q / ((L + 2)(1 − q)),
    an upper bound within the factor 1 / (1 − r) of the tail, so the truncation term is never understated."""
    if size >= trials:
        return -math.inf
    tail = float(stats.binom.sf(size, trials, q))
    if tail >= np.finfo(float).tiny:  # a normal float: SciPy's tail to its relative precision
        return math.log(tail)
    ratio = (trials - size - 1) * q / ((size + 2) * (1 - q))
    first = float(stats.binom.logpmf(size + 1, trials, q))
    if ratio < 1:
        return first - math.log1p(-ratio)
    terms = stats.binom.logpmf(np.arange(size + 1, trials + 1), trials, q)  # not reached: the tail is not tiny
    return float(np.logaddexp.reduce(terms))


def log_truncation_delta(dataset_size: int, q: float, examples_per_user: int, steps: int, size: int,
                         epsilon: float) -> float:
    """log of (1 + e^ε) · T · P(Binomial(N + k, q) > L), in log space (it can exceed 1e308 where ε is large):
    −inf where L ≥ N + k (no batch of the data or of a neighbour's can exceed L)."""
    tail = log_binomial_tail(size, dataset_size + examples_per_user, q)
    if tail == -math.inf:
        return -math.inf
    return float(np.logaddexp(0.0, epsilon)) + math.log(steps) + tail


def truncation_delta(dataset_size: int, q: float, examples_per_user: int, steps: int, size: int,
                     epsilon: float) -> float:
    """(1 + e^ε) · T · P(Binomial(N + k, q) > L): what truncating at L adds to δ (at most 1: it is a probability's
    bound), from :func:`log_truncation_delta`."""
    return math.exp(min(0.0, log_truncation_delta(dataset_size, q, examples_per_user, steps, size, epsilon)))


def els_truncated_batch_size(dataset_size: int, q: float, examples_per_user: int, steps: int, epsilon: float,
                             budget: float, multiple: int = 1) -> int:
    """The smallest L (≥ the expected batch, a multiple of ``multiple``) whose truncation term is ≤ ``budget``;
    at most N + k rounded up, where nothing is cut and the term is 0."""
    def fits(candidate: int) -> bool:
        return truncation_delta(dataset_size, q, examples_per_user, steps, candidate, epsilon) <= budget

    ceiling = round_up(dataset_size + examples_per_user, multiple)
    start = size = min(ceiling, round_up(max(1, math.ceil(q * dataset_size)), multiple))
    step = max(multiple, round_up(math.sqrt(q * dataset_size), multiple))
    while not fits(size):
        size = min(ceiling, size + step)
    low = max(size - step, start - multiple)  # a size known to fail, or just below the smallest allowed
    while size - low > multiple:  # bisect down to the smallest multiple that passes
        middle = round_up((low + size) // 2, multiple)
        if middle >= size:
            break
        if fits(middle):
            size = middle
        else:
            low = middle
    return size


@dataclass(frozen=True)
class ElsRun:
    """An ELS run resolved: σ, ε and δ for the user, and L with what it costs."""

    sigma: float
    epsilon: float
    mixture_delta: float  # δ of the untruncated mixture
    truncation_delta: float  # (1 + e^ε) η at the run's L; mixture_delta + truncation_delta ≤ the run's δ
    truncated_batch_size: int
    padding_share: float
    examples_per_user: int  # k


def els_run(*, q: float, steps: int, dataset_size: int, examples_per_user: int, delta: float, multiple: int = 1,
            truncated_batch_size: int | None = None, target_epsilon: float | None = None,
            sigma: float | None = None) -> ElsRun:
    """σ (calibrated for ``target_epsilon`` at the mixture's share of δ, else ``sigma``) and L (the smallest
    whose truncation term fits the rest of δ, unless given; a given L that does not fit is refused)."""
    if (target_epsilon is None) == (sigma is None):
        raise ValueError("give exactly one of target_epsilon and sigma")
    mixture = delta * (1 - TRUNCATION_DELTA_SHARE)

    def epsilon_of(noise: float) -> float:
        return els_epsilon(noise, q, examples_per_user, steps, dataset_size, mixture)

    if target_epsilon is not None:  # the sequence-level σ is a lower bound: a user is at least one sequence
        start = calibrate_poisson(target_epsilon, q, steps, mixture)
        sigma = solve_decreasing(epsilon_of, target_epsilon, start)
    epsilon = epsilon_of(sigma)
    budget = delta - mixture
    size = truncated_batch_size
    if size is None:
        size = els_truncated_batch_size(dataset_size, q, examples_per_user, steps, epsilon, budget, multiple)
    spent = truncation_delta(dataset_size, q, examples_per_user, steps, size, epsilon)
    if spent > budget:
        needed = els_truncated_batch_size(dataset_size, q, examples_per_user, steps, epsilon, budget, multiple)
        raise UserError(f"training.truncated_batch_size: L={size} is cut often enough to add {spent:.3g} to delta "
                        f"where {budget:.3g} is left for it; ELS needs L >= {needed} (or leave it null)")
    return ElsRun(sigma, epsilon, mixture, spent, size, padding_share(dataset_size, q, size), examples_per_user)
