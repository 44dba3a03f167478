"""Gaussian noise on the clipped mean gradient, as an optax transformation (Algorithm 1).

DP-Adam = ``optax.chain(add_gaussian_noise(σ̄, seed), optax.adam(schedule))`` applied to
the clipped mean gradient of :func:`dpscaling.dp.clipping.clipped_mean_grad`: the
noise std is the *noise-batch ratio* σ̄ on the mean (paper §2, "Noise-Batch Ratio"),
i.e. noise multiplier B·σ̄ on the sum. Any optax optimizer can be the OptimizerUpdate.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpscaling.dp.correlated import CorrelatedNoiseState
from dpscaling.dp.layers import STACKED_LAYERS, is_scanned


class GaussianNoiseState(NamedTuple):
    count: jnp.ndarray  # updates applied so far; the noise of step t uses fold_in(key, t)


class KeyedGaussianNoiseState(NamedTuple):
    """The state of a stream whose key is data in the state (a private run's secret key), so
    its checkpoint carries the key; :class:`GaussianNoiseState` (the study's, keyed by the
    transform) keeps the layout of earlier checkpoints."""

    count: jnp.ndarray
    noise_key: jax.Array


def _is_noise_state(x) -> bool:
    return isinstance(x, (GaussianNoiseState, KeyedGaussianNoiseState, CorrelatedNoiseState))


def _with_key(state, key: jax.Array):
    if isinstance(state, CorrelatedNoiseState):
        return state._replace(noise_key=key)
    return KeyedGaussianNoiseState(state.count, key)


def replace_noise_key(opt_state, key: jax.Array):
    """``opt_state`` whose noise stream uses ``key`` (e.g. a secret one) from now on.

    The key enters as data, never as a constant of a compiled function, so it cannot
    reach XLA's compilation cache or a lowered program.
    """
    return jax.tree.map(
        lambda x: _with_key(x, key) if _is_noise_state(x) else x,
        opt_state,
        is_leaf=_is_noise_state,
    )


def noise_key_of(opt_state) -> jax.Array | None:
    """The key stored in ``opt_state`` (None: the stream uses the transform's own key)."""
    found = [x.noise_key for x in jax.tree.leaves(opt_state, is_leaf=_is_noise_state)
             if isinstance(x, (KeyedGaussianNoiseState, CorrelatedNoiseState))]
    return found[0] if found else None


def standard_normal_like(key: jax.Array, tree, layer_prefix: str | None = None):
    """i.i.d. N(0, 1) float32 noise shaped like ``tree``: one draw of all its coordinates, split among its
    leaves in their flattening order.

    One draw, not one per leaf (optax's ``tree_random_like``): a step's noise then compiles to a few kernels
    instead of a threefry and a transform per leaf (the DP step compiles in about half the time, at the same
    step time: docs/runs.md), and the coordinates are i.i.d. either way.

    With ``layer_prefix``, a scanned model's parameters (:mod:`dpscaling.dp.layers`) receive the unrolled
    model's draw, coordinate for coordinate, in as many operations as the unrolled model has leaves per layer,
    whatever the depth (a run's curve does not depend on its layout).
    """
    if layer_prefix is not None and is_scanned(tree):
        return _unrolled_draw(key, tree, layer_prefix)
    return _split(jax.random.normal(key, (_size(tree),), jnp.float32), tree)


def _size(tree) -> int:
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(tree))


def _split(flat: jnp.ndarray, tree):
    """``flat`` split among ``tree``'s leaves in their flattening order, each in its leaf's shape."""
    leaves, treedef = jax.tree.flatten(tree)
    sizes = [math.prod(leaf.shape) for leaf in leaves]
    pieces = jnp.split(flat, list(itertools.accumulate(sizes))[:-1])
    return jax.tree.unflatten(treedef, [piece.reshape(leaf.shape) for piece, leaf in zip(pieces, leaves)])


def _unrolled_draw(key: jax.Array, tree, prefix: str):
    """:func:`standard_normal_like`'s draw for the unrolled twin of the scanned ``tree``, in ``tree``'s layout.
    The unrolled tree's top-level keys sort ``{prefix}_10`` before ``{prefix}_2``: its layers' draws form one
    contiguous block of rows in that order, put back in layer order by one gather of L rows."""
    stacked = tree[STACKED_LAYERS]
    layers = jax.tree.leaves(stacked)[0].shape[0]
    one_layer = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape[1:], leaf.dtype), stacked)
    layer_size = _size(one_layer)
    layer_names = [f"{prefix}_{i}" for i in range(layers)]
    order = sorted([key for key in tree if key != STACKED_LAYERS] + layer_names)
    first = order.index(min(layer_names))
    if order[first:first + layers] != sorted(layer_names):
        raise ValueError(f"noise: a parameter's name sorts among the layers {prefix}_<i>: {order}")
    flat = jax.random.normal(key, (_size(tree),), jnp.float32)
    drawn, offset = {}, 0
    for name in order[:first] + [STACKED_LAYERS] + order[first + layers:]:
        size = layers * layer_size if name == STACKED_LAYERS else _size(tree[name])
        drawn[name] = flat[offset:offset + size]
        offset += size
    rows = drawn[STACKED_LAYERS].reshape(layers, layer_size)
    row_of = {name: row for row, name in enumerate(sorted(layer_names))}
    rows = jnp.take(rows, jnp.asarray([row_of[name] for name in layer_names]), axis=0)
    leaves, treedef = jax.tree.flatten(stacked)
    sizes = [math.prod(leaf.shape[1:]) for leaf in leaves]
    columns = jnp.split(rows, list(itertools.accumulate(sizes))[:-1], axis=1)
    result = {name: _split(piece, tree[name]) for name, piece in drawn.items() if name != STACKED_LAYERS}
    result[STACKED_LAYERS] = jax.tree.unflatten(
        treedef, [column.reshape(leaf.shape) for column, leaf in zip(columns, leaves)])
    return type(tree)(result)


