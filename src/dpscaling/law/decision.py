"""The decision rule: how an answer is chosen among the configurations, or the mechanisms, a law predicts
(docs/query.md, "The decision rule"). Not in the paper, whose §3.4 optimum is the lowest predicted loss; that
optimum is kept beside every answer (``law_optimum``) and the paper's figures and tables use it unchanged.

A prediction far from the law's measured points is less certain than one near them, and a choice on point
predictions alone prefers exactly those: the lowest prediction among many candidates is the likeliest to
be an over-optimistic extrapolation (the winner's curse). The calibrated 90% interval
(:mod:`dpscaling.law.calibration`) measures that uncertainty where the law was validated; its
distance-scaled half-width q·s, s = 1 + the distance from the measured points, grows by q per unit of
distance, a doubling of T past the horizon included. The rules:

* ``extrapolation_charged`` (default): the lowest expected loss, the prediction plus q · the candidate's
  distance *outside* the law's measured range (:meth:`dpscaling.law.distance.DistanceScale.extrapolation`).
  Between measured points the law's held-out errors are unbiased, so the point prediction is the expected
  loss there and the rule leaves it alone; past the measured range a candidate pays what the law's
  validation says such an extrapolation can miss by, so a far extrapolation wins only on a larger predicted
  gain. A law whose calibration has a constant half-width (or none) cannot measure the charge and falls back
  to ``point``, and the answer says so (``applied``).
* ``calibrated_upper``: the lowest upper end of the calibrated 90% interval, prediction + q·s: the loss the
  law can promise with 90% confidence. It also charges the in-range uncertainty, so it prefers configurations
  near measured points and laws that validate well over a lower expected loss (measured on
  ``config/mechanisms.yaml``: docs/runs.md). Falls back to ``point`` without a calibration.
* ``point``: the lowest predicted loss (the paper's criterion).

The same rule picks the query's runnable configuration, the mechanism among several laws, a
``private_model`` budget's plan and a ``savings`` answer: one :class:`DecisionRule` for every caller. Across laws
the scores compare like with like (:func:`comparable_scores`): a law that cannot apply the rule (no
calibration) would otherwise win by paying no charge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from dpscaling.config.schema import default as schema_default
from dpscaling.core.errors import UserError

if TYPE_CHECKING:
    from dpscaling.law.calibration import Calibration

CHARGED, UPPER, POINT = "extrapolation_charged", "calibrated_upper", "point"
DECISION_RULES: tuple[str, ...] = (CHARGED, UPPER, POINT)
# Declared once, in the schema (private_model.decision_rule; savings.decision_rule is the same node): the CLI's
# --decision-rule and a DecisionRule without a name take the workflow's default.
DEFAULT_DECISION_RULE: str = schema_default("private_model.decision_rule")
DESCRIPTIONS = {
    CHARGED: "the lowest predicted loss plus the calibrated interval's growth outside the law's measured range "
             "(q per unit of distance past the measured models, σ̄ columns and horizon; nothing in between)",
    UPPER: "the lowest upper end of the calibrated 90% interval (prediction + its half-width at the "
           "configuration, wider far from the law's measured points)",
    POINT: "the lowest predicted loss (the paper's criterion)",
}
CHARGES = {CHARGED: "extrapolation charge", UPPER: "half-width"}  # what each rule adds to the prediction


@dataclass(frozen=True)
class Decision:
    """A rule's score of one configuration: what it asked, what it could apply, and the parts."""

    rule: str  # asked
    applied: str  # what scored: the rule, or ``point`` where the law cannot price the rule's charge
    score: float  # lower is better: predicted_loss + charge
    predicted_loss: float
    charge: float | None  # what the applied rule added (None under ``point``): see :data:`CHARGES`

    def to_json(self) -> dict[str, Any]:
        note = ("" if self.applied == self.rule
                else "; this law's calibration cannot price that, so the point prediction scored it")
        return {"rule": self.rule, "applied": self.applied, "description": DESCRIPTIONS[self.rule] + note,
                "score": self.score, "predicted_loss": self.predicted_loss, "charge": self.charge,
                "charge_is": CHARGES.get(self.applied)}


