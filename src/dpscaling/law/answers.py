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
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.law.answer_types import Answer, Configuration, Runnable
from dpscaling.law.bootstrap import band, interval
from dpscaling.law.budget import AnswerSettings, Budget, PricedSurface, check_positive, held_sequences
from dpscaling.law.margins import margins
from dpscaling.law.budget_scan import BudgetScan
from dpscaling.law.bundle import Bundle
from dpscaling.law.columns import (
    BATCH_SIZE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, PRIVACY_BUDGET,
    REASON)
from dpscaling.law.decision import DecisionRule, rule_named
from dpscaling.law.interpolation import reason_counts
from dpscaling.law.noise import SigmaSource, els_sigma_source
from dpscaling.law.physical_batch import PhysicalBatchCorrection
from dpscaling.law.queries import (
    DEFAULT_BATCH_SIZES, DEFAULT_TOLERANCE, REFERENCE_BAND_TOLERANCE, compute_cost, evaluate_configurations,
    model_size_grid, nonprivate_best_up_to)
from dpscaling.law.range_checks import ExtrapolationRefused, ValidatedRanges, nonprivate_floor_flag
from dpscaling.law.rendering import render_answer
from dpscaling.law.rounding import choose_runnable, ranking
from dpscaling.law.runnable import ModelShape, nearest_shape
from dpscaling.law.sequence_length import SEQ_LEN, compute_optimal_across_lengths, length_tradeoff
from dpscaling.law.surface import surface_at
from dpscaling.privacy.mechanisms import mechanism_named

CONFIG_COLUMNS = [MODEL_SIZE, BATCH_SIZE, ITERATIONS, PRIVACY_BUDGET, DATA_BUDGET]
SKIPPED_OPTIMUM_INTERVAL = "not computed (optimum_interval=False)"


