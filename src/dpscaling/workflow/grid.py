"""The experiment grid and its canonical names (paper §3.2 "Detailed Experimental Setup").

The workflow expands model size × noise-batch ratio × learning rate (× physical
batch × seed for ablations) into one training job per point, at every sequence length of
``training.seq_lens`` (not in the paper, which fixes S = 512: docs/fit.md "Sequence length"). Every number that
appears in a path is written by :func:`canonical`, so one value has exactly one
spelling: no ``1e-05`` next to ``1.0e-5``, no ``0.30000000000000004``.
"""

from __future__ import annotations

import dataclasses

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import TYPE_CHECKING, Any

import numpy as np

from dpscaling.core.errors import UserError
from dpscaling.privacy.mechanisms import DPSGD, mechanism_named

if TYPE_CHECKING:
    from dpscaling.config.blocks import RunConfig


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
    """One training job: a model at one noise-batch ratio and learning rate, at sequence length ``seq_len``
    (None for the jobs whose paths carry no length: the physical-batch ablation's, at ``data.seq_len``)."""

    model: str
    batch: int
    seed: int
    noise_batch_ratio: float
    learning_rate: float
    seq_len: int | None = None
    mechanism: str = DPSGD.name  # the noise mechanism (dpscaling.privacy.mechanisms): the run id's mech= level

    @property
    def wildcards(self) -> dict[str, str]:
        values = {
            "mech": self.mechanism,
            "model": self.model,
            "batch": canonical(self.batch),
            "seed": canonical(self.seed),
            "nbr": canonical(self.noise_batch_ratio),
            "lr": canonical(self.learning_rate),
        }
        return values if self.seq_len is None else {"seq": canonical(self.seq_len), **values}


def _typed(config: Mapping[str, Any] | RunConfig) -> RunConfig:
    from dpscaling.config.blocks import typed

    return typed(config)


# Model → its chosen learning rate (the protocol's record: dpscaling.tuning.rule.read_chosen), or several
# candidates of it (every rate the protocol may choose: :func:`possible_grid`).
Chosen = Mapping[str, "float | Sequence[float]"]


def main_grid(config: Mapping[str, Any] | RunConfig, chosen: Chosen | None = None) -> list[TrainPoint]:
    """The main grid: every mechanism × sequence length × model × noise-batch ratio × learning rate at the
    physical batch (σ̄ = 0 once, under the primary mechanism: :func:`trains`).

    With ``training.learning_rates: tuned`` the rates are per model, from ``chosen`` (the learning-rate
    protocol's, :mod:`dpscaling.tuning.rule`): σ̄ = 0 at the chosen rate, each noisy σ̄ at it and
    ``learning_rate_protocol.rates_below`` halvings below it (and ``rates_above`` doublings above it; a
    mechanism's ``mechanism_learning_rates`` entry still overrides the noisy runs' rates)."""
    run = _typed(config)
    training = run.training
    names = mechanisms(run)
    if training.tuned and chosen is None:
        raise ValueError("main_grid: training.learning_rates is tuned: pass the protocol's chosen rates "
                         "(or use possible_grid for every rate it may choose)")
    return [
        TrainPoint(model, training.physical_batch, training.seed, float(nbr), lr, seq_len, mechanism)
        for mechanism in names
        for seq_len, model, nbr in product(run.seq_lens(), run.models.names, training.noise_batch_ratios)
        if trains(mechanism, float(nbr), names)
        for lr in _rates(run, mechanism, model, float(nbr), chosen)
    ]


