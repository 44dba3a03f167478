"""Choose and round (paper §3.4; beyond the paper: an answer that trains as it stands): the search's leading
candidates, best first by the decision rule (:mod:`dpscaling.law.decision`), each made runnable
(:mod:`dpscaling.law.runnable`: a model shape, whole microbatches and steps, σ priced exactly by
:func:`dpscaling.accounting.pricing.price` for the law's mechanism), until one stays inside the law's range.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Protocol

import numpy as np
import pandas as pd

from dpscaling.accounting import pricing
from dpscaling.core.errors import UserError
from dpscaling.law.answer_types import Runnable
from dpscaling.law.bootstrap import interval
from dpscaling.law.budget import AnswerSettings, Budget, PricedSurface
from dpscaling.law.bundle import Bundle
from dpscaling.law.calibration import calibrated_interval
from dpscaling.law.columns import BATCH_SIZE, CROSS_ENTROPY, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO
from dpscaling.law.decision import DecisionRule
from dpscaling.law.queries import DECISION_SCORE, ComputeOptimal
from dpscaling.law.range_checks import ValidatedRanges
from dpscaling.law.runnable import ModelShape, best_learning_rate, nearest_measured, whole_batch, whole_steps
from dpscaling.law.surface import Surface

# The search's best candidates made runnable, in order, until one stays inside the law's range.
RUNNABLE_CANDIDATES = 8


class MeasuredLaw(Protocol):
    """What rounding reads of a law (:class:`dpscaling.law.answers.ScalingLaw`): its bundle, ranges, length,
    mechanism, measured models and their shapes, and pretrained starts."""

    bundle: Bundle
    ranges: ValidatedRanges
    seq_len: int
    mechanism: str
    measured_sizes: pd.Series
    pretrained: dict[str, str]

    def measured_model(self, model_size: float) -> str | None: ...

    def shape_near(self, model_size: float, seq_len: int | None = None,
                   bounds: tuple[float, float] | None = None) -> ModelShape: ...


def ranking(rule: DecisionRule, surface: Surface) -> Callable[[pd.DataFrame], np.ndarray]:
    """The decision rule's score of a search's answered rows (:mod:`dpscaling.law.decision`)."""
    def rank(rows: pd.DataFrame) -> np.ndarray:
        return rule.scores(rows[CROSS_ENTROPY].to_numpy(float), surface.calibration,
                           rows[MODEL_SIZE].to_numpy(float), rows[ITERATIONS].to_numpy(float),
                           rows[NOISE_BATCH_RATIO].to_numpy(float))
    return rank


def choose_runnable(law: MeasuredLaw, answer: ComputeOptimal, budget: Budget, priced: PricedSurface,
                    settings: AnswerSettings) -> Runnable:
    """The search's leading candidates (best first by the decision rule, :data:`RUNNABLE_CANDIDATES` distinct
    after rounding) made runnable and re-priced exactly under ``settings.price_rule``; the first with a finite
    predicted loss wins. Rounding can move a candidate out of the law's range (σ' below its smallest σ̄, say);
    the next then answers. Priced under another rule than the search's (``sampling="poisson"`` where the law's
    is ``min``), the σ̄ of each candidate moves, so all :data:`RUNNABLE_CANDIDATES` are priced and the rule's
    lowest score wins."""
    leading = answer.leading
    if DECISION_SCORE not in leading:  # a search that ranked by loss (across lengths): rank it here
        leading = leading.assign(**{DECISION_SCORE: ranking(settings.rule, priced.surface)(leading)}).sort_values(
            DECISION_SCORE, kind="stable")
    tried, first, answered, unpriced = set(), None, [], []
    for _, row in leading.iterrows():
        runnable = rounded(law, row, budget, priced, settings)
        key = (runnable.model_size, runnable.batch_size, runnable.iterations)
        if key in tried:
            continue
        tried.add(key)
        first = first or runnable
        if math.isfinite(runnable.predicted_loss):
            if not runnable.priced:  # an interpolated σ answers only where no candidate is priced
                unpriced.append(runnable)
            elif settings.price_rule == priced.source.sampling:
                return runnable
            else:
                answered.append(runnable)
        if len(tried) >= RUNNABLE_CANDIDATES:
            break
    if answered or unpriced:  # the first of equal scores: the search's order
        return min(answered or unpriced, key=lambda found: found.decision.score)
    low, high = law.ranges.noise_batch_ratio
    return dataclasses.replace(first, model_note=(
        f"{first.model_note + '; ' if first.model_note else ''}no rounded configuration of the {len(tried)} best "
        f"is inside the law's range (σ̄ = {first.noise_batch_ratio:.4g}, the law's σ̄ range {low:.4g}..{high:.4g})"))


def rounded(law: MeasuredLaw, optimum: pd.Series, budget: Budget, priced: PricedSurface,
            settings: AnswerSettings) -> Runnable:
    """One candidate rounded (:mod:`dpscaling.law.runnable`): shape, whole microbatches and steps, σ priced
    exactly for the law's mechanism (:func:`dpscaling.accounting.pricing.price`), the rule's score."""
    bundle, surface, source, units = law.bundle, priced.surface, priced.source, priced.units
    microbatch = int(settings.microbatch_size or bundle.provenance.get("microbatch_size") or 1)
    shape, note = None, ""
    measured = law.measured_model(float(optimum[MODEL_SIZE])) if surface.seq_len == law.seq_len else None
    try:
        if measured is not None:  # a measured model as it stands (a search over the law's own models)
            shape = next((known for known in bundle.shapes if known.name == measured), None)
        else:
            shape = law.shape_near(float(optimum[MODEL_SIZE]), surface.seq_len, bounds=surface.model_size_range)
    except UserError as error:
        note = str(error)
    model_size = (shape.param_count if shape is not None and measured is None
                  else int(round(float(optimum[MODEL_SIZE]))))
    batch = whole_batch(float(optimum[BATCH_SIZE]), microbatch, units)
    low, high = surface.iteration_bounds
    steps = min(max(whole_steps(budget.compute, model_size, batch, surface.step_tokens), math.ceil(low)),
                math.floor(high))
    sigma, branch, accountant, price, unpriced = _priced_sigma(law.mechanism, budget.epsilon, batch, steps, priced,
                                                               settings.price_rule)
    nbr = sigma / batch
    m, t, s = np.array([float(model_size)]), np.array([float(steps)]), np.array([nbr])
    shift = 0.0 if priced.correction is None else priced.correction.shift(np.array([float(batch)]), s, m)
    predicted = float(np.asarray(surface.loss(m, t, s) - shift).ravel()[0])
    seed_only = None
    if surface.replicates is not None and math.isfinite(predicted):
        lows, highs = interval(surface.replicates.loss_matrix(m, t, s))
        seed_only = (float(np.ravel(lows - shift)[0]), float(np.ravel(highs - shift)[0]))
    calibrated = (calibrated_interval(predicted, surface.calibration, m[0], t[0], s[0])
                  if surface.calibration is not None and math.isfinite(predicted) else None)
    try:
        rate = best_learning_rate(bundle.law.grid, nearest_measured(float(model_size), law.measured_sizes.to_dict()),
                                  nbr, steps)
    except UserError:
        rate = None
    start = law.pretrained.get(shape.name) if shape is not None else None
    decision = (settings.rule.decide(predicted, surface.calibration, m[0], t[0], s[0]) if math.isfinite(predicted)
                else None)
    return Runnable(shape, int(model_size), batch, steps, microbatch, surface.seq_len, float(budget.epsilon),
                    float(source.delta), float(units), float(sigma), float(nbr), branch, accountant, predicted,
                    seed_only, calibrated, rate, note, start, price, law.mechanism, decision, measured,
                    surface.sequences_per_unit, source.examples_per_user, unpriced)


def _priced_sigma(mechanism: str, epsilon: float, batch: int, steps: int, priced: PricedSurface, price_rule: str):
    """σ of (B, T) priced exactly under ``price_rule`` (its price, branch and accountant); at the accountant's hard
    corner the table's σ, shown apart (:attr:`Runnable.unpriced` names why)."""
    source, units = priced.source, priced.units
    try:
        price = pricing.price(mechanism, price_rule, epsilon, source.delta, units, batch, steps,
                              source.examples_per_user)
        return (price.sigma, price.branch, f"dpscaling.accounting.pricing ({mechanism}, {price_rule} rule)", price,
                None)
    except UserError as error:
        sigma = float(source.sigma(np.array([epsilon]), np.array([steps]), np.array([batch / units]))[0])
        return sigma, source.sampling, f"{source.description} (interpolated)", None, str(error)
