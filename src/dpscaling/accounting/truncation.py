"""Truncated Poisson DP-SGD: its accountant, and the truncation length L chosen by its privacy price.

Private runs sample Poisson batches at rate q = B/N and train at a static shape L: a batch
above L keeps a uniform subset of L (:mod:`dpscaling.train.sampling`). The matched accountant
is jax-privacy's ``truncated_dpsgd_event`` (Chua et al. 2024, arXiv 2411.04205; a
``dp_accounting.TruncatedSubsampledGaussianDpEvent``) composed by dp-accounting's PLD
accountant, add/remove adjacency; its single-step PLD is built as dp-accounting builds it, with
the Gaussian losses vectorised (:func:`dpscaling.accounting.pld.truncated_poisson_gaussian_pld`).
It prices truncation: a step whose batch would exceed L behaves, with that step's probability P(Binomial(N, q) > L), like a mechanism of sensitivity 2.
Over T steps that mass is far above a δ of 1e-8 unless L sits well into the tail, and then
it raises ε at a given σ, or σ at a given ε, by a lot: a fixed L = B + 4√B (this module's
predecessor) cost the default's private runs 11–30% more noise than their ε needed, and ε = 4
at B = 181, N = 20,000, T = 289 came to 3.99 at L = 240 where untruncated Poisson spends 1.84
at the same σ.

So L is chosen by its price, with the same accountant: :func:`priced_truncation` returns the
smallest L (a multiple of the microbatch) whose truncated ε at the run's σ is within
:data:`EPSILON_TOLERANCE` of the untruncated Poisson ε at that σ — the same PLD event at
L = N, where no batch can be cut, so both numbers share one accountant and one
discretisation. :func:`truncated_poisson_run` resolves a run: σ calibrated for a target ε
(or the configured one), L priced (or the user's, with a warning saying what it costs),
and the record of the trade (L, P(batch > L) per step, the padding share of a step, the σ
untruncated Poisson would need).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from dpscaling.accounting import gaussian, pld
from dpscaling.accounting.validation import AccountingRefused
from dpscaling.accounting.calibration import calibrate_poisson, poisson_warm_start
from dpscaling.accounting.search import solve_decreasing

logger = logging.getLogger(__name__)

# The truncation may raise the run's ε at its σ by at most this fraction over untruncated Poisson.
EPSILON_TOLERANCE = 0.01
# Calibration tolerance on σ (relative): ε(σ) ≤ target always holds, σ is at most this much high.
RELATIVE_TOLERANCE = 1e-3


def _discretisation(sigma: float, q: float, steps: int, epsilon: float | None, delta: float) -> float:
    step_mu = None if epsilon is None else gaussian.gdp_mu(epsilon, delta) / math.sqrt(steps)
    return pld.choose_discretisation(sigma, q, gdp_step_mu=step_mu).interval


def truncated_dpsgd_event():
    """jax-privacy's ``truncated_dpsgd_event``: in ``jax_privacy.accounting`` from 2.2 on, in
    ``jax_privacy.experimental.accounting`` before (imported late: jax_privacy imports JAX)."""
    try:
        from jax_privacy.accounting import truncated_dpsgd_event as event
    except ImportError:
        from jax_privacy.experimental.accounting import truncated_dpsgd_event as event
    return event


def truncated_poisson_epsilon(sigma: float, q: float, steps: int, dataset_size: int,
                              truncated_batch_size: int, delta: float,
                              interval: float | None = None) -> float:
    """ε(δ) of T steps of truncated-Poisson DP-SGD with noise σ on the sum: jax-privacy's event's PLD as
    dp-accounting builds it, with vectorised losses (:func:`dpscaling.accounting.pld.truncated_poisson_gaussian_pld`,
    ten times sooner), composed by real FFT (:func:`dpscaling.accounting.pld.composed_epsilon`; tests compare both
    with dp-accounting's accountant); the discretisation follows :mod:`dpscaling.accounting.pld`'s rule."""
    if sigma == 0:
        return math.inf
    if interval is None:
        interval = _discretisation(sigma, q, steps, None, delta)
    single = pld.truncated_poisson_gaussian_pld(sigma, q, dataset_size, min(truncated_batch_size, dataset_size),
                                                interval)
    try:  # the real-FFT composition of dpscaling.accounting.composition, as the Poisson calibration composes
        return pld.composed_epsilon(single, steps, delta)
    except AccountingRefused:  # beyond its memory cap: dp-accounting's own composition, which has none
        return float(single.self_compose(steps).get_epsilon_for_delta(delta))


def calibration_interval(epsilon: float, delta: float, q: float, steps: int, start: float) -> float:
    """The discretisation a calibration for ε solves at (and its run's ε is then recorded at: the
    PLD bound is pessimistic at any interval, but a coarser one than the solve's can exceed ε)."""
    return _discretisation(start, q, steps, epsilon, delta)


def calibrate_truncated_poisson(epsilon: float, delta: float, q: float, steps: int,
                                dataset_size: int, truncated_batch_size: int,
                                start: float | None = None) -> float:
    """Smallest σ (within :data:`RELATIVE_TOLERANCE`) with truncated-Poisson DP-SGD (ε, δ)-DP at
    :func:`calibration_interval` (``start``'s)."""
    start = start or poisson_warm_start(epsilon, delta, q, steps)
    interval = calibration_interval(epsilon, delta, q, steps, start)
    return solve_decreasing(
        lambda s: truncated_poisson_epsilon(s, q, steps, dataset_size, truncated_batch_size,
                                            delta, interval),
        epsilon, start=start, relative_tolerance=RELATIVE_TOLERANCE)


def truncation_probability(dataset_size: int, q: float, truncated_batch_size: int) -> float:
    """P(Binomial(N, q) > L): the chance that one step's Poisson batch is cut to L."""
    return float(stats.binom.sf(truncated_batch_size, dataset_size, q))


def padding_share(dataset_size: int, q: float, truncated_batch_size: int) -> float:
    """Expected share of a step's L slots that are padding: 1 − E[min(X, L)] / L, X ~ Binomial(N, q)."""
    # E[min(X, L)] = Σ_{j<L} P(X > j)
    filled = float(np.sum(stats.binom.sf(np.arange(truncated_batch_size), dataset_size, q)))
    return 1.0 - filled / truncated_batch_size


def computed_batch(dataset_size: int, q: float, truncated_batch_size: int, microbatch_size: int) -> float:
    """Expected examples a padded step computes when it skips its whole microbatches of padding
    (:mod:`dpscaling.dp.per_example`): m · E[⌈min(X, L)/m⌉] = m · Σ_{k < L/m} P(X > k·m), X ~ Binomial(N, q);
    between E[min(X, L)] and L, under one microbatch above the former."""
    starts = np.arange(0, truncated_batch_size, microbatch_size)
    return microbatch_size * float(np.sum(stats.binom.sf(starts, dataset_size, q)))


def round_up(value: float, multiple: int) -> int:
    return -(-math.ceil(value) // multiple) * multiple


def tail_truncated_batch_size(expected_batch_size: int, steps: int, delta: float, multiple: int = 1,
                              dataset_size: int | None = None) -> int:
    """The smallest L (a multiple of ``multiple``) with T · P(batch > L) ≤ δ: every truncation
    of the run folded into δ. An accountant-free upper bound on the priced L (the PLD prices a
    cut step far more finely), for sizing jobs before the data exist and for a σ = 0 run, which
    has no privacy to price. Without ``dataset_size`` the batch is Poisson(B), whose tail is the
    heavier."""
    mass = delta / steps
    if dataset_size is None:
        size = stats.poisson.isf(mass, expected_batch_size)
    else:
        size = stats.binom.isf(mass, dataset_size, expected_batch_size / dataset_size)
    size = max(float(size), float(expected_batch_size))
    if dataset_size is not None:
        size = min(size, float(dataset_size))
    return round_up(size, multiple)


@dataclass(frozen=True)
class TruncationPrice:
    """What truncating at L costs a run of noise σ: its ε against untruncated Poisson's at that σ."""

    truncated_batch_size: int  # L
    truncation_probability: float  # P(batch > L) per step
    padding_share: float  # expected share of the L slots that are padding
    epsilon: float  # ε at σ, truncated at L
    untruncated_epsilon: float  # ε at σ, untruncated Poisson (the same PLD event at L = N)

    @property
    def excess(self) -> float:
        """Relative ε the truncation adds at this σ."""
        return self.epsilon / self.untruncated_epsilon - 1.0


def price_truncation(sigma: float, q: float, steps: int, dataset_size: int, truncated_batch_size: int,
                     delta: float, untruncated_epsilon: float | None = None,
                     interval: float | None = None) -> TruncationPrice:
    """The :class:`TruncationPrice` of L at σ (both ε with one accountant and one discretisation)."""
    interval = interval or _discretisation(sigma, q, steps, None, delta)
    if untruncated_epsilon is None:
        untruncated_epsilon = truncated_poisson_epsilon(sigma, q, steps, dataset_size, dataset_size, delta,
                                                        interval)
    return TruncationPrice(
        truncated_batch_size=truncated_batch_size,
        truncation_probability=truncation_probability(dataset_size, q, truncated_batch_size),
        padding_share=padding_share(dataset_size, q, truncated_batch_size),
        epsilon=truncated_poisson_epsilon(sigma, q, steps, dataset_size, truncated_batch_size, delta, interval),
        untruncated_epsilon=untruncated_epsilon)


def priced_truncation(sigma: float, q: float, steps: int, dataset_size: int, delta: float,
                      multiple: int = 1, tolerance: float = EPSILON_TOLERANCE) -> TruncationPrice:
    """The smallest L (≥ B, a multiple of ``multiple``) whose truncated ε at σ is within
    ``tolerance`` of the untruncated Poisson ε at σ, and its price.

    ε falls as L grows, so a bisection over the multiples between B and an L known to pass
    (:func:`tail_truncated_batch_size`, grown until it does) costs ~log2 of their count
    accountant calls.
    """
    interval = _discretisation(sigma, q, steps, None, delta)
    untruncated = truncated_poisson_epsilon(sigma, q, steps, dataset_size, dataset_size, delta, interval)
    expected = q * dataset_size

    def price(size: int) -> TruncationPrice:
        return price_truncation(sigma, q, steps, dataset_size, size, delta, untruncated, interval)

    def passes(found: TruncationPrice) -> bool:
        return found.epsilon <= untruncated * (1 + tolerance)

    high = price(tail_truncated_batch_size(round(expected), steps, delta, multiple, dataset_size))
    while not passes(high):
        if high.truncated_batch_size >= dataset_size:
            return high  # nothing is ever cut: the accountant's own rounding is all that is left
        grown = high.truncated_batch_size + max(multiple, round_up(math.sqrt(expected), multiple))
        high = price(min(grown, round_up(dataset_size, multiple)))
    low = round_up(expected, multiple) // multiple - 1  # an index known (or taken) to fail
    top = high.truncated_batch_size // multiple
    while top - low > 1:
        middle = (low + top) // 2
        found = price(middle * multiple)
        if passes(found):
            top, high = middle, found
        else:
            low = middle
    return high


@dataclass(frozen=True)
class TruncatedPoissonRun:
    """A truncated-Poisson run resolved: its σ, its L, and the trade it makes."""

    sigma: float  # noise multiplier on the sum
    epsilon: float  # ε(δ) the run spends
    untruncated_sigma: float  # the σ untruncated Poisson needs for that ε
    price: TruncationPrice  # of L at σ
    truncation_priced: bool  # L chosen by its price (else given by the user)


def truncated_poisson_run(*, q: float, steps: int, dataset_size: int, delta: float, multiple: int = 1,
                          truncated_batch_size: int | None = None, target_epsilon: float | None = None,
                          sigma: float | None = None, setting: str = "training.truncated_batch_size"
                          ) -> TruncatedPoissonRun:
    """σ (calibrated for ``target_epsilon``, else ``sigma``) and L (``truncated_batch_size``, else
    priced at the σ untruncated Poisson needs, so the truncation costs at most
    :data:`EPSILON_TOLERANCE` of ε). A given L that costs more is kept, with a warning naming
    ``setting`` and the ε or σ it costs."""
    if (target_epsilon is None) == (sigma is None):
        raise ValueError("give exactly one of target_epsilon and sigma")
    if target_epsilon is not None:
        untruncated_sigma = calibrate_poisson(target_epsilon, q, steps, delta)
        reference = untruncated_sigma  # where L is priced: the σ the run would have untruncated
    elif sigma == 0:
        size = truncated_batch_size or tail_truncated_batch_size(round(q * dataset_size), steps, delta,
                                                                 multiple, dataset_size)
        price = TruncationPrice(size, truncation_probability(dataset_size, q, size),
                                padding_share(dataset_size, q, size), math.inf, math.inf)
        return TruncatedPoissonRun(0.0, math.inf, 0.0, price, truncated_batch_size is None)
    else:
        reference = sigma
    if truncated_batch_size is None:
        size = priced_truncation(reference, q, steps, dataset_size, delta, multiple).truncated_batch_size
    else:
        size = truncated_batch_size
    interval = None  # a configured σ is priced at its own discretisation
    if target_epsilon is not None:
        sigma = calibrate_truncated_poisson(target_epsilon, delta, q, steps, dataset_size, size,
                                            start=untruncated_sigma)
        # Recorded at the solve's interval, so the record meets the target it was calibrated for.
        interval = calibration_interval(target_epsilon, delta, q, steps, untruncated_sigma)
    price = price_truncation(sigma, q, steps, dataset_size, size, delta, interval=interval)
    if target_epsilon is None:
        untruncated_sigma = calibrate_poisson(price.epsilon, q, steps, delta)
    if truncated_batch_size is not None and price.excess > EPSILON_TOLERANCE:
        priced = priced_truncation(reference, q, steps, dataset_size, delta, multiple)
        if target_epsilon is not None:
            cost = (f"for epsilon={target_epsilon:g} it needs sigma={sigma:.4g} where untruncated Poisson "
                    f"needs {untruncated_sigma:.4g} ({sigma / untruncated_sigma - 1:+.1%} noise)")
        else:
            cost = (f"at sigma={sigma:.4g} it spends epsilon={price.epsilon:.4g} where untruncated Poisson "
                    f"spends {price.untruncated_epsilon:.4g} ({price.excess:+.1%})")
        logger.warning(
            "%s: L=%d costs privacy: a batch is cut with probability %.2g per step over %d steps, and %s; "
            "the priced choice (leave it null) is L=%d (%.1f%% padding against %.1f%%)",
            setting, size, price.truncation_probability, steps, cost, priced.truncated_batch_size,
            100 * priced.padding_share, 100 * price.padding_share)
    return TruncatedPoissonRun(sigma, price.epsilon, untruncated_sigma, price, truncated_batch_size is None)


def truncation_trade(epsilon: float, q: float, steps: int, dataset_size: int, delta: float,
                     lengths: list[int]) -> list[dict[str, float | int]]:
    """For each L in ``lengths``: what truncating there costs a run calibrated for (ε, δ) — the
    chance a step is cut, the padding share of the step, and the σ it needs against untruncated
    Poisson's (``dpscaling truncation`` prints it; docs/private-training.md tabulates it)."""
    untruncated_sigma = calibrate_poisson(epsilon, q, steps, delta)
    rows = []
    for size in sorted(set(lengths)):
        sigma = calibrate_truncated_poisson(epsilon, delta, q, steps, dataset_size, size, start=untruncated_sigma)
        rows.append({"truncated_batch_size": size,
                     "truncation_probability": truncation_probability(dataset_size, q, size),
                     "padding_share": padding_share(dataset_size, q, size), "sigma": sigma,
                     "untruncated_sigma": untruncated_sigma, "extra_noise": sigma / untruncated_sigma - 1})
    return rows