def _rates(run: RunConfig, mechanism: str, model: str, noise_batch_ratio: float, chosen: Chosen | None
           ) -> tuple[float, ...]:
    from dpscaling.tuning.rule import grid_rates

    fixed = run.training.learning_rates_of(mechanism)
    if fixed is not None and (noise_batch_ratio != 0 or not run.training.tuned):
        return fixed
    if model not in chosen:
        raise UserError(f"learning-rate protocol: no chosen rate for model {model!r} (chosen for {sorted(chosen)}); "
                        "rerun the protocol (target learning_rates)")
    doublings = _tuned_doublings(run, mechanism, noise_batch_ratio)
    if doublings is not None:  # the mechanism's own multiple of the chosen rate, that one rate
        return tuple(sorted(set(_picks(chosen, model, doublings)), reverse=True))
    protocol = run.learning_rate_protocol
    below, above = (0, 0) if noise_batch_ratio == 0 else (protocol.rates_below, protocol.rates_above)
    return tuple(sorted({rate for pick in _picks(chosen, model) for rate in grid_rates(pick, below, above)},
                        reverse=True))


def _picks(chosen: Chosen, model: str, doublings: int = 0) -> tuple[float, ...]:
    """``model``'s chosen rate, or its candidates, as a tuple of floats, each times 2^``doublings``."""
    picks = chosen[model]
    picks = (picks,) if isinstance(picks, (int, float)) else picks
    return tuple(float(p) * 2.0 ** doublings for p in picks)


def _tuned_doublings(run: RunConfig, mechanism: str, noise_batch_ratio: float) -> int | None:
    """``k`` of ``mechanism``'s ``{tuned_doublings: k}`` entry for a noisy point (σ̄ = 0 trains at the chosen rate
    itself); None where it has no such entry."""
    return None if noise_batch_ratio == 0 else run.training.tuned_doublings_of(mechanism)


def possible_chosen(config: Mapping[str, Any] | RunConfig) -> dict[str, tuple[float, ...]] | None:
    """Every rate the protocol may choose, per model (its ladder); None when the config gives its rates."""
    run = _typed(config)
    if not run.training.tuned:
        return None
    return {model: tuple(run.learning_rate_protocol.ladder) for model in run.models.names}


def possible_grid(config: Mapping[str, Any] | RunConfig) -> list[TrainPoint]:
    """The main and repeat grids before the protocol has chosen: every point it may name (the workflow's
    wildcard values and run ids); the grid itself when the config gives its rates."""
    chosen = possible_chosen(config)
    return main_grid(config, chosen) + repeat_grid(config, chosen)


def learning_rate_protocol_grid(config: Mapping[str, Any] | RunConfig) -> list[TrainPoint]:
    """The learning-rate protocol's runs (:mod:`dpscaling.tuning.rule`): each model × ladder rate, σ̄ = 0, at
    the grid's physical batch and seed, at ``data.seq_len``; none when the config gives its rates."""
    run = _typed(config)
    if not run.training.tuned:
        return []
    return [TrainPoint(model, run.training.physical_batch, run.training.seed, 0.0, float(rate))
            for model, rate in product(run.models.names, run.learning_rate_protocol.ladder)]


def protocol_prefix(config: Mapping[str, Any] | RunConfig, wildcards: Mapping[str, str]) -> dict[str, str] | None:
    """The wildcards of the learning-rate protocol's run that is the first steps of the grid run named by
    ``wildcards`` (which continues it: :mod:`dpscaling.train.prefix`), or None. A protocol run is the grid's σ̄ = 0
    run at its rate stopped early (:meth:`~dpscaling.config.training_blocks.LearningRateProtocolBlock.run_params`),
    at ``data.seq_len`` under the primary mechanism; the training job checks the two configs before it continues.
    None under ``learning_rate_protocol.domain: public``: that run trained on the public domain, and a grid run
    continuing it would take public data into steps the law reads as trained on the private domain (its
    vocabulary and config match, so the job's checks could not tell): the grid's runs train from step 0."""
    from dpscaling.config.training_blocks import PRIVATE_DOMAIN

    run = _typed(config)
    if run.learning_rate_protocol.domain != PRIVATE_DOMAIN:
        return None
    if wildcards.get("seq") != canonical(run.data.seq_len) or wildcards.get("mech", DPSGD.name) != mechanisms(run)[0]:
        return None
    wanted = {key: wildcards.get(key) for key in ("model", "batch", "seed", "nbr", "lr")}
    for point in learning_rate_protocol_grid(run):
        if {key: point.wildcards[key] for key in wanted} == wanted:
            return point.wildcards
    return None


