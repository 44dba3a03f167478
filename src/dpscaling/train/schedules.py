"""Learning-rate schedules, and the steps two horizons of one run share (``training.schedule``).

- ``paper`` (the default; paper §3.2 "Optimizer"): linear warm-up to the peak over ``warmup_steps``, then
  exponential decay by ``decay_factor`` over ``decay_steps``. The rate at a step does not depend on the run's
  horizon, so every step of a shorter run is a step of the longer one.
- ``constant_cooldown`` (not in the paper; Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond
  Fixed Training Durations"): the same warm-up, the peak held constant, then a cooldown to zero over the last
  ``cooldown_fraction`` of the horizon in their best-performing form, 1 − √(progress). A run is cooled down at its
  own horizon, as a run of the paper's schedule is not. Two horizons share only the constant part: a longer
  run branches from a shorter one's checkpoint at the start of its cooldown (:mod:`dpscaling.train.prefix`).
  ``decay_steps`` and ``decay_factor`` do not enter it.

Every caller asks :func:`branch_step` where a run's schedule stops being that of every longer horizon; a run
saves and keeps its checkpoint there (:mod:`dpscaling.train.loop`).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import optax

PAPER, CONSTANT_COOLDOWN = "paper", "constant_cooldown"
SCHEDULES = (PAPER, CONSTANT_COOLDOWN)


def cooldown_start(num_steps: int, cooldown_fraction: float, log_every: int) -> int:
    """The step a ``constant_cooldown`` run of ``num_steps`` starts its cooldown: ``cooldown_fraction`` of the
    horizon before its end, rounded down to a logged step (where a branch can start and a curve row ends)."""
    return int(num_steps * (1.0 - cooldown_fraction)) // log_every * log_every


def branch_step(schedule: str, num_steps: int, cooldown_fraction: float, log_every: int) -> int:
    """The last step of a run whose learning rates are those of every longer horizon of the same run: the whole
    run under the paper's schedule, its constant part under ``constant_cooldown``."""
    if schedule == PAPER:
        return num_steps
    if schedule == CONSTANT_COOLDOWN:
        return cooldown_start(num_steps, cooldown_fraction, log_every)
    raise ValueError(f"training.schedule: {schedule!r} is not one of {SCHEDULES}")


def schedule_refusal(schedule: str, num_steps: int, warmup_steps: int, cooldown_fraction: float,
                     log_every: int) -> str | None:
    """Why these settings do not make a schedule (the field and the rule), or None when they do."""
    if schedule not in SCHEDULES:
        return f"schedule: must be one of {SCHEDULES}, got {schedule!r}"
    if not 0 < cooldown_fraction < 1:
        return f"cooldown_fraction: must be in (0, 1), got {cooldown_fraction!r}"
    if schedule == CONSTANT_COOLDOWN and cooldown_start(num_steps, cooldown_fraction, log_every) < warmup_steps:
        start = cooldown_start(num_steps, cooldown_fraction, log_every)
        return (f"cooldown_fraction: {cooldown_fraction} of {num_steps} steps starts the cooldown at step {start}, "
                f"before the warm-up ends (warmup_steps={warmup_steps}); lower it or train longer")
    return None


def learning_rates(schedule: str, peak: Any, num_steps: int, warmup_steps: int, decay_steps: int,
                   decay_factor: float, cooldown_fraction: float, log_every: int) -> optax.Schedule:
    """The schedule (module doc) with peak ``peak``: a number, or a traced value inside the compiled step."""
    if schedule == PAPER:
        parts = [optax.exponential_decay(init_value=peak, transition_steps=decay_steps, decay_rate=1.0 / decay_factor)]
        boundaries: list[int] = []
    elif schedule == CONSTANT_COOLDOWN:
        start = cooldown_start(num_steps, cooldown_fraction, log_every)
        length = num_steps - start  # >= 1: the start is rounded down from before the horizon

        def cooldown(count):
            return peak * (1.0 - jnp.sqrt(jnp.clip(count / length, 0.0, 1.0)))

        parts, boundaries = [optax.constant_schedule(peak), cooldown], [start]
    else:
        raise ValueError(f"training.schedule: {schedule!r} is not one of {SCHEDULES}")
    if warmup_steps:
        parts, boundaries = [optax.linear_schedule(0.0, peak, warmup_steps), *parts], [warmup_steps, *boundaries]
    # join_schedules counts each part from its boundary, an absolute step
    return optax.join_schedules(parts, boundaries) if boundaries else parts[0]
