"""Using the fitted function (paper §3.4, Fig. "methodology"; appendix "Saturating Compute Budget", Table 2).

Enumerate constant-compute configurations C = 6·M·B·S·T (B in sequences),
calibrate σ for each from the privacy budget ε and data budget N (q = B/N),
set σ̄ = σ/B, and read the loss off the fitted function. The optimum is the
lowest loss; the near-optimal set is every configuration within a relative
tolerance of it (paper captions: 1%; the authors' code: 2% for bands).
Configurations the law or the accounting cannot answer are counted by reason,
never silently dropped. :func:`inference_aware` adds inference FLOPs (the
paper's over-training remark in its limitations).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.law.columns import (
    BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO,
    PRIVACY_BUDGET, REASON, SIGMA, TOKENS, TOKENS_PER_PARAMETER)
from dpscaling.law.interpolation import LossFunction, reason_counts
from dpscaling.law.noise import SigmaFunction
from dpscaling.law.physical_batch import PhysicalBatchCorrection

# Batch sizes 2^(k/4), k = 0..100 (1 … 2^25 sequences), as in the authors' code.
DEFAULT_BATCH_SIZES = 2.0 ** (np.arange(0, 101) / 4)
DEFAULT_MODEL_SIZE_COUNT = 100
# Candidate model sizes stay 1% inside the trained range (the code: 1.01·smallest … 0.99·largest).
MODEL_SIZE_MARGIN = 0.01
DEFAULT_TOLERANCE = 0.01
REFERENCE_BAND_TOLERANCE = 0.02
SATURATION_TOLERANCE = 0.01
LEADING_CANDIDATES = 32
# A decision rule's score of each answered candidate (dpscaling.law.decision), lower is better.
DECISION_SCORE = "Decision Score"
BATCH_LARGER_THAN_DATA = "batch size larger than the data budget (q = B/N > 1)"
NO_SIGMA = "accounting cannot calibrate sigma here (outside its table)"
RANGE_COLUMNS = (MODEL_SIZE, BATCH_SIZE, ITERATIONS, NOISE_BATCH_RATIO, TOKENS_PER_PARAMETER)
# Inference-aware answers (the paper's over-training remark): forward pass ≈ 2·M FLOPs per token;
# training budgets C·2^(k/4) up to 2^10·C.
INFERENCE_FLOPS_PER_PARAMETER_TOKEN = 2.0
OVERTRAINING_STEPS_PER_DOUBLING = 4
DEFAULT_MAX_OVERTRAINING = 2.0 ** 10
TRAINING_FLOPS, INFERENCE_FLOPS, TOTAL_FLOPS = "Training FLOPs", "Inference FLOPs", "Total FLOPs"


def within(loss, best, tolerance: float):
    """Loss within ``tolerance`` (a fraction) of the best: loss ≤ best·(1 + tolerance), the paper's rule for
    positive losses; written best + tolerance·|best| so a law extrapolated below zero keeps its optimum."""
    return loss <= best + tolerance * np.abs(best)


def compute_cost(model_size, batch_size, iterations, seq_len: float):
    """C = 6·M·B·S·T FLOPs (paper appendix "FLOPs estimation under DP"; B counts sequences)."""
    return 6.0 * np.asarray(model_size) * np.asarray(batch_size) * seq_len * np.asarray(iterations)


def model_size_grid(smallest: float, largest: float, count: int = DEFAULT_MODEL_SIZE_COUNT,
                    margin: float = MODEL_SIZE_MARGIN) -> np.ndarray:
    """Log-spaced candidate model sizes from (1+margin)·smallest to (1−margin)·largest."""
    if not 0 < smallest < largest:
        raise UserError(f"model-size range must satisfy 0 < min < max, got [{smallest:g}, {largest:g}]")
    return np.geomspace(smallest * (1 + margin), largest * (1 - margin), count)


def _constant_compute_arrays(compute, model_sizes: np.ndarray, seq_len: float, iteration_bounds: tuple[float, float],
                             batch_sizes: np.ndarray) -> dict[str, np.ndarray]:
    """The columns of :func:`constant_compute_configurations`."""
    c, m, b = (a.ravel() for a in np.meshgrid(np.atleast_1d(np.asarray(compute, float)), model_sizes,
                                              batch_sizes, indexing="ij"))
    t = c / compute_cost(m, b, 1.0, seq_len)
    inside = (t >= iteration_bounds[0]) & (t <= iteration_bounds[1])
    return {COMPUTE: c[inside], MODEL_SIZE: m[inside], BATCH_SIZE: b[inside], ITERATIONS: t[inside]}


def constant_compute_configurations(compute, model_sizes: np.ndarray, seq_len: float,
                                    iteration_bounds: tuple[float, float],
                                    batch_sizes: np.ndarray = DEFAULT_BATCH_SIZES) -> pd.DataFrame:
    """Every (C, M, B) with T = C/(6·M·B·S) inside ``iteration_bounds`` (T not rounded, as the code)."""
    return pd.DataFrame(_constant_compute_arrays(compute, model_sizes, seq_len, iteration_bounds, batch_sizes))


def _evaluated_columns(m: np.ndarray, b: np.ndarray, t: np.ndarray, epsilon, users, loss: LossFunction,
                       sigma: SigmaFunction, seq_len: float,
                       correction: PhysicalBatchCorrection | None) -> dict[str, np.ndarray]:
    """The columns :func:`evaluate_configurations` adds (σ, σ̄, loss, tokens, tokens/parameter, reason), as
    arrays: a search's thousands of candidates are evaluated without a frame (the saturation scan keeps one
    row per budget of them)."""
    epsilon, users = np.broadcast_to(epsilon, m.shape), np.broadcast_to(users, m.shape)
    q = b / users
    feasible = q <= 1
    sigma_values = np.full(len(m), np.nan)
    if feasible.any():
        sigma_values[feasible] = sigma(epsilon[feasible], t[feasible], q[feasible])
    nbr = sigma_values / b
    values, reasons = loss.evaluate(m, t, nbr)
    if correction is not None:
        values = correction.apply(values, b, nbr, m)
    reasons = np.where(np.isnan(sigma_values), NO_SIGMA, reasons)
    reasons = np.where(feasible, reasons, BATCH_LARGER_THAN_DATA)
    tokens = b * t * seq_len
    return {SIGMA: sigma_values, NOISE_BATCH_RATIO: nbr, CROSS_ENTROPY: values, TOKENS: tokens,
            TOKENS_PER_PARAMETER: tokens / m, REASON: reasons}


def evaluate_configurations(configs: pd.DataFrame, loss: LossFunction, sigma: SigmaFunction,
                            seq_len: float, correction: PhysicalBatchCorrection | None = None) -> pd.DataFrame:
    """Add σ, σ̄, loss, tokens, tokens/parameter, FLOPs and a NaN reason to rows of (M, B, T, ε, N).

    With a ``correction`` (not in the paper: :mod:`dpscaling.law.physical_batch`) the loss is the law's
    corrected to each row's batch B trained as its physical batch."""
    m, b, t = (configs[c].to_numpy(float) for c in (MODEL_SIZE, BATCH_SIZE, ITERATIONS))
    epsilon, users = configs[PRIVACY_BUDGET].to_numpy(float), configs[DATA_BUDGET].to_numpy(float)
    evaluated = configs.assign(**_evaluated_columns(m, b, t, epsilon, users, loss, sigma, seq_len, correction))
    if COMPUTE not in evaluated:  # a budget column from the caller stays exact (rows are grouped by it)
        evaluated.insert(len(evaluated.columns) - 1, COMPUTE, compute_cost(m, b, t, seq_len))
    return evaluated


