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

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.design.answers import Target
from dpscaling.design.plan import Round, plan_round
from dpscaling.design.settings import DesignSettings
from dpscaling.design.runs import DesignRun, longest_runs, seed_design
from dpscaling.law.collect import TIDY_COLUMNS
from dpscaling.law.columns import (
    CROSS_ENTROPY, FAMILY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, SEED, STATUS)
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


def run_design(simulator: Simulator, grid: Sequence[tuple[str, float, float]], models: Sequence[str],
               rates: Mapping[str, float], targets: Sequence[Target], design: DesignSettings,
               fit: Callable[[pd.DataFrame, Any], Any], law_settings: Any, fit_options: Mapping[str, Any],
               context_of: Callable[[Any, Any], Any]) -> tuple[list[DesignRun], list[Round]]:
    """The adaptive design on ``simulator``: seed runs, then rounds (:func:`dpscaling.design.plan.plan_round`) until
    one stops. ``grid``: the full design's points; ``fit``: (results, law settings) → law; ``context_of``: (law,
    committee) → an analysis context."""
    noisy = sorted({nbr for _, nbr, _ in grid})
    trained = seed_design(models, noisy, rates, design.seed, design.repeat_seeds, design.seed_steps)
    rounds: list[Round] = []
    while True:
        record, chosen = plan_round(len(rounds), trained, simulator.results(trained), grid, simulator.sizes, targets,
                                    design, fit, law_settings, fit_options, context_of)
        rounds.append(record)
        if not chosen:
            return trained, rounds
        trained = sorted({*trained, *chosen})