class ScalingLaw:
    """A law bundle (or a bare law directory) ready to answer: :meth:`query`, :meth:`evaluate`, :meth:`info`."""

    def __init__(self, bundle: Bundle, accounting: tuple[Any, Any] | None = None):
        self.bundle = bundle
        self._accounting = accounting  # the authors' accounting tables given by the caller
        self._sources: dict[float | None, SigmaSource] = {}
        self._scan = BudgetScan()  # per-budget optima of saturation scans, remembered across queries
        self._floors: dict[float, float] = {}  # the non-private law's best up to each budget (nonprivate_floor)

    @property
    def ranges(self) -> ValidatedRanges:
        return self.bundle.ranges

    @property
    def seq_len(self) -> int:
        return int(self.bundle.law.seq_len)

    @property
    def mechanism(self) -> str:
        """The noise mechanism whose price σ̄ is (dpscaling.privacy.mechanisms)."""
        return self.bundle.law.mechanism

    def info(self) -> dict[str, Any]:
        """The bundle's manifest: provenance, validated ranges, loss units, contents."""
        return self.bundle.manifest()

    def sigma_source(self, delta: float | None = None, progress: Callable[[str], None] | None = None) -> SigmaSource:
        """σ(ε, T, q) at ``delta`` (None: the bundle's δ): the bundle's table, else built on demand."""
        if delta not in self._sources:
            source = self.bundle.law.sigma_source(self._accounting, delta=delta, progress=progress)
            if self.bundle.root is not None and source.description.startswith("the run's accounting table"):
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

    def measured_model(self, model_size: float) -> str | None:
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

    def nonprivate_floor(self, computes: float | Sequence[float] | np.ndarray) -> np.ndarray:
        """The non-private law at each of ``computes``, the best up to it over the budgets C·2^(-k/2) below it
        (:func:`dpscaling.law.queries.nonprivate_best_up_to`): no private answer at that compute is better, and every
        answer respects it (:meth:`query`); inf where the law answers no budget up to it."""
        fitted = self.bundle.law
        sizes = model_size_grid(*fitted.model_size_range())
        bounds = fitted.iteration_bounds()
        lowest = float(compute_cost(sizes[0], fitted.physical_batch, bounds[0], fitted.seq_len))
        asked = np.atleast_1d(np.asarray(computes, float))
        missing = sorted({float(f"{c:.12g}") for c in asked} - set(self._floors))
        if missing:
            lattice = sorted({float(f"{c * 2.0 ** (-k / 2):.12g}") for c in missing
                              for k in range(int(2 * math.log2(max(c / lowest, 1.0))) + 1)})
            values = nonprivate_best_up_to(fitted.loss, np.array(lattice), fitted.seq_len, sizes, bounds,
                                           fitted.physical_batch)
            running = dict(zip(lattice, values))
            self._floors.update({c: running[c] for c in missing})
        return np.array([self._floors[float(f"{c:.12g}")] for c in asked])

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
              models: Sequence[str] | None = None, examples_per_user: int | None = None,
              sequences: float | None = None) -> Answer:
        """The compute-optimal configuration for compute ``compute`` FLOPs, privacy budget (``epsilon``,
        ``delta``) and a data budget of ``users`` privacy units or ``tokens`` tokens (one sequence per unit).
        ``examples_per_user`` k: the budget protects a user of up to k sequences, ``users`` of them
        (:meth:`_user_budget`: a user-level mechanism's law samples the users; a sequence-level law samples their
        ``sequences`` S, S = N where not given (:func:`held_sequences`: the largest σ any N..N·k needs), its σ
        ELS's for k ≥ 2).

        Raises :class:`~dpscaling.law.range_checks.ExtrapolationRefused` when the optimum's T lies beyond
        the extrapolation the law's validation measured (unless ``allow_extrapolation``), and UserError for
        a budget the law cannot answer at all. ``optimum_interval=False`` skips the spread of the bootstrap
        replicates' own optima (``optimum_interval``, the slowest part of an answer; a sweep of many
        budgets leaves it out); the answer's loss, intervals and flags do not depend on it.
        ``count_pretraining`` (a fine-tuning law only): ``compute`` also pays for each pretrained model's
        public pretraining (:meth:`_query_counting_pretraining`). ``decision_rule`` picks the runnable
        configuration among the candidates (:mod:`dpscaling.law.decision`; default ``extrapolation_charged``, the schema's ``private_model.decision_rule``);
        ``sampling`` the rule the runnable answer's σ is priced under (default the law's; ``poisson``: what a
        private run trains; the search reads the law's table under the law's rule, and the best
        :data:`dpscaling.law.rounding.RUNNABLE_CANDIDATES` are priced);
        ``models`` restricts the search to those measured models (a run's own, for ``private_model``).
        """
        check_positive(compute, epsilon)
        rule = rule_named(decision_rule)
        if count_pretraining:
            return self._query_counting_pretraining(
                compute, epsilon, users=users, tokens=tokens, delta=delta, privacy_unit=privacy_unit,
                seq_len=seq_len, tolerance=tolerance, model_size_range=model_size_range,
                physical_batch_correction=physical_batch_correction, allow_extrapolation=allow_extrapolation,
                inference_tokens=inference_tokens, microbatch_size=microbatch_size,
                optimum_interval=optimum_interval, progress=progress, decision_rule=rule, sampling=sampling,
                models=models, examples_per_user=examples_per_user, sequences=sequences)
        budget = Budget.asked(compute, epsilon, users, tokens, delta=delta, privacy_unit=privacy_unit,
                              seq_len=seq_len, examples_per_user=examples_per_user, sequences=sequences)
        tolerance = self.default_tolerance() if tolerance is None else float(tolerance)
        # Price: the search reads the law's table under its own rule (the table refuses the Poisson branch alone
        # where it cannot interpolate it); the runnable answer is priced exactly under ``sampling``.
        source, per_user = self._user_budget(budget, progress)
        correction = self._correction(physical_batch_correction)
        settings = AnswerSettings(rule, sampling or source.sampling, bool(allow_extrapolation), microbatch_size,
                                  optimum_interval)
        lengths = self.bundle.lengths
        if lengths is not None and (seq_len is None or float(seq_len) != self.seq_len or
                                    self.seq_len not in lengths.across.lengths):
            if source.examples_per_user is not None:
                raise UserError("--examples-per-user: a budget per user is answered at the law's own length only; "
                                f"give --seq-len {self.seq_len}")
            if models is not None:
                raise UserError("models: a query across sequence lengths searches each length's own models")
            return self._query_across_lengths(budget, tolerance, source, correction, settings, model_size_range)
        if seq_len is not None and float(seq_len) != self.seq_len:
            raise UserError(f"--seq-len {seq_len:g}: this law was fitted at S = {self.seq_len} only")
        surface = surface_at(self.bundle, self.seq_len)
        sizes = (self.sizes_of(models) if models is not None
                 else self.candidate_sizes(model_size_range or surface.model_size_range))
        priced = PricedSurface(epsilon, surface, source, budget.data.units(self.seq_len) * per_user, sizes,
                               correction, tolerance)
        return self._answer_at(budget, priced, settings, inference_tokens)

    def _answer_at(self, budget: Budget, priced: PricedSurface, settings: AnswerSettings,
                   inference_tokens: float | None) -> Answer:
        """Scan, choose, round and answer at the law's own length: the search, its refusal past the validated
        horizon, the optimum's band, the saturating compute, the runnable twin and the answer."""
        surface, compute = priced.surface, budget.compute
        answer = priced.search(compute, rank=ranking(settings.rule, surface))
        self._scan.remember(answer, compute, priced)
        self._scan.refuse_beyond_validation(answer, compute, priced, self.ranges, settings.allow_extrapolation)
        interval_bands, note = (surface.optimum_band(answer, priced.correction, self.bundle.notes)
                                if settings.optimum_interval else (None, SKIPPED_OPTIMUM_INTERVAL))
        inference = None if inference_tokens is None else priced.inference_aware(compute, inference_tokens)
        saturation = self._scan.saturation(compute, priced)
        # ELS samples the users' sequences: the answer says how many it priced, and whether they were assumed.
        held = ({"sequences": float(priced.units), "sequences_assumed": budget.sequences is None}
                if priced.source.examples_per_user is not None and mechanism_named(self.mechanism).unit == "sequence"
                else {})
        runnable, floor = at_least(choose_runnable(self, answer, budget, priced, settings),
                                   float(self.nonprivate_floor(compute)[0]))
        return render_answer(self.bundle, answer, runnable, budget, priced, settings, interval_bands, note, saturation,
                             inference=inference, held=held, floor_flags=floor,
                             margins_of=functools.partial(margins, self, runnable, budget, priced, settings))

    def _user_budget(self, budget: Budget, progress: Callable[[str], None] | None) -> tuple[SigmaSource, float]:
        """σ's source for the budget, and the sampled units per user of it (docs/query.md, "A budget per user"):

        * a sequence-level budget (no ``examples_per_user``): the law's own σ, one unit each;
        * a user-level mechanism's law (``uls-m<m>``): its σ over users, whatever k (each user's m sequences are
          clipped as one), one unit per user; it answers only per user;
        * a sequence-level law and a budget per user of k sequences: the users' sequences S are sampled
          (:func:`held_sequences`: ``sequences``, else S = N, the conservative end), σ is ELS's for k ≥ 2
          (:func:`dpscaling.law.noise.els_sigma_source`), DP-SGD's at k = 1.
        """
        mechanism = mechanism_named(self.mechanism)
        data, k = budget.data, budget.examples_per_user
        if mechanism.unit == "user" and data.privacy_unit != "user":
            raise UserError(f"--privacy-unit: {mechanism.name}'s law samples users (N and B count users): give the "
                            "data budget in --users")
        source = self.sigma_source(budget.delta, progress)
        if k is None:
            return source, 1
        held = held_sequences(data.users, k, budget.sequences)
        if mechanism.unit == "user":
            return dataclasses.replace(source, examples_per_user=k), 1
        if mechanism.bands > 1:
            raise UserError(f"--examples-per-user: {mechanism.name} has no user-level accountant here (ELS prices "
                            "DP-SGD's Poisson steps); ask the DP-SGD or a user-level (uls-m<m>) law")
        if k == 1:
            return dataclasses.replace(source, examples_per_user=1), 1
        per_user = held / data.users
        key = (source.delta, k)
        if key not in self._sources:
            bounds = surface_at(self.bundle, self.seq_len).iteration_bounds
            self._sources[key] = els_sigma_source(source.delta, k, progress, bounds)
        return self._sources[key], per_user

    def sizes_of(self, models: Sequence[str]) -> np.ndarray:
        """The Model Size of each of ``models`` the law measured (refused when none is)."""
        measured = self.measured_sizes
        inside = sorted(float(measured[name]) for name in dict.fromkeys(models) if name in measured)
        if not inside:
            raise UserError(f"models: none of {list(models)} is a model of this law (it measured "
                            f"{sorted(measured.index)})")
        return np.array(inside)

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

    def _query_across_lengths(self, budget: Budget, tolerance: float, source: SigmaSource,
                              correction: PhysicalBatchCorrection | None, settings: AnswerSettings,
                              model_size_range: tuple[float, float] | None) -> Answer:
        """The best (M, S, B, T) over the bundle's lengths (or at the budget's ``seq_len``, interpolated in log S)."""
        lengths, data, seq_len = self.bundle.lengths, budget.data, budget.seq_len
        if correction is not None:
            raise UserError("the physical-batch correction was fitted at the primary length only; drop it for a "
                            "query across sequence lengths")
        if model_size_range is not None:
            raise UserError("--model-size-range applies to a law of one length; a query across lengths searches "
                            "each length's own model range")
        found = compute_optimal_across_lengths(budget.compute, budget.epsilon, lengths.across, source.sigma,
                                               data.privacy_unit, tokens=data.tokens, users=data.users,
                                               seq_len=seq_len, tolerance=tolerance)
        surface = surface_at(self.bundle, found.seq_len)
        priced = PricedSurface(budget.epsilon, surface, source, data.units(found.seq_len),
                               model_size_grid(*surface.model_size_range), None, tolerance)
        self._scan.refuse_beyond_validation(found.answer, budget.compute, priced, self.ranges,
                                            settings.allow_extrapolation)
        bands, note = None, lengths.note
        if not settings.optimum_interval:
            note = SKIPPED_OPTIMUM_INTERVAL
        elif lengths.replicates:
            chosen = None if seq_len is None else [seq_len]
            row = length_tradeoff(lengths.across, source.sigma, np.array([budget.compute]), budget.epsilon, data,
                                  DEFAULT_BATCH_SIZES, lengths.replicates, lengths=chosen).iloc[0]
            bands = {"seed_only_interval_90": (float(row[band(CROSS_ENTROPY)[0]]), float(row[band(CROSS_ENTROPY)[1]])),
                     "seq_len_90": (float(row[band(SEQ_LEN)[0]]), float(row[band(SEQ_LEN)[1]]))}
            note = f"{note} (seed noise only)"
        per_length = [{"seq_len": int(row[SEQ_LEN]), "units": float(row[DATA_BUDGET]),
                       "predicted_loss": float(row[CROSS_ENTROPY]), "model_size": float(row[MODEL_SIZE]),
                       "batch_size": float(row[BATCH_SIZE]), "iterations": float(row[ITERATIONS])}
                      for _, row in found.per_length.iterrows()]
        runnable = choose_runnable(self, found.answer, budget, priced, settings)
        return render_answer(self.bundle, found.answer, runnable, budget, priced, settings, bands, note, None,
                             per_length=per_length, lengths_without_answer=found.unanswered_lengths)

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


def at_least(runnable: Runnable, floor: float) -> tuple[Runnable, list]:
    """``runnable`` with its predicted loss and intervals raised to ``floor`` (the non-private law at its compute)
    where the law predicts less, and the flag that says so (:func:`nonprivate_floor_flag`); as it was otherwise."""
    flags = nonprivate_floor_flag(runnable.predicted_loss, floor)
    if not flags:
        return runnable, []

    def raised(pair: tuple[float, float] | None) -> tuple[float, float] | None:
        return None if pair is None else (max(pair[0], floor), max(pair[1], floor))

    return dataclasses.replace(runnable, predicted_loss=floor, seed_only_interval=raised(runnable.seed_only_interval),
                               calibrated_interval=raised(runnable.calibrated_interval)), flags


__all__ = ["Answer", "Configuration", "ExtrapolationRefused", "Runnable", "ScalingLaw"]