@dataclass
class ComputeOptimal:
    """The answer to one (C, ε, N) query."""
    optimum: pd.Series
    near_optimal: pd.DataFrame
    tolerance: float
    candidates: int
    unanswered: dict[str, int] = field(default_factory=dict)
    # The sampling rates q = B/N of the candidates without σ (None: every candidate had one).
    unpriced_sampling_rates: tuple[float, float] | None = None
    # The best answered candidates, lowest loss first (the near-optimal set may hold only the optimum); with a
    # ``rank``, lowest rank first, in its column DECISION_SCORE.
    leading: pd.DataFrame | None = None
    # Every candidate as evaluated (σ, σ̄, loss, reason): what a caller re-scores without pricing them again.
    evaluated: pd.DataFrame | None = None

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Range of each hyper-parameter over the near-optimal set (the figures' bands)."""
        return {column: (float(self.near_optimal[column].min()), float(self.near_optimal[column].max()))
                for column in RANGE_COLUMNS}


def compute_optimal(compute: float, epsilon: float, users: float, loss: LossFunction, sigma: SigmaFunction,
                    seq_len: float, model_sizes: np.ndarray, iteration_bounds: tuple[float, float],
                    tolerance: float = DEFAULT_TOLERANCE,
                    batch_sizes: np.ndarray = DEFAULT_BATCH_SIZES,
                    correction: PhysicalBatchCorrection | None = None,
                    rank: Callable[[pd.DataFrame], np.ndarray] | None = None) -> ComputeOptimal:
    """Best constant-compute configuration and every one within ``tolerance`` of its loss; ``leading`` holds
    the best candidates by loss, or by ``rank`` (a decision rule's score of the answered rows) when given.

    Raises UserError when no candidate has a finite predicted loss (the budget
    is outside the law's range), naming why the candidates failed.
    """
    configs = constant_compute_configurations(compute, model_sizes, seq_len, iteration_bounds, batch_sizes)
    if configs.empty:
        lo, hi = (compute_cost(model_sizes[[0, -1]], batch_sizes[[0, -1]], iteration_bounds, seq_len))
        raise UserError(f"compute budget {compute:.3g} FLOPs admits no configuration with "
                        f"{iteration_bounds[0]:.4g} <= iterations <= {iteration_bounds[1]:.4g}; "
                        f"the law covers about [{lo:.3g}, {hi:.3g}] FLOPs")
    configs = configs.assign(**{PRIVACY_BUDGET: epsilon, DATA_BUDGET: users})
    evaluated = evaluate_configurations(configs, loss, sigma, seq_len, correction)
    answered = evaluated.dropna(subset=[CROSS_ENTROPY]).sort_values(CROSS_ENTROPY, kind="stable")
    unanswered = reason_counts(evaluated[REASON].to_numpy())
    if answered.empty:
        summary = "; ".join(f"{n} × {reason}" for reason, n in unanswered.items())
        raise UserError(f"no configuration for compute {compute:.3g}, epsilon {epsilon:g}, users {users:.3g} "
                        f"is inside the law's range ({len(evaluated)} candidates: {summary})")
    best = answered.iloc[0]
    near = answered[within(answered[CROSS_ENTROPY], best[CROSS_ENTROPY], tolerance)]
    unpriced = evaluated[evaluated[REASON] == NO_SIGMA]
    rates = unpriced[BATCH_SIZE] / unpriced[DATA_BUDGET]
    leading = answered
    if rank is not None:
        leading = answered.assign(**{DECISION_SCORE: rank(answered)}).sort_values(DECISION_SCORE, kind="stable")
    return ComputeOptimal(best, near.reset_index(drop=True), tolerance, len(evaluated), unanswered,
                          (float(rates.min()), float(rates.max())) if len(rates) else None,
                          leading.head(LEADING_CANDIDATES).reset_index(drop=True), evaluated)


def inference_cost(model_size, inference_tokens: float):
    """2·M FLOPs per inference token: the standard forward-pass estimate (a third of training's 6·M per token)."""
    return INFERENCE_FLOPS_PER_PARAMETER_TOKEN * np.asarray(model_size) * inference_tokens


def overtraining_budgets(compute: float, max_multiple: float = DEFAULT_MAX_OVERTRAINING,
                         steps_per_doubling: int = OVERTRAINING_STEPS_PER_DOUBLING) -> np.ndarray:
    """Training budgets C·2^(k/steps_per_doubling) from C up to ``max_multiple``·C (C itself exactly first)."""
    if not max_multiple >= 1:
        raise UserError(f"the over-training budgets must reach at least C (max multiple >= 1), got {max_multiple:g}")
    steps = int(np.floor(np.log2(max_multiple) * steps_per_doubling + 1e-9))
    return compute * 2.0 ** (np.arange(steps + 1) / steps_per_doubling)


@dataclass
class InferenceAware:
    """The configuration with the fewest training plus inference FLOPs at no worse a predicted loss.

    ``choice`` and ``compute_optimal`` are rows of :func:`evaluate_configurations` with
    Training / Inference / Total FLOPs added; ``choice`` is ``compute_optimal`` itself when
    over-training saves nothing (always so with no inference tokens).
    """
    choice: pd.Series
    compute_optimal: pd.Series
    inference_tokens: float
    candidates: int
    unanswered: dict[str, int] = field(default_factory=dict)


def inference_aware(compute: float, epsilon: float, users: float, loss: LossFunction, sigma: SigmaFunction,
                    seq_len: float, model_sizes: np.ndarray, iteration_bounds: tuple[float, float],
                    inference_tokens: float, max_multiple: float = DEFAULT_MAX_OVERTRAINING,
                    batch_sizes: np.ndarray = DEFAULT_BATCH_SIZES,
                    correction: PhysicalBatchCorrection | None = None) -> InferenceAware:
    """Over-training for inference (paper's limitations, "Over-Training and Inference-Time Compute").

    Finds the compute-optimal loss L* at budget C, then searches the constant-compute configurations
    of the training budgets C·2^(k/4) up to ``max_multiple``·C (default 2^10·C) at the same ε and N
    (σ calibrated per candidate, so longer training pays its privacy cost in noise), keeps those
    predicted at L* or better, and returns the one with the fewest training FLOPs 6·M·B·S·T plus
    inference FLOPs 2·M·``inference_tokens`` (the forward-pass estimate). Raises UserError for a
    negative inference volume and, like :func:`compute_optimal`, for a budget the law cannot answer.
    ``correction`` is passed on to both searches (see :func:`evaluate_configurations`).
    """
    if not inference_tokens >= 0:
        raise UserError(f"inference tokens must be >= 0, got {inference_tokens:g}")
    optimum = compute_optimal(compute, epsilon, users, loss, sigma, seq_len, model_sizes, iteration_bounds,
                              batch_sizes=batch_sizes, correction=correction).optimum
    configs = constant_compute_configurations(overtraining_budgets(compute, max_multiple), model_sizes, seq_len,
                                              iteration_bounds, batch_sizes)
    evaluated = evaluate_configurations(configs.assign(**{PRIVACY_BUDGET: epsilon, DATA_BUDGET: users}),
                                        loss, sigma, seq_len, correction)
    as_good = _with_total_flops(evaluated[evaluated[CROSS_ENTROPY] <= optimum[CROSS_ENTROPY]], inference_tokens)
    baseline = _with_total_flops(optimum.to_frame().T, inference_tokens).iloc[0]
    cheapest = as_good.loc[as_good[TOTAL_FLOPS].idxmin()] if len(as_good) else baseline
    choice = cheapest if cheapest[TOTAL_FLOPS] < baseline[TOTAL_FLOPS] else baseline  # ties: no over-training
    return InferenceAware(choice, baseline, float(inference_tokens), len(evaluated),
                          reason_counts(evaluated[REASON].to_numpy()))


def _with_total_flops(configs: pd.DataFrame, inference_tokens: float) -> pd.DataFrame:
    """Add training (the budget C), inference (2·M per token) and total FLOPs to evaluated rows."""
    training = configs[COMPUTE].to_numpy(float)
    inference = inference_cost(configs[MODEL_SIZE].to_numpy(float), inference_tokens)
    return configs.assign(**{TRAINING_FLOPS: training, INFERENCE_FLOPS: inference, TOTAL_FLOPS: training + inference})


def best_loss_per_compute(budgets: np.ndarray, epsilon: float, users: float, loss: LossFunction,
                          sigma: SigmaFunction, seq_len: float, model_sizes: np.ndarray,
                          iteration_bounds: tuple[float, float],
                          batch_sizes: np.ndarray = DEFAULT_BATCH_SIZES,
                          correction: PhysicalBatchCorrection | None = None) -> pd.DataFrame:
    """The compute-optimal configuration per budget (rows with no answer are absent; count in ``attrs``): the
    rows :func:`evaluate_configurations` gives, each budget's first lowest loss, budgets ascending."""
    columns = _constant_compute_arrays(budgets, model_sizes, seq_len, iteration_bounds, batch_sizes)
    m, b, t = columns[MODEL_SIZE], columns[BATCH_SIZE], columns[ITERATIONS]
    columns.update({PRIVACY_BUDGET: np.full(len(m), float(epsilon)), DATA_BUDGET: np.full(len(m), float(users))})
    columns.update(_evaluated_columns(m, b, t, columns[PRIVACY_BUDGET], columns[DATA_BUDGET], loss, sigma, seq_len,
                                      correction))
    answered = np.flatnonzero(~np.isnan(columns[CROSS_ENTROPY]))
    # By budget, then loss; lexsort is stable, so of equal losses the first candidate wins (as idxmin's).
    order = answered[np.lexsort((columns[CROSS_ENTROPY][answered], columns[COMPUTE][answered]))]
    budget = columns[COMPUTE][order]
    best = order[np.flatnonzero(np.r_[True, budget[1:] != budget[:-1]])] if len(order) else order
    frame = pd.DataFrame({name: values[best] for name, values in columns.items()})
    frame.attrs["unanswered"] = reason_counts(columns[REASON])
    frame.attrs["budgets_without_answer"] = int(len(budgets) - len(best))
    return frame


def near_optimal_per_compute(budgets: np.ndarray, epsilon: float, users: float, loss: LossFunction,
                             sigma: SigmaFunction, seq_len: float, model_sizes: np.ndarray,
                             iteration_bounds: tuple[float, float], tolerance: float = DEFAULT_TOLERANCE,
                             batch_sizes: np.ndarray = DEFAULT_BATCH_SIZES) -> pd.DataFrame:
    """Per budget: the optimum and each hyper-parameter's min / max over the near-optimal set.

    The figures' lines and bands (fig:compute_allocation_selection: "lines show minimum values
    … within 1% of optimal", shading the full range). One row per budget with an answer;
    columns ``<name>`` (at the optimum), ``<name> Min``, ``<name> Max`` for each of
    :data:`RANGE_COLUMNS`, plus Cross Entropy and Compute.
    """
    configs = constant_compute_configurations(budgets, model_sizes, seq_len, iteration_bounds, batch_sizes)
    configs = configs.assign(**{PRIVACY_BUDGET: epsilon, DATA_BUDGET: users})
    evaluated = evaluate_configurations(configs, loss, sigma, seq_len).dropna(subset=[CROSS_ENTROPY])
    if evaluated.empty:
        return pd.DataFrame(columns=[COMPUTE, CROSS_ENTROPY])
    best_loss = evaluated.groupby(COMPUTE)[CROSS_ENTROPY].transform("min")
    near = evaluated[within(evaluated[CROSS_ENTROPY], best_loss, tolerance)]
    optimum = evaluated.loc[evaluated.groupby(COMPUTE)[CROSS_ENTROPY].idxmin()].set_index(COMPUTE)
    ranges = near.groupby(COMPUTE)[list(RANGE_COLUMNS)].agg(["min", "max"])
    ranges.columns = [f"{column} {'Min' if stat == 'min' else 'Max'}" for column, stat in ranges.columns]
    table = optimum[[CROSS_ENTROPY, *RANGE_COLUMNS]].join(ranges).reset_index()
    return table.assign(**{PRIVACY_BUDGET: epsilon, DATA_BUDGET: users})


def saturating_compute(per_compute: pd.DataFrame, tolerance: float = SATURATION_TOLERANCE) -> pd.Series:
    """Smallest budget whose best loss is within ``tolerance`` of the best over all budgets (Table 2)."""
    if per_compute.empty:
        raise UserError("no compute budget has an answer inside the law's range")
    overall = per_compute[CROSS_ENTROPY].min()
    reached = per_compute[within(per_compute[CROSS_ENTROPY], overall, tolerance)]
    return reached.sort_values(COMPUTE).iloc[0]


def saturating_table(budgets: np.ndarray, privacy_budgets, data_budgets, loss: LossFunction,
                     sigma: SigmaFunction, seq_len: float, model_sizes: np.ndarray,
                     iteration_bounds: tuple[float, float], tolerance: float = SATURATION_TOLERANCE) -> pd.DataFrame:
    """Table 2: the saturating budget and its optimal configuration per (data budget, privacy budget)."""
    rows = []
    for users in data_budgets:
        for epsilon in privacy_budgets:
            per_compute = best_loss_per_compute(budgets, epsilon, users, loss, sigma, seq_len, model_sizes,
                                                iteration_bounds)
            if per_compute.empty:
                # Kept as a row with its reason rather than dropped or raised: the other cells still answer.
                reasons = "; ".join(f"{n} × {r}" for r, n in per_compute.attrs["unanswered"].items())
                row = pd.Series({DATA_BUDGET: users, PRIVACY_BUDGET: epsilon,
                                 REASON: f"no compute budget answered ({reasons})"})
            else:
                row = saturating_compute(per_compute, tolerance).copy()
                row[REASON] = ""
            # A budget with no answer cannot be the saturating one; say how many there were.
            row["Budgets Without Answer"] = per_compute.attrs["budgets_without_answer"]
            rows.append(row)
    columns = [DATA_BUDGET, PRIVACY_BUDGET, COMPUTE, CROSS_ENTROPY, MODEL_SIZE, ITERATIONS, BATCH_SIZE,
               TOKENS_PER_PARAMETER, TOKENS, SIGMA, NOISE_BATCH_RATIO]
    table = pd.DataFrame(rows).reindex(columns=columns + ["Budgets Without Answer", REASON])
    return table.reset_index(drop=True)


def nonprivate_best_up_to(loss: LossFunction, computes: np.ndarray, seq_len: float, model_sizes: np.ndarray,
                          iteration_bounds: tuple[float, float], physical_batch: float) -> np.ndarray:
    """The non-private law (σ̄ = 0) at the law's physical batch (a law measured at one batch says nothing about
    another B: the paper's non-private reproduction), per budget the best loss up to it (a larger budget can always
    be spent like a smaller one); inf below the first answered budget. No private configuration at the same compute
    can be better: noise only adds loss, and a private run's batch is at least the physical one."""
    computes = np.asarray(computes, float)
    best = best_loss_per_compute(computes, np.inf, 1e300, loss, lambda epsilon, steps, rate: np.zeros(len(steps)),
                                 seq_len, model_sizes, iteration_bounds, batch_sizes=np.array([float(physical_batch)]))
    by_budget = dict(zip(best[COMPUTE].astype(float), best[CROSS_ENTROPY].astype(float)))
    order = np.argsort(computes, kind="stable")
    running = np.minimum.accumulate([by_budget.get(float(computes[i]), np.inf) for i in order])
    floor = np.empty(len(computes))
    floor[order] = running
    return floor
