"""The adaptive design against the full grid on a known truth (not in the paper): what each design's law says at
the target budgets, what it cost, and how far it is from the measurements it never trained.

A ground-truth law gives every grid point's clean curve; a run of one seed adds that seed's offset (seed-to-seed
noise, one draw per run) and measurement noise per logged step, both drawn from the run's own generator, so a run
to a longer horizon is the same run continued: its first steps are the shorter one's (as
:mod:`dpscaling.train.prefix` makes them in the workflow). The full grid trains every point to the full horizon; the
adaptive design trains its seed runs, then rounds of the runs :func:`dpscaling.design.choice.choose_runs` picks,
fitting the law (and its bootstrap committee) after each, until the answers' 90% band at every target is narrower
than ``stop_width`` or the next round would pass the compute cap.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.design.answers import Target, answer_matrix
from dpscaling.design.choice import choose_from_covariance, jackknife_covariance, joint_covariance
from dpscaling.design.runs import (
    Candidate, DesignRun, candidates, design_flops, horizons, longest_runs, seed_design)
from dpscaling.errors import UserError
from dpscaling.law.bootstrap import REPLICATE, Replicates, replicate_grids, seed_noise
from dpscaling.law.collect import TIDY_COLUMNS
from dpscaling.law.columns import (
    CROSS_ENTROPY, FAMILY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, SEED, STATUS)
from dpscaling.law.interpolation import LossFunction
from dpscaling.law.settings import Window
from dpscaling.models.family import BERT

# Truth: loss(M, T, σ̄) (clean, vectorised); the worse of a point's learning rates costs a share more.
LossOf = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Simulator:
    """Runs drawn from a ground truth: ``sizes`` per model, ``rate_penalty`` per learning rate (a factor on the
    clean loss), seed-to-seed and measurement noise in nats, a log every ``log_every`` steps."""

    truth: LossOf
    sizes: Mapping[str, float]
    rate_penalty: Mapping[float, float]
    seed_noise: float
    measurement_noise: float
    log_every: int
    seed: int = 0

    def curve(self, run: DesignRun) -> pd.DataFrame:
        """The run's tidy curve: the same draws at every horizon, so a longer run continues a shorter one."""
        key = zlib.crc32(repr((run.point, run.seed)).encode())
        rng = np.random.default_rng([self.seed, key])
        offset = rng.normal(0.0, self.seed_noise)
        steps = np.arange(self.log_every, run.steps + 1, self.log_every, dtype=float)
        noise = rng.normal(0.0, self.measurement_noise, 1 << 20)[: len(steps)] if len(steps) else np.array([])
        size = float(self.sizes[run.model])
        clean = self.truth(np.full(len(steps), size), steps, np.full(len(steps), run.noise_batch_ratio))
        loss = clean * self.rate_penalty[run.learning_rate] + offset + noise
        return pd.DataFrame({MODEL: run.model, MODEL_SIZE: size, LEARNING_RATE: run.learning_rate,
                             ITERATIONS: steps, NOISE_BATCH_RATIO: run.noise_batch_ratio, CROSS_ENTROPY: loss,
                             STATUS: "finished", SEED: run.seed, FAMILY: BERT.name})[TIDY_COLUMNS]

    def results(self, runs: Sequence[DesignRun]) -> pd.DataFrame:
        """The tidy curves of ``runs``, each point and seed once, at its longest horizon."""
        return pd.concat([self.curve(run) for run in longest_runs(runs).values()], ignore_index=True)


@dataclass(frozen=True)
class DesignSettings:
    """How a simulated (or trained) adaptive design runs; see :mod:`dpscaling.design.runs` for the seed design."""

    seed_steps: int
    horizon: int
    runs_per_round: int
    max_rounds: int
    compute_cap: float  # FLOPs
    stop_width: float  # nats: the widest 90% committee band at a target that lets the design stop
    replicates: int
    batch: int
    seq_len: int
    seed: int = 0
    repeat_seeds: tuple[int, ...] = (1, 2)
    coverage: bool = False  # every grid point's loss at three horizons is a target beside the answers
    fill_forms: bool = False  # the model forms include the fills' alternatives (FILL_FORMS)
    model_forms: bool = True  # the committee also holds the law under other extrapolation choices (MODEL_FORMS)
    jackknife: bool = False  # the committee also holds the laws refitted with one trained point left out each


@dataclass
class Round:
    """One round's record: what was trained before it, what the committee said, and what it chose and why."""

    index: int
    runs: int
    flops: float
    answers: list[float]  # the committee's median answer per target
    widths: list[float]  # its 90% band per target
    chosen: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = ""


