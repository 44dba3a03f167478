"""Per-example clipped sums by materialising per-example gradients (``clipping: vmap``).

Each example's gradient comes from ``vmap(grad)``; the weighted sum of the clipped gradients is
a contraction (:func:`dpscaling.dp.per_example.weighted_sum`). See :mod:`dpscaling.dp.per_example`
for the clipping rule and the microbatched aggregation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dpscaling.dp.per_example import BatchLossFn, PyTree, clip_factors, tree_sq_norms, weighted_sum


def vmap_clipped_sum(
    loss_fn: BatchLossFn,
    params: PyTree,
    batch: PyTree,
    clip_norm: float,
    example_weights: jnp.ndarray | None = None,
) -> tuple[PyTree, jnp.ndarray, jnp.ndarray]:
    """Σ_b w_b · clip(g_b) of one microbatch by materialising per-example gradients
    (w_b = ``example_weights``, all 1 when None)."""

    def single_loss(p, example):
        one = jax.tree.map(lambda x: x[None], example)
        return loss_fn(p, one)[0]

    losses, grads = jax.vmap(jax.value_and_grad(single_loss), in_axes=(None, 0))(params, batch)
    norms = jnp.sqrt(tree_sq_norms(grads))
    factors = clip_factors(norms, clip_norm)
    if example_weights is not None:
        factors = factors * example_weights
    return weighted_sum(factors, grads), losses, norms
