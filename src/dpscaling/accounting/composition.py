"""T-fold self-composition of a discretised PLD, as dp-accounting does it, minus its overheads.

dp-accounting's ``DensePLDPmf.self_compose`` is one FFT exponentiation, but
profiling the table sweep showed 60% of the time elsewhere: its Chernoff
truncation bounds call ``logsumexp`` once per order in a Python loop, and its
sparse PMF class first evaluates ``size ** T`` as an exact Python integer
(thousands of digits at T = 128000) before converting to dense. This module does
the same computation — identical orders, bound formula and tail truncation,
real FFTs instead of complex ones — vectorised, and returns the arrays the
hockey-stick divergence needs. Tests check it against dp-accounting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution
from scipy import fft, special

from dpscaling.accounting.validation import AccountingRefused

TAIL_MASS_TRUNCATION = 1e-15  # dp-accounting's default for self_compose
# Complex FFT grid of a composition: 3e7 points ≈ 0.5 GB per array.
DEFAULT_MAX_COMPOSED_POINTS = 30_000_000
_MAX_BOUND_ELEMENTS = 20_000_000


@dataclass(frozen=True)
class DiscreteLosses:
    """Privacy losses (lower + i)·step with masses probs[i], plus mass at +∞."""
    probs: np.ndarray
    lower: int
    step: float
    infinity_mass: float


def dense_losses(pmf: pld_pmf.PLDPmf) -> DiscreteLosses:
    dense = pmf.to_dense_pmf()
    # Private in dp-accounting 0.6 (no public accessor); tests/test_accounting_calibration.py
    # compares against dp-accounting's own results, so a changed layout fails loudly.
    return DiscreteLosses(np.asarray(dense._probs, dtype=float), int(dense._lower_loss),  # noqa: SLF001
                          float(dense._discretization), float(dense._infinity_mass))  # noqa: SLF001


def directions(pld: PrivacyLossDistribution) -> list[DiscreteLosses]:
    """The remove- and (if different) add-direction loss distributions."""
    parts = [dense_losses(pld._pmf_remove)]  # noqa: SLF001
    if not pld._symmetric:  # noqa: SLF001
        parts.append(dense_losses(pld._pmf_add))  # noqa: SLF001
    return parts


def truncation_bounds(probs: np.ndarray, steps: int, tail_mass: float) -> tuple[int, int]:
    """dp-accounting's ``common.compute_self_convolve_bounds``, all orders in one logsumexp."""
    n = len(probs)
    orders = np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / n
    # Orders in blocks so the (orders × n) exponent matrix stays ≤ ~160 MB for long PMFs.
    block = max(1, _MAX_BOUND_ELEMENTS // n)
    index = np.arange(n)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_mgf = np.concatenate([special.logsumexp(np.outer(orders[i:i + block], index), b=probs, axis=1)
                                  for i in range(0, len(orders), block)])
        bounds = (steps * log_mgf + math.log(2 / tail_mass)) / orders
    finite = np.isfinite(bounds)
    upper = min([(n - 1) * steps] + [math.ceil(b) for b in bounds[finite & (orders > 0)]])
    lower = max([0] + [math.floor(b) for b in bounds[finite & (orders < 0)]])
    return lower, upper


def self_compose(losses: DiscreteLosses, steps: int, tail_mass: float = TAIL_MASS_TRUNCATION,
                 max_points: int = DEFAULT_MAX_COMPOSED_POINTS) -> DiscreteLosses:
    """``steps``-fold composition; refuses (AccountingRefused) above ``max_points`` FFT points."""
    if steps == 1:
        return losses
    low, high = truncation_bounds(losses.probs, steps, tail_mass)
    output_len = high - low + 1
    if output_len > max_points:
        raise AccountingRefused(
            f"composing {steps} steps needs an FFT grid of {output_len:.3g} points "
            f"(> {max_points:.3g}); sigma too small for this many steps")
    size = fft.next_fast_len(max(output_len, len(losses.probs)), real=True)
    composed = fft.irfft(fft.rfft(losses.probs, size) ** steps, size)
    composed = np.roll(composed, -low)[:output_len]
    infinity = tail_mass - math.expm1(steps * math.log1p(-losses.infinity_mass))
    return DiscreteLosses(composed, losses.lower * steps + low, losses.step, infinity)
