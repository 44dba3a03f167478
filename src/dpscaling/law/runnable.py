"""Runnable answers: the law's optimum made into a configuration that can be trained as it stands
(docs/query.md, "Runnable answers"). Not in the paper, whose §3.4 answers are points of a continuous search
(M between the measured models, B = 2^(k/4), T = C/(6·M·B·S) unrounded).

* **Model.** A shape (layers, heads, hidden) in the law's family whose parameter count is nearest M,
  following the measured models' shapes: the number of layers interpolated in log M between theirs, the
  head width of the measured model nearest in log M, the width a multiple of it. The count is what the
  workflow builds for a ``models.custom`` entry at the law's S and vocabulary
  (:meth:`dpscaling.models.family.Family.custom_overrides`). A shape equal to a measured model keeps its
  name.
* **B and T.** B in whole microbatches (a multiple of the microbatch size the law's runs trained with),
  at most N; T = C/(6·M'·B'·S) rounded to a whole step, so the compute stays C up to the rounding.
* **σ.** Priced for (ε, δ, N, B', T') by :func:`dpscaling.accounting.pricing.price` for the law's mechanism
  under its sampling rule (dp-accounting PLD, a direct calibration, not the table's interpolation); then
  σ̄ = σ'/B'. The answer names the sampler, adjacency and accounting event of that price.
* **Choice.** The candidates are tried in the decision rule's order (:mod:`dpscaling.law.decision`).
* **Loss.** The law (and, when asked, its physical-batch correction) at (M', T', σ̄'), with the seed-only
  interval of that fixed configuration over the bootstrap replicates and the calibrated one.
* **Learning rate.** The one that won on the law's measured grid for the measured model nearest M' at the
  nearest noisy σ̄ (:func:`best_learning_rate`).
* **Config.** The ``models.custom`` entry (when the shape is new) and the ``private_model`` budget with
  this ``configuration``: the workflow trains exactly this answer privately (docs/private-training.md).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.law.columns import ITERATIONS, LEARNING_RATE, MODEL, NOISE_BATCH_RATIO, SOURCE
from dpscaling.models.family import PRESETS, family_named
from dpscaling.privacy.mechanisms import DPSGD

# The widest model a shape search considers: hidden up to this many head widths.
MAX_HEADS = 256


@dataclass(frozen=True)
class ModelShape:
    """A model of the law's family: its name, shape and exact parameter count."""

    name: str
    family: str
    layers: int
    heads: int
    hidden: int
    param_count: int
    measured: bool = False  # one of the models the law was fitted on

    @property
    def head_width(self) -> int:
        return self.hidden // self.heads

    def custom_entry(self) -> dict[str, Any]:
        """The ``models.custom`` entry that builds this shape."""
        return {"layers": self.layers, "heads": self.heads, "hidden": self.hidden, "family": self.family}

    def job_param(self, seq_len: int) -> dict[str, Any]:
        """A training job's ``model`` param for this shape at ``seq_len`` (what the config's ``models.custom``
        entry gives: :func:`dpscaling.models.family.model_param_of`)."""
        family = family_named(self.family)
        return {"layers": self.layers, "heads": self.heads, "hidden": self.hidden, "intermediate": None,
                "family": self.family, **family.rows_trained_at(seq_len)}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelShape:
        return cls(str(data["name"]), str(data["family"]), int(data["layers"]), int(data["heads"]),
                   int(data["hidden"]), int(data["param_count"]), bool(data.get("measured", False)))


def custom_param_count(family: str, layers: int, heads: int, hidden: int, vocab_size: int, seq_len: int) -> int:
    """Parameters of a ``models.custom`` entry of ``family`` trained at ``seq_len`` (the rows it trains)."""
    owner = family_named(family)
    positions, overrides = owner.custom_overrides({"layers": layers, "heads": heads, "hidden": hidden}, seq_len)
    return int(owner.config("custom", vocab_size=vocab_size, max_positions=positions, **overrides).param_count().total)


def preset_shapes(names: Sequence[str]) -> list[ModelShape]:
    """Measured shapes for a law without recorded shapes whose models are presets (the authors' BERTs), counted
    at the family's own vocabulary and positions, as the paper's sizes are."""
    shapes = []
    for name in names:
        if name in PRESETS:
            family = PRESETS[name]
            layers, heads, hidden = family.presets[name]
            count = family.config(name, vocab_size=family.vocab_size).param_count().total
            shapes.append(ModelShape(name, family.name, layers, heads, hidden, int(count), True))
    return shapes