@dataclass(frozen=True)
class DecisionRule:
    """One of :data:`DECISION_RULES`, scoring configurations of one law (its calibration, if any)."""

    name: str = DEFAULT_DECISION_RULE

    def __post_init__(self) -> None:
        if self.name not in DECISION_RULES:
            raise UserError(f"--decision-rule: must be one of {DECISION_RULES}, got {self.name!r}")

    def applied(self, calibration: Calibration | None) -> str:
        """The rule that can score under ``calibration``: the charge needs a calibration, and the
        extrapolation charge one whose half-width grows with the distance."""
        if calibration is None or (self.name == CHARGED and calibration.scale is None):
            return POINT
        return self.name

    def charges(self, calibration: Calibration | None, model_size: ArrayLike, iterations: ArrayLike,
                noise_batch_ratio: ArrayLike) -> Any:
        """What the applied rule adds to each configuration's prediction; None under ``point``."""
        applied = self.applied(calibration)
        if applied == POINT:
            return None
        if applied == UPPER:
            return calibration.half_width_at(model_size, iterations, noise_batch_ratio)
        return calibration.extrapolation_charge_at(model_size, iterations, noise_batch_ratio)

    def scores(self, predicted: ArrayLike, calibration: Calibration | None, model_size: ArrayLike,
               iterations: ArrayLike, noise_batch_ratio: ArrayLike) -> np.ndarray:
        """The score of each configuration (NaN where the prediction is)."""
        charge = self.charges(calibration, model_size, iterations, noise_batch_ratio)
        predicted = np.asarray(predicted, float)
        return predicted if charge is None else predicted + np.asarray(charge, float)

    def decide(self, predicted: float, calibration: Calibration | None, model_size: float, iterations: float,
               noise_batch_ratio: float) -> Decision:
        """The :class:`Decision` of one configuration."""
        charge = self.charges(calibration, model_size, iterations, noise_batch_ratio)
        charge = None if charge is None else float(charge)
        return Decision(self.name, self.applied(calibration), float(predicted) + (charge or 0.0), float(predicted),
                        charge)


def rule_named(name: str | DecisionRule | None) -> DecisionRule:
    """The rule called ``name`` (None: the default)."""
    if isinstance(name, DecisionRule):
        return name
    return DecisionRule(DEFAULT_DECISION_RULE if name is None else str(name))


@dataclass(frozen=True)
class Scored:
    """What a choice across laws reads of one law's choice: its prediction, its score, the rule it was asked and
    the rule it could apply (None: no decision, a fixed configuration), and its calibrated half-width."""

    predicted_loss: float
    score: float
    rule: str | None
    applied: str | None
    half_width: float | None


def comparable_scores(scored: Mapping[str, Scored]) -> tuple[dict[str, float], dict[str, str]]:
    """Each law's score, like with like: a law that could not apply the rule the others applied (no calibration,
    or one that cannot price the charge: its score is the bare prediction) would win on paying nothing, so it is
    charged the widest calibrated half-width among the laws that applied the rule, and its note says so. Where
    no law applied the rule, every score is the point prediction it already is."""
    scores = {name: float(entry.score) for name, entry in scored.items()}
    widths = {name: entry.half_width for name, entry in scored.items()
              if entry.applied not in (None, POINT) and entry.half_width is not None
              and math.isfinite(entry.half_width)}
    notes: dict[str, str] = {}
    if not widths:
        return scores, notes
    widest = max(widths, key=widths.__getitem__)
    for name, entry in scored.items():
        if entry.applied == POINT and entry.rule not in (None, POINT):
            scores[name] = float(entry.predicted_loss) + widths[widest]
            notes[name] = (f"this law cannot apply the {entry.rule} rule (no calibration that prices its charge): "
                           f"charged the widest calibrated half-width of the laws that did, {widths[widest]:.4g} "
                           f"({widest}'s), instead of its bare prediction")
    return scores, notes