def add_gaussian_noise(stddev: float | jax.Array, key: jax.Array | int, layer_prefix: str | None = None
                       ) -> optax.GradientTransformation:
    """Add i.i.d. N(0, stddev²) noise in float32 to every coordinate of the update.

    ``key`` is a PRNG key (or an int seed). The noise of update t depends only on
    (key, t), where a key set in the state (:func:`replace_noise_key`) overrides ``key``;
    a run resumed from a checkpoint (which stores ``count`` and any state key) draws
    exactly the noise of an uninterrupted run.
    A Python ``stddev = 0`` passes updates through unchanged (the non-private baseline); a
    traced ``stddev`` (one compiled step for every σ̄) always draws, and 0 · noise adds 0.
    """
    concrete = isinstance(stddev, (int, float))
    if concrete and stddev < 0:
        raise ValueError(f"noise stddev must be >= 0, got {stddev}")
    base_key = jax.random.PRNGKey(key) if isinstance(key, int) else key

    def init_fn(params):
        del params
        return GaussianNoiseState(count=jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params=None):
        del params
        if not concrete or stddev > 0:
            stream = getattr(state, "noise_key", base_key)
            key = jax.random.fold_in(stream, state.count)
            noise = standard_normal_like(key, updates, layer_prefix)
            updates = jax.tree.map(
                lambda u, n: (u.astype(jnp.float32) + stddev * n).astype(u.dtype), updates, noise
            )
        return updates, state._replace(count=state.count + 1)

    return optax.GradientTransformation(init_fn, update_fn)


def gaussian_noise(mechanism, stddev: float | jax.Array, key: jax.Array, steps: int, strategy: str,
                   layer_prefix: str | None = None) -> optax.GradientTransformation:
    """DP-SGD's noise (its :attr:`~dpscaling.privacy.mechanisms.Mechanism.noise_builder`): i.i.d., whatever T; with
    ``layer_prefix``, a scanned model's in the unrolled model's order (:func:`standard_normal_like`)."""
    del mechanism, steps, strategy
    return add_gaussian_noise(stddev, key, layer_prefix)


def dp_optimizer(optimizer: optax.GradientTransformation, noise: optax.GradientTransformation
                 ) -> optax.GradientTransformation:
    """Generalized DP-SGD's noise + OptimizerUpdate (Algorithm 1, lines 5–6).

    Feed it the clipped mean gradient; with ``optax.adam`` this is the paper's DP-Adam. ``noise`` is the run's
    mechanism's (:meth:`dpscaling.privacy.mechanisms.Mechanism.noise_transform`): DP-SGD's i.i.d. Gaussian
    (:func:`gaussian_noise`) or BandMF's correlated noise.
    """
    return optax.chain(noise, optimizer)
