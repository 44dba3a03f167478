"""Gaussian noise on the clipped mean gradient, as an optax transformation (Algorithm 1).

DP-Adam = ``optax.chain(add_gaussian_noise(σ̄, seed), optax.adam(schedule))`` applied to
the clipped mean gradient of :func:`dpscaling.dp.clipping.clipped_mean_grad`: the
noise std is the *noise-batch ratio* σ̄ on the mean (paper §2, "Noise-Batch Ratio"),
i.e. noise multiplier B·σ̄ on the sum. Any optax optimizer can be the OptimizerUpdate.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
import optax.tree_utils as otu


class GaussianNoiseState(NamedTuple):
    count: jnp.ndarray  # updates applied so far; the noise of step t uses fold_in(key, t)
    noise_key: jax.Array  # the stream's key, in the state so a checkpoint carries it


def replace_noise_key(opt_state, key: jax.Array):
    """``opt_state`` with the noise stream's key replaced (e.g. by a secret one).

    The key enters as data, never as a constant of a compiled function, so it cannot
    reach XLA's compilation cache or a lowered program.
    """
    return otu.tree_set(opt_state, noise_key=key)


def noise_key_of(opt_state) -> jax.Array:
    """The noise stream's key stored in ``opt_state``."""
    return otu.tree_get(opt_state, "noise_key")


def add_gaussian_noise(stddev: float, key: jax.Array | int) -> optax.GradientTransformation:
    """Add i.i.d. N(0, stddev²) noise in float32 to every coordinate of the update.

    ``key`` is a PRNG key (or an int seed); ``init`` stores it in the state, and the
    noise of update t depends only on (stored key, t), so a run resumed from a
    checkpoint (which stores both) draws exactly the noise of an uninterrupted run.
    ``stddev = 0`` passes updates through unchanged (the non-private baseline).
    """
    if stddev < 0:
        raise ValueError(f"noise stddev must be >= 0, got {stddev}")
    base_key = jax.random.PRNGKey(key) if isinstance(key, int) else key

    def init_fn(params):
        del params
        return GaussianNoiseState(count=jnp.zeros([], jnp.int32), noise_key=base_key)

    def update_fn(updates, state, params=None):
        del params
        if stddev > 0:
            key = jax.random.fold_in(state.noise_key, state.count)
            noise = otu.tree_random_like(key, updates, jax.random.normal, dtype=jnp.float32)
            updates = jax.tree.map(
                lambda u, n: (u.astype(jnp.float32) + stddev * n).astype(u.dtype), updates, noise
            )
        return updates, GaussianNoiseState(count=state.count + 1, noise_key=state.noise_key)

    return optax.GradientTransformation(init_fn, update_fn)


def dp_optimizer(
    optimizer: optax.GradientTransformation, noise_batch_ratio: float, key: jax.Array | int
) -> optax.GradientTransformation:
    """Generalized DP-SGD's noise + OptimizerUpdate (Algorithm 1, lines 5–6).

    Feed it the clipped mean gradient; with ``optax.adam`` this is the paper's DP-Adam.
    """
    return optax.chain(add_gaussian_noise(noise_batch_ratio, key), optimizer)
