"""The learning-rate protocol (paper §3.2 "Learning Rates" and its appendix): tune the rate per model with
per-example clipping and no noise, then train the noisy runs at the tuned rate and the next rungs below it.

The paper tuned once, at its own scale, found 2^-7 for every model, and trained its noisy runs at 2^-7, 2^-8
and 2^-9 (with noise the best rate falls, gradually). A rate tuned there need not suit another batch,
length, warm-up or model family, so a config may ask the workflow to tune (``training.learning_rates:
tuned``): one short clipped, noise-free run per model and rate of ``learning_rate_protocol.ladder``, the rate
chosen per model by :func:`choose_rate`, the grid's runs trained at :func:`grid_rates`.

The choice rule, stated: each rung's loss is the mean of the run's last ``window`` logged training losses (a
diverged or unfinished run counts as +inf). The best rung is the lowest. The rungs within ``tolerance`` nats
of it that are contiguous with it on the ladder form its basin. A basin of one rung is a clear optimum and is
chosen. A wider basin is *flat* and its largest rate is chosen: a protocol run is the first steps of the
grid's schedule, where a larger rate has only just finished its warm-up and its lead shows later (measured on
the default: each flat basin's largest rate was the best at the full horizon, its smallest was not; a rung
on the unigram plateau is far outside the tolerance by then). Rungs within tolerance outside the basin (a
worse rung between) make the choice *noisy*: they are reported and the basin of the best is kept. A best rung
at either end of the ladder is *at the edge*: the optimum may lie beyond it (extend the ladder).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.core.io import write_text_atomic

CAPTION = ("The learning-rate protocol: each model's final training loss (mean of the last logged losses) at "
           "each rate of the ladder, clipped and without noise; the chosen rate, its flat basin and the rates the "
           "grid trains.")
RULE = ("lowest mean of the last `window` logged training losses; a basin of rungs within `tolerance` of it "
        "(contiguous on the ladder) is flat and its largest rate is chosen")


@dataclass(frozen=True)
class RateChoice:
    """One model's protocol result: the chosen rate and the evidence behind it."""

    model: str
    rate: float  # the chosen rate
    best_rate: float  # the rung with the lowest loss
    losses: dict[float, float]  # rung → loss (inf: diverged or unfinished)
    basin: tuple[float, ...]  # the rungs within tolerance contiguous with the best, descending
    noisy: tuple[float, ...]  # rungs within tolerance outside the basin (a worse rung between)
    at_edge: str | None  # "top" / "bottom" when the best rung is the ladder's largest / smallest

    @property
    def flat(self) -> bool:
        return len(self.basin) > 1

    @property
    def ambiguous(self) -> bool:
        return self.flat or bool(self.noisy) or self.at_edge is not None

    def to_json(self) -> dict[str, Any]:
        values = asdict(self)
        values["losses"] = {repr(rate): (None if not math.isfinite(loss) else loss)
                            for rate, loss in self.losses.items()}
        values.update(flat=self.flat, ambiguous=self.ambiguous)
        return values


def choose_rate(model: str, losses: Mapping[float, float], tolerance: float) -> RateChoice:
    """The protocol's rate for ``model`` from its ladder's losses (rate → loss; NaN counts as +inf), by the
    rule of the module docstring. Raises UserError when no rung finished."""
    if tolerance < 0:
        raise UserError(f"learning_rate_protocol.tolerance: must be >= 0, got {tolerance}")
    ladder = sorted((float(rate) for rate in losses), reverse=True)
    values = np.array([_finite_or_inf(losses[rate]) for rate in ladder])
    if not np.isfinite(values).any():
        raise UserError(f"learning-rate protocol: every run of {model} diverged or did not finish "
                        f"(rates {ladder}); lower learning_rate_protocol.ladder")
    best = int(np.argmin(values))
    near = values <= values[best] + tolerance
    low, high = best, best
    while low > 0 and near[low - 1]:
        low -= 1
    while high < len(ladder) - 1 and near[high + 1]:
        high += 1
    basin = tuple(ladder[low:high + 1])
    noisy = tuple(rate for index, rate in enumerate(ladder) if near[index] and not low <= index <= high)
    edge = None if len(ladder) == 1 else "top" if best == 0 else "bottom" if best == len(ladder) - 1 else None
    return RateChoice(model=model, rate=basin[0], best_rate=ladder[best],
                      losses={rate: float(values[i]) for i, rate in enumerate(ladder)},
                      basin=basin, noisy=noisy, at_edge=edge)


