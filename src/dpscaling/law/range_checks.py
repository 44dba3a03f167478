"""Honest answers: where an answer lies against what the law measured and validated (docs/query.md,
"Flags and the refusal policy"). Not in the paper, whose §3.4 queries report points only.

The law is measured on a grid of models, σ̄ columns and T up to the trained horizon H, extrapolated in T to
64·H (paper §3.3) and validated on held-out sets (:mod:`dpscaling.law.validation`): the horizon set fits
each curve up to H/2 and predicts the rest, so the extrapolation in T is measured up to a factor
``extrapolation_factor`` = 2, and the calibrated interval (:mod:`dpscaling.law.calibration`) is measured at
T ≥ ``calibration_iterations_from``. An answer is checked against those ranges; each finding is a
:class:`Flag` with a machine-readable code, the value, the limit and one line for a person:

=============================== ======================================================================
``iterations_extrapolated``      H < T ≤ factor·H: beyond the trained horizon, inside the validated factor
``iterations_beyond_validated``  T > factor·H: beyond what validation measured. **Refused** unless the
                                 caller allows extrapolation; then a warning
``point_optimum_beyond_validated`` the law's point optimum lies beyond the validated extrapolation, the
                                 decision rule's choice inside it (:mod:`dpscaling.law.decision`)
``iterations_below_calibration`` T below the calibrated interval's region
``model_size_at_edge``           the optimum is the largest (or smallest) model the search may pick: a
                                 larger (smaller) model might be better, and the law cannot say
``noise_batch_ratio_at_edge``    the optimum's σ̄ is at the smallest σ̄ the law measured: less noise might
                                 be better, and the law cannot say
``sampling_rate_above_limit``    q = B/N above :data:`SAMPLING_RATE_LIMIT`
``repeats_data``                 with one sequence as the privacy unit, B·T > N: the answer passes over
                                 its data more than once, which no curve of the law did
``candidates_without_sigma``     candidates within an octave of the optimum's q = B/N had no σ (outside
                                 the σ table, or refused by the accountant): a better one may be among
                                 them (farther ones are only counted, ``candidates_without_answer``)
``past_saturation``              a smaller compute budget predicts a loss within the saturation tolerance
                                 of the best up to this one (paper Table 2's saturating compute)
=============================== ======================================================================

Only ``iterations_beyond_validated`` refuses; everything else warns (the policy).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dpscaling.core.errors import UserError

# q = B/N above which an answer is flagged: each step then samples over a tenth of the data. The law's
# curves are trained with batches drawn from a pool thousands of times larger (q ≈ 1e-3 and below), so it
# sees neither the smaller gradient noise of sampling without replacement from a small pool (variance
# × (1 − q)) nor the data reuse such a rate implies.
SAMPLING_RATE_LIMIT = 0.1
WARNING, REFUSED = "warning", "refused"


@dataclass(frozen=True)
class ValidatedRanges:
    """What a law was measured and validated on (a bundle's ``validated_ranges``)."""

    model_size: tuple[float, float]  # the smallest and largest measured model
    first_iteration: float  # the first measured T after the warm-up cut
    horizon: float  # H: the largest measured T
    law_iterations: tuple[float, float]  # the law's own T range (extrapolated to 2^k·H)
    extrapolation_factor: float  # T/H measured by the held-out horizon set (1: nothing beyond H validated)
    noise_batch_ratio: tuple[float, float]  # the smallest and largest measured σ̄ > 0
    calibration_iterations_from: float | None = None  # the calibrated interval's region T ≥ this
    sampling_rate_limit: float = SAMPLING_RATE_LIMIT

    @property
    def validated_iterations(self) -> float:
        return self.horizon * self.extrapolation_factor

    def to_json(self) -> dict[str, Any]:
        values = asdict(self)
        values["validated_iterations"] = self.validated_iterations
        return values

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ValidatedRanges:
        values = {key: value for key, value in data.items() if key != "validated_iterations"}
        for key in ("model_size", "law_iterations", "noise_batch_ratio"):
            values[key] = tuple(float(v) for v in values[key])
        return cls(**values)


@dataclass(frozen=True)
class Flag:
    """One finding about an answer: ``code`` (machine-readable), ``severity`` (warning or refused), the
    ``value`` checked, the ``limit`` it was checked against and a one-line ``message``."""

    code: str
    severity: str
    message: str
    value: float | None = None
    limit: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class ExtrapolationRefused(UserError):
    """The answer relies on the law beyond the extrapolation its validation measured (the policy of
    :mod:`dpscaling.law.range_checks`). ``answer`` is the law's search whose optimum was refused
    (:class:`dpscaling.law.queries.ComputeOptimal`); ``within`` the best configuration inside the validated
    range at the same budget (a row of the search; None when there is none)."""

    def __init__(self, message: str, answer: Any = None, within: Any = None):
        super().__init__(message)
        self.answer, self.within = answer, within


def iteration_flags(iterations: float, ranges: ValidatedRanges, allow_extrapolation: bool) -> list[Flag]:
    """T against the trained horizon, the validated extrapolation and the calibration region."""
    flags = []
    horizon, validated = ranges.horizon, ranges.validated_iterations
    if iterations > validated * (1 + 1e-9):
        flags.append(Flag(
            "iterations_beyond_validated", WARNING if allow_extrapolation else REFUSED,
            f"T = {iterations:,.0f} is {iterations / horizon:.3g}× the trained horizon {horizon:,.0f}; the law's "
            f"extrapolation in T was validated up to {ranges.extrapolation_factor:g}× ({validated:,.0f} steps)",
            iterations, validated))
    elif iterations > horizon * (1 + 1e-9):
        flags.append(Flag(
            "iterations_extrapolated", WARNING,
            f"T = {iterations:,.0f} is {iterations / horizon:.3g}× the trained horizon {horizon:,.0f} "
            f"(extrapolated; validated up to {ranges.extrapolation_factor:g}×)", iterations, horizon))
    start = ranges.calibration_iterations_from
    if start is not None and iterations < start:
        flags.append(Flag(
            "iterations_below_calibration", WARNING,
            f"T = {iterations:,.0f} is below the calibrated interval's region (T ≥ {start:,.0f}): its coverage "
            "was not measured there", iterations, start))
    return flags


def point_optimum_flags(optimum_iterations: float, chosen_iterations: float, ranges: ValidatedRanges) -> list[Flag]:
    """The law's point optimum beyond the validated extrapolation while the decision rule's choice is not
    (:mod:`dpscaling.law.decision`): the choice stepped back from it, and says so."""
    validated = ranges.validated_iterations * (1 + 1e-9)
    if optimum_iterations > validated and chosen_iterations <= validated:
        return [Flag("point_optimum_beyond_validated", WARNING,
                     f"the law's point optimum (T = {optimum_iterations:,.0f}, {optimum_iterations / ranges.horizon:.3g}× "
                     f"the trained horizon) lies beyond the validated {ranges.extrapolation_factor:g}×; the decision "
                     f"rule chose T = {chosen_iterations:,.0f}, inside it", optimum_iterations,
                     ranges.validated_iterations)]
    return []


def model_size_flags(model_size: float, searched: tuple[float, float], measured: tuple[float, float]) -> list[Flag]:
    """The optimum's M at an end of the searched model sizes (within one grid step of 2%)."""
    low, high = searched
    if model_size >= high * 0.98:
        edge = "largest"
        limit = measured[1]
    elif model_size <= low * 1.02:
        edge = "smallest"
        limit = measured[0]
    else:
        return []
    other = "larger" if edge == "largest" else "smaller"
    return [Flag("model_size_at_edge", WARNING,
                 f"M = {model_size:,.0f} is at the {edge} model the law covers ({limit:,.0f} measured): a {other} "
                 "model may be better, and the law cannot say", model_size, limit)]


def noise_flags(noise_batch_ratio: float, measured: tuple[float, float]) -> list[Flag]:
    """The optimum's σ̄ within a batch-size step (2^(1/4)) of the smallest σ̄ the law measured: less noise (a
    larger batch, more data) might be better, and the law cannot say (it does not extrapolate in σ̄)."""
    smallest = measured[0]
    if not 0 < noise_batch_ratio <= smallest * 2 ** 0.25:
        return []
    return [Flag("noise_batch_ratio_at_edge", WARNING,
                 f"σ̄ = {noise_batch_ratio:.4g} is at the smallest noise the law measured ({smallest:.4g}): less noise "
                 "might be better, and the law cannot say", noise_batch_ratio, smallest)]


def data_flags(batch_size: float, iterations: float, units: float, privacy_unit: str,
               ranges: ValidatedRanges) -> list[Flag]:
    """q = B/N above the limit, and (one sequence per privacy unit) B·T > N: the data passed over again."""
    flags = []
    q = batch_size / units
    if q > ranges.sampling_rate_limit:
        flags.append(Flag("sampling_rate_above_limit", WARNING,
                          f"q = B/N = {q:.3g} is above {ranges.sampling_rate_limit:g}: each step samples over a tenth "
                          "of the data, which no curve of the law did", q, ranges.sampling_rate_limit))
    epochs = batch_size * iterations / units
    if privacy_unit == "sequence" and epochs > 1:
        flags.append(Flag("repeats_data", WARNING,
                          f"B·T = {epochs:.3g}·N: the answer passes over its {units:,.0f} sequences {epochs:.3g} "
                          "times; the law's curves never repeat a sequence, so overfitting is not in the prediction",
                          epochs, 1.0))
    return flags


def sigma_flags(without_sigma: int, candidates: int, sampling_rates: tuple[float, float] | None,
                optimum_rate: float) -> list[Flag]:
    """Candidates the σ source could not price (outside its table, or refused by the accountant) within an
    octave of the optimum's q = B/N: a better configuration may be among them. Farther ones are only counted
    (``candidates_without_answer``)."""
    if not without_sigma or sampling_rates is None:
        return []
    low, high = sampling_rates
    if not low / 2 <= optimum_rate <= high * 2:
        return []
    return [Flag("candidates_without_sigma", WARNING,
                 f"{without_sigma} of {candidates} candidates have no σ at q = B/N from {low:.3g} to {high:.3g} "
                 f"(outside the σ table, or refused by the accountant), next to the optimum's q = {optimum_rate:.3g}: "
                 "a better configuration may be among them", float(without_sigma), 0.0)]


def unpriced_sigma_flag(sigma: float, reason: str) -> list[Flag]:
    """The runnable configuration's σ could not be priced exactly (the accountant refused it): the law's table
    interpolated it, which is no price a run can train with, so the answer shows it apart and trains nothing."""
    return [Flag("sigma_not_priced", WARNING,
                 f"the accountant refused to price this configuration exactly ({reason}); its σ = {sigma:.5g} is the "
                 "σ table's interpolation, shown apart (interpolated_sigma), not as the runnable σ, and the answer "
                 "has no train config", sigma, None)]


def saturation_flag(compute: float, saturating: float, loss: float, saturating_loss: float,
                    tolerance: float) -> list[Flag]:
    """The query's budget past the saturating compute of the budgets up to it."""
    if not saturating < compute * (1 - 1e-9):
        return []
    better = "predicts a lower loss" if saturating_loss < loss else f"is within {tolerance:.0%} of the best"
    return [Flag("past_saturation", WARNING,
                 f"compute {compute:.3g} is past the saturating compute {saturating:.3g} (the smallest budget within "
                 f"{tolerance:.0%} of the best loss up to {compute:.3g}); {saturating:.3g} {better} "
                 f"({saturating_loss:.4g} against {loss:.4g})", compute, saturating)]


BELOW_NONPRIVATE_LAW = "below_nonprivate_law"  # the code of nonprivate_floor_flag's flag


def nonprivate_floor_flag(loss: float, floor: float) -> list[Flag]:
    """An answer the law predicts below the non-private law at its compute: no private run can beat it (noise only
    adds loss), so the law extrapolates wrongly there; its loss is raised to the floor."""
    if not loss < floor:
        return []
    return [Flag(BELOW_NONPRIVATE_LAW, WARNING,
                 f"the law predicts {loss:.4g}, below the non-private law's {floor:.4g} at this compute (σ̄ = 0 at the "
                 f"law's physical batch, the best up to this budget): no private run can beat it, so the answer's loss "
                 f"and intervals are raised to {floor:.4g}; the law extrapolates here", loss, floor)]


def refusal(flags: list[Flag]) -> Flag | None:
    return next((flag for flag in flags if flag.severity == REFUSED), None)


def one_line(flags: list[Flag]) -> str:
    """The flags as one line for a person ("" when there are none)."""
    if not flags:
        return ""
    first = flags[0].message
    more = len(flags) - 1
    return first + (f" (+{more} more flag{'s' if more > 1 else ''})" if more else "")