@dataclass(frozen=True)
class MemberSet:
    """Laws of one kind in the committee and their answers at the targets (members × targets); ``covariance``
    reads their spread: :func:`joint_covariance` for a sample, :func:`jackknife_covariance` for a jackknife."""

    name: str
    members: Replicates
    answers: np.ndarray
    covariance: Callable[[np.ndarray, np.ndarray], np.ndarray] = joint_covariance


# The committee's model forms (DesignSettings.model_forms): the design's law refitted with each of these changes,
# the choices its extrapolation from a short horizon is least sure of (the window, and whether the asymptote is free).
MODEL_FORMS: tuple[dict[str, Any], ...] = (
    {"extrapolation_window": Window(0.25, 1.0)},
    {"extrapolation_window": Window(0.5, 1.0)},
    {"extrapolation_asymptote": "nonprivate"},
    {"extrapolation_asymptote": "per_curve_else_nonprivate"},
)
# With DesignSettings.fill_forms, also the fills it is least sure of: across models first, and in log loss.
FILL_FORMS: tuple[dict[str, Any], ...] = (
    {"fill_models_first": True},
    {"interpolate_log_loss": True},
)


@dataclass(frozen=True)
class Committee:
    """The laws whose disagreement the design reads, as sets whose covariances add: the bootstrap replicates (seed
    noise); with ``DesignSettings.model_forms`` the law refitted under other extrapolation choices (how sure its
    extrapolation from short horizons is); with ``DesignSettings.jackknife`` the laws refitted with one trained point
    left out each (what the answers hang on)."""

    sets: tuple[MemberSet, ...]

    def covariance(self, runs: Sequence[DesignRun], sizes: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
        """The joint covariance of (answers, the ``runs``' predicted losses where they would be measured), and
        the indices of the runs at least two members of every set predict (the others are left out)."""
        points = (np.array([sizes[run.model] for run in runs], float), np.array([run.steps for run in runs], float),
                  np.array([run.noise_batch_ratio for run in runs], float))
        predictions = [part.members.loss_matrix(*points) for part in self.sets]
        answered = np.flatnonzero(np.all([np.sum(np.isfinite(p), axis=0) >= 2 for p in predictions], axis=0))
        sigma = sum(part.covariance(part.answers, p[:, answered]) for part, p in zip(self.sets, predictions))
        return sigma, answered

    @property
    def bootstrap_answers(self) -> np.ndarray:
        return self.sets[0].answers

    def widths(self) -> np.ndarray:
        """Each target's 90% band, Gaussian, from the committee's total variance of its answer."""
        sigma, _ = self.covariance([], {})
        return 2 * 1.645 * np.sqrt(np.clip(np.diag(sigma), 0.0, None))


def committee(results: pd.DataFrame, fit: Callable[[pd.DataFrame, Any], Any], settings: Any, design: DesignSettings,
              context_of: Callable[[Any, Replicates], Any], fit_options: Mapping[str, Any],
              targets: Sequence[Target], coverage: np.ndarray | None = None) -> Committee:
    """The committee on ``results`` (:class:`Committee`), answering at ``targets`` and, with ``coverage`` (points ×
    (M, T, σ̄)), predicting the loss there too, each such point one more target; ``fit``: (results, law settings) →
    law."""
    law = fit(results, settings)

    def member_set(name, losses, covariance=joint_covariance) -> MemberSet:
        members = Replicates(list(losses))
        answers = answer_matrix(context_of(law, members), targets)
        if coverage is not None and len(coverage):
            answers = np.hstack([answers, members.loss_matrix(*coverage.T)])
        return MemberSet(name, members, answers, covariance)

    grids = replicate_grids(results, settings, range(design.replicates), **fit_options)
    sets = [member_set("bootstrap", [LossFunction.from_grid(grid) for _, grid in grids.groupby(REPLICATE)])]
    if design.model_forms:
        forms = [law.loss]
        for change in (*MODEL_FORMS, *(FILL_FORMS if design.fill_forms else ())):
            try:
                forms.append(fit(results, dataclasses.replace(settings, **change)).loss)
            except UserError:
                continue
        sets.append(member_set("model forms", forms))
    if design.jackknife:
        point = [MODEL, NOISE_BATCH_RATIO, LEARNING_RATE]
        left_out = []
        for (model, nbr, rate), _ in results[results[SEED] == design.seed].groupby(point):
            rest = results[~((results[MODEL] == model) & (results[NOISE_BATCH_RATIO] == nbr)
                             & (results[LEARNING_RATE] == rate))]
            try:
                left_out.append(fit(rest, settings).loss)
            except UserError:  # a point the law cannot do without (a model's only curve): no refit of it
                continue
        sets.append(member_set("jackknife", left_out, jackknife_covariance))
    return Committee(tuple(sets))


def run_design(simulator: Simulator, grid: Sequence[tuple[str, float, float]], models: Sequence[str],
               rates: Mapping[str, float], targets: Sequence[Target], design: DesignSettings,
               fit: Callable[[pd.DataFrame, Any], Any], law_settings: Any, fit_options: Mapping[str, Any],
               context_of: Callable[[Any, Replicates], Any]) -> tuple[list[DesignRun], list[Round]]:
    """The adaptive design on ``simulator``: seed runs, then rounds (module doc). ``grid``: the full design's
    points; ``fit``: (results, law settings) → law; ``context_of``: (law, committee) → an analysis context."""
    noisy = sorted({nbr for _, nbr, _ in grid})
    trained = seed_design(models, noisy, rates, design.seed, design.repeat_seeds, design.seed_steps)
    ladder = horizons(design.seed_steps, design.horizon)
    # DesignSettings.coverage: every grid point's loss at its seed, middle and full horizon is a target too (the law
    # everywhere, not only at the answers' optima)
    steps = (design.seed_steps, ladder[len(ladder) // 2], design.horizon)
    coverage = (np.array(sorted({(simulator.sizes[model], float(t), nbr) for model, nbr, _ in grid for t in steps}))
                if design.coverage else None)
    rounds: list[Round] = []
    for index in range(design.max_rounds + 1):
        results = simulator.results(trained)
        members = committee(results, fit, law_settings, design, context_of, fit_options, targets, coverage)
        widths = members.widths()[: len(targets)]
        spent = design_flops(trained, simulator.sizes, design.batch, design.seq_len)
        record = Round(index, len(trained), spent,
                       [float(v) for v in np.nanmedian(members.bootstrap_answers[:, : len(targets)], axis=0)],
                       [float(v) for v in widths])
        rounds.append(record)
        if np.nanmax(widths) < design.stop_width:
            record.stopped = f"every target's band is below {design.stop_width} nats"
            break
        if index == design.max_rounds:
            record.stopped = f"the round limit ({design.max_rounds})"
            break
        options = candidates(trained, grid, design.seed, design.repeat_seeds, ladder)
        costs = [option.flops(simulator.sizes, design.batch, design.seq_len) for option in options]
        affordable = [i for i, cost in enumerate(costs) if spent + cost <= design.compute_cap]
        if not affordable:
            record.stopped = "the compute cap"
            break
        chosen = _choose(options, affordable, costs, members, seed_noise(results), simulator.sizes, design, spent)
        if not chosen:
            record.stopped = "no candidate is expected to narrow the answers within the cap"
            break
        record.chosen = [{"model": option.run.model, "noise_batch_ratio": option.run.noise_batch_ratio,
                          "learning_rate": option.run.learning_rate, "seed": option.run.seed,
                          "steps": option.run.steps, "kind": option.kind, "flops": cost, "variance_reduction": gain}
                         for option, cost, gain in chosen]
        trained = sorted({*trained, *(option.run for option, _, _ in chosen)})
    return trained, rounds


def _choose(options: Sequence[Candidate], affordable: Sequence[int], costs: Sequence[float], members: Committee,
            noise: float, sizes: Mapping[str, float], design: DesignSettings, spent: float):
    """The round's picks among the affordable candidates: distinct, in the rule's order, within the cap in total."""
    sigma, answered = members.covariance([options[i].run for i in affordable], sizes)
    affordable = [affordable[i] for i in answered]
    if not affordable:
        return []
    n_targets = members.bootstrap_answers.shape[1]
    choice = choose_from_covariance(sigma, n_targets, [costs[i] for i in affordable], max(noise**2, 1e-8),
                                    2 * design.runs_per_round)
    chosen, total = [], spent
    for pick in choice.picks:
        index = affordable[pick.candidate]
        if any(index == taken for taken, _, _ in chosen) or total + costs[index] > design.compute_cap:
            continue
        chosen.append((index, costs[index], pick.variance_reduction))
        total += costs[index]
        if len(chosen) == design.runs_per_round:
            break
    return [(options[index], cost, gain) for index, cost, gain in chosen]
