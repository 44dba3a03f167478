"""The answer (paper §3.4; docs/query.md): the compute-optimal configuration and its runnable twin with every
range flag (:mod:`dpscaling.law.range_checks`), the saturating compute when the budget is past it, the query as
it was priced and where the law came from, as one :class:`~dpscaling.law.answer_types.Answer`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dpscaling.law.answer_types import Answer, Configuration, Runnable
from dpscaling.law.budget import AnswerSettings, Budget, PricedSurface
from dpscaling.law.bundle import Bundle
from dpscaling.law.queries import NO_SIGMA, SATURATION_TOLERANCE, ComputeOptimal
from dpscaling.law.range_checks import (
    Flag, data_flags, iteration_flags, model_size_flags, noise_flags, point_optimum_flags, refusal, saturation_flag,
    sigma_flags, unpriced_sigma_flag)


def render_answer(bundle: Bundle, answer: ComputeOptimal, runnable: Runnable, budget: Budget, priced: PricedSurface,
                  settings: AnswerSettings, bands, note: str, saturation: dict | None, *, per_length=None,
                  lengths_without_answer=None, inference=None, held: dict | None = None,
                  margins_of: Callable[[], tuple] | None = None, floor_flags: Sequence[Flag] = ()) -> Answer:
    """The :class:`Answer` of ``answer`` (the search) and ``runnable`` (its rounded twin) at ``budget``, flagged
    against ``bundle``'s validated ranges, and with ``floor_flags`` (the non-private floor's, when it bound)."""
    surface, units, ranges = priced.surface, priced.units, bundle.ranges
    optimum = Configuration.from_row(answer.optimum, surface.seq_len, surface.sequences_per_unit)
    flags = [*iteration_flags(float(runnable.iterations), ranges, settings.allow_extrapolation),
             *point_optimum_flags(optimum.iterations, float(runnable.iterations), ranges),
             *model_size_flags(optimum.model_size, (float(priced.sizes[0]), float(priced.sizes[-1])), ranges.model_size),
             *noise_flags(optimum.noise_batch_ratio, ranges.noise_batch_ratio),
             *data_flags(runnable.batch_size, runnable.iterations, units, budget.data.privacy_unit, ranges),
             *sigma_flags(answer.unanswered.get(NO_SIGMA, 0), answer.candidates, answer.unpriced_sampling_rates,
                          optimum.batch_size / units),
             *([] if runnable.priced else unpriced_sigma_flag(runnable.sigma, runnable.unpriced)), *floor_flags]
    if saturation is not None:
        flags += saturation_flag(budget.compute, saturation["compute"], optimum.predicted_loss,
                                 saturation["answer"]["predicted_loss"], SATURATION_TOLERANCE)
        if not any(flag.code == "past_saturation" for flag in flags):
            saturation = None  # reported only when the budget is past it
    refused = refusal(iteration_flags(optimum.iterations, ranges, allow_extrapolation=False))
    source = priced.source
    return Answer(_query_record(budget, priced, settings, held), runnable, optimum, answer.ranges(),
                  len(answer.near_optimal), answer.candidates, answer.unanswered, bands, note, surface.calibration,
                  surface.calibration_note, tuple(flags), saturation, source.description, source.sampling,
                  bundle.loss_units, bundle.provenance, priced.correction, per_length, lengths_without_answer or {},
                  inference, refused.message if refused is not None else "", margins_of)


def _query_record(budget: Budget, priced: PricedSurface, settings: AnswerSettings, held: dict | None) -> dict[str, Any]:
    """The query as it was priced: the budget, δ, the units sampled, the length and the search's tolerance."""
    data = budget.data
    return {"compute": float(budget.compute), "epsilon": float(budget.epsilon), "delta": float(priced.source.delta),
            "privacy_unit": data.privacy_unit, "users": data.users, "tokens": data.tokens,
            "examples_per_user": priced.source.examples_per_user,
            "data_budget_units": float(priced.units), "seq_len": priced.surface.seq_len,
            "tolerance": float(priced.tolerance), "allow_extrapolation": bool(settings.allow_extrapolation),
            **(held or {})}
