"""A run that continues a shorter run of its own configuration (its prefix) instead of retraining those steps.

Two runs whose configs differ only in their horizon (``num_steps``, and ``checkpoint_every``, which never changes
what trains) compute the same first steps: the batch of step s, its mask and noise are pure functions of (seed,
step), and the learning rate at s is the config's warm-up and ``decay_steps`` schedule, not the horizon's
(:func:`~dpscaling.train.config.learning_rate_schedule`). So the longer run may start from the shorter one's last
verified checkpoint and reproduce, step for step, the curve it would have trained from step 0. The workflow
uses it for the learning-rate protocol (paper §3.2 "Learning Rates"; docs/learning-rates.md): the protocol's run
at a rate is the first ``learning_rate_protocol.steps`` steps of the grid's σ̄ = 0 run at that rate, which then
continues it.

A prefix is refused (the run starts from step 0, with a warning saying why) when that argument does not hold:
a private sampler's run (its σ is calibrated to its own horizon, and its key is its own secret), a correlated
mechanism (its strategy is built for its horizon), another config, vocabulary or logging interval, or a checkpoint
past this run's horizon or between two of its logged steps. A prefix that does not verify is never used either:
it costs recomputation, never a wrong curve (:mod:`dpscaling.train.checkpoint`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from dpscaling.data.shards import DatasetMeta
from dpscaling.errors import UserError
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


def restore_prefix(prefix_dir: Path, config: TrainConfig, meta: DatasetMeta, template: Any) -> Restored | None:
    """The verified last checkpoint of the run in ``prefix_dir`` as this run's start, read without modifying
    anything; None, with a warning, when it is not this run's prefix (:func:`prefix_refusal`) or does not verify."""
    prefix_dir = Path(prefix_dir)
    reason = prefix_refusal(prefix_dir, config, meta)
    restored = None
    if reason is None:
        manager = open_manager(prefix_dir / STATE_DIR, read_only=True)
        try:
            step = manager.latest_step()  # checked before its state is read
            if step is not None and step % config.log_every:
                reason = f"its step {step} is not a multiple of log_every={config.log_every}"
            else:
                restored = restore_verified_read_only(manager, template, prefix_dir)
        except UserError as error:
            reason = str(error)
        finally:
            manager.close()
    if reason is not None:
        logger.warning("not continuing %s (%s): training from step 0", prefix_dir, reason)
        return None
    logger.info("continuing %s from its verified step %d, the first steps of this run", prefix_dir, restored.step)
    return restored
