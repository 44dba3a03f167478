"""DP-SGD with any optax optimizer (paper §2 Algorithm 1; appendix "Notes on Generalized DP-SGD").

``clipped_mean_grad`` computes the clipped mean gradient ḡ (per-example normalized
clipping, microbatched); ``dp_optimizer`` adds N(0, σ̄²) noise to it and applies the
OptimizerUpdate (DP-Adam with ``optax.adam``).
"""

from dpscaling.dp.clipping import (
    CLIPPING_METHODS,
    ClippedGrad,
    clip_factors,
    clipped_mean_grad,
    vmap_clipped_sum,
    weighted_sum,
)
from dpscaling.dp.ghost import ghost_clipped_sum
from dpscaling.dp.noise import add_gaussian_noise, dp_optimizer

__all__ = [
    "CLIPPING_METHODS",
    "ClippedGrad",
    "add_gaussian_noise",
    "clip_factors",
    "clipped_mean_grad",
    "dp_optimizer",
    "ghost_clipped_sum",
    "vmap_clipped_sum",
    "weighted_sum",
]