def _point_rates(run: RunConfig, model: str, rate: float | str, chosen: Chosen | None, mechanism: str,
                 noise_batch_ratio: float) -> tuple[float, ...]:
    """A configured grid point's learning rate(s) in ``mechanism``: its number, or (``tuned``) the model's chosen
    rate(s), times 2^k for a noisy point of a mechanism whose rates are ``{tuned_doublings: k}``."""
    from dpscaling.config.training_blocks import TUNED

    if rate != TUNED:
        return (float(rate),)
    if chosen is None or model not in chosen:
        raise UserError(f"learning_rate: {TUNED!r} names the protocol's rate of {model!r}, but training.learning_rates "
                        "is not tuned (or the model is not in models.names)")
    return _picks(chosen, model, _tuned_doublings(run, mechanism, noise_batch_ratio) or 0)


# training.runs_per_job: "one" job per run, or (the other value, "shape") one job per shape for the runs that
# differ only in σ̄, learning rate or seed.
ONE_RUN_PER_JOB = "one"


def noise_levels_of_one_job(config: Mapping[str, Any] | RunConfig) -> tuple[str, ...]:
    """The σ̄ (as wildcard values) that one grid job trains under ``training.runs_per_job: shape``, for
    every (mechanism, length, model, rate) of ``training.seed`` at the physical batch; () under ``one``.

    The noisy σ̄ only: they share their rates in every mechanism (:func:`_rates`), so each such job trains exactly
    main-grid runs. σ̄ = 0 trains once, under the first mechanism of its sampling unit (:func:`trains`), at a rate
    of its own where the protocol tunes: it stays a job of its own, so which runs a job trains never depends on
    the other mechanisms of the grid, and adding one regroups (and reruns) nothing. Repeat seeds and the
    correction's batch stay one job each too."""
    run = _typed(config)
    if run.training.runs_per_job == ONE_RUN_PER_JOB:
        return ()
    return tuple(canonical(float(nbr)) for nbr in run.training.noise_batch_ratios if float(nbr) != 0)


def ladder_of_one_job(config: Mapping[str, Any] | RunConfig) -> tuple[str, ...]:
    """The learning rates (as wildcard values) that one learning-rate protocol job trains per model under
    ``training.runs_per_job: shape``: the whole ladder (the protocol trains each model at each of its rates,
    :func:`learning_rate_protocol_grid`); () under ``one`` or when the config gives its rates."""
    run = _typed(config)
    if run.training.runs_per_job == ONE_RUN_PER_JOB or not run.training.tuned:
        return ()
    return tuple(canonical(float(rate)) for rate in run.learning_rate_protocol.ladder)


def noiseless_trainer(mechanism: str, names: Sequence[str]) -> str:
    """The mechanism whose σ̄ = 0 runs ``mechanism`` shares: without noise every mechanism of one sampling unit
    (:attr:`dpscaling.privacy.mechanisms.Mechanism.sampling_unit`) trains the same run, trained once as the first of
    ``names`` of that unit's (the primary's for every sequence-level mechanism)."""
    unit = mechanism_named(mechanism).sampling_unit
    return next(name for name in names if mechanism_named(name).sampling_unit == unit)


def trains(mechanism: str, noise_batch_ratio: float, names: Sequence[str]) -> bool:
    """Whether a grid point of ``mechanism`` trains its own run: noisy, or at σ̄ = 0 as the first of its sampling
    unit (:func:`noiseless_trainer`)."""
    return noise_batch_ratio != 0 or mechanism == noiseless_trainer(mechanism, names)


def law_points(points: Iterable[TrainPoint], mechanism: str, names: Sequence[str]) -> list[TrainPoint]:
    """The runs ``mechanism``'s law is fitted on: its own, and the σ̄ = 0 runs it shares (:func:`trains`)."""
    shared = noiseless_trainer(mechanism, names)
    return [point for point in points if point.mechanism == mechanism
            or (point.mechanism == shared and point.noise_batch_ratio == 0)]


