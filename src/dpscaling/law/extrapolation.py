"""Training-step extrapolation (paper §3.3 "Training Step Extrapolation").

L(T) = E + A·T^(−α), fitted with ``scipy.optimize.curve_fit`` (Levenberg–Marquardt)
in the authors' parameterisation exp(m·log T + b) + E (A = e^b, α = −m), on the
extrapolation window ([16K, 128K] = [H/8, H] in the paper), evaluated at H·2^k
(256K … 8.192M in the paper).
``LawSettings.extrapolation_asymptote`` decides E:

- ``"per_curve"`` (paper: "we independently fit a function for each model size
  and NBR"): E, A and α are free in every (model, σ̄) fit, so a curve's
  extrapolation depends on that curve only and one failed fit fails one curve;
- ``"nonprivate"`` (the authors' code): E is tied per model: E* is fitted first
  on the noise-free curve over [warm-up, H]; every (model, σ̄) curve, σ̄ = 0
  included, is then fitted with E = E*. A failed E* fails every σ̄ of the model.
- ``"per_curve_else_nonprivate"`` (not in the paper): E free as in the paper; a
  curve whose free fit fails (short noisy curves nearly straight in log T, where
  Levenberg–Marquardt runs E towards −∞) is fitted again with E = E*, and the
  fits table says so in its reason.

A fit that fails is a row of the fits table with status "failed" and a reason;
its extrapolated cells are NaN, so queries that need them say so.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, SOURCE
from dpscaling.law.interpolation import with_cells
from dpscaling.law.settings import NONPRIVATE, PER_CURVE_ELSE_NONPRIVATE, LawSettings

MEASURED = "measured"
EXTRAPOLATED = "extrapolated"
# The authors' initial slope m (α = 0.3) and intercept for the E* fit.
_INITIAL_SLOPE = -0.3
_INITIAL_INTERCEPT = 1.94
_MIN_POINTS = 3


@dataclass(frozen=True)
class PowerLawFit:
    """One fitted curve L(T) = E + A·T^(−α); status "failed" carries NaNs and a reason."""
    model: str
    noise_batch_ratio: float
    kind: str  # "asymptote" (E* fit, E free) or "curve" (E tied to E*, or free per curve in paper mode)
    E: float
    A: float
    alpha: float
    points: int
    status: str
    reason: str = ""

    def __call__(self, iterations: np.ndarray) -> np.ndarray:
        return self.E + self.A * np.asarray(iterations, dtype=float) ** (-self.alpha)


def power_law(iterations: np.ndarray, E: float, A: float, alpha: float) -> np.ndarray:
    return E + A * np.asarray(iterations, dtype=float) ** (-alpha)


def _window(curve: pd.Series, window: tuple[float, float]) -> pd.Series:
    inside = curve[(curve.index >= window[0]) & (curve.index <= window[1])]
    return inside.dropna()


def _failed(model: str, nbr: float, kind: str, points: int, reason: str) -> PowerLawFit:
    return PowerLawFit(model, nbr, kind, np.nan, np.nan, np.nan, points, "failed", reason)


def _curve_fit(function, curve: pd.Series, p0: list[float]) -> np.ndarray:
    """curve_fit on log T; warnings (e.g. covariance not estimable) don't matter, only the optimum."""
    from scipy.optimize import OptimizeWarning, curve_fit  # SciPy on first fit: the workflow imports the law to plan

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        params, _ = curve_fit(function, np.log(curve.index.to_numpy(float)), curve.to_numpy(float), p0=p0,
                              maxfev=20_000)
    return params


def fit_asymptote(model: str, curve: pd.Series, window: tuple[float, float]) -> PowerLawFit:
    """E* of a model: fit exp(m·log T + b) + E to its noise-free curve (index = iterations) on ``window``."""
    data = _window(curve, window)
    if len(data) < _MIN_POINTS:
        return _failed(model, 0.0, "asymptote", len(data), f"{len(data)} finite points in window {window}")
    try:
        m, b, E = _curve_fit(lambda log_t, m, b, E: np.exp(m * log_t + b) + E, data,
                             [_INITIAL_SLOPE, _INITIAL_INTERCEPT, 0.9 * data.min()])
    except (RuntimeError, ValueError) as error:
        return _failed(model, 0.0, "asymptote", len(data), f"curve_fit: {error}")
    return _checked(PowerLawFit(model, 0.0, "asymptote", E, np.exp(b), -m, len(data), "ok"))


