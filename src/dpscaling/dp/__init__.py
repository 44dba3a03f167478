"""DP-SGD with any optax optimizer (paper §2 Algorithm 1; appendix "Notes on Generalized DP-SGD").

``clipped_mean_grad`` computes the clipped mean gradient ḡ (per-example normalized
clipping, microbatched) with one of :data:`CLIPPED_SUMS` (the caller chooses);
``dp_optimizer`` adds N(0, σ̄²) noise to it and applies the OptimizerUpdate (DP-Adam with
``optax.adam``).
"""

from dpscaling.dp.clipping import vmap_clipped_sum
from dpscaling.dp.ghost import ghost_clipped_sum
from dpscaling.dp.noise import add_gaussian_noise, dp_optimizer
from dpscaling.dp.per_example import ClippedGrad, ClippedSumFn, clip_factors, clipped_mean_grad, weighted_sum

# How a microbatch's clipped sum is computed (config key training.clipping).
CLIPPED_SUMS: dict[str, ClippedSumFn] = {"vmap": vmap_clipped_sum, "ghost": ghost_clipped_sum}
CLIPPING_METHODS: tuple[str, ...] = tuple(CLIPPED_SUMS)

__all__ = [
    "CLIPPED_SUMS",
    "CLIPPING_METHODS",
    "ClippedGrad",
    "ClippedSumFn",
    "add_gaussian_noise",
    "clip_factors",
    "clipped_mean_grad",
    "dp_optimizer",
    "ghost_clipped_sum",
    "vmap_clipped_sum",
    "weighted_sum",
]