def mechanisms(config: Mapping[str, Any] | RunConfig) -> tuple[str, ...]:
    """``training.mechanisms``, the first the primary one (the paper's figures and tables use its law).
    Refused with more than one sequence length: each other mechanism's law is fitted at ``data.seq_len``."""
    run = _typed(config)
    names = tuple(mechanism_named(name).name for name in run.training.mechanisms)
    if len(names) > 1 and len(run.seq_lens()) > 1:
        raise UserError(f"training.mechanisms: {list(names)} with training.seq_lens {list(run.seq_lens())}: "
                        "a run varies one of the two axes; run the other under its own run_name")
    unknown = sorted(set(run.training.mechanism_learning_rates) - set(names))
    if unknown:
        raise UserError(f"training.mechanism_learning_rates: {unknown} not in training.mechanisms ({list(names)})")
    shifted = [name for name in names if run.training.tuned_doublings_of(name) is not None]
    if shifted and not run.training.tuned:
        raise UserError(f"training.mechanism_learning_rates.{shifted[0]}: tuned_doublings multiplies the learning-rate "
                        "protocol's chosen rate: set training.learning_rates: tuned, or give the rates as a list")
    return names


def points_with_mechanism(points: Iterable[TrainPoint], mechanism: str) -> list[TrainPoint]:
    """The points trained with ``mechanism`` (the curves of its law)."""
    return [point for point in points if point.mechanism == mechanism]


def pretrain_grid(config: Mapping[str, Any] | RunConfig) -> list[TrainPoint]:
    """Fine-tuning's public pretraining (``finetune.pretrain``): one σ̄ = 0 run per model of ``models.names``
    that ``finetune.checkpoints`` does not point at an existing checkpoint; none without a ``finetune`` block."""
    run = _typed(config)
    if run.finetune is None:
        return []
    block = run.finetune.pretrain
    return [TrainPoint(model, block.physical_batch, block.seed, 0.0, float(block.learning_rate))
            for model in run.models.names if model not in run.finetune.checkpoints]


def finetune_grid(config: Mapping[str, Any] | RunConfig) -> list[TrainPoint]:
    """The fine-tuning grid: model × noise-batch ratio × ``finetune.learning_rates`` at the grid's physical batch
    and seed, on the private domain at ``data.seq_len``; none without a ``finetune`` block."""
    run = _typed(config)
    if run.finetune is None:
        return []
    training = run.training
    return [TrainPoint(model, training.physical_batch, training.seed, float(nbr), float(lr))
            for model, nbr, lr in product(run.models.names, training.noise_batch_ratios, run.finetune.learning_rates)]


def finetune_noise_levels_of_one_job(config: Mapping[str, Any] | RunConfig) -> tuple[str, ...]:
    """The σ̄ (as wildcard values) that one fine-tuning job trains per model and rate under ``training.runs_per_job:
    shape``: every ``training.noise_batch_ratios`` (the fine-tuning grid is their product with the models and
    rates, :func:`finetune_grid`); () under ``one``."""
    run = _typed(config)
    if run.training.runs_per_job == ONE_RUN_PER_JOB:
        return ()
    return tuple(canonical(float(nbr)) for nbr in run.training.noise_batch_ratios)


def points_at_length(points: Iterable[TrainPoint], seq_len: int) -> list[TrainPoint]:
    """The points trained at sequence length ``seq_len`` (the curves of that length's law)."""
    return [point for point in points if point.seq_len == int(seq_len)]