def fit_free_curve(model: str, nbr: float, curve: pd.Series, window: tuple[float, float]) -> PowerLawFit:
    """Fit exp(m·log T + b) + E with all three free to one (model, σ̄) curve on ``window`` (paper mode)."""
    data = _window(curve, window)
    if len(data) < _MIN_POINTS:
        return _failed(model, nbr, "curve", len(data), f"{len(data)} finite points in window {window}")
    # The authors' E* start (slope −0.3, E = 0.9·min), with the line through the first point.
    asymptote = 0.9 * data.min()
    intercept = np.log(max(data.iloc[0] - asymptote, 1e-12)) - _INITIAL_SLOPE * np.log(data.index[0])
    try:
        m, b, E = _curve_fit(lambda log_t, m, b, E: np.exp(m * log_t + b) + E, data,
                             [_INITIAL_SLOPE, intercept, asymptote])
    except (RuntimeError, ValueError) as error:
        return _failed(model, nbr, "curve", len(data), f"curve_fit: {error}")
    return _checked(PowerLawFit(model, nbr, "curve", E, np.exp(b), -m, len(data), "ok"))


def fit_tied_curve(model: str, nbr: float, curve: pd.Series, window: tuple[float, float],
                   asymptote: float) -> PowerLawFit:
    """Fit exp(m·log T + b) + E* to one (model, σ̄) curve on ``window``."""
    data = _window(curve, window)
    if not np.isfinite(asymptote):
        return _failed(model, nbr, "curve", len(data), "the model's E* fit failed")
    if len(data) < _MIN_POINTS:
        return _failed(model, nbr, "curve", len(data), f"{len(data)} finite points in window {window}")
    gap = data.iloc[0] - asymptote
    if not gap > 0:
        return _failed(model, nbr, "curve", len(data), f"curve starts at or below E* = {asymptote:.6g}")
    # Start from the line through the first point with the authors' slope.
    intercept = np.log(gap) - _INITIAL_SLOPE * np.log(data.index[0])
    try:
        m, b = _curve_fit(lambda log_t, m, b: np.exp(m * log_t + b) + asymptote, data, [_INITIAL_SLOPE, intercept])
    except (RuntimeError, ValueError) as error:
        return _failed(model, nbr, "curve", len(data), f"curve_fit: {error}")
    return _checked(PowerLawFit(model, nbr, "curve", asymptote, np.exp(b), -m, len(data), "ok"))


def _checked(fit: PowerLawFit) -> PowerLawFit:
    """A fit whose loss would rise with more training (α < 0) or is not finite is reported as failed."""
    if not np.all(np.isfinite([fit.E, fit.A, fit.alpha])):
        return _failed(fit.model, fit.noise_batch_ratio, fit.kind, fit.points, "non-finite parameters")
    if fit.alpha < 0:
        return _failed(fit.model, fit.noise_batch_ratio, fit.kind, fit.points,
                       f"fitted loss increases with iterations (alpha = {fit.alpha:.3g})")
    return fit


def _model_asymptote(model: str, surface: pd.DataFrame, window: tuple[float, float]) -> PowerLawFit:
    if 0.0 in surface.columns:
        return fit_asymptote(model, surface[0.0], window)
    return _failed(model, 0.0, "asymptote", 0, "no noise-free (σ̄ = 0) curve")


def _tied_after_free_failed(free: PowerLawFit, tied: PowerLawFit) -> PowerLawFit:
    """The tied fit that replaces a failed free one, its reason naming both (a failed tied fit keeps its own)."""
    reason = f"free fit failed ({free.reason}); E tied to the model's E*"
    return replace(tied, reason=reason if tied.status == "ok" else f"{reason}, which failed too: {tied.reason}")


# ``curve_horizons``: a short curve's own extrapolation at the steps of the longer runs, used only where the fills
# leave its cell empty (:func:`own_extrapolation_where_unfilled`).
OWN_EXTRAPOLATION = "Own Extrapolation"


def own_extrapolation_where_unfilled(grid: pd.DataFrame) -> pd.DataFrame:
    """The grid with every cell the fills left empty taken from its curve's own extrapolation (``curve_horizons``);
    the column dropped."""
    if OWN_EXTRAPOLATION not in grid:
        return grid
    own = grid[OWN_EXTRAPOLATION].to_numpy(float)
    empty = np.isnan(grid[CROSS_ENTROPY].to_numpy(float)) & np.isfinite(own)
    out = grid.drop(columns=OWN_EXTRAPOLATION)
    out.loc[empty, CROSS_ENTROPY] = own[empty]
    return out


