"""Per-example normalized clipping: what both ways of computing it share, and its microbatched
aggregation (paper Algorithm 1).

The clipped mean gradient of Algorithm 1 is

    ḡ = (1/B) Σ_b clip(∇ℓ(θ; x_b)),   clip(g) = g · min(1, C/‖g‖) / C

("normalized" clipping of De et al. 2022: clip to C, then divide by C, so every
per-example contribution has norm ≤ 1 whatever C is; paper §3.2 uses C = 1).

The physical batch is processed as ``lax.scan`` over microbatches, so memory is flat
in B: each microbatch's clipped per-example gradients are reduced to one float32 sum
before the next microbatch starts. Two exact ways to compute a microbatch's clipped sum,
each in its own module, both built on this one:

* ``"vmap"`` (:mod:`dpscaling.dp.clipping`): materialise the microbatch's per-example gradients with
  ``vmap(grad)``; the weighted sum is a contraction (``tensordot``), never
  ``sum(g * s[:, None, ...], 0)``, which is 100×+ slower on CPU (docs/train.md, "The DP step on this CPU").
* ``"ghost"``: per-example norms from layer activations without per-example
  gradients, then the clipped sum by book-keeping (:mod:`dpscaling.dp.ghost`).

Variable-size (Poisson) batches run at a static shape: the batch is padded, and
``example_weights`` (1 = real example, 0 = padding) multiply the clip factors, so a
padding example's clipped gradient is exactly zero whatever it contains; the sum is
divided by ``normaliser``, the *expected* batch size (dividing by the realised size
would make the update's scale depend on the data).

A padded batch costs its drawn size, not its cap: the samplers lay a padded batch out with
:func:`real_examples_first` (real examples fill the leading microbatches, padding whole trailing
ones), and the accumulation stops after the last microbatch that holds a real example (a dynamic
trip count, ``lax.fori_loop``). A skipped microbatch would have added exactly zero, so the sum is
bit-identical to the scan over every microbatch (``skip_padding=False``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any
# Per-example loss of a batch: (params, batch) -> (batch,) losses. Examples must not
# interact (no batch statistics), so the gradient of Σ_b ℓ_b w.r.t. example b's
# activations is ∇ℓ_b — the ghost path relies on it.
BatchLossFn = Callable[[PyTree, PyTree], jnp.ndarray]
# One microbatch's Σ_b w_b · clip(g_b): (loss_fn, params, batch, clip_norm, weights) -> (sum, losses, norms).
ClippedSumFn = Callable[..., tuple[PyTree, jnp.ndarray, jnp.ndarray]]


class ClippedGrad(NamedTuple):
    """The clipped mean gradient of a batch and per-example diagnostics."""

    grad: PyTree  # (1/B) Σ_b clip(g_b), float32
    losses: jnp.ndarray  # (B,) per-example losses
    norms: jnp.ndarray  # (B,) per-example gradient norms before clipping


def clip_factors(norms: jnp.ndarray, clip_norm: float) -> jnp.ndarray:
    """Per-example scale s_b with clip(g_b) = s_b · g_b (normalized clipping)."""
    # Written with a max in the denominator (not a division by the norm) so that
    # zero gradients give a finite factor and infinite norms give 0.
    return 1.0 / jnp.maximum(norms, clip_norm)


def weighted_sum(weights: jnp.ndarray, per_example: PyTree) -> PyTree:
    """Σ_b w_b · g_b over the leading axis of every leaf, as a contraction, in float32."""
    return jax.tree.map(
        lambda g: jnp.tensordot(weights, g.astype(jnp.float32), axes=1), per_example
    )


def tree_sq_norms(per_example: PyTree) -> jnp.ndarray:
    """Squared global L2 norm of each example's gradient (leading axis = example)."""
    leaves = jax.tree.leaves(per_example)
    return sum(
        jnp.sum(jnp.square(g.astype(jnp.float32)).reshape(g.shape[0], -1), axis=1) for g in leaves
    )


def microbatches(batch: PyTree, microbatch_size: int) -> PyTree:
    """Reshape leaves (B, ...) → (B/m, m, ...) with microbatch k = examples {k, k+B/m, …}.

    The strided assignment keeps each device's contiguous shard of a data-parallel
    batch inside every microbatch, so no example moves between devices.
    """
    n = _microbatch_count(jax.tree.leaves(batch)[0].shape[0], microbatch_size)
    return jax.tree.map(
        lambda x: jnp.swapaxes(x.reshape((microbatch_size, n) + x.shape[1:]), 0, 1), batch
    )


def _microbatch_count(size: int, microbatch_size: int) -> int:
    if size % microbatch_size:
        raise ValueError(f"batch size {size} is not a multiple of microbatch size {microbatch_size}")
    return size // microbatch_size


