"""The privacy unit of a step: what one clipped contribution is (not in the paper, which clips one sequence;
user-level sampling after Charles et al. 2024, arXiv 2407.07737).

A sampler names its unit (:attr:`dpscaling.privacy.samplers.Sampler.unit`), and the train step asks the unit how to
turn the step's tokens into the objective's batch and which loss DP-SGD clips; it never asks which unit it is.

* ``sequence`` — tokens ``(B, S)``; each sequence's loss is clipped (the paper's).
* ``user`` — tokens ``(U, m, S)``: each row of the batch is one user's m sequences (the sampler's
  ``examples_per_user_per_batch``). The objective sees the ``U·m`` sequences, and the loss that is clipped is
  a user's mean over its m: one user's whole contribution to the step has norm at most C, however many
  sequences the user wrote. Example weights are then per user (a padded user slot weighs 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any
LossFn = Callable[[PyTree, dict[str, jnp.ndarray]], jnp.ndarray]


@dataclass(frozen=True)
class SequenceUnit:
    """One sequence per clipped contribution."""

    name: str = "sequence"

    def batch(self, objective, key: jax.Array, tokens: jnp.ndarray) -> dict[str, jnp.ndarray]:
        return objective.batch(key, tokens)

    def losses(self, losses_of: LossFn) -> LossFn:
        return losses_of


@dataclass(frozen=True)
class UserUnit:
    """One user's m sequences per clipped contribution: leaves ``(U, m, ...)``, one loss per user."""

    name: str = "user"

    def batch(self, objective, key: jax.Array, tokens: jnp.ndarray) -> dict[str, jnp.ndarray]:
        users, per_user = tokens.shape[:2]
        flat = objective.batch(key, tokens.reshape((users * per_user,) + tokens.shape[2:]))
        return jax.tree.map(lambda leaf: leaf.reshape((users, per_user) + leaf.shape[1:]), flat)

    def losses(self, losses_of: LossFn) -> LossFn:
        def user_losses(params, batch):
            users, per_user = jax.tree.leaves(batch)[0].shape[:2]
            flat = jax.tree.map(lambda leaf: leaf.reshape((users * per_user,) + leaf.shape[2:]), batch)
            return losses_of(params, flat).reshape(users, per_user).mean(axis=1)
        return user_losses


UNITS: dict[str, SequenceUnit | UserUnit] = {unit.name: unit for unit in (SequenceUnit(), UserUnit())}
