"""σ for a whole (ε × T) slab at one sampling probability, from few PLD builds.

The structure exploited (for speed, docs/accounting.md; paper §3.4 needs σ for every queried
(ε, T, q)): for fixed q, ε(σ, T) is monotone in σ and smooth in log–log. So
instead of a root search per grid point, walk σ over a geometric lattice; each
single-step PLD (built once per σ and discretisation, cached across T) is
composed T-fold by one FFT exponentiation and gives ε(σ, T) at δ. For each T a
cubic spline of log σ against log ε through the lattice points is then
evaluated at every grid ε at once, so the ε axis is nearly free and the cost is
one walk per (T, q).

Each walk steps 2^(1/sigma_per_octave) in σ from a warm start until the lattice
passes both ends of [ε_min, ε_max] (the last point lands just beyond, not a whole
step: at the ε_max end compositions are the largest), then halves lattice
intervals where the spline is not yet resolved (the knee of ε(σ) near σ ≈ 1 at
small q). The discretisation of each point is predicted from its neighbours' ε.

Where a lattice σ cannot be accounted for (single-step PLD over the memory cap:
the tiny-q / many-steps / small-ε corner), the walk stops there and grid points
left outside the bracketed range are reported as refused, never extrapolated.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from scipy import interpolate

from dpscaling.accounting import calibration, composition, gaussian, pld, rdp
from dpscaling.accounting.matched import CyclicPoissonReduction
from dpscaling.accounting.table_spec import TableSpec
from dpscaling.accounting.validation import AccountingRefused

# σ below this is not meaningful for any tabulated ε (≈ 1e-3 at ε = 1e6, T = 100).
_SIGMA_FLOOR = 2.0**-14
_SIGMA_CEILING = 2.0**30
# The walk's last point lands (as predicted) this factor beyond each end of the ε range.
_END_MARGIN = 1.25
# The walk steps 2^(1/sigma_per_octave); _refine halves steps down to 1/_FINEST of that
# where the spline of log σ(log ε) is not yet resolved to _INVERSION_TOLERANCE (in log σ).
_FINEST = 8
_INVERSION_TOLERANCE = 2e-4
# Single-step PLDs kept between T values (each ≤ max_points bins, two directions).
_CACHE_BYTES = 1_500_000_000


@dataclass
class SlabResult:
    sigma: np.ndarray          # shape (n_epsilon, n_steps); NaN where refused
    compositions: int          # PLD compositions performed
    builds: int                # single-step PLDs built


class _PldCurve:
    """ε(σ_j, T) on the lattice σ_j = 2^(j/resolution), with an LRU cache of single-step PLDs.

    Discretisation follows the same rule as direct calibration
    (:func:`dpscaling.accounting.pld.interval_rule`: a fraction of μ/√T, μ the
    GDP-equivalent of the resulting (ε, δ), capped by a multiple of one step's loss
    spread). μ is only known after composing, so the interval is predicted from
    ``epsilon_hint`` (extrapolated by the walk, or this σ's ε at the previous T) and
    the σ is rebuilt finer when the result asks for it. Intervals are rounded down
    to powers of two so built PLDs are shared across T.
    """

    def __init__(self, q: float, spec: TableSpec):
        self.q, self.spec = q, spec
        self.cache: OrderedDict[tuple[int, int], list[composition.DiscreteLosses] | AccountingRefused] = \
            OrderedDict()
        self.spreads: dict[int, tuple[float, float]] = {}
        self.last_epsilon: dict[int, float] = {}
        self.cached_bytes = 0
        self.compositions = self.builds = self.refinements = 0

    @property
    def resolution(self) -> int:
        """Lattice points per octave of σ at the finest refinement."""
        return self.spec.sigma_per_octave * _FINEST

    def sigma(self, j: int) -> float:
        return 2.0 ** (j / self.resolution)

    @staticmethod
    def _bytes(built: list[composition.DiscreteLosses] | AccountingRefused) -> int:
        if isinstance(built, AccountingRefused):
            return 0
        return 8 * sum(part.probs.size for part in built)

    def _spread(self, j: int) -> tuple[float, float]:
        """(standard deviation, range) of one step's privacy loss at σ_j."""
        if j not in self.spreads:
            self.spreads[j] = pld.step_loss_spread(self.sigma(j), self.q)
        return self.spreads[j]

    def _level(self, j: int, steps: int, epsilon: float | None) -> int:
        """log2 of the rule's interval for ε, rounded down (ε = None: the loss spread alone;
        ε = inf: the coarsest the rule allows). ε is rounded down to a 2^(1/64) grid so μ is
        cached (a smaller ε gives a smaller μ: never a coarser interval)."""
        step_mu = None
        if epsilon is not None and 0 < epsilon:
            step_mu = math.inf
            if epsilon < math.inf:
                rounded = 2.0 ** (math.floor(math.log2(epsilon) * 64) / 64)
                step_mu = gaussian.gdp_mu(rounded, self.spec.delta) / math.sqrt(steps)
        interval = pld.interval_rule(self._spread(j)[0], step_mu, self.spec.discretisation_fraction)
        return math.floor(math.log2(interval)) if interval > 0 else -10**6

    def _single_step(self, j: int, level: int) -> list[composition.DiscreteLosses] | AccountingRefused:
        key = (j, level)
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        sigma = self.sigma(j)
        try:
            built = pld.poisson_gaussian_losses(sigma, self.q, 2.0**level)
            self.builds += 1
        except (ValueError, OverflowError, MemoryError) as failure:
            built = AccountingRefused(f"PLD build failed at sigma={sigma:g}: {failure}")
        self.cache[key] = built
        self.cached_bytes += self._bytes(built)
        while self.cached_bytes > _CACHE_BYTES and len(self.cache) > 1:
            _, old = self.cache.popitem(last=False)
            self.cached_bytes -= self._bytes(old)
        return built

    def _epsilon(self, j: int, level: int, steps: int) -> float | None:
        """ε of the σ_j PLD at interval 2^level; None when refused (memory cap, cancellation)."""
        if 2.0**level < pld.MIN_DISCRETISATION / 2 or self._spread(j)[1] / 2.0**level > self.spec.max_points:
            return None
        single = self._single_step(j, level)
        if isinstance(single, AccountingRefused):
            return None
        self.compositions += 1
        try:
            return pld.composed_epsilon(single, steps, self.spec.delta)
        except AccountingRefused:
            return None

    def __call__(self, j: int, steps: int, epsilon_hint: float | None = None) -> float | None:
        """ε at δ, or None if this σ is refused."""
        hint = epsilon_hint if epsilon_hint is not None else self.last_epsilon.get(j)
        # A wrong hint must not refuse a feasible σ: fall back to the coarsest level.
        for level in dict.fromkeys((self._level(j, steps, hint), self._level(j, steps, math.inf))):
            epsilon = self._epsilon(j, level, steps)
            if epsilon is not None:
                break
        if epsilon is not None and 0 < epsilon < math.inf:
            needed = self._level(j, steps, epsilon)
            if level > needed:
                self.refinements += 1
                epsilon = self._epsilon(j, needed, steps)
        if epsilon is not None:
            self.last_epsilon[j] = epsilon
        return epsilon


class _MixtureCurve(_PldCurve):
    """ε(σ_j, T) of example-level sampling for a user of k sequences (``spec.examples_per_user``): each σ's
    one-step mixture PLD (:func:`dpscaling.accounting.user_level.mixture_losses`, at the ELS run's fixed
    discretisation) built once and self-composed for every T by :mod:`dpscaling.accounting.composition`, the
    Poisson tables' composer: dp-accounting's composition vectorised (its truncation bounds were 90% of a
    composition's time), within 1e-4 of the run's accountant (tested). A run prices its own σ exactly."""

    def __call__(self, j: int, steps: int, epsilon_hint: float | None = None) -> float | None:
        from dpscaling.accounting.user_level import mixture_losses

        key = (j, 0)
        if key not in self.cache:
            try:
                self.cache[key] = composition.directions(
                    mixture_losses(self.sigma(j), self.q, self.spec.examples_per_user))
                self.builds += 1
            except (ValueError, OverflowError, MemoryError) as failure:
                self.cache[key] = AccountingRefused(f"mixture PLD build failed at sigma={self.sigma(j):g}: {failure}")
        single = self.cache[key]
        if isinstance(single, AccountingRefused):
            return None
        self.compositions += 1
        try:
            return pld.composed_epsilon(single, steps, self.spec.delta)
        except AccountingRefused:
            return None


class _RdpCurve(_PldCurve):
    def __call__(self, j: int, steps: int, epsilon_hint: float | None = None) -> float | None:
        self.compositions += 1
        return rdp.poisson_epsilon_rdp(self.sigma(j), self.q, steps, self.spec.delta)


def _predict(previous: list[tuple[int, float]], j: int) -> float | None:
    """ε at lattice point j, linear in log ε over j through the walk's last two points."""
    usable = [(i, e) for i, e in previous[-2:] if 0 < e < math.inf]
    if len(usable) < 2:
        return usable[-1][1] if usable else None
    (i1, e1), (i2, e2) = usable
    return math.exp(math.log(e2) + (j - i2) * (math.log(e2) - math.log(e1)) / (i2 - i1))


def _next_point(previous: list[tuple[int, float]], step: int, target: float) -> int:
    """The next lattice point: one ``step`` on, or — when that is predicted to pass ``target``
    by more than _END_MARGIN — the nearest finer point predicted to pass it by _END_MARGIN.
    At the ε_max end the compositions are the largest (their size grows like ε), so
    stopping just past the range instead of a full step (or two) beyond saves most of
    their cost."""
    last = previous[-1][0]
    passed = (lambda e: e <= target / _END_MARGIN) if step > 0 else (lambda e: e >= target * _END_MARGIN)
    for size in range(1, abs(step) + 1):
        j = last + size * (1 if step > 0 else -1)
        predicted = _predict(previous, j)
        if predicted is not None and len(previous) >= 2 and passed(predicted):
            return j
    return last + step


def _walk(curve: _PldCurve, start: int, steps: int, epsilon_min: float, epsilon_max: float,
          stride: int, start_hint: float | None = None) -> dict[int, float]:
    """Lattice points every ``stride`` around `start` (whose ε is about ``start_hint``) until
    ε_min and ε_max are both passed (or refused)."""
    points: dict[int, float] = {}
    floor = math.floor(math.log2(_SIGMA_FLOOR) * curve.resolution)
    ceiling = math.ceil(math.log2(_SIGMA_CEILING) * curve.resolution)
    for step, target in ((+stride, epsilon_min), (-stride, epsilon_max)):
        j = start if step > 0 else start - stride
        previous: list[tuple[int, float]] = []
        while floor <= j <= ceiling:
            epsilon = curve(j, steps, _predict(previous, j) if previous else points.get(j - step, start_hint))
            if epsilon is None:
                # A refused warm start (tiny q: the PLD at moderate σ is too fine to
                # build) must not hide the feasible smaller σ of larger ε.
                if step < 0 and not points:
                    j += step
                    continue
                break
            points[j] = epsilon
            previous.append((j, epsilon))
            if epsilon == 0 or math.isinf(epsilon) or (epsilon < target if step > 0 else epsilon > target):
                break
            j = _next_point(previous, step, target)
    return points


def _monotone(points: dict[int, float], resolution: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log ε, log σ, j) of the usable lattice points, ε strictly falling as σ rises
    (points where discretisation noise breaks this are dropped)."""
    x: list[float] = []
    y: list[float] = []
    js: list[int] = []
    for log_e, j in sorted((math.log(e), j) for j, e in points.items() if 0 < e < math.inf):
        log_s = j / resolution * math.log(2)
        if not x or (log_e > x[-1] and log_s < y[-1]):
            x.append(log_e)
            y.append(log_s)
            js.append(j)
    return np.array(x), np.array(y), np.array(js, dtype=np.int64)


def _refine(curve: _PldCurve, points: dict[int, float], steps: int,
            epsilon_min: float, epsilon_max: float) -> None:
    """Halve lattice intervals (down to the finest lattice) where the cubic spline of log σ(log ε)
    and a monotone (PCHIP) interpolant disagree by more than ``_INVERSION_TOLERANCE`` at the
    interval's middle: the knee of ε(σ) near σ ≈ 1 at small q needs ~2^(1/16) steps, the rest
    of the curve 2^(1/2). With fewer than four points (a narrow ε range that the walk crosses in one or
    two steps) every interval is halved until there are four: a straight line through two or three
    points was measured 3% low in σ in the knee."""
    failed: set[int] = set()
    low, high = math.log(epsilon_min), math.log(epsilon_max)
    while True:
        x, y, js = _monotone(points, curve.resolution)
        if len(x) < 2:
            return
        middle = (x[:-1] + x[1:]) / 2
        if len(x) < 4:  # too few points for a spline (a narrow ε range): halve every interval until there are
            gap = np.full(len(middle), np.inf)
        else:
            gap = np.abs(interpolate.CubicSpline(x, y)(middle) - interpolate.PchipInterpolator(x, y)(middle))
        wanted = [(int((js[i] + js[i + 1]) // 2), math.exp(middle[i])) for i in np.flatnonzero(
            (gap > _INVERSION_TOLERANCE) & (x[1:] >= low) & (x[:-1] <= high)
            & (np.abs(js[:-1] - js[1:]) >= 2))]
        wanted = [(j, hint) for j, hint in wanted if j not in points and j not in failed]
        if not wanted:
            return
        for j, hint in wanted:
            epsilon = curve(j, steps, hint)
            if epsilon is None:
                failed.add(j)
            else:
                points[j] = epsilon


def _invert(points: dict[int, float], epsilons: np.ndarray, resolution: int) -> np.ndarray:
    """log σ as a cubic spline of log ε through the lattice points; NaN outside them."""
    x, y, _ = _monotone(points, resolution)
    result = np.full(len(epsilons), np.nan)
    if len(x) < 2:
        return result
    log_eps = np.log(epsilons)
    inside = (log_eps >= x[0]) & (log_eps <= x[-1])
    if len(x) >= 4:
        result[inside] = np.exp(interpolate.CubicSpline(x, y)(log_eps[inside]))
    else:
        result[inside] = np.exp(np.interp(log_eps[inside], x, y))
    return result


def poisson_slab(spec: TableSpec, q: float) -> SlabResult:
    """Poisson σ for every (ε, T) of ``spec`` at sampling probability ``q``; with ``spec.bands`` b > 1, amplified
    BandMF's: the DP-SGD event it reduces to
    (:meth:`dpscaling.accounting.matched.CyclicPoissonReduction.at_rate`, jax-privacy's ``amplified_bandmf_event``), NaN where b·q > 1; with
    ``spec.examples_per_user`` k > 1, ELS's for a user of k sequences (:class:`_MixtureCurve`)."""
    epsilons = spec.epsilons()
    q, steps_grid = CyclicPoissonReduction.at_rate(q, spec.steps(), spec.bands)
    sigma = np.full((len(epsilons), len(steps_grid)), np.nan)
    if q > 1.0:
        return SlabResult(sigma, 0, 0)
    if q == 1.0:  # no subsampling: exactly the Gaussian closed form
        for i, epsilon in enumerate(epsilons):
            sigma[i] = np.sqrt(steps_grid) * gaussian.analytic_gaussian_sigma(float(epsilon), spec.delta)
        return SlabResult(sigma, 0, 0)
    if spec.examples_per_user > 1:
        curve: _PldCurve = _MixtureCurve(q, spec)
    else:
        curve = (_RdpCurve if spec.accountant == "rdp" else _PldCurve)(q, spec)
    middle_epsilon = math.sqrt(spec.epsilon_min * spec.epsilon_max)
    for k, steps in enumerate(steps_grid):
        steps = int(steps)
        warm = calibration.poisson_warm_start(middle_epsilon, spec.delta, q, steps)
        start = round(math.log2(warm) * spec.sigma_per_octave) * _FINEST
        points = _walk(curve, start, steps, spec.epsilon_min, spec.epsilon_max, _FINEST, middle_epsilon)
        _refine(curve, points, steps, spec.epsilon_min, spec.epsilon_max)
        sigma[:, k] = _invert(points, epsilons, curve.resolution)
    return SlabResult(sigma, curve.compositions, curve.builds)
