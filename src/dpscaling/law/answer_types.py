"""The answer to the practitioner's question as data (paper §3.4, "Using the Fitted Functions"; docs/query.md):
the law's continuous optimum (:class:`Configuration`), the same configuration made runnable with its own σ,
predicted loss, intervals and decision score (:class:`Runnable`), and the whole :class:`Answer` with its
flags, saturation and provenance, each as the JSON ``dpscaling query --json`` prints.
:class:`dpscaling.law.answers.ScalingLaw` builds them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dpscaling.accounting.pricing import Price
from dpscaling.privacy.epsilon_scope import choices_of_provenance, epsilon_scope
from dpscaling.law.calibration import Calibration
from dpscaling.law.columns import (
    BATCH_SIZE, CROSS_ENTROPY, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO, SIGMA)
from dpscaling.law.decision import Decision
from dpscaling.law.physical_batch import PhysicalBatchCorrection
from dpscaling.law.queries import InferenceAware, compute_cost
from dpscaling.law.range_checks import Flag, one_line
from dpscaling.law.runnable import ModelShape, train_config
from dpscaling.privacy.mechanisms import DPSGD, mechanism_named


@dataclass(frozen=True)
class Configuration:
    """One training configuration and the law's prediction for it (σ on the summed clipped gradients,
    σ̄ = σ/B the noise std on their mean, compute C = 6·M·B·S·T)."""

    model_size: float
    batch_size: float
    iterations: float
    seq_len: int
    sigma: float
    noise_batch_ratio: float
    compute: float
    predicted_loss: float
    sequences_per_unit: int = 1  # m of a user-level law's sampled user (B counts users), else 1

    @property
    def tokens(self) -> float:
        return self.batch_size * self.sequences_per_unit * self.iterations * self.seq_len

    @property
    def tokens_per_parameter(self) -> float:
        return self.tokens / self.model_size

    @classmethod
    def from_row(cls, row: pd.Series, seq_len: float, sequences_per_unit: int = 1) -> Configuration:
        m, b, t = float(row[MODEL_SIZE]), float(row[BATCH_SIZE]), float(row[ITERATIONS])
        return cls(m, b, t, int(seq_len), float(row[SIGMA]), float(row[NOISE_BATCH_RATIO]),
                   float(compute_cost(m, b, t, seq_len * sequences_per_unit)), float(row[CROSS_ENTROPY]),
                   int(sequences_per_unit))

    def to_json(self) -> dict[str, Any]:
        return {"model_size": self.model_size, "batch_size": self.batch_size, "iterations": self.iterations,
                "seq_len": self.seq_len, "sigma": self.sigma, "noise_batch_ratio": self.noise_batch_ratio,
                "compute": self.compute, "tokens": self.tokens, "tokens_per_parameter": self.tokens_per_parameter,
                "predicted_loss": self.predicted_loss}


@dataclass(frozen=True)
class Runnable:
    """The optimum rounded to what can be trained (:mod:`dpscaling.law.runnable`), with its own σ (exact, at
    the asked ε and δ), predicted loss and intervals."""

    model: ModelShape | None
    model_size: int
    batch_size: int
    iterations: int
    microbatch_size: int
    seq_len: int
    epsilon: float
    delta: float
    data_budget: float
    sigma: float
    noise_batch_ratio: float
    sampling: str  # the batching whose σ this is: poisson or deterministic
    accountant: str
    predicted_loss: float
    seed_only_interval: tuple[float, float] | None
    calibrated_interval: tuple[float, float] | None
    learning_rate: float | None
    model_note: str = ""
    # A fine-tuning law's answer: the pretrained checkpoint its first step starts from (docs/finetune.md).
    init_checkpoint: str | None = None
    # How σ was priced (dpscaling.accounting.pricing): mechanism, sampler, adjacency and the event; None where
    # the accountant refused and the table's σ stands.
    price: Price | None = None
    mechanism: str = DPSGD.name
    decision: Decision | None = None  # the decision rule's score of this configuration
    measured_model: str | None = None  # the law's measured model of exactly this size, when the answer is one
    sequences_per_unit: int = 1  # m of a user-level mechanism's sampled user (B, N count users), else 1
    examples_per_user: int | None = None  # k of a budget per user (None: per sequence)
    # Why the accountant refused to price this configuration exactly (None: it priced it). Its σ is then the σ
    # table's interpolation, which no run can train with: shown apart, never as the runnable σ.
    unpriced: str | None = None

    @property
    def priced(self) -> bool:
        """σ is the accountant's exact price of this configuration (else the table's interpolation)."""
        return self.unpriced is None

    @property
    def compute(self) -> float:
        return float(compute_cost(self.model_size, self.batch_size, self.iterations,
                                  self.seq_len * self.sequences_per_unit))

    @property
    def tokens(self) -> float:
        return float(self.batch_size) * self.sequences_per_unit * self.iterations * self.seq_len

    @property
    def privacy_unit(self) -> str:
        """Whom the answer's guarantee protects: ``user`` (a user-level mechanism, or a budget per user), else
        ``sequence``."""
        user_level = mechanism_named(self.mechanism).unit == "user" or self.examples_per_user is not None
        return "user" if user_level else "sequence"

    def train_config(self) -> dict[str, Any]:
        """The config block that trains exactly this configuration with ``snakemake private_model``; {} where
        its σ could not be priced (no run can train it at that price)."""
        if not self.priced:
            return {}
        return train_config(self.model, self.batch_size, self.iterations, self.learning_rate, self.epsilon,
                            self.delta, self.data_budget, self.compute, self.init_checkpoint, self.mechanism,
                            self.examples_per_user)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": None if self.model is None else self.model.to_json(), "model_size": self.model_size,
            "batch_size": self.batch_size, "microbatch_size": self.microbatch_size, "iterations": self.iterations,
            "seq_len": self.seq_len, "compute": self.compute, "tokens": self.tokens,
            "tokens_per_parameter": self.tokens / self.model_size, "epsilon": self.epsilon, "delta": self.delta,
            "sigma": self.sigma if self.priced else None,
            "noise_batch_ratio": self.noise_batch_ratio if self.priced else None, "sampling": self.sampling,
            "mechanism": self.mechanism, "privacy_unit": self.privacy_unit,
            "sequences_per_unit": self.sequences_per_unit, "examples_per_user": self.examples_per_user,
            "sampler": None if self.price is None else self.price.sampler,
            "adjacency": None if self.price is None else self.price.adjacency,
            "accounting_event": None if self.price is None else self.price.event.to_json(),
            "truncation": None if self.price is None else self.price.truncation,
            "accountant": self.accountant, "predicted_loss": self.predicted_loss,
            "seed_only_interval_90": _pair(self.seed_only_interval),
            "calibrated_interval_90": _pair(self.calibrated_interval), "learning_rate": self.learning_rate,
            "model_note": self.model_note or None, "init_checkpoint": self.init_checkpoint,
            "decision_rule": None if self.decision is None else self.decision.to_json(),
            "train_config": self.train_config() or None,
            "interpolated_sigma": None if self.priced else {
                "sigma": self.sigma, "noise_batch_ratio": self.noise_batch_ratio, "why_not_priced": self.unpriced,
                "note": "the σ table's interpolation: the law's prediction reads it, no run can train with it"}}


@dataclass(frozen=True)
class Answer:
    """The answer to one (compute, privacy, data) question: see the module docstring."""

    query: dict[str, Any]
    runnable: Runnable
    optimum: Configuration
    near_optimal: dict[str, tuple[float, float]]
    near_optimal_count: int
    candidates: int
    candidates_without_answer: dict[str, int]
    optimum_interval: dict[str, tuple[float, float]] | None
    interval_note: str
    calibration: Calibration | None
    calibration_note: str
    flags: tuple[Flag, ...]
    saturation: dict[str, Any] | None
    accounting: str
    sampling: str
    loss_units: str
    provenance: dict[str, Any]
    correction: PhysicalBatchCorrection | None = None
    per_length: list[dict[str, Any]] | None = None
    lengths_without_answer: dict[int, str] = field(default_factory=dict)
    inference: InferenceAware | None = None
    # With allow_extrapolation: why the same query without it is refused ("" when it is answered).
    refusal: str = ""
    # What computes the answer's predicted margin over each rule of thumb (dpscaling.law.margins), on first use:
    # pricing three more configurations that a plan's queries never read. None across lengths (no margins).
    margins_of: Callable[[], tuple] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def margins(self) -> tuple:
        """The answer's predicted margin over each rule of thumb (:class:`dpscaling.law.margins.Margin`)."""
        return () if self.margins_of is None else tuple(self.margins_of())

    @property
    def predicted_loss(self) -> float:
        """The runnable configuration's predicted loss (see :attr:`loss_units`)."""
        return self.runnable.predicted_loss

    @property
    def seed_only_interval(self) -> tuple[float, float] | None:
        return self.runnable.seed_only_interval

    @property
    def calibrated_interval(self) -> tuple[float, float] | None:
        return self.runnable.calibrated_interval

    @property
    def warning(self) -> str:
        """Every flag in one line for a person ("" when none)."""
        return one_line(list(self.flags))

    @property
    def epsilon_covers(self) -> dict[str, Any]:
        """What ε covers of a run trained with this answer, and where the law's data-dependent choices (its
        configuration, learning rate, vocabulary) were fitted: :func:`dpscaling.privacy.epsilon_scope.epsilon_scope` of
        the bundle's record."""
        return epsilon_scope(choices_of_provenance(self.provenance))

    def to_json(self) -> dict[str, Any]:
        """What ``dpscaling query --json`` prints: the runnable answer at the top level, the law's continuous
        optimum under ``law_optimum``."""
        runnable = self.runnable.to_json()
        optimum = {**self.optimum.to_json(), "near_optimal_count": self.near_optimal_count,
                   "tolerance": self.query["tolerance"], "candidates": self.candidates,
                   "candidates_without_answer": self.candidates_without_answer}
        for column, (low, high) in self.near_optimal.items():
            optimum[f"near_optimal_{_snake(column)}"] = [low, high]
        if self.optimum_interval:
            for key, pair in self.optimum_interval.items():
                optimum[key] = list(pair)
        calibration: Any = self.calibration_note
        if self.calibration is not None:
            # half_width: the interval's at this answer; q: at a measured point (the same with a constant scale).
            calibration = {"method": self.calibration.method, "mode": self.calibration.mode,
                           "level": self.calibration.level, "guaranteed_level": self.calibration.guaranteed_level,
                           "half_width": (None if self.runnable.calibrated_interval is None else
                                          self.calibration.half_width_at(self.runnable.model_size,
                                                                         self.runnable.iterations,
                                                                         self.runnable.noise_batch_ratio)),
                           "q": self.calibration.half_width,
                           "interval_scale": "constant" if self.calibration.scale is None else "distance",
                           "sets": len(self.calibration.sets), "iterations_from": self.calibration.iterations_from}
        document = {
            "query": self.query, **{key: runnable[key] for key in runnable if key != "train_config"},
            "loss_units": self.loss_units, "interval": self.interval_note, "calibration": calibration,
            "flags": [flag.to_json() for flag in self.flags], "warning": self.warning or None,
            "law_optimum": optimum, "saturation": self.saturation,
            "physical_batch_correction": ("off (the paper's law)" if self.correction is None
                                          else self.correction.to_json()),
            "train_config": runnable["train_config"], "accounting": self.accounting, "sampling_rule": self.sampling,
            "epsilon_covers": self.epsilon_covers, "provenance": self.provenance}
        if self.per_length is not None:
            document["per_length"] = self.per_length
            document["lengths_without_answer"] = {str(k): v for k, v in self.lengths_without_answer.items()}
        if self.inference is not None:
            document["inference_aware"] = _inference_json(self.inference)
        if self.query["allow_extrapolation"]:
            document["refused_without_allow_extrapolation"] = self.refusal or None
        document["margins_over_rules_of_thumb"] = [margin.to_json() for margin in self.margins]
        return document


def _pair(values) -> list[float] | None:
    return None if values is None else [float(values[0]), float(values[1])]


def _snake(column: str) -> str:
    return column.lower().replace(" / ", "_per_").replace(" ", "_")


def _inference_json(served: InferenceAware) -> dict[str, Any]:
    columns = {"model_size": MODEL_SIZE, "batch_size": BATCH_SIZE, "iterations": ITERATIONS, "sigma": SIGMA,
               "noise_batch_ratio": NOISE_BATCH_RATIO, "predicted_loss": CROSS_ENTROPY,
               "training_flops": "Training FLOPs", "inference_flops": "Inference FLOPs", "total_flops": "Total FLOPs"}
    return {"inference_tokens": served.inference_tokens,
            **{key: float(served.choice[column]) for key, column in columns.items()},
            "compute_optimal_total_flops": float(served.compute_optimal["Total FLOPs"]),
            "candidates": served.candidates, "candidates_without_answer": served.unanswered}
