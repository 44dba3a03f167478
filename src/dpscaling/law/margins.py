"""The answer's predicted margin over the rules of thumb a practitioner would use without a law (not in the paper,
whose §4.4 compares its optimum to fixed baselines by prediction only; docs/query.md, "Margins over rules of
thumb"; measured by training in docs/savings.md, "What an answer is worth").

A rule of thumb fixes the model and the number of steps and lets the batch spend the compute:

* ``dp_expert``: the smallest measured model at a very large batch, T = 0.2 H (the DP literature's habit);
* ``middle``: the grid's middle measured model (by size), T = 0.4 H;
* ``chinchilla``: the size non-private laws pick, 20 tokens per parameter (C = 6·M·20·M), T = 0.6 H;

H is the law's measured horizon (on the default, 500 steps: T = 100, 200, 300, the paper's 1 : 2 : 3 and
``savings.baselines`` of ``config/config.yaml``). Each rule's configuration at the budget is rounded and priced
exactly as the answer is (:func:`dpscaling.law.rounding.rounded`: whole microbatches at most N, whole steps,
σ from :mod:`dpscaling.accounting.pricing` under the answer's sampler), so the margin compares like with like.

**Margin and its interval.** The margin is the rule's predicted loss minus the answer's (positive: the answer is
predicted better). Its 90% interval combines the two configurations' calibrated half-widths in quadrature, as if
the law's errors at the two points were independent; they share the law, so where its error is common to both the
interval is wider than the difference needs: a conservative reading. An interval that spans zero says **not
distinguishable**: the law cannot tell the answer from the rule at this budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.law.answer_types import Runnable
from dpscaling.law.budget import AnswerSettings, Budget, PricedSurface
from dpscaling.law.columns import BATCH_SIZE, ITERATIONS, MODEL_SIZE
from dpscaling.law.rounding import MeasuredLaw, rounded

BETTER, WORSE, TIED, NO_INTERVAL = "answer better", "rule better", "not distinguishable", "no calibrated interval"


@dataclass(frozen=True)
class RuleOfThumb:
    """A fixed way of choosing a configuration: a model (``smallest``, ``middle`` or the size that
    ``tokens_per_parameter`` gives at the budget's compute) trained for ``horizon_fraction`` of the law's horizon."""

    name: str
    model: str
    horizon_fraction: float
    tokens_per_parameter: float | None = None

    def model_size(self, measured: np.ndarray, compute: float) -> float:
        """The rule's M among the law's ``measured`` sizes (sorted) at ``compute``."""
        if self.model == "smallest":
            return float(measured[0])
        if self.model == "middle":
            return float(measured[len(measured) // 2])
        return math.sqrt(compute / (6.0 * float(self.tokens_per_parameter)))


RULES_OF_THUMB = (RuleOfThumb("dp_expert", "smallest", 0.2), RuleOfThumb("middle", "middle", 0.4),
                  RuleOfThumb("chinchilla", "tokens_per_parameter", 0.6, tokens_per_parameter=20.0))


@dataclass(frozen=True)
class Margin:
    """One rule's configuration at the budget, its prediction and the answer's predicted margin over it."""

    rule: str
    model: str | None
    model_size: int
    batch_size: int
    iterations: int
    predicted_loss: float
    margin: float  # the rule's predicted loss − the answer's (positive: the answer is predicted better)
    interval: tuple[float, float] | None  # the margin's 90% interval (module docstring)
    verdict: str  # BETTER, WORSE, TIED, NO_INTERVAL, or why the rule has no prediction here

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "model": self.model, "model_size": self.model_size, "batch_size": self.batch_size,
                "iterations": self.iterations, "predicted_loss": _finite(self.predicted_loss),
                "margin": _finite(self.margin), "interval_90": None if self.interval is None else list(self.interval),
                "verdict": self.verdict}


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _half_width(interval: tuple[float, float] | None) -> float | None:
    return None if interval is None else (interval[1] - interval[0]) / 2


def verdict_of(interval: tuple[float, float] | None) -> str:
    if interval is None:
        return NO_INTERVAL
    low, high = interval
    return BETTER if low > 0 else WORSE if high < 0 else TIED


def margins(law: MeasuredLaw, runnable: Runnable, budget: Budget, priced: PricedSurface,
            settings: AnswerSettings) -> tuple[Margin, ...]:
    """The answer ``runnable``'s margin over each of :data:`RULES_OF_THUMB` at ``budget`` (one length's law)."""
    measured = np.sort(np.asarray(law.measured_sizes, float))
    horizon = float(law.ranges.horizon)
    step_tokens = float(priced.surface.step_tokens)
    found = []
    for rule in RULES_OF_THUMB:
        size = rule.model_size(measured, budget.compute)
        steps = max(1.0, round(rule.horizon_fraction * horizon))
        row = pd.Series({MODEL_SIZE: size, BATCH_SIZE: budget.compute / (6.0 * size * step_tokens * steps),
                         ITERATIONS: steps})
        chosen = rounded(law, row, budget, priced, settings)
        name = None if chosen.model is None else chosen.model.name
        if not (math.isfinite(chosen.predicted_loss) and math.isfinite(runnable.predicted_loss)):
            found.append(Margin(rule.name, name, chosen.model_size, chosen.batch_size, chosen.iterations,
                                chosen.predicted_loss, math.nan, None,
                                f"no prediction: {chosen.model_note or 'outside the law’s range'}"))
            continue
        margin = chosen.predicted_loss - runnable.predicted_loss
        widths = (_half_width(chosen.calibrated_interval), _half_width(runnable.calibrated_interval))
        interval = (None if None in widths else
                    (margin - math.hypot(*widths), margin + math.hypot(*widths)))
        found.append(Margin(rule.name, name, chosen.model_size, chosen.batch_size, chosen.iterations,
                            chosen.predicted_loss, margin, interval, verdict_of(interval)))
    return tuple(found)
