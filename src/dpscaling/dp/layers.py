"""Layers whose per-example gradient norms :mod:`dpscaling.dp.ghost` computes beyond Flax's own.

Models build their output bias from :class:`Bias` so that ghost clipping recognises it (a plain
``self.param`` in a model would be a parameter the ghost path cannot see, and it refuses those).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import linen as nn


class Bias(nn.Module):
    """Adds a learned bias over the last axis (e.g. the MLM output bias)."""

    features: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        return x + self.param("bias", nn.initializers.zeros_init(), (self.features,))