def nearest_shape(model_size: float, measured: Sequence[ModelShape], vocab_size: int, seq_len: int,
                  bounds: tuple[float, float] | None = None, measured_seq_len: int | None = None) -> ModelShape:
    """The shape of the measured models' family with the parameter count nearest ``model_size`` (module
    docstring), among counts inside ``bounds`` (the law's model range) when any is. A measured model keeps
    its name, and its recorded count when ``seq_len`` is the length it was recorded at (``measured_seq_len``,
    None: the same). Raises UserError without measured shapes."""
    if not measured:
        raise UserError("no model shape: the law records no shapes of its measured models")
    family = measured[0].family
    ordered = sorted(measured, key=lambda shape: shape.param_count)
    log_counts = np.log([shape.param_count for shape in ordered])
    target = math.log(model_size)
    layers = float(np.exp(np.interp(target, log_counts, np.log([shape.layers for shape in ordered]))))
    head_width = ordered[int(np.argmin(np.abs(log_counts - target)))].head_width
    low, high = bounds if bounds is not None else (0.0, math.inf)
    candidates: list[tuple[bool, float, ModelShape]] = []
    for depth in sorted({max(1, math.floor(layers)), max(1, math.ceil(layers))}):
        for heads in range(1, MAX_HEADS + 1):
            hidden = heads * head_width
            count = custom_param_count(family, depth, heads, hidden, vocab_size, seq_len)
            shape = ModelShape(f"{family.capitalize()}L{depth}H{hidden}", family, depth, heads, hidden, count)
            candidates.append((not low <= count <= high, abs(math.log(count) - target), shape))
            if count > model_size:
                break
    shape = min(candidates, key=lambda item: item[:2])[2]
    for known in measured:  # a measured model keeps its name (and at its own length its rows and count)
        if (known.layers, known.heads, known.hidden) == (shape.layers, shape.heads, shape.hidden):
            if measured_seq_len is None or measured_seq_len == seq_len:
                return known
            return dataclasses.replace(known, param_count=shape.param_count)
    return shape


def whole_batch(batch_size: float, microbatch: int, units: float) -> int:
    """B in whole microbatches, at least one and at most the data budget."""
    microbatch = max(1, int(microbatch))
    batch = max(microbatch, microbatch * int(round(batch_size / microbatch)))
    largest = microbatch * int(units // microbatch)
    return min(batch, largest) if largest >= microbatch else batch


def whole_steps(compute: float, model_size: float, batch: int, seq_len: float) -> int:
    """T = C/(6·M·B·S) rounded to a whole step (at least one)."""
    return max(1, int(round(compute / (6.0 * model_size * batch * seq_len))))


def best_learning_rate(grid: pd.DataFrame, model: str, noise_batch_ratio: float, iterations: float) -> float:
    """The learning rate that won on the law's measured grid for ``model`` at the noisy σ̄ nearest (in log)
    to ``noise_batch_ratio``, and there at the measured T nearest to ``iterations``."""
    cells = grid[(grid[MODEL] == model) & (grid[SOURCE] == "measured") & (grid[NOISE_BATCH_RATIO] > 0)]
    cells = cells.dropna(subset=[LEARNING_RATE])
    if cells.empty:
        raise UserError(f"the law has no measured noisy curve of {model} to take a learning rate from")
    distance = (np.abs(np.log(cells[NOISE_BATCH_RATIO].to_numpy(float) / noise_batch_ratio)),
                np.abs(np.log(cells[ITERATIONS].to_numpy(float) / iterations)))
    return float(cells.iloc[np.lexsort(distance[::-1])[0]][LEARNING_RATE])


def nearest_measured(model_size: float, sizes: Mapping[str, float]) -> str:
    """The measured model (name → Model Size) nearest ``model_size`` in log M."""
    return min(sizes, key=lambda name: abs(math.log(sizes[name] / model_size)))


def train_config(shape: ModelShape | None, batch: int, steps: int, learning_rate: float | None, epsilon: float,
                 delta: float, units: float, compute: float, init_checkpoint: str | None = None,
                 mechanism: str = DPSGD.name, examples_per_user: int | None = None) -> dict[str, Any]:
    """The config block that trains this configuration with the ``private_model`` target (a fine-tuning law's
    answer, which starts from ``init_checkpoint``, as a ``pretrained`` budget of the run that pretrained it;
    a BandMF or user-level law's with its ``mechanism``; a budget per user with its ``examples_per_user``)."""
    if shape is None:
        return {}
    configuration = {"model": shape.name, "batch_size": int(batch), "iterations": int(steps)}
    if learning_rate is not None:
        configuration["learning_rate"] = float(learning_rate)
    block: dict[str, Any] = {}
    if not shape.measured:
        block["models"] = {"custom": {shape.name: shape.custom_entry()}}
    budget = {"epsilon": float(epsilon), "delta": float(delta), "data_budget": int(units), "compute": float(compute),
              "configuration": configuration}
    if init_checkpoint is not None:  # the run that pretrained it fine-tunes from its checkpoint
        budget["pretrained"] = True
    if mechanism != DPSGD.name:  # trained with that mechanism's noise and batches (docs/mechanisms.md)
        budget["mechanism"] = mechanism
    if examples_per_user is not None:  # the guarantee is per user of up to k sequences
        budget["examples_per_user"] = int(examples_per_user)
    block["private_model"] = {"budgets": [budget]}
    return block