def correction_grid(config: Mapping[str, Any] | RunConfig, chosen: Chosen | None = None) -> list[TrainPoint]:
    """The physical-batch correction's runs (``fit.physical_batch_correction``): each of its points at the
    grid's physical batch (a main-grid run) and again at the correction's larger batch, main seed, at the
    primary length ``data.seq_len``; none when the correction is off. Raises UserError when a point is not on
    the main grid."""
    run = _typed(config)
    block, training = run.fit.physical_batch_correction, run.training
    if not block.enabled:
        return []
    if block.physical_batch <= training.physical_batch:
        raise UserError(f"fit.physical_batch_correction.physical_batch: must be larger than training.physical_batch "
                        f"({training.physical_batch}), got {block.physical_batch}")
    if not block.points:
        raise UserError("fit.physical_batch_correction.points: list at least one main-grid point "
                        "(model, noise_batch_ratio, learning_rate) when the correction is enabled")
    main = set(main_grid(run, chosen))
    primary = mechanisms(run)[0]
    points = []
    for index, point in enumerate(block.points):
        nbr = float(point.noise_batch_ratio)
        for rate in _point_rates(run, point.model, point.learning_rate, chosen, primary, nbr):
            grid = TrainPoint(point.model, training.physical_batch, training.seed, nbr, rate, run.data.seq_len,
                              primary)
            if grid not in main:
                raise UserError(f"fit.physical_batch_correction.points[{index}]: {point.to_mapping()} is not a point "
                                "of the main grid (models.names x training.noise_batch_ratios x "
                                "training.learning_rates)")
            points += [grid, dataclasses.replace(grid, batch=int(block.physical_batch))]
    return sorted(set(points))


def repeat_grid(config: Mapping[str, Any] | RunConfig, chosen: Chosen | None = None) -> list[TrainPoint]:
    """Extra seeds at a few main-grid points (``training.repeat_seeds`` × ``training.repeat_points``), at every
    sequence length and mechanism whose learning rates include the point's: the seed-to-seed noise each
    length's bootstrap intervals resample (docs/fit.md "Intervals").

    Raises UserError when a point is not on the main grid, repeats in no mechanism, or a repeat seed is the
    main seed.
    """
    run = _typed(config)
    training = run.training
    seeds = [int(seed) for seed in training.repeat_seeds]
    if training.seed in seeds:
        raise UserError(f"training.repeat_seeds: {seeds} must not contain training.seed ({training.seed})")
    names = mechanisms(run)
    main = main_grid(run, chosen)
    axes = {"model": list(run.models.names), "noise_batch_ratio": [float(v) for v in training.noise_batch_ratios],
            "learning_rate": sorted({grid.learning_rate for grid in main}, reverse=True)}
    main_keys = {"model": "models.names", "noise_batch_ratio": "training.noise_batch_ratios",
                 "learning_rate": "training.learning_rates or training.mechanism_learning_rates"}
    points = []
    for index, point in enumerate(training.repeat_points):
        for key, values in axes.items():
            value = getattr(point, key)
            if key == "learning_rate":
                continue  # checked per resolved rate below
            if (value if key == "model" else float(value)) not in values:
                raise UserError(f"training.repeat_points[{index}].{key}: {value!r} is not in {main_keys[key]} "
                                f"({list(values)})")
        # a number repeats in every mechanism that trains it; `tuned`, in each mechanism at its own tuned rate
        nbr = float(point.noise_batch_ratio)
        rates = {(mechanism, rate) for mechanism in names
                 for rate in _point_rates(run, point.model, point.learning_rate, chosen, mechanism, nbr)}
        for rate in sorted({rate for _, rate in rates}, reverse=True):
            if rate not in axes["learning_rate"]:
                raise UserError(f"training.repeat_points[{index}].learning_rate: {rate!r} is not in "
                                f"{main_keys['learning_rate']} ({axes['learning_rate']})")
            # the main grid's runs at the point (every length, each mechanism that trains it), at the other seeds
            repeated = [grid for grid in main if (grid.model, grid.noise_batch_ratio, grid.learning_rate) ==
                        (point.model, nbr, rate) and (grid.mechanism, rate) in rates]
            if seeds and not repeated:
                raise UserError(f"training.repeat_points[{index}]: {point.to_mapping()} is in no mechanism's grid "
                                f"(sigma-bar = 0 trains at {names[0]}'s learning rates only: "
                                f"{sorted({g.learning_rate for g in main if g.noise_batch_ratio == 0})})")
            points += [dataclasses.replace(grid, seed=seed) for grid in repeated for seed in seeds]
    return sorted(set(points))


