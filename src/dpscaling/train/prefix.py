"""A run that continues a shorter run of its own configuration (its prefix) instead of retraining those steps.

Two runs whose configs differ only in their horizon (``num_steps``, and ``checkpoint_every``, which never changes
what trains) compute the same first steps: the batch of step s, its mask and noise are pure functions of (seed,
step), and so is the learning rate up to the shorter run's branch step (:mod:`dpscaling.train.schedules`): its
whole horizon under the paper's schedule (warm-up, then decay over ``decay_steps``, not over the horizon), the
start of its cooldown under ``constant_cooldown``, where it saved and kept a checkpoint. So the longer run may
start from the shorter one's verified checkpoint at that step and reproduce, step for step, the curve it would
have trained from step 0. The workflow uses it for the learning-rate protocol (paper §3.2 "Learning Rates";
docs/learning-rates.md): the protocol's run at a rate is the first ``learning_rate_protocol.steps`` steps of the
grid's σ̄ = 0 run at that rate, which then continues it; and for the adaptive design's longer horizons.

A prefix is refused (the run starts from step 0, with a warning saying why) when that argument does not hold:
a private sampler's run (its σ is calibrated to its own horizon, and its key is its own secret), a correlated
mechanism (its strategy is built for its horizon), another config, vocabulary or logging interval, a horizon past
this run's, or no checkpoint at a logged step the two share. A prefix that does not verify is never used either:
it costs recomputation, never a wrong curve (:mod:`dpscaling.train.checkpoint`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from dpscaling.data.shards import DatasetMeta
from dpscaling.core.errors import UserError
from dpscaling.train.checkpoint import (
    STATE_DIR,
    Restored,
    config_differences,
    open_manager,
    recorded_config,
    recorded_vocabulary,
    restore_verified_read_only,
    vocabulary_record,
)
from dpscaling.train.config import TrainConfig

logger = logging.getLogger(__name__)

# The config fields in which a prefix may differ from the run it starts: its horizon, and how often it saved.
HORIZON_FIELDS = frozenset({"num_steps", "checkpoint_every"})


def prefix_refusal(prefix_dir: Path, config: TrainConfig, meta: DatasetMeta) -> str | None:
    """Why the run checkpointed in ``prefix_dir`` cannot be the first steps of ``config``'s run; None when it can
    (what remains to check is its checkpoint's step: :func:`restore_prefix`)."""
    if config.sampler.private:
        return f"a {config.sampling} run is calibrated to its own horizon and keeps its own secret key"
    if config.noise_mechanism.correlated:
        return f"the {config.mechanism} strategy is built for the run's horizon"
    found = recorded_config(prefix_dir)
    if found is None:
        return "it records no config"
    differ = sorted(set(config_differences(prefix_dir, config) or ()) - HORIZON_FIELDS)
    if differ:
        return f"its config differs in {differ}"
    if found["num_steps"] > config.num_steps:
        return f"its horizon, {found['num_steps']} steps, is past this run's {config.num_steps}"
    if recorded_vocabulary(prefix_dir) != vocabulary_record(meta):
        return "it trained on another vocabulary"
    return None


def shared_steps(prefix_dir: Path, config: TrainConfig) -> int:
    """How many first steps the run in ``prefix_dir`` (a prefix: :func:`prefix_refusal`) and ``config``'s share:
    up to the earlier branch step of the two horizons (the shorter run's own under the paper's schedule, its
    cooldown's start under ``constant_cooldown``: :mod:`dpscaling.train.schedules`)."""
    shorter = dataclasses.replace(config, num_steps=int(recorded_config(prefix_dir)["num_steps"]))
    return min(shorter.branch_step, config.branch_step)


def restore_prefix(prefix_dir: Path, config: TrainConfig, meta: DatasetMeta, template: Any) -> Restored | None:
    """The verified checkpoint of the run in ``prefix_dir`` at the last step it shares with this run
    (:func:`shared_steps`) as this run's start, read without modifying anything; None, with a warning, when it is
    not this run's prefix (:func:`prefix_refusal`), has no checkpoint there, or does not verify."""
    prefix_dir = Path(prefix_dir)
    reason = prefix_refusal(prefix_dir, config, meta)
    restored = None
    if reason is None:
        shared = shared_steps(prefix_dir, config)
        manager = open_manager(prefix_dir / STATE_DIR, read_only=True)
        try:
            # checked before its state is read
            step = max((found for found in manager.all_steps() if found <= shared), default=None)
            if step is None:
                reason = f"it has no checkpoint at or before step {shared}, the last step the two runs share"
            elif step % config.log_every:
                reason = f"its step {step} is not a multiple of log_every={config.log_every}"
            else:
                restored = restore_verified_read_only(manager, template, prefix_dir, step)
        except UserError as error:
            reason = str(error)
        finally:
            manager.close()
    if reason is not None:
        logger.warning("not continuing %s (%s): training from step 0", prefix_dir, reason)
        return None
    logger.info("continuing %s from its verified step %d, the first steps of this run", prefix_dir, restored.step)
    return restored
