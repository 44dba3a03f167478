"""Fully parametric scaling laws (paper appendix "Parametric Scaling Laws").

L̂1(M, N, σ̄) = E + A/M^α + B/N^β + C·σ̄^γ
L̂2(M, N, σ̄) = E + A/M^α + B/N^β + C·σ̄↷^γ / M^α2,  σ̄↷ = sigmoid((log σ̄ + 8)/1.6)

N counts training examples (physical batch × iterations). Coefficients are
fitted as in Chinchilla: Huber loss between predicted and observed loss,
L-BFGS (``scipy.optimize.minimize``) from several initialisations, best kept.
E, A, B, C are fitted through their logs so they stay positive and the terms
are computed as exp(log A − α·log M), which keeps M ~ 1e9 well conditioned.
Data filters (paper: T > 100K, σ̄ > 5e-7, loss ≤ 8) are parameters; the
iteration cut is a fraction of the horizon (100K/128K) so it scales to short runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO, PAPER_PHYSICAL_BATCH

EXAMPLES = "Examples"
DEFAULT_HUBER_DELTA = 1e-3
# Fitted through their logs (positive); the other parameters are exponents.
COEFFICIENTS = frozenset("EABC")
_LBFGS_OPTIONS = {"maxiter": 1000, "ftol": 1e-10, "gtol": 1e-8}


@dataclass(frozen=True)
class ParametricFilters:
    """Which smoothed points the parametric fit sees (the appendix's filters)."""
    min_iterations_fraction: float = 100_000 / 128_000  # strictly more than this fraction of the horizon
    min_noise_batch_ratio: float = 5e-7  # strictly above
    max_cross_entropy: float = 8.0

    def apply(self, smoothed: pd.DataFrame) -> pd.DataFrame:
        horizon = smoothed[ITERATIONS].max()
        keep = ((smoothed[ITERATIONS] > self.min_iterations_fraction * horizon)
                & (smoothed[NOISE_BATCH_RATIO] > self.min_noise_batch_ratio)
                & (smoothed[CROSS_ENTROPY] <= self.max_cross_entropy))
        return smoothed[keep].dropna(subset=[CROSS_ENTROPY])


def sigmoid_noise_batch_ratio(nbr) -> np.ndarray:
    """σ̄↷ = sigmoid((log σ̄ + 8)/1.6), the appendix's transform that makes loss roughly linear in σ̄."""
    from scipy.special import expit  # SciPy on first use: the figures' registry imports this module to plan

    return expit((np.log(np.asarray(nbr, dtype=float)) + 8.0) / 1.6)


@dataclass(frozen=True)
class ParametricForm:
    """E + A/M^α + B/N^β + C·f(σ̄)^γ / M^α2, with f = identity (L̂1, α2 ≡ 0) or the sigmoid transform (L̂2).

    theta holds log E, log A, log B, log C, α, β, γ (and α2 when ``coupled``).
    """
    name: str
    parameters: tuple[str, ...]
    noise_feature: Callable[[np.ndarray], np.ndarray]  # log f(σ̄)
    coupled: bool

    def terms(self, theta: np.ndarray, log_m: np.ndarray, log_n: np.ndarray,
              feature: np.ndarray) -> tuple[np.ndarray, ...]:
        log_e, log_a, log_b, log_c, alpha, beta, gamma = theta[:7]
        alpha2 = theta[7] if self.coupled else 0.0
        return (np.full_like(log_m, np.exp(log_e)), np.exp(log_a - alpha * log_m), np.exp(log_b - beta * log_n),
                np.exp(log_c + gamma * feature - alpha2 * log_m))

    def predict_logs(self, theta, log_m, log_n, feature) -> np.ndarray:
        return sum(self.terms(theta, log_m, log_n, feature))

    def jacobian(self, theta, log_m, log_n, feature) -> np.ndarray:
        """d prediction / d theta, one column per parameter (for an exact L-BFGS gradient)."""
        t_e, t_a, t_b, t_c = self.terms(theta, log_m, log_n, feature)
        columns = [t_e, t_a, t_b, t_c, -log_m * t_a, -log_n * t_b, feature * t_c]
        if self.coupled:
            columns.append(-log_m * t_c)
        return np.column_stack(columns)

    def predict(self, params: dict[str, float], model_size, examples, nbr) -> np.ndarray:
        theta = np.array([np.log(params[p]) if p in COEFFICIENTS else params[p] for p in self.parameters])
        log_m, log_n = np.broadcast_arrays(np.log(np.asarray(model_size, float)), np.log(np.asarray(examples, float)))
        return self.predict_logs(theta, log_m, log_n, self.noise_feature(np.asarray(nbr, float)))


L1 = ParametricForm("L1", ("E", "A", "B", "C", "alpha", "beta", "gamma"), np.log, coupled=False)
L2 = ParametricForm("L2", ("E", "A", "B", "C", "alpha", "beta", "gamma", "alpha2"),
                    lambda nbr: np.log(sigmoid_noise_batch_ratio(nbr)), coupled=True)
FORMS = {"L1": L1, "L2": L2}


def _initialisations(form: ParametricForm, log_m, log_n, noise_feature, loss) -> list[np.ndarray]:
    """Multi-start grid: exponents from a small grid; each term starts at a third of (mean loss − E)."""
    log_e = np.log(0.5 * loss.min())
    log_term = np.log(max(loss.mean() - 0.5 * loss.min(), 1e-6) / 3)
    starts = []
    exponent_grid = [(0.2, 0.6)] * 3 + ([(0.0, 0.3)] if form.coupled else [])
    for exponents in itertools.product(*exponent_grid):
        alpha, beta, gamma = exponents[:3]
        alpha2 = exponents[3] if form.coupled else 0.0
        log_c = log_term - gamma * noise_feature.mean() + alpha2 * log_m.mean()
        theta = [log_e, log_term + alpha * log_m.mean(), log_term + beta * log_n.mean(), log_c, alpha, beta, gamma]
        starts.append(np.array(theta + ([alpha2] if form.coupled else [])))
    return starts


def fit_parametric(form: ParametricForm, data: pd.DataFrame, huber_delta: float = DEFAULT_HUBER_DELTA) -> dict:
    """Best Huber/L-BFGS fit of ``form`` over the multi-start grid; returns params and fit statistics."""
    from scipy.optimize import minimize
    from scipy.special import huber

    log_m, log_n = np.log(data[MODEL_SIZE].to_numpy(float)), np.log(data[EXAMPLES].to_numpy(float))
    feature = form.noise_feature(data[NOISE_BATCH_RATIO].to_numpy(float))
    loss = data[CROSS_ENTROPY].to_numpy(float)

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        # Divided by δ so the objective is O(|residual|): L-BFGS-B's stopping rule is relative to max(|f|, 1).
        with np.errstate(over="ignore", invalid="ignore"):
            residual = form.predict_logs(theta, log_m, log_n, feature) - loss
            value = huber(huber_delta, residual).mean() / huber_delta
            # Huber's derivative is the residual clipped to ±δ.
            # Elementwise, not a matrix product: a threaded BLAS gemv on a shared 2-core machine was 30x slower.
            clipped = np.clip(residual, -huber_delta, huber_delta)
            gradient = (clipped[:, None] * form.jacobian(theta, log_m, log_n, feature)).sum(axis=0)
        if not (np.isfinite(value) and np.all(np.isfinite(gradient))):
            return 1e300, np.zeros_like(theta)
        return float(value), gradient / (len(loss) * huber_delta)

    results = [minimize(objective, start, jac=True, method="L-BFGS-B", options=_LBFGS_OPTIONS)
               for start in _initialisations(form, log_m, log_n, feature, loss)]
    best = min(results, key=lambda r: r.fun)
    with np.errstate(over="ignore", under="ignore"):
        params = {name: float(np.exp(v) if name in COEFFICIENTS else v) for name, v in zip(form.parameters, best.x)}
    predicted = form.predict_logs(best.x, log_m, log_n, feature)
    degenerate = degenerate_reason(form, dict(zip(form.parameters, best.x)))
    return {"form": form.name, "params": params, "huber_objective": float(best.fun) * huber_delta,
            "huber_delta": huber_delta, "starts": len(results),
            "converged": bool(best.success) and degenerate is None, "degenerate": degenerate,
            "points": int(len(data)), **prediction_errors(predicted, loss)}


def degenerate_reason(form: ParametricForm, theta: dict[str, float]) -> str | None:
    """Why a fit's parameters cannot be used outside log space, or None.

    The fit works on log coefficients; a term the data do not constrain can drift until its
    coefficient overflows (or underflows) a float64 while its contribution stays tiny, e.g. A·M^-α
    with α in the hundreds when the loss does not depend on M over the grid. Such a fit predicts
    the points it saw but gives no usable law in M, N or σ̄."""
    bad = [name for name in form.parameters if name in COEFFICIENTS and not -700.0 < theta[name] < 700.0]
    if not bad:
        return None
    exponents = ", ".join(f"{p} = {theta[p]:.3g}" for p in form.parameters if p not in COEFFICIENTS)
    return (f"{form.name}'s fit is degenerate on this grid: log {', log '.join(bad)} = "
            f"{', '.join(f'{theta[b]:.3g}' for b in bad)} (outside a float64; {exponents}): "
            "a term the measurements do not constrain")


class TooFewPointsError(ValueError):
    """Not enough measurements pass the appendix's filters to fit the parametric forms."""


def prediction_errors(predicted: np.ndarray, observed: np.ndarray) -> dict[str, float]:
    """Predicted-vs-observed summary (the appendix's scatter plots, as numbers)."""
    error = predicted - observed
    return {"rmse": float(np.sqrt(np.mean(error**2))), "max_abs_error": float(np.max(np.abs(error))),
            "mean_relative_error": float(np.mean(np.abs(error) / observed))}


def fit_paper_forms(smoothed: pd.DataFrame, physical_batch: int = PAPER_PHYSICAL_BATCH,
                    filters: ParametricFilters = ParametricFilters(),
                    huber_delta: float = DEFAULT_HUBER_DELTA) -> tuple[dict, pd.DataFrame]:
    """Fit L̂1 and L̂2 on the filtered smoothed grid → (fits by form name, predicted-vs-observed table)."""
    data = filters.apply(smoothed)
    data = data.assign(**{EXAMPLES: physical_batch * data[ITERATIONS]})
    if len(data) < len(L2.parameters) + 1:
        raise TooFewPointsError(
            f"only {len(data)} points pass the parametric filters {filters}; "
            f"{len(L2.parameters) + 1} are needed")
    fits = {name: fit_parametric(form, data, huber_delta) for name, form in FORMS.items()}
    diagnostics = data[[MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO, EXAMPLES, CROSS_ENTROPY]].copy()
    for name, form in FORMS.items():
        diagnostics[f"Predicted {name}"] = form.predict(fits[name]["params"], data[MODEL_SIZE], data[EXAMPLES],
                                                        data[NOISE_BATCH_RATIO])
    fits["filters"] = vars(filters) | {"physical_batch": physical_batch}
    return fits, diagnostics.reset_index(drop=True)


def optimal_model_size(form: ParametricForm, params: dict[str, float], compute: float, nbr: float,
                       seq_len: float, model_size_bounds: tuple[float, float]) -> float:
    """argmin_M L̂(M, N = C/(6·M·S), σ̄) by ``minimize_scalar`` on log M (the appendix's optimal-size curves)."""
    from scipy.optimize import minimize_scalar

    def loss_at(log_m: float) -> float:
        m = np.exp(log_m)
        return float(form.predict(params, m, compute / (6.0 * m * seq_len), nbr))

    result = minimize_scalar(loss_at, bounds=tuple(np.log(model_size_bounds)), method="bounded")
    return float(np.exp(result.x))
