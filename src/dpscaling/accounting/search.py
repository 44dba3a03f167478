"""Root finding for monotone accounting curves: relative tolerance in log σ, explicit brackets.

dp-accounting's own calibration uses an absolute σ tolerance (15–52 accountant
evaluations for σ ~ 1e2–1e4) and always probes σ = 1 (which can allocate 20 GB);
here the search starts from a warm start, grows a bracket geometrically and
stops at a relative tolerance in σ (~6 evaluations).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scipy import optimize

from dpscaling.core.errors import UserError

DEFAULT_RELATIVE_TOLERANCE = 1e-4
_BRACKET_GROWTH = 1.5
_MAX_BRACKET_STEPS = 80
# Stand-in for log ε when ε is 0 or ∞, keeping the sign for the bracket search.
_CLAMPED_LOG = 700.0


def _log_or_clamped(value: float) -> float:
    if value <= 0:
        return -_CLAMPED_LOG
    if math.isinf(value):
        return _CLAMPED_LOG
    return math.log(value)


def solve_decreasing(curve: Callable[[float], float], target: float, start: float,
                     relative_tolerance: float = DEFAULT_RELATIVE_TOLERANCE,
                     lower_limit: float = 1e-6, upper_limit: float = 1e9) -> float:
    """Smallest x > 0 with curve(x) ≤ target, for a curve decreasing in x (e.g. ε(σ)).

    Works on log x and log curve so the tolerance is relative and curves spanning
    many decades stay well conditioned.
    """
    log_target = math.log(target)

    def gap(log_x: float) -> float:
        return _log_or_clamped(curve(math.exp(log_x))) - log_target

    low = high = math.log(start)
    gap_low = gap_high = gap(low)
    step = math.log(_BRACKET_GROWTH)
    for _ in range(_MAX_BRACKET_STEPS):
        if gap_high <= 0 < gap_low:
            break
        if gap_low <= 0:  # start is already private enough: move down
            high, gap_high = low, gap_low
            low -= step
            if low < math.log(lower_limit):
                raise UserError(f"sigma below {lower_limit:g} needed; epsilon too large for this configuration")
            gap_low = gap(low)
        else:
            low, gap_low = high, gap_high
            high += step
            if high > math.log(upper_limit):
                raise UserError(f"sigma above {upper_limit:g} needed; epsilon too small for this configuration")
            gap_high = gap(high)
        step *= 1.5
    else:
        raise UserError("could not bracket sigma")
    half = relative_tolerance / 2
    root = optimize.brentq(gap, low, high, xtol=half, rtol=1e-12)
    # brentq lands within `half` of the root on either side; stepping up by
    # `half` keeps ε(σ) ≤ target while staying within the relative tolerance.
    return math.exp(min(root + half, high))
