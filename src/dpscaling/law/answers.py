"""The practitioner's question, answered from a law (paper §3.4, "Using the Fitted Functions"), as a typed
object a person can act on (docs/api.md, docs/query.md)::

    import dpscaling

    law = dpscaling.load_law("results/default/law/bundle")  # dpscaling.law.loading
    answer = law.query(compute=1e13, epsilon=4, users=1e5)
    answer.runnable.batch_size, answer.runnable.iterations, answer.predicted_loss, answer.flags

An :class:`Answer` carries the law's compute-optimal configuration (the paper's continuous search,
:func:`dpscaling.law.queries.compute_optimal`), the same configuration made runnable
(:mod:`dpscaling.law.runnable`: a model shape, whole microbatches and steps, σ recomputed exactly at the
asked ε and δ, its predicted loss and both 90% intervals, the config that trains it), every range flag
(:mod:`dpscaling.law.range_checks`; beyond the validated extrapolation the answer is refused unless
``allow_extrapolation``), the saturating compute when the budget is past it, and what the loss means
and where the law came from. ``dpscaling query`` prints exactly this object.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.accounting import pricing
from dpscaling.accounting.pricing import Price
from dpscaling.errors import UserError
from dpscaling.law.bootstrap import Replicates, band, interval, optimum_intervals
from dpscaling.law.bundle import Bundle
from dpscaling.law.calibration import Calibration, calibrated_interval
from dpscaling.law.decision import Decision, DecisionRule, rule_named
from dpscaling.law.columns import (
    BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO,
    PRIVACY_BUDGET, REASON, SIGMA)
from dpscaling.law.interpolation import reason_counts
from dpscaling.law.noise import SigmaSource
from dpscaling.law.physical_batch import PhysicalBatchCorrection
from dpscaling.law.queries import (
    DECISION_SCORE, DEFAULT_BATCH_SIZES, DEFAULT_TOLERANCE, NO_SIGMA, REFERENCE_BAND_TOLERANCE, SATURATION_TOLERANCE, ComputeOptimal,
    InferenceAware, best_loss_per_compute, compute_cost, compute_optimal,
    evaluate_configurations, inference_aware, model_size_grid, saturating_compute)
from dpscaling.law.range_checks import (
    ExtrapolationRefused, Flag, ValidatedRanges, data_flags, iteration_flags, model_size_flags, noise_flags,
    one_line, point_optimum_flags, refusal, saturation_flag, sigma_flags)
from dpscaling.law.runnable import (
    ModelShape, best_learning_rate, nearest_measured, nearest_shape, train_config, whole_batch, whole_steps)
from dpscaling.law.sequence_length import (
    PRIVACY_UNITS, SEQ_LEN, DataBudget, compute_optimal_across_lengths, length_tradeoff)

CONFIG_COLUMNS = [MODEL_SIZE, BATCH_SIZE, ITERATIONS, PRIVACY_BUDGET, DATA_BUDGET]
# Budgets of the saturation scan: C·2^(-k/2) down to the law's smallest budget (at most 40 octaves), one
# octave first (most queries stop there: their best loss still falls with compute), then chunks twice as
# deep each time, up to 8 octaves.
SATURATION_STEPS_PER_OCTAVE = 2
SATURATION_OCTAVES = 40
SATURATION_FIRST_CHUNK_OCTAVES = 1
SATURATION_CHUNK_OCTAVES = 8
# The search's best candidates made runnable, in order, until one stays inside the law's range.
RUNNABLE_CANDIDATES = 8
SKIPPED_OPTIMUM_INTERVAL = "not computed (optimum_interval=False)"
# Per-budget optima a law remembers across queries (:meth:`ScalingLaw._remembered_optima`) before forgetting them.
OPTIMA_REMEMBERED = 100_000


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

    @property
    def tokens(self) -> float:
        return self.batch_size * self.iterations * self.seq_len

    @property
    def tokens_per_parameter(self) -> float:
        return self.tokens / self.model_size

    @classmethod
    def from_row(cls, row: pd.Series, seq_len: float) -> Configuration:
        m, b, t = float(row[MODEL_SIZE]), float(row[BATCH_SIZE]), float(row[ITERATIONS])
        return cls(m, b, t, int(seq_len), float(row[SIGMA]), float(row[NOISE_BATCH_RATIO]),
                   float(compute_cost(m, b, t, seq_len)), float(row[CROSS_ENTROPY]))

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
    mechanism: str = "dpsgd"
    decision: Decision | None = None  # the decision rule's score of this configuration
    measured_model: str | None = None  # the law's measured model of exactly this size, when the answer is one

    @property
    def compute(self) -> float:
        return float(compute_cost(self.model_size, self.batch_size, self.iterations, self.seq_len))

    @property
    def tokens(self) -> float:
        return float(self.batch_size) * self.iterations * self.seq_len

    def train_config(self) -> dict[str, Any]:
        """The config block that trains exactly this configuration with ``snakemake private_model``."""
        return train_config(self.model, self.batch_size, self.iterations, self.learning_rate, self.epsilon,
                            self.delta, self.data_budget, self.compute, self.init_checkpoint, self.mechanism)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": None if self.model is None else self.model.to_json(), "model_size": self.model_size,
            "batch_size": self.batch_size, "microbatch_size": self.microbatch_size, "iterations": self.iterations,
            "seq_len": self.seq_len, "compute": self.compute, "tokens": self.tokens,
            "tokens_per_parameter": self.tokens / self.model_size, "epsilon": self.epsilon, "delta": self.delta,
            "sigma": self.sigma, "noise_batch_ratio": self.noise_batch_ratio, "sampling": self.sampling,
            "mechanism": self.mechanism, "sampler": None if self.price is None else self.price.sampler,
            "adjacency": None if self.price is None else self.price.adjacency,
            "accounting_event": None if self.price is None else self.price.event.to_json(),
            "accountant": self.accountant, "predicted_loss": self.predicted_loss,
            "seed_only_interval_90": _pair(self.seed_only_interval),
            "calibrated_interval_90": _pair(self.calibrated_interval), "learning_rate": self.learning_rate,
            "model_note": self.model_note or None, "init_checkpoint": self.init_checkpoint,
            "decision_rule": None if self.decision is None else self.decision.to_json(),
            "train_config": self.train_config() or None}


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
            "provenance": self.provenance}
        if self.per_length is not None:
            document["per_length"] = self.per_length
            document["lengths_without_answer"] = {str(k): v for k, v in self.lengths_without_answer.items()}
        if self.inference is not None:
            document["inference_aware"] = _inference_json(self.inference)
        if self.query["allow_extrapolation"]:
            document["refused_without_allow_extrapolation"] = self.refusal or None
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


@dataclass(frozen=True)
class _Surface:
    """The law at one sequence length: its loss, ranges, replicates and calibration."""

    seq_len: int
    loss: Callable
    iteration_bounds: tuple[float, float]
    model_size_range: tuple[float, float]
    replicates: Replicates | None
    calibration: Calibration | None
    calibration_note: str


class ScalingLaw:
    """A law bundle (or a bare law directory) ready to answer: :meth:`query`, :meth:`evaluate`, :meth:`info`."""

    def __init__(self, bundle: Bundle, accounting: tuple[Any, Any] | None = None):
        self.bundle = bundle
        self._accounting = accounting  # the authors' accounting tables given by the caller
        self._sources: dict[float | None, SigmaSource] = {}
        self._optima: dict[tuple, pd.Series | None] = {}  # per-budget optima of saturation scans

    @property
    def ranges(self) -> ValidatedRanges:
        return self.bundle.ranges

    @property
    def seq_len(self) -> int:
        return int(self.bundle.law.seq_len)

    @property
    def mechanism(self) -> str:
        """The noise mechanism whose price σ̄ is (dpscaling.mechanisms)."""
        return self.bundle.law.mechanism

    def info(self) -> dict[str, Any]:
        """The bundle's manifest: provenance, validated ranges, loss units, contents."""
        return self.bundle.manifest()

    def sigma_source(self, delta: float | None = None, progress: Callable[[str], None] | None = None) -> SigmaSource:
        """σ(ε, T, q) at ``delta`` (None: the bundle's δ): the bundle's table, else built on demand."""
        if delta not in self._sources:
            source = self.bundle.law.sigma_source(self._accounting, delta=delta, progress=progress)
            if self.bundle.root is not None and "accounting table" in source.description:
                # the bundle's own table, named by its place in the bundle: the answer is the same wherever it lies
                source = SigmaSource(source.sigma, source.delta, source.sampling,
                                     f"the bundle's σ table (sigma_table.parquet, {source.sampling} rule, "
                                     f"δ = {source.delta:g})")
            self._sources[delta] = source
        return self._sources[delta]

    def shape_near(self, model_size: float, seq_len: int | None = None,
                   bounds: tuple[float, float] | None = None) -> ModelShape:
        """The model shape of the law's family whose parameter count at ``seq_len`` (None: the law's S) is
        nearest ``model_size``, among counts inside ``bounds`` when any is (:func:`nearest_shape`)."""
        shapes = self.bundle.shapes
        if not shapes:
            raise UserError("no model shape: the law records no shapes of its measured models")
        if self.pretrained:  # only a pretrained model has weights to start from
            started = [shape for shape in shapes if shape.name in self.pretrained]
            if not started:
                raise UserError(f"no model shape: none of the law's pretrained models {sorted(self.pretrained)} "
                                "has a recorded shape")
            return min(started, key=lambda shape: abs(math.log(shape.param_count / float(model_size))))
        from dpscaling.models.family import family_named

        vocab = self.bundle.provenance.get("vocab_size") or family_named(shapes[0].family).vocab_size
        return nearest_shape(float(model_size), shapes, int(vocab), int(seq_len or self.seq_len), bounds=bounds,
                             measured_seq_len=self.seq_len)

    @property
    def pretrained(self) -> dict[str, str]:
        """A fine-tuning law's pretrained checkpoints, model name → checkpoint directory ({} for a law of
        training from scratch)."""
        return dict(self.bundle.provenance.get("pretrained") or {})

    @functools.cached_property
    def measured_sizes(self) -> pd.Series:
        """The law's measured models: name → Model Size."""
        return self.bundle.law.grid.drop_duplicates(MODEL).set_index(MODEL)[MODEL_SIZE]

    def _measured_model(self, model_size: float) -> str | None:
        """The measured model of exactly ``model_size`` parameters, if any."""
        sizes = self.measured_sizes
        hits = sizes.index[np.isclose(sizes.to_numpy(float), model_size, rtol=1e-9, atol=0.5)]
        return str(hits[0]) if len(hits) else None

    def candidate_sizes(self, model_size_range: tuple[float, float]) -> np.ndarray:
        """The model sizes a query searches: a grid over ``model_size_range``; for a fine-tuning law only the
        pretrained models' sizes inside it (a size between them has no weights to start from)."""
        if not self.pretrained:
            return model_size_grid(*model_size_range)
        sizes = self.measured_sizes
        low, high = model_size_range
        inside = sorted(float(sizes[name]) for name in self.pretrained
                        if name in sizes and low <= float(sizes[name]) <= high)
        if not inside:
            raise UserError(f"--model-size-range {low:g}..{high:g}: no pretrained model of this fine-tuning law "
                            f"lies inside it ({', '.join(f'{n} {sizes[n]:g}' for n in self.pretrained if n in sizes)})")
        return np.array(inside)

    def default_tolerance(self) -> float:
        return REFERENCE_BAND_TOLERANCE if self.bundle.law.settings.reference_compatible else DEFAULT_TOLERANCE

    # ------------------------------------------------------------------------------------------ query

    def query(self, compute: float, epsilon: float, users: float | None = None, tokens: float | None = None, *,
              delta: float | None = None, privacy_unit: str | None = None, seq_len: float | None = None,
              tolerance: float | None = None, model_size_range: tuple[float, float] | None = None,
              physical_batch_correction: bool | PhysicalBatchCorrection = False,
              allow_extrapolation: bool = False, inference_tokens: float | None = None,
              microbatch_size: int | None = None, optimum_interval: bool = True,
              count_pretraining: bool = False, progress: Callable[[str], None] | None = None,
              decision_rule: str | DecisionRule | None = None, sampling: str | None = None,
              models: Sequence[str] | None = None) -> Answer:
        """The compute-optimal configuration for compute ``compute`` FLOPs, privacy budget (``epsilon``,
        ``delta``) and a data budget of ``users`` privacy units or ``tokens`` tokens (one sequence per unit).

        Raises :class:`~dpscaling.law.range_checks.ExtrapolationRefused` when the optimum's T lies beyond
        the extrapolation the law's validation measured (unless ``allow_extrapolation``), and UserError for
        a budget the law cannot answer at all. ``optimum_interval=False`` skips the spread of the bootstrap
        replicates' own optima (``optimum_interval``, the slowest part of an answer; a sweep of many
        budgets leaves it out); the answer's loss, intervals and flags do not depend on it.
        ``count_pretraining`` (a fine-tuning law only): ``compute`` also pays for each pretrained model's
        public pretraining (:meth:`_query_counting_pretraining`). ``decision_rule`` picks the runnable
        configuration among the candidates (:mod:`dpscaling.law.decision`; default ``calibrated_upper``);
        ``sampling`` the rule the runnable answer's σ is priced under (default the law's; ``poisson``: what a
        private run trains; the search reads the law's table under the law's rule, and the best
        :data:`RUNNABLE_CANDIDATES` are priced);
        ``models`` restricts the search to those measured models (a run's own, for ``private_model``).
        """
        if not (compute > 0 and epsilon > 0):
            raise UserError(f"--compute and --epsilon must be positive, got {compute!r} and {epsilon!r}")
        rule = rule_named(decision_rule)
        if count_pretraining:
            return self._query_counting_pretraining(
                compute, epsilon, users=users, tokens=tokens, delta=delta, privacy_unit=privacy_unit,
                seq_len=seq_len, tolerance=tolerance, model_size_range=model_size_range,
                physical_batch_correction=physical_batch_correction, allow_extrapolation=allow_extrapolation,
                inference_tokens=inference_tokens, microbatch_size=microbatch_size,
                optimum_interval=optimum_interval, progress=progress, decision_rule=rule, sampling=sampling,
                models=models)
        if (users is None) == (tokens is None):
            raise UserError("give the data budget as exactly one of --users (privacy units) and --tokens")
        unit = privacy_unit or ("sequence" if tokens is not None else "user")
        if unit not in PRIVACY_UNITS:
            raise UserError(f"--privacy-unit: must be one of {PRIVACY_UNITS}, got {unit!r}")
        data = DataBudget(unit, tokens, users)
        tolerance = self.default_tolerance() if tolerance is None else float(tolerance)
        # The search reads the law's table under its own rule (the table refuses the Poisson branch alone where
        # it cannot interpolate it); the runnable answer is priced exactly under ``sampling``.
        source = self.sigma_source(delta, progress)
        correction = self._correction(physical_batch_correction)
        lengths = self.bundle.lengths
        if lengths is not None and (seq_len is None or float(seq_len) != self.seq_len or
                                    self.seq_len not in lengths.across.lengths):
            if models is not None:
                raise UserError("models: a query across sequence lengths searches each length's own models")
            return self._query_across_lengths(compute, epsilon, data, seq_len, tolerance, source, correction,
                                              allow_extrapolation, microbatch_size, model_size_range,
                                              optimum_interval, rule, sampling)
        if seq_len is not None and float(seq_len) != self.seq_len:
            raise UserError(f"--seq-len {seq_len:g}: this law was fitted at S = {self.seq_len} only")
        surface = self._surface(self.seq_len)
        units = data.units(self.seq_len)
        sizes = (self.sizes_of(models) if models is not None
                 else self.candidate_sizes(model_size_range or surface.model_size_range))
        answer = compute_optimal(compute, epsilon, units, surface.loss, source.sigma, surface.seq_len, sizes,
                                 surface.iteration_bounds, tolerance, correction=correction,
                                 rank=self._rank(rule, surface))
        self._remember_optimum(answer, compute, epsilon, units, surface, sizes, source, correction)
        self._refuse_beyond_validation(answer, compute, epsilon, units, surface, sizes, source, tolerance,
                                       correction, allow_extrapolation)
        interval_bands, note = (self._optimum_interval(answer, surface, correction)
                                if optimum_interval else (None, SKIPPED_OPTIMUM_INTERVAL))
        inference = None
        if inference_tokens is not None:
            inference = inference_aware(compute, epsilon, units, surface.loss, source.sigma, surface.seq_len, sizes,
                                        surface.iteration_bounds, inference_tokens, correction=correction)
        saturation = self._saturation(compute, epsilon, units, surface, sizes, source, correction)
        return self._answer(answer, compute, epsilon, data, units, surface, sizes, source, correction,
                            allow_extrapolation, microbatch_size, tolerance, interval_bands, note, saturation,
                            rule, inference=inference, price_rule=sampling)

    def sizes_of(self, models: Sequence[str]) -> np.ndarray:
        """The Model Size of each of ``models`` the law measured (refused when none is)."""
        measured = self.measured_sizes
        inside = sorted(float(measured[name]) for name in dict.fromkeys(models) if name in measured)
        if not inside:
            raise UserError(f"models: none of {list(models)} is a model of this law (it measured "
                            f"{sorted(measured.index)})")
        return np.array(inside)

    @staticmethod
    def _rank(rule: DecisionRule, surface: _Surface) -> Callable[[pd.DataFrame], np.ndarray]:
        """The decision rule's score of a search's answered rows (:mod:`dpscaling.law.decision`)."""
        def rank(rows: pd.DataFrame) -> np.ndarray:
            return rule.scores(rows[CROSS_ENTROPY].to_numpy(float), surface.calibration,
                               rows[MODEL_SIZE].to_numpy(float), rows[ITERATIONS].to_numpy(float),
                               rows[NOISE_BATCH_RATIO].to_numpy(float))
        return rank

    def _query_counting_pretraining(self, compute: float, epsilon: float, *, model_size_range=None,
                                    **query: Any) -> Answer:
        """The best of the pretrained models, each answered at the compute its public pretraining leaves:
        C − 6·M·D_pre (D_pre its pretraining tokens, recorded in the bundle); the answer's query says how
        ``compute`` split. Refused for a law of training from scratch or one without the pretraining's record."""
        tokens_spent = self.bundle.provenance.get("pretraining_tokens") or {}
        if not self.pretrained:
            raise UserError("--count-pretraining: this law trains from scratch (no pretrained checkpoints)")
        unknown = sorted(set(self.pretrained) - set(tokens_spent))
        if unknown:
            raise UserError(f"--count-pretraining: the bundle records no pretraining for {unknown} (a checkpoint "
                            "given in finetune.checkpoints): its cost is unknown")
        sizes = self.measured_sizes
        low, high = model_size_range or (0.0, math.inf)
        answers, refusals = [], []
        for name in self.pretrained:
            size = float(sizes[name])
            if not low <= size <= high:
                continue
            pretraining = float(compute_cost(size, 1.0, float(tokens_spent[name]), 1.0))
            left = compute - pretraining
            if left <= 0:
                refusals.append(f"{name}: its pretraining alone costs {pretraining:.3g} FLOPs")
                continue
            try:
                answer = self.query(left, epsilon, model_size_range=(size, size), **query)
            except UserError as error:
                refusals.append(f"{name} at the {left:.3g} FLOPs its pretraining leaves: {error}")
                continue
            answers.append((answer, pretraining))
        if not answers:
            raise UserError(f"--count-pretraining: no pretrained model answers {compute:.3g} FLOPs: "
                            + "; ".join(refusals))
        answer, pretraining = min(answers, key=lambda pair: pair[0].runnable.decision.score)
        split = {"compute": float(compute), "pretraining_compute": pretraining,
                 "finetuning_compute": float(compute) - pretraining}
        return dataclasses.replace(answer, query={**answer.query, **split})

    def _query_across_lengths(self, compute, epsilon, data: DataBudget, seq_len, tolerance, source, correction,
                              allow_extrapolation, microbatch_size, model_size_range,
                              optimum_interval: bool = True, rule: DecisionRule | None = None,
                              price_rule: str | None = None) -> Answer:
        """The best (M, S, B, T) over the bundle's lengths (or at ``seq_len``, interpolated in log S)."""
        lengths = self.bundle.lengths
        if correction is not None:
            raise UserError("the physical-batch correction was fitted at the primary length only; drop it for a "
                            "query across sequence lengths")
        if model_size_range is not None:
            raise UserError("--model-size-range applies to a law of one length; a query across lengths searches "
                            "each length's own model range")
        found = compute_optimal_across_lengths(compute, epsilon, lengths.across, source.sigma, data.privacy_unit,
                                               tokens=data.tokens, users=data.users, seq_len=seq_len,
                                               tolerance=tolerance)
        surface = self._surface(found.seq_len)
        units = data.units(found.seq_len)
        sizes = model_size_grid(*surface.model_size_range)
        self._refuse_beyond_validation(found.answer, compute, epsilon, units, surface, sizes, source, tolerance,
                                       None, allow_extrapolation)
        bands, note = None, lengths.note
        if not optimum_interval:
            note = SKIPPED_OPTIMUM_INTERVAL
        elif lengths.replicates:
            chosen = None if seq_len is None else [seq_len]
            row = length_tradeoff(lengths.across, source.sigma, np.array([compute]), epsilon, data,
                                  DEFAULT_BATCH_SIZES, lengths.replicates, lengths=chosen).iloc[0]
            bands = {"seed_only_interval_90": (float(row[band(CROSS_ENTROPY)[0]]), float(row[band(CROSS_ENTROPY)[1]])),
                     "seq_len_90": (float(row[band(SEQ_LEN)[0]]), float(row[band(SEQ_LEN)[1]]))}
            note = f"{note} (seed noise only)"
        per_length = [{"seq_len": int(row[SEQ_LEN]), "units": float(row[DATA_BUDGET]),
                       "predicted_loss": float(row[CROSS_ENTROPY]), "model_size": float(row[MODEL_SIZE]),
                       "batch_size": float(row[BATCH_SIZE]), "iterations": float(row[ITERATIONS])}
                      for _, row in found.per_length.iterrows()]
        return self._answer(found.answer, compute, epsilon, data, units, surface, sizes, source, None,
                            allow_extrapolation, microbatch_size, tolerance, bands, note, None, rule_named(rule),
                            per_length=per_length, lengths_without_answer=found.unanswered_lengths,
                            price_rule=price_rule)

    # --------------------------------------------------------------------------------- the parts

    def _correction(self, wanted: bool | PhysicalBatchCorrection) -> PhysicalBatchCorrection | None:
        if isinstance(wanted, PhysicalBatchCorrection):
            return wanted
        if not wanted:
            return None
        if self.bundle.correction is None:
            raise UserError("--physical-batch-correction: this law carries no physical-batch correction (the run "
                            "did not enable fit.physical_batch_correction); pass its correction.json instead")
        return self.bundle.correction

    def _surface(self, seq_len: int) -> _Surface:
        bundle = self.bundle
        lengths = bundle.lengths
        at_primary = seq_len == self.seq_len and (lengths is None or self.seq_len in lengths.laws)
        if lengths is not None and not (at_primary and bundle.replicates is not None):
            iteration_bounds, model_range = lengths.across.bounds_at(float(seq_len))
            replicates = (Replicates([replicate.loss_at(float(seq_len)) for replicate in lengths.replicates])
                          if lengths.replicates else None)
            loss = lengths.across.loss_at(float(seq_len))
        else:
            law = bundle.law
            iteration_bounds, model_range, replicates, loss = (law.iteration_bounds(), law.model_size_range(),
                                                                bundle.replicates, law.loss)
        if at_primary:
            calibration, note = bundle.calibration, bundle.notes.get("calibration", "")
        else:
            calibration, note = None, (f"no calibrated interval at S = {seq_len}: validate calibrates the law at "
                                       f"S = {self.seq_len} only")
        if calibration is not None and not math.isfinite(calibration.half_width):
            calibration, note = None, (f"no calibrated interval: its calibration ({Path(calibration.source).name}) "
                                       "pools no answered held-out set")
        return _Surface(int(seq_len), loss, iteration_bounds, model_range, replicates, calibration,
                        note or "no calibration in this law")

    def _refuse_beyond_validation(self, answer: ComputeOptimal, compute, epsilon, units, surface: _Surface, sizes,
                                  source, tolerance, correction, allow_extrapolation: bool) -> None:
        """The policy (:mod:`dpscaling.law.range_checks`): an optimum beyond the validated T is refused, naming
        the best configuration inside the validated range at this budget and the largest budget whose
        optimum stays inside it."""
        flag = refusal(iteration_flags(_chosen_iterations(answer), self.ranges, allow_extrapolation))
        if flag is None:
            return
        limit = min(self.ranges.validated_iterations, surface.iteration_bounds[1])
        inside_bounds = (surface.iteration_bounds[0], limit)
        within = None
        if limit > surface.iteration_bounds[0]:
            try:
                within = compute_optimal(compute, epsilon, units, surface.loss, source.sigma, surface.seq_len, sizes,
                                         inside_bounds, tolerance, correction=correction).optimum
            except UserError:
                within = None
        parts = []
        if within is not None:
            best = Configuration.from_row(within, surface.seq_len)
            parts.append(f"inside it the best at this budget is M = {best.model_size:,.0f}, B = {best.batch_size:,.0f}, "
                         f"T = {best.iterations:,.0f}, predicted loss {best.predicted_loss:.4g} (the extrapolated "
                         f"optimum: {float(answer.optimum[CROSS_ENTROPY]):.4g})")
        else:
            parts.append("no configuration at this budget stays inside it")
        smaller = self._largest_budget_inside(compute, epsilon, units, surface, sizes, source, correction, limit)
        if smaller is not None:
            parts.append(f"the largest budget whose optimum stays inside it is about {smaller.compute:.3g} FLOPs "
                         f"(M = {smaller.model_size:,.0f}, B = {smaller.batch_size:,.0f}, T = {smaller.iterations:,.0f}, "
                         f"predicted loss {smaller.predicted_loss:.4g})")
        raise ExtrapolationRefused(
            f"{flag.message}. Refused: {'; '.join(parts)}; --allow-extrapolation answers anyway, flagged "
            "(docs/query.md)", answer=answer, within=within)

    def _largest_budget_inside(self, compute, epsilon, units, surface: _Surface, sizes, source, correction,
                               limit: float) -> Configuration | None:
        """The largest budget C·2^(-k/2) below C whose compute-optimal T is at most ``limit``, or None."""
        for _, per_compute in self._optima_below(compute, epsilon, units, surface, sizes, source, correction,
                                                 first=1):
            inside = per_compute[per_compute[ITERATIONS] <= limit * (1 + 1e-9)]
            if len(inside):  # chunks come highest budget first: the first hit holds the largest
                return Configuration.from_row(inside.loc[inside[COMPUTE].idxmax()], surface.seq_len)
        return None

    def _optima_below(self, compute, epsilon, units, surface: _Surface, sizes, source, correction, first: int = 0):
        """The compute-optimal configuration of each budget C·2^(-k/2), k from ``first`` down to the law's
        smallest budget (at most :data:`SATURATION_OCTAVES` octaves), one chunk at a time
        (:data:`SATURATION_FIRST_CHUNK_OCTAVES`, then twice as deep up to :data:`SATURATION_CHUNK_OCTAVES`
        octaves): (budgets, their
        :func:`dpscaling.law.queries.best_loss_per_compute` frame) per chunk, highest budgets first; callers
        stop as soon as they have what they need."""
        lowest = float(compute_cost(sizes[0], DEFAULT_BATCH_SIZES[0], surface.iteration_bounds[0], surface.seq_len))
        deepest = int(math.floor(min(SATURATION_OCTAVES, max(0.0, math.log2(compute / lowest)))
                                 * SATURATION_STEPS_PER_OCTAVE))
        start, octaves = first, SATURATION_FIRST_CHUNK_OCTAVES
        while start <= deepest:
            stop = min(deepest, start + octaves * SATURATION_STEPS_PER_OCTAVE)
            octaves = min(2 * octaves, SATURATION_CHUNK_OCTAVES)
            budgets = compute * 2.0 ** (-np.arange(start, stop + 1) / SATURATION_STEPS_PER_OCTAVE)
            yield budgets, self._remembered_optima(budgets, epsilon, units, surface, sizes, source, correction)
            start = stop + 1

    @staticmethod
    def _scan(epsilon, units, surface: _Surface, sizes, source, correction) -> tuple:
        """What a saturation scan's optima depend on besides the budget."""
        return float(epsilon), float(units), surface.seq_len, hash(sizes.tobytes()), id(source), id(correction)

    @staticmethod
    def _budget_key(budget: float) -> float:
        return float(f"{budget:.12g}")

    def _remember_optimum(self, answer: ComputeOptimal, compute, epsilon, units, surface: _Surface, sizes, source,
                          correction) -> None:
        """The search's optimum is the saturation scan's row at its own budget (the same candidates)."""
        scan = self._scan(epsilon, units, surface, sizes, source, correction)
        self._optima[(scan, self._budget_key(compute))] = answer.optimum.copy()

    def _remembered_optima(self, budgets: np.ndarray, epsilon, units, surface: _Surface, sizes, source,
                           correction) -> pd.DataFrame:
        """:func:`best_loss_per_compute` at ``budgets``, each budget's row computed once per law: queries on a
        lattice of budgets a factor 2^(1/2) apart (a sweep, :mod:`dpscaling.explorer`) share their saturation
        scans. Budgets are matched to 12 significant digits (the same budget reached by different products)."""
        scan = self._scan(epsilon, units, surface, sizes, source, correction)
        keys = [(scan, self._budget_key(budget)) for budget in budgets]
        missing = [budget for budget, key in zip(budgets, keys) if key not in self._optima]
        if missing:
            if len(self._optima) > OPTIMA_REMEMBERED:
                self._optima.clear()
            found = best_loss_per_compute(np.array(missing), epsilon, units, surface.loss, source.sigma,
                                          surface.seq_len, sizes, surface.iteration_bounds, correction=correction)
            rows = {self._budget_key(row[COMPUTE]): row for _, row in found.iterrows()}
            for budget in missing:
                self._optima[(scan, self._budget_key(budget))] = rows.get(self._budget_key(budget))
        rows = [self._optima[key] for key in keys if self._optima[key] is not None]
        if not rows:
            return pd.DataFrame(columns=[COMPUTE, CROSS_ENTROPY])
        return pd.DataFrame(rows).reset_index(drop=True).infer_objects()

    def _optimum_interval(self, searched: ComputeOptimal, surface: _Surface, correction):
        """The seed-only 90% band of the optimum (each replicate's own optimum), or why there is none."""
        if surface.replicates is None:
            return None, self.bundle.notes.get("bootstrap", "no interval: no bootstrap replicates in this law")
        candidates = searched.evaluated  # the search's candidates: σ is the same for every replicate
        table = optimum_intervals(candidates.dropna(subset=[NOISE_BATCH_RATIO]), surface.replicates,
                                  correction=correction)
        count = len(surface.replicates)
        if table.empty:
            return None, f"no interval: none of the {count} replicates answers this query"
        row = table.iloc[0]
        bands = {key: (float(row[band(column)[0]]), float(row[band(column)[1]])) for column, key in (
            (CROSS_ENTROPY, "seed_only_interval_90"), (MODEL_SIZE, "model_size_5_95"),
            (BATCH_SIZE, "batch_size_5_95"), (ITERATIONS, "iterations_5_95"))}
        return bands, f"90% over {count} bootstrap replicates (seed noise only)"

    def _saturation(self, compute, epsilon, units, surface: _Surface, sizes, source, correction):
        """The smallest budget ≤ C within the saturation tolerance of the best loss up to C (paper Table 2's
        saturating compute), over the budgets C·2^(-k/2), further down only while the lowest budget scanned
        is still within the tolerance."""
        frames, scanned = [], 0
        for budgets, chunk in self._optima_below(compute, epsilon, units, surface, sizes, source, correction):
            scanned += len(budgets)
            frames.append(chunk)
            per_compute = pd.concat([frame for frame in frames if len(frame)] or frames, ignore_index=True)
            if per_compute.empty:
                break
            row = saturating_compute(per_compute, SATURATION_TOLERANCE)
            if float(row[COMPUTE]) > float(budgets[-1]) * (1 + 1e-9):
                break  # the saturating budget lies above the lowest one scanned: found
        if per_compute.empty:
            return None
        row = saturating_compute(per_compute.sort_values(COMPUTE), SATURATION_TOLERANCE)
        return {"compute": float(row[COMPUTE]), "tolerance": SATURATION_TOLERANCE, "budgets_scanned": scanned,
                "resolution": f"2^(1/{SATURATION_STEPS_PER_OCTAVE}) in compute",
                "answer": Configuration.from_row(row, surface.seq_len).to_json()}

    def _runnable(self, answer: ComputeOptimal, compute, epsilon, units, surface: _Surface, source: SigmaSource,
                  correction, microbatch_size, rule: DecisionRule, price_rule: str) -> Runnable:
        """The search's leading candidates (best first by the decision rule, :data:`RUNNABLE_CANDIDATES`
        distinct after rounding) made runnable and re-priced exactly under ``price_rule``; the first with a
        finite predicted loss wins. Rounding can move a candidate out of the law's range (σ' below its smallest
        σ̄, say); the next then answers. Priced under another rule than the search's (``sampling="poisson"``
        where the law's is ``min``), the σ̄ of each candidate moves, so all :data:`RUNNABLE_CANDIDATES` are
        priced and the rule's lowest score wins."""
        leading = answer.leading
        if DECISION_SCORE not in leading:  # a search that ranked by loss (across lengths): rank it here
            leading = leading.assign(**{DECISION_SCORE: self._rank(rule, surface)(leading)}).sort_values(
                DECISION_SCORE, kind="stable")
        tried, first, answered = set(), None, []
        for _, row in leading.iterrows():
            runnable = self._rounded(row, compute, epsilon, units, surface, source, correction, microbatch_size,
                                     rule, price_rule)
            key = (runnable.model_size, runnable.batch_size, runnable.iterations)
            if key in tried:
                continue
            tried.add(key)
            first = first or runnable
            if math.isfinite(runnable.predicted_loss):
                if price_rule == source.sampling:
                    return runnable
                answered.append(runnable)
            if len(tried) >= RUNNABLE_CANDIDATES:
                break
        if answered:  # the first of equal scores: the search's order
            return min(answered, key=lambda found: found.decision.score)
        return dataclasses.replace(first, model_note=(
            f"{first.model_note + '; ' if first.model_note else ''}no rounded configuration of the {len(tried)} best "
            f"is inside the law's range (σ̄ = {first.noise_batch_ratio:.4g}, the law's σ̄ range "
            f"{self.ranges.noise_batch_ratio[0]:.4g}..{self.ranges.noise_batch_ratio[1]:.4g})"))

    def _rounded(self, optimum: pd.Series, compute, epsilon, units, surface: _Surface, source: SigmaSource,
                 correction, microbatch_size, rule: DecisionRule, price_rule: str) -> Runnable:
        """One candidate rounded (:mod:`dpscaling.law.runnable`): shape, whole microbatches and steps, σ priced
        exactly for the law's mechanism (:func:`dpscaling.accounting.pricing.price`), the rule's score."""
        bundle = self.bundle
        microbatch = int(microbatch_size or bundle.provenance.get("microbatch_size") or 1)
        shape, note = None, ""
        measured = self._measured_model(float(optimum[MODEL_SIZE])) if surface.seq_len == self.seq_len else None
        try:
            if measured is not None:  # a measured model as it stands (a search over the law's own models)
                shape = next((known for known in bundle.shapes if known.name == measured), None)
            else:
                shape = self.shape_near(float(optimum[MODEL_SIZE]), surface.seq_len, bounds=surface.model_size_range)
        except UserError as error:
            note = str(error)
        model_size = (shape.param_count if shape is not None and measured is None
                      else int(round(float(optimum[MODEL_SIZE]))))
        batch = whole_batch(float(optimum[BATCH_SIZE]), microbatch, units)
        low, high = surface.iteration_bounds
        steps = min(max(whole_steps(compute, model_size, batch, surface.seq_len), math.ceil(low)), math.floor(high))
        priced = None
        try:
            priced = pricing.price(self.mechanism, price_rule, epsilon, source.delta, units, batch, steps)
            sigma, branch = priced.sigma, priced.branch
            accountant = f"dpscaling.accounting.pricing ({self.mechanism}, {price_rule} rule)"
        except UserError as error:  # the accountant's hard corner: the table's σ, said so
            sigma = float(source.sigma(np.array([epsilon]), np.array([steps]), np.array([batch / units]))[0])
            branch, accountant = source.sampling, f"{source.description} (direct calibration refused: {error})"
        nbr = sigma / batch
        m, t, s = np.array([float(model_size)]), np.array([float(steps)]), np.array([nbr])
        loss = surface.loss(m, t, s)
        shift = 0.0 if correction is None else correction.shift(np.array([float(batch)]), s, m)
        predicted = float(np.asarray(loss - shift).ravel()[0])
        seed_only = None
        if surface.replicates is not None and math.isfinite(predicted):
            lows, highs = interval(surface.replicates.loss_matrix(m, t, s))
            seed_only = (float(np.ravel(lows - shift)[0]), float(np.ravel(highs - shift)[0]))
        calibrated = (calibrated_interval(predicted, surface.calibration, m[0], t[0], s[0])
                      if surface.calibration is not None and math.isfinite(predicted) else None)
        rate = None
        sizes = self.measured_sizes.to_dict()
        try:
            rate = best_learning_rate(bundle.law.grid, nearest_measured(float(model_size), sizes), nbr, steps)
        except UserError:
            rate = None
        start = self.pretrained.get(shape.name) if shape is not None else None
        decision = (rule.decide(predicted, surface.calibration, m[0], t[0], s[0]) if math.isfinite(predicted)
                    else None)
        return Runnable(shape, int(model_size), batch, steps, microbatch, surface.seq_len, float(epsilon),
                        float(source.delta), float(units), float(sigma), float(nbr), branch, accountant, predicted,
                        seed_only, calibrated, rate, note, start, priced, self.mechanism, decision, measured)

    def _answer(self, answer: ComputeOptimal, compute, epsilon, data: DataBudget, units, surface: _Surface, sizes,
                source: SigmaSource, correction, allow_extrapolation, microbatch_size, tolerance, bands, note,
                saturation, rule: DecisionRule, per_length=None, lengths_without_answer=None,
                inference=None, price_rule: str | None = None) -> Answer:
        optimum = Configuration.from_row(answer.optimum, surface.seq_len)
        runnable = self._runnable(answer, compute, epsilon, units, surface, source, correction, microbatch_size,
                                  rule, price_rule or source.sampling)
        flags = [*iteration_flags(float(runnable.iterations), self.ranges, allow_extrapolation),
                 *point_optimum_flags(optimum.iterations, float(runnable.iterations), self.ranges),
                 *model_size_flags(optimum.model_size, (float(sizes[0]), float(sizes[-1])), self.ranges.model_size),
                 *noise_flags(optimum.noise_batch_ratio, self.ranges.noise_batch_ratio),
                 *data_flags(runnable.batch_size, runnable.iterations, units, data.privacy_unit, self.ranges),
                 *sigma_flags(answer.unanswered.get(NO_SIGMA, 0), answer.candidates, answer.unpriced_sampling_rates,
                              optimum.batch_size / units)]
        if saturation is not None:
            flags += saturation_flag(compute, saturation["compute"], optimum.predicted_loss,
                                     saturation["answer"]["predicted_loss"], SATURATION_TOLERANCE)
            if not any(flag.code == "past_saturation" for flag in flags):
                saturation = None  # reported only when the budget is past it
        query = {"compute": float(compute), "epsilon": float(epsilon), "delta": float(source.delta),
                 "privacy_unit": data.privacy_unit, "users": data.users, "tokens": data.tokens,
                 "data_budget_units": float(units), "seq_len": surface.seq_len, "tolerance": float(tolerance),
                 "allow_extrapolation": bool(allow_extrapolation)}
        refused = refusal(iteration_flags(optimum.iterations, self.ranges, allow_extrapolation=False))
        return Answer(query, runnable, optimum, answer.ranges(), len(answer.near_optimal), answer.candidates,
                      answer.unanswered, bands, note, surface.calibration, surface.calibration_note, tuple(flags),
                      saturation, source.description, source.sampling, self.bundle.loss_units,
                      self.bundle.provenance, correction, per_length, lengths_without_answer or {}, inference,
                      refused.message if refused is not None else "")

    # ------------------------------------------------------------------------------------------ evaluate

    def evaluate(self, configs: pd.DataFrame | Sequence[Mapping[str, float]], *, delta: float | None = None,
                 physical_batch_correction: bool | PhysicalBatchCorrection = False) -> pd.DataFrame:
        """σ, σ̄, predicted loss, its seed-only 90% interval and a reason for every row of (Model Size,
        Batch Size, Iterations, Privacy Budget, Data Budget) (paper §3.4: "specify directly the training
        configurations"). σ comes from the bundle's table at its δ, else from dpscaling's accountant per row."""
        frame = pd.DataFrame(list(configs)) if not isinstance(configs, pd.DataFrame) else configs.copy()
        missing = [column for column in CONFIG_COLUMNS if column not in frame.columns]
        if missing:
            raise UserError(f"configurations: missing column(s) {', '.join(missing)}; expected "
                            f"{', '.join(CONFIG_COLUMNS)}")
        values = frame[CONFIG_COLUMNS].apply(pd.to_numeric, errors="coerce")
        bad = values.index[~(values > 0).all(axis=1)]
        if len(bad):
            raise UserError(f"configurations: row(s) {', '.join(str(i + 2) for i in bad[:10])} have a missing, "
                            "non-numeric or non-positive value (line numbers count a CSV header)")
        source = self.bundle.law.sigma_source(self._accounting, delta=delta, per_row=True)
        correction = self._correction(physical_batch_correction)
        law = self.bundle.law
        evaluated = evaluate_configurations(frame.assign(**values), law.loss, source.sigma, law.seq_len, correction)
        if self.bundle.replicates is not None:
            m, t, nbr = (evaluated[c].to_numpy(float) for c in (MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO))
            shift = 0.0 if correction is None else correction.shift(evaluated[BATCH_SIZE].to_numpy(float), nbr, m)
            low, high = interval(self.bundle.replicates.loss_matrix(m, t, nbr))
            evaluated = evaluated.assign(**{"Cross Entropy 5%": low - shift, "Cross Entropy 95%": high - shift})
        evaluated.attrs.update(accounting=source.description, sampling=source.sampling,
                               unanswered=reason_counts(evaluated[REASON].to_numpy()))
        return evaluated


def _chosen_iterations(answer: ComputeOptimal) -> float:
    """T of the candidate the decision rule ranked first (the search's optimum when it ranked by loss)."""
    leading = answer.leading
    if leading is not None and DECISION_SCORE in leading and len(leading):
        return float(leading.iloc[0][ITERATIONS])
    return float(answer.optimum[ITERATIONS])


__all__ = ["Answer", "Configuration", "ExtrapolationRefused", "Runnable", "ScalingLaw"]
