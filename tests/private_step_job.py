"""Clipped gradients of a padded Poisson-style batch, on however many devices JAX sees.

Used in-process (one device) and as a subprocess under
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` (data-parallel sharding).
Usage: python tests/private_step_job.py OUTPUT.npz
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from dpscaling.dp import CLIPPED_SUMS, clipped_mean_grad
from dpscaling.train.distributed import DataParallel
from test_dp import BATCH, _setup

REAL = 5  # real examples; the other BATCH - REAL slots are padding with arbitrary content
EXPECTED = 4.0  # the expected batch size the clipped sum is divided by


def weights() -> np.ndarray:
    return (np.arange(BATCH) < REAL).astype(np.float32)


def padded_grads(method: str, microbatch: int = 4, sharded: bool = True) -> dict[str, np.ndarray]:
    """Flattened clipped mean gradient of the padded batch (padding = real-looking tokens)."""
    loss_fn, params, batch = _setup()
    parallel = DataParallel()
    tokens = jax.device_put(batch, parallel.batch) if sharded else batch
    w = jax.device_put(jnp.asarray(weights()), parallel.batch) if sharded else jnp.asarray(weights())

    def grad(p, b, w):
        return clipped_mean_grad(loss_fn, p, b, clip_norm=1.0, microbatch_size=microbatch,
                                 clipped_sum=CLIPPED_SUMS[method], example_weights=w, normaliser=EXPECTED,
                                 microbatch_sharding=parallel.microbatch if sharded else None)

    result = jax.jit(grad)(params, tokens, w)
    return flat_leaves(result.grad)


def unpadded_grads(method: str) -> dict[str, np.ndarray]:
    """The same examples without padding, divided by the same expected batch size."""
    loss_fn, params, batch = _setup()
    real = jax.tree.map(lambda x: x[:REAL], batch)
    result = jax.jit(lambda p, b: clipped_mean_grad(loss_fn, p, b, clip_norm=1.0, clipped_sum=CLIPPED_SUMS[method],
                                                    normaliser=EXPECTED))(params, real)
    return flat_leaves(result.grad)


def flat_leaves(tree) -> dict[str, np.ndarray]:
    return {jax.tree_util.keystr(path): np.asarray(leaf)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


if __name__ == "__main__":
    out = sys.argv[1]
    arrays = {f"{method}_{i}": value for method in ("vmap", "ghost")
              for i, value in enumerate(padded_grads(method).values())}
    np.savez(out, n_devices=jax.device_count(), **arrays)