# ---------------------------------------------------------------------------- the physical-batch ablation


@dataclass(frozen=True)
class AblationAxes:
    """What decides the ablation's training points: its model, σ̄ values, physical batches, seeds and learning
    rate, and its learning-rate sweep (one σ̄, several rates)."""

    model: str
    noise_batch_ratios: tuple[float, ...]
    physical_batches: tuple[int, ...]
    seeds: tuple[int, ...]
    learning_rate: float
    sweep_noise_batch_ratio: float
    sweep_learning_rates: tuple[float, ...]

    @classmethod
    def of(cls, config: Mapping[str, Any] | RunConfig) -> AblationAxes:
        """From a run's config (typed or a mapping), or from the ``ablation_batch`` block's mapping alone."""
        if not isinstance(config, Mapping):
            block = config.ablation_batch.to_mapping()
        else:
            block = config.get("ablation_batch", config)
        sweep = block["sweep"]
        return cls(str(block["model"]), tuple(float(v) for v in block["noise_batch_ratios"]),
                   tuple(int(v) for v in block["physical_batches"]), tuple(int(v) for v in block["seeds"]),
                   float(block["learning_rate"]), float(sweep["noise_batch_ratio"]),
                   tuple(float(v) for v in sweep["learning_rates"]))


def ablation_curve_points(config: Mapping[str, Any] | RunConfig) -> list[TrainPoint]:
    """fig:physical_batch_size_ablation: σ̄ × physical batch × seed at the ablation's one learning rate."""
    axes = AblationAxes.of(config)
    return sorted(TrainPoint(axes.model, batch, seed, nbr, axes.learning_rate)
                  for nbr, batch, seed in product(axes.noise_batch_ratios, axes.physical_batches, axes.seeds))


def ablation_sweep_points(config: Mapping[str, Any] | RunConfig) -> list[TrainPoint]:
    """fig:physical-batch-size-sweep-loss: the learning-rate sweep at one σ̄, every physical batch and seed."""
    axes = AblationAxes.of(config)
    return sorted(TrainPoint(axes.model, batch, seed, axes.sweep_noise_batch_ratio, lr)
                  for lr, batch, seed in product(axes.sweep_learning_rates, axes.physical_batches, axes.seeds))


def ablation_eval_points(config: Mapping[str, Any] | RunConfig) -> list[TrainPoint]:
    """tab:physical-batch-size-sweep-loss-entire-train-set: the final models at the sweep's σ̄ trained
    with the ablation's learning rate, every physical batch and seed (paper: σ̄ = 2^-15, LR 2^-8)."""
    axes = AblationAxes.of(config)
    return sorted(TrainPoint(axes.model, batch, seed, axes.sweep_noise_batch_ratio, axes.learning_rate)
                  for batch, seed in product(axes.physical_batches, axes.seeds))


def ablation_seeds_of_one_job(config: Mapping[str, Any] | RunConfig) -> tuple[str, ...]:
    """The seeds (as wildcard values) that one physical-batch ablation job trains under ``training.runs_per_job:
    shape``: every ``ablation_batch.seeds`` (each ablation point is trained at each of them, :func:`ablation_grid`);
    () under ``one``."""
    run = _typed(config)
    if run.training.runs_per_job == ONE_RUN_PER_JOB:
        return ()
    return tuple(canonical(seed) for seed in AblationAxes.of(run).seeds)


def ablation_grid(config: Mapping[str, Any] | RunConfig) -> list[TrainPoint]:
    """Every training job of the ``ablation_batch`` target (paper appendix "Physical Batch Size Ablation"):
    the fixed-learning-rate ablation, its learning-rate sweep and the evaluated models, each point once."""
    return sorted(set(ablation_curve_points(config)) | set(ablation_sweep_points(config))
                  | set(ablation_eval_points(config)))