def _finite_or_inf(loss: float | None) -> float:
    return float(loss) if loss is not None and math.isfinite(loss) else math.inf


def final_loss(curve: pd.DataFrame, steps: int, window: int) -> float:
    """A protocol run's loss: the mean of its last ``window`` logged training losses; +inf when it did not
    reach ``steps`` or any of them is not finite (diverged)."""
    if curve.empty or int(curve["step"].max()) < steps:
        return math.inf
    last = curve.sort_values("step")["loss"].to_numpy(dtype=float)[-window:]
    return float(last.mean()) if np.isfinite(last).all() else math.inf


def grid_rates(rate: float, rates_below: int, rates_above: int = 0) -> tuple[float, ...]:
    """The noisy runs' rates, descending: ``rates_above`` doublings above the tuned ``rate``, the rate, and the
    next ``rates_below`` halvings below it (the paper: 2^-7, 2^-8, 2^-9 from its tuned 2^-7)."""
    return tuple(float(rate) * 2.0 ** -j for j in range(-rates_above, rates_below + 1))


def choose_rates(curves: Iterable[tuple[str, float, pd.DataFrame]], steps: int, window: int,
                 tolerance: float) -> list[RateChoice]:
    """Each model's :class:`RateChoice` from its protocol curves ``(model, rate, curve)``."""
    losses: dict[str, dict[float, float]] = {}
    for model, rate, curve in curves:
        losses.setdefault(model, {})[float(rate)] = final_loss(curve, steps, window)
    return [choose_rate(model, table, tolerance) for model, table in losses.items()]


def choice_table(choices: Sequence[RateChoice], rates_below: int, rates_above: int = 0) -> pd.DataFrame:
    """One row per model and rung: the loss, whether it is the best, in the basin, the chosen rate, and the
    grid rates it names (the table of the evidence)."""
    rows = []
    for choice in choices:
        named = grid_rates(choice.rate, rates_below, rates_above)
        for rate, loss in choice.losses.items():
            rows.append({"model": choice.model, "learning_rate": rate, "log2_learning_rate": math.log2(rate),
                         "loss": loss if math.isfinite(loss) else np.nan, "best": rate == choice.best_rate,
                         "in_basin": rate in choice.basin, "chosen": rate == choice.rate,
                         "grid": rate in named, "flat": choice.flat, "noisy": bool(choice.noisy),
                         "at_edge": choice.at_edge or ""})
    return pd.DataFrame(rows)


def write_choice(choices: Sequence[RateChoice], settings: Mapping[str, Any], cost: Mapping[str, Any],
                 path: str | Path) -> None:
    """The protocol's record (``learning_rates/chosen.json``): the rule, settings, cost and each model's choice
    with the grid rates it names."""
    below, above = int(settings["rates_below"]), int(settings.get("rates_above", 0))
    record = {"rule": RULE, "settings": dict(settings), "cost": dict(cost),
              "models": {choice.model: {**choice.to_json(), "grid_rates": list(grid_rates(choice.rate, below, above))}
                         for choice in choices}}
    write_text_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


def read_chosen(path: str | Path) -> dict[str, float]:
    """Model → the protocol's chosen rate, from :func:`write_choice`'s record."""
    record = json.loads(Path(path).read_text())
    return {model: float(entry["rate"]) for model, entry in record["models"].items()}