def real_examples_first(padded: np.ndarray, microbatch_size: int | None) -> np.ndarray:
    """The physical batch (leading axis) reordered so that microbatch k of :func:`microbatches` holds
    ``padded[k·m : (k+1)·m]``: a padded batch listed real examples first then has its padding in whole
    trailing microbatches, which :func:`clipped_mean_grad` skips. ``None``: one microbatch, unchanged."""
    m = microbatch_size or len(padded)
    n = _microbatch_count(len(padded), m)
    return np.swapaxes(np.reshape(padded, (n, m) + np.shape(padded)[1:]), 0, 1).reshape(np.shape(padded))


def clipped_mean_grad(
    loss_fn: BatchLossFn,
    params: PyTree,
    batch: PyTree,
    *,
    clipped_sum: ClippedSumFn,
    clip_norm: float = 1.0,
    microbatch_size: int | None = None,
    microbatch_sharding: jax.sharding.Sharding | None = None,
    example_weights: jnp.ndarray | None = None,
    normaliser: float | None = None,
    skip_padding: bool = True,
) -> ClippedGrad:
    """ḡ = (1/B) Σ_b clip(∇ℓ(θ; x_b)) of Algorithm 1, accumulated over microbatches.

    Args:
      loss_fn: per-example losses of a batch, ``(params, batch) -> (B,)``.
      batch: pytree of arrays with the example axis first.
      clipped_sum: one microbatch's clipped sum, :func:`dpscaling.dp.clipping.vmap_clipped_sum` or
        :func:`dpscaling.dp.ghost.ghost_clipped_sum` (same result up to float rounding); the caller
        chooses (``dpscaling.dp.CLIPPED_SUMS``).
      microbatch_size: examples per scan step (None = the whole batch at once).
      microbatch_sharding: optional sharding of the ``(n_micro, m, ...)`` batch, e.g.
        ``NamedSharding(mesh, P(None, "data"))`` for data parallelism.
      example_weights: optional ``(B,)`` weights w_b multiplying each clipped gradient
        (0 marks a padding example, whose contribution is then exactly zero).
      normaliser: the divisor of the clipped sum (None = the physical batch size B);
        padded Poisson batches pass the expected batch size.
      skip_padding: with ``example_weights``, stop after the last microbatch holding a real example
        (its losses and norms read 0 beyond it); False scans every microbatch (the same sum, bit for bit).
    """
    size = jax.tree.leaves(batch)[0].shape[0]
    micro = microbatches((batch, example_weights), microbatch_size or size)
    if microbatch_sharding is not None:
        micro = jax.lax.with_sharding_constraint(
            micro, jax.tree.map(lambda _: microbatch_sharding, micro)
        )

    def step(total, mb):
        examples, weights = mb
        grad_sum, losses, norms = clipped_sum(loss_fn, params, examples, clip_norm, weights)
        return jax.tree.map(jnp.add, total, grad_sum), (losses, norms)

    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
    if example_weights is None or not skip_padding:
        total, (losses, norms) = jax.lax.scan(step, zeros, micro)
    else:
        total, (losses, norms) = _accumulate_real_microbatches(step, zeros, micro)
    # Undo the strided microbatch layout so losses/norms line up with the batch.
    unstride = lambda x: jnp.swapaxes(x, 0, 1).reshape(size)  # noqa: E731
    mean = jax.tree.map(lambda g: g / (size if normaliser is None else normaliser), total)
    return ClippedGrad(mean, unstride(losses), unstride(norms))


def _accumulate_real_microbatches(step, zeros: PyTree, micro: PyTree):
    """``lax.scan(step, zeros, micro)`` over the microbatches up to the last one holding a real example
    (weight > 0): the same carry, bit for bit, since a microbatch of padding adds exactly zero; the skipped
    microbatches' outputs read 0."""
    weights = micro[1]
    n = weights.shape[0]
    holds_real = jnp.any(weights > 0, axis=tuple(range(1, weights.ndim)))
    active = jnp.max(jnp.where(holds_real, jnp.arange(1, n + 1), 0))
    first = jax.tree.map(lambda x: x[0], micro)
    _, out_shape = jax.eval_shape(step, zeros, first)
    outputs = jax.tree.map(lambda o: jnp.zeros((n,) + o.shape, o.dtype), out_shape)

    def body(k, carry):
        total, outputs = carry
        total, out = step(total, jax.tree.map(lambda x: x[k], micro))
        return total, jax.tree.map(lambda buffer, o: buffer.at[k].set(o), outputs, out)

    return jax.lax.fori_loop(0, active, body, (zeros, outputs))
