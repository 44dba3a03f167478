"""A training run's privacy, the part of a run that its guarantee rests on (paper §2 and §3.2; beyond the paper:
matched accounting of the sampler that runs): the accountant's price of the sampler and mechanism it runs, with the
truncated batch L it priced (:func:`account`); the sequences and users it trains on (:func:`training_rows`,
:func:`users_subset`, :func:`protected_examples`); the guarantee as curve columns (:func:`privacy_columns`); and the
secret noise key, drawn from the operating system's entropy and kept only in the checkpointed state
(:func:`private_key`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from dpscaling.accounting.matched import RunPrivacy, account_run
from dpscaling.core.errors import UserError
from dpscaling.core.streams import Stream
from dpscaling.data.users import subset_of_users
from dpscaling.dp.correlated import strategy_coefficients
from dpscaling.dp.noise import noise_key_of, replace_noise_key
from dpscaling.train.config import TrainConfig
from dpscaling.train.distributed import DataParallel
from dpscaling.train.sampling import secret_key


@dataclass(frozen=True)
class Accounted:
    """A run's privacy accounting (:func:`account`): its config as it runs (with the L its accountant priced),
    its guarantee, and what went into that guarantee which its curve records."""

    config: TrainConfig
    privacy: RunPrivacy
    coefficients: np.ndarray  # the noise mechanism's strategy (dpscaling.dp.correlated)
    units: int  # N, in sampled units
    user_level: bool  # whether its sampler protects or samples users
    examples_per_user: int | None  # k, of a user-level run


def account(config: TrainConfig, rows: np.ndarray, users: np.ndarray | None, parallel: DataParallel) -> Accounted:
    """The run's guarantee for the sampler and mechanism it runs (:func:`dpscaling.accounting.matched.account_run`),
    with its config given the truncated batch L the accountant priced (checked against the devices, as a set L was
    before any data was read)."""
    coefficients = strategy_coefficients(config.noise_mechanism, config.num_steps, config.bandmf_strategy)
    units = len(rows) if config.sampler.unit == "sequence" else int(users.max()) + 1  # N, in sampled units
    user_level = "user" in (config.sampler.protects, config.sampler.unit)
    examples_per_user = protected_examples(users, config) if user_level else None  # k
    privacy = account_run(
        config.sampling,
        config.accountant,
        dataset_size=units,
        expected_batch_size=config.batch_size,
        steps=config.num_steps,
        delta=config.delta,
        noise_batch_ratio=config.noise_batch_ratio,
        target_epsilon=config.target_epsilon,
        truncated_batch_size=config.truncated_batch_size,
        multiple=config.microbatch_size or parallel.n_devices,
        mechanism=config.mechanism,
        coefficients=coefficients,
        examples_per_user=examples_per_user if config.sampler.unit == "sequence" else None,
    )
    if not config.truncation_resolved:  # the L its accountant priced is what runs (and is recorded)
        config = dataclasses.replace(config, truncated_batch_size=privacy.truncated_batch_size)
        check_divisible(config, parallel)
    return Accounted(config, privacy, coefficients, units, user_level, examples_per_user)


def check_divisible(config: TrainConfig, parallel: DataParallel) -> None:
    for name in ("physical_batch_size", "microbatch"):
        if getattr(config, name) % parallel.n_devices:
            raise UserError(
                f"train.{name}: {getattr(config, name)} is not divisible by the "
                f"{parallel.n_devices} devices"
            )


def protected_examples(users: np.ndarray | None, config: TrainConfig) -> int | None:
    """k, the sequences of a user the run protects: ``config.examples_per_user`` (a budget's k), refused when a
    user of the training data has more; without it, the most any user has."""
    if users is None:
        return None
    most = int(np.bincount(users).max())
    if config.examples_per_user is None:
        return most
    if most > config.examples_per_user:
        raise UserError(f"train.examples_per_user: a user of the training data has {most} sequences, more than the "
                        f"{config.examples_per_user} the run protects; cap them (data.users.max_examples) at most at "
                        "that k")
    return config.examples_per_user


def users_subset(rows: np.ndarray, users: np.ndarray, config: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """``config.train_users`` of the users with every sequence of each (:func:`dpscaling.data.users.subset_of_users`:
    the users of smallest key, keyed by ``config.seed``); all of them without ``train_users``."""
    kept, users = subset_of_users(rows, users, config.train_users, config.seed)
    return rows[kept], users


def training_rows(rows: np.ndarray, config: TrainConfig) -> np.ndarray:
    """The sequences a run trains on: all of ``rows``, or ``config.train_sequences`` of them drawn
    without replacement by a generator seeded with ``config.seed`` only (public, independent of the
    data), in their original order. The accountant's dataset size is ``len`` of the result."""
    if config.train_sequences is None:
        return rows
    chosen = np.random.default_rng([config.seed, Stream.SUBSET]).choice(
        len(rows), config.train_sequences, replace=False
    )
    return rows[np.sort(chosen)]


def private_key(state, fresh: bool, parallel: DataParallel):
    """A private run's secret key: fresh from OS entropy (the same on every process) and put
    into the state's noise stream, or, on resume, the one restored with the state."""
    from jax.experimental import multihost_utils

    if fresh:
        key = np.asarray(multihost_utils.broadcast_one_to_all(secret_key()), np.uint32)
        state = with_noise_key(state, key, parallel)
    else:
        key = np.asarray(jax.device_get(noise_key_of(state.opt_state)), np.uint32)
    return state, key


def with_noise_key(state, key: np.ndarray, parallel: DataParallel):
    """``state`` whose noise stream uses ``key`` (placed as data, never as a compiled constant)."""
    replicated = jax.device_put(key, parallel.replicated)
    return state._replace(opt_state=replace_noise_key(state.opt_state, replicated))


def privacy_columns(privacy: RunPrivacy) -> dict[str, Any]:
    """The run's guarantee as curve columns (T as ``accounted_steps``: ``step`` is the row's)."""
    record = privacy.record()
    record["accounted_steps"] = record.pop("steps")
    return record
