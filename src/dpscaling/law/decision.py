"""The decision rule: how an answer is chosen among the configurations, or the mechanisms, a law predicts
(docs/query.md, "The decision rule"). Not in the paper, whose §3.4 optimum is the lowest predicted loss; that
optimum is kept beside every answer (``law_optimum``) and the paper's figures and tables use it unchanged.

A prediction far from the law's measured points is less certain than one near them, and a choice on point
predictions alone prefers exactly those: the lowest prediction among many candidates is the likeliest to
be an over-optimistic extrapolation (the winner's curse). The calibrated 90% interval
(:mod:`dpscaling.law.calibration`) measures that uncertainty where the law was validated, and its
distance-scaled half-width q·s grows with the distance from the measured points, T beyond the horizon
included. So the default rule charges each candidate its own risk:

* ``calibrated_upper`` (default): the lowest upper end of the calibrated 90% interval, prediction + q·s at
  the candidate's (M, T, σ̄): the loss the law can promise with 90% confidence. A candidate beyond the
  horizon pays q per doubling of T, so a far extrapolation wins only when its predicted gain is larger
  than what the law's validation says such an extrapolation can miss by. A law without a calibration
  falls back to ``point``, and the answer says so (``applied``).
* ``point``: the lowest predicted loss (the paper's criterion).

The same rule picks the query's runnable configuration, the mechanism among several laws, a
``private_model`` budget's plan and a ``savings`` answer: one :class:`DecisionRule` for every caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from dpscaling.errors import UserError

if TYPE_CHECKING:
    from dpscaling.law.calibration import Calibration

UPPER, POINT = "calibrated_upper", "point"
DECISION_RULES: tuple[str, ...] = (UPPER, POINT)
DEFAULT_DECISION_RULE = UPPER
DESCRIPTIONS = {
    UPPER: "the lowest upper end of the calibrated 90% interval (prediction + its half-width at the "
           "configuration, wider far from the law's measured points)",
    POINT: "the lowest predicted loss (the paper's criterion)",
}


@dataclass(frozen=True)
class Decision:
    """A rule's score of one configuration: what it asked, what it could apply, and the parts."""

    rule: str  # asked
    applied: str  # what scored: the rule, or ``point`` where the law has no calibration
    score: float  # lower is better
    predicted_loss: float
    half_width: float | None  # the calibrated half-width at the configuration (``calibrated_upper``)

    def to_json(self) -> dict[str, Any]:
        note = ("" if self.applied == self.rule
                else "; this law has no calibrated interval, so the point prediction scored it")
        return {"rule": self.rule, "applied": self.applied, "description": DESCRIPTIONS[self.rule] + note,
                "score": self.score, "predicted_loss": self.predicted_loss, "half_width": self.half_width}


@dataclass(frozen=True)
class DecisionRule:
    """One of :data:`DECISION_RULES`, scoring configurations of one law (its calibration, if any)."""

    name: str = DEFAULT_DECISION_RULE

    def __post_init__(self) -> None:
        if self.name not in DECISION_RULES:
            raise UserError(f"--decision-rule: must be one of {DECISION_RULES}, got {self.name!r}")

    def applied(self, calibration: Calibration | None) -> str:
        return self.name if self.name == POINT or calibration is not None else POINT

    def scores(self, predicted: ArrayLike, calibration: Calibration | None, model_size: ArrayLike,
               iterations: ArrayLike, noise_batch_ratio: ArrayLike) -> np.ndarray:
        """The score of each configuration (NaN where the prediction is)."""
        predicted = np.asarray(predicted, float)
        if self.applied(calibration) == POINT:
            return predicted
        return predicted + np.asarray(calibration.half_width_at(model_size, iterations, noise_batch_ratio), float)

    def decide(self, predicted: float, calibration: Calibration | None, model_size: float, iterations: float,
               noise_batch_ratio: float) -> Decision:
        """The :class:`Decision` of one configuration."""
        applied = self.applied(calibration)
        width = (None if applied == POINT
                 else float(calibration.half_width_at(model_size, iterations, noise_batch_ratio)))
        score = float(predicted) + (width or 0.0)
        return Decision(self.name, applied, score, float(predicted), width)


def rule_named(name: str | DecisionRule | None) -> DecisionRule:
    """The rule called ``name`` (None: the default)."""
    if isinstance(name, DecisionRule):
        return name
    return DecisionRule(DEFAULT_DECISION_RULE if name is None else str(name))
