"""Counting a built Flax module's parameters (by abstract init: nothing is allocated, even for the
largest presets), split into embedding tables and the rest. Tests hold every family's closed-form
count (:mod:`dpscaling.models.shapes`) to this one."""

from __future__ import annotations

import math
from collections.abc import Iterable

import jax
import jax.numpy as jnp

from dpscaling.models.shapes import ParamCount


def count_module_params(module, init_inputs: Iterable[jax.ShapeDtypeStruct],
                        embedding_paths: frozenset[str]) -> ParamCount:
    """Parameters of ``module`` initialised on ``init_inputs``; those at ``embedding_paths`` (``"name/leaf"``)
    are the embedding tables."""
    shapes = jax.eval_shape(module.init, jax.random.key(0), *init_inputs)["params"]
    total = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes))
    embedding = sum(math.prod(leaf.shape) for path, leaf in jax.tree_util.tree_leaves_with_path(shapes)
                    if "/".join(str(getattr(key, "key", key)) for key in path) in embedding_paths)
    return ParamCount(total=total, non_embedding=total - embedding, embedding=embedding)


def token_ids(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.int32)