def _from_own_horizon(curve: pd.Series, settings: LawSettings, horizon: float, measured: np.ndarray,
                      extension: np.ndarray) -> tuple[tuple[float, float], np.ndarray, bool]:
    """``settings.curve_horizons`` (not in the paper; for designs whose runs stop at different horizons,
    :mod:`dpscaling.design`): the fit window at the curve's own last measured step h, and the steps it is read at,
    every grid step past h (the longer runs' measured ones and the extension's), and whether it is short (h below
    the longest horizon): the law then prefers what the fills give from its neighbours' longer curves to this
    extrapolation from a short window (off by 0.5 nats at 4× its horizon on the synthetic law,
    tests/test_law_sparse_design.py)."""
    finite = curve.dropna()
    own = float(finite.index.max()) if len(finite) else horizon
    at = np.union1d(measured[measured > own], extension)
    return settings.extrapolation_window.resolve(own), at, own < horizon


def extrapolate(smoothed: pd.DataFrame, settings: LawSettings,
                horizon: float | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Smoothed grid → (grid with extrapolated rows appended, table of every fit incl. failures).

    ``smoothed`` is the output of :func:`dpscaling.law.smoothing.smooth_results`;
    ``horizon`` defaults to its largest iteration count.
    """
    horizon = float(smoothed[ITERATIONS].max()) if horizon is None else horizon
    asymptote_window = settings.asymptote_range(horizon)
    fit_window = settings.extrapolation_window.resolve(horizon)
    new_iterations = np.array(settings.extension_iterations(horizon))
    fits: list[PowerLawFit] = []
    extended = []
    tied = settings.extrapolation_asymptote == NONPRIVATE
    fallback = settings.extrapolation_asymptote == PER_CURVE_ELSE_NONPRIVATE
    measured_iterations = np.sort(smoothed[ITERATIONS].unique())
    for (model, size), group in smoothed.groupby([MODEL, MODEL_SIZE], sort=True):
        surface = group.pivot(index=ITERATIONS, columns=NOISE_BATCH_RATIO, values=CROSS_ENTROPY).sort_index()
        asymptote = None
        if tied:
            asymptote = _model_asymptote(model, surface, asymptote_window)
            fits.append(asymptote)
        for nbr in surface.columns:
            window, at, short = fit_window, new_iterations, False
            if settings.curve_horizons:  # a curve stopped short is extrapolated from its own horizon
                window, at, short = _from_own_horizon(surface[nbr], settings, horizon, measured_iterations,
                                                      new_iterations)
            if tied:
                fit = fit_tied_curve(model, float(nbr), surface[nbr], window, asymptote.E)
            else:
                fit = fit_free_curve(model, float(nbr), surface[nbr], window)
                if fallback and fit.status != "ok":
                    if asymptote is None:  # fitted once per model, and only if a curve needs it
                        asymptote = _model_asymptote(model, surface, asymptote_window)
                        fits.append(asymptote)
                    fit = _tied_after_free_failed(fit, fit_tied_curve(model, float(nbr), surface[nbr], window,
                                                                      asymptote.E))
            fits.append(fit)
            values = fit(at)
            frame = {MODEL: model, MODEL_SIZE: size, ITERATIONS: at, NOISE_BATCH_RATIO: float(nbr)}
            if short:  # the fills' values first (from the neighbours' longer curves), its own where they have none
                frame |= {CROSS_ENTROPY: np.nan, OWN_EXTRAPOLATION: values}
            else:
                frame[CROSS_ENTROPY] = values
            extended.append(pd.DataFrame(frame))
    measured = smoothed.assign(**{SOURCE: MEASURED})
    extended = [frame.assign(**{SOURCE: EXTRAPOLATED}) for frame in extended]
    if settings.curve_horizons and extended:  # an extrapolated cell replaces the unmeasured (NaN) row at its place
        grid = with_cells(measured, pd.concat(extended, ignore_index=True))
    else:
        grid = pd.concat([measured, *extended], ignore_index=True)
    fit_table = pd.DataFrame([asdict(fit) for fit in fits])
    return grid.sort_values([MODEL_SIZE, NOISE_BATCH_RATIO, ITERATIONS]).reset_index(drop=True), fit_table
