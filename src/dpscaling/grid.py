"""The experiment grid and its canonical names (paper §3.2 "Detailed Experimental Setup").

The workflow expands model size × noise-batch ratio × learning rate (× physical
batch × seed for ablations) into one training job per point. Every number that
appears in a path is written by :func:`canonical`, so one value has exactly one
spelling: no ``1e-05`` next to ``1.0e-5``, no ``0.30000000000000004``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from dpscaling.errors import UserError


def canonical(value: float | int) -> str:
    """The one spelling of a number in paths and wildcards.

    Integers print as integers; floats as the shortest positional decimal that
    reads back as the same float (for the paper's 2^-k, k <= 23, that decimal is
    the exact binary value), never in exponent notation.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("booleans are not grid values")
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    if not np.isfinite(value):
        raise UserError(f"grid values must be finite, got {value}")
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return np.format_float_positional(value, unique=True, trim="-")


def alternation(values: Iterable[float | int | str]) -> str:
    """A regex matching exactly the canonical spellings of ``values``."""
    spellings = sorted({v if isinstance(v, str) else canonical(v) for v in values})
    return "|".join(re.escape(s) for s in spellings)


@dataclass(frozen=True, order=True)
class TrainPoint:
    """One training job: a model at one noise-batch ratio and learning rate."""

    model: str
    batch: int
    seed: int
    noise_batch_ratio: float
    learning_rate: float

    @property
    def wildcards(self) -> dict[str, str]:
        return {
            "model": self.model,
            "batch": canonical(self.batch),
            "seed": canonical(self.seed),
            "nbr": canonical(self.noise_batch_ratio),
            "lr": canonical(self.learning_rate),
        }


def main_grid(config: Mapping[str, Any]) -> list[TrainPoint]:
    """The main grid: every model × noise-batch ratio × learning rate at the physical batch."""
    training = config["training"]
    return [
        TrainPoint(model, int(training["physical_batch"]), int(training["seed"]), float(nbr), float(lr))
        for model, nbr, lr in product(
            config["models"]["names"], training["noise_batch_ratios"], training["learning_rates"]
        )
    ]


def repeat_grid(config: Mapping[str, Any]) -> list[TrainPoint]:
    """Extra seeds at a few main-grid points (``training.repeat_seeds`` × ``training.repeat_points``): the
    seed-to-seed noise the law's bootstrap intervals resample (docs/fit.md "Intervals").

    Raises UserError when a point is not on the main grid or a repeat seed is the main seed.
    """
    training = config["training"]
    seeds = [int(seed) for seed in training.get("repeat_seeds", [])]
    if int(training["seed"]) in seeds:
        raise UserError(f"training.repeat_seeds: {seeds} must not contain training.seed ({training['seed']})")
    axes = {"model": config["models"]["names"], "noise_batch_ratio": [float(v) for v in training["noise_batch_ratios"]],
            "learning_rate": [float(v) for v in training["learning_rates"]]}
    main_keys = {"model": "models.names", "noise_batch_ratio": "training.noise_batch_ratios",
                 "learning_rate": "training.learning_rates"}
    points = []
    for index, point in enumerate(training.get("repeat_points", [])):
        for key, values in axes.items():
            value = point[key] if key == "model" else float(point[key])
            if value not in values:
                raise UserError(f"training.repeat_points[{index}].{key}: {point[key]!r} is not in {main_keys[key]} "
                                f"({list(values)})")
        points += [TrainPoint(point["model"], int(training["physical_batch"]), seed,
                              float(point["noise_batch_ratio"]), float(point["learning_rate"])) for seed in seeds]
    return sorted(set(points))


# ---------------------------------------------------------------------------- the physical-batch ablation


def ablation_curve_points(config: Mapping[str, Any]) -> list[TrainPoint]:
    """fig:physical_batch_size_ablation: σ̄ × physical batch × seed at the ablation's one learning rate."""
    block = config["ablation_batch"]
    return sorted(
        TrainPoint(block["model"], int(batch), int(seed), float(nbr), float(block["learning_rate"]))
        for nbr, batch, seed in product(block["noise_batch_ratios"], block["physical_batches"], block["seeds"])
    )


def ablation_sweep_points(config: Mapping[str, Any]) -> list[TrainPoint]:
    """fig:physical-batch-size-sweep-loss: the learning-rate sweep at one σ̄, every physical batch and seed."""
    block = config["ablation_batch"]
    sweep = block["sweep"]
    return sorted(
        TrainPoint(block["model"], int(batch), int(seed), float(sweep["noise_batch_ratio"]), float(lr))
        for lr, batch, seed in product(sweep["learning_rates"], block["physical_batches"], block["seeds"])
    )


def ablation_eval_points(config: Mapping[str, Any]) -> list[TrainPoint]:
    """tab:physical-batch-size-sweep-loss-entire-train-set: the final models at the sweep's σ̄ trained
    with the ablation's learning rate, every physical batch and seed (paper: σ̄ = 2^-15, LR 2^-8)."""
    block = config["ablation_batch"]
    nbr, lr = float(block["sweep"]["noise_batch_ratio"]), float(block["learning_rate"])
    return sorted(
        TrainPoint(block["model"], int(batch), int(seed), nbr, lr)
        for batch, seed in product(block["physical_batches"], block["seeds"])
    )


def ablation_grid(config: Mapping[str, Any]) -> list[TrainPoint]:
    """Every training job of the ``ablation_batch`` target (paper appendix "Physical Batch Size Ablation"):
    the fixed-learning-rate ablation, its learning-rate sweep and the evaluated models, each point once."""
    return sorted(
        set(ablation_curve_points(config)) | set(ablation_sweep_points(config)) | set(ablation_eval_points(config))
    )
