"""Layers whose per-example gradient norms :mod:`dpscaling.dp.ghost` computes beyond Flax's own, and the stack
of a model's identical layers, unrolled or scanned.

Models build their output bias from :class:`Bias` so that ghost clipping recognises it (a plain
``self.param`` in a model would be a parameter the ghost path cannot see, and it refuses those).

:func:`layer_stack` applies a model's ``num_layers`` identical layers. Unrolled (the default), layer i is the
module ``{prefix}_{i}`` and XLA compiles every layer again: a DP step's compilation grows linearly with depth
(docs/train.md). Scanned (``scan_layers``), the layers are one module :data:`STACKED_LAYERS` whose parameters
carry a leading layer axis, applied by ``flax.linen.scan`` (as MaxText and levanter do): one layer is compiled,
whatever the depth; with ``remat`` each layer's activations are recomputed in the backward pass instead of
stored. Both layouts compute the same function of the same parameters: :func:`stack_layers` and
:func:`unstack_layers` convert between them, and a scanned model starts from the unrolled model's
initialisation, stacked, so that a run's curve does not depend on its layout (tested to float32 tolerance).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn

# The scanned stack's name in the parameter tree; ghost clipping finds the layers inside the scan by it
STACKED_LAYERS = "layers"
# Set by ghost clipping while it traces a model (dpscaling.dp.ghost._Stack): the body a scanned stack runs its
# layers in, which adds stacked perturbations and returns the layers' inputs; None: the plain body
STACK_BODY: ContextVar = ContextVar("dpscaling_stack_body", default=None)


class Bias(nn.Module):
    """Adds a learned bias over the last axis (e.g. the MLM output bias)."""

    features: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        return x + self.param("bias", nn.initializers.zeros_init(), (self.features,))


def _carry(layer: nn.Module, x: jnp.ndarray, *shared: Any) -> tuple[jnp.ndarray, None]:
    return layer(x, *shared), None


def layer_stack(make_layer: Callable[[str], nn.Module], num_layers: int, prefix: str, x: jnp.ndarray,
                *shared: Any, scan: bool = False, remat: bool = False) -> jnp.ndarray:
    """``x`` through ``num_layers`` layers ``make_layer(name)(x, *shared)`` (``shared``: the same for every layer,
    e.g. the attention mask); call it inside the model's compact ``__call__``. Unrolled: modules
    ``{prefix}_0`` … ``{prefix}_{L-1}``; ``scan``: one module :data:`STACKED_LAYERS` of stacked parameters,
    ``remat``: its activations recomputed in the backward pass."""
    if not scan:
        for i in range(num_layers):
            x = make_layer(f"{prefix}_{i}")(x, *shared)
        return x
    traced = STACK_BODY.get()
    if traced is None:
        body, scanned_in, in_axes = _carry, (), ()
    else:  # ghost clipping: per-layer perturbations in, per-layer inputs out (dpscaling.dp.ghost)
        body, scanned_in, in_axes = traced.body, (traced.perturbations,), (0,)
    body = nn.remat(body, prevent_cse=False) if remat else body  # prevent_cse is not needed inside a scan
    scanned = nn.scan(body, variable_axes={"params": 0}, split_rngs={"params": True},
                      in_axes=in_axes + (nn.broadcast,) * len(shared), length=num_layers)
    x, outputs = scanned(make_layer(STACKED_LAYERS), x, *scanned_in, *shared)
    if traced is not None:
        traced.inputs = outputs
    return x


def stack_layers(params: Mapping[str, Any], prefix: str, num_layers: int | None = None) -> dict[str, Any]:
    """An unrolled model's parameters (``{prefix}_{i}``; all of them when ``num_layers`` is None) in the scanned
    layout (:data:`STACKED_LAYERS`, layer axis first); the other parameters as they are."""
    if num_layers is None:
        num_layers = sum(1 for key in params if key.startswith(f"{prefix}_") and key[len(prefix) + 1:].isdigit())
    names = [f"{prefix}_{i}" for i in range(num_layers)]
    missing = [name for name in names if name not in params]
    if missing:
        raise ValueError(f"stack_layers: the parameters have no {missing[0]} (layers named {prefix}_<i> expected)")
    stacked = {key: value for key, value in params.items() if key not in names}
    stacked[STACKED_LAYERS] = jax.tree.map(lambda *layers: jnp.stack(layers), *(params[name] for name in names))
    return stacked


def unstack_layers(params: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """A scanned model's parameters in the unrolled layout (:func:`stack_layers`'s inverse)."""
    unrolled = {key: value for key, value in params.items() if key != STACKED_LAYERS}
    stacked = params[STACKED_LAYERS]
    num_layers = jax.tree.leaves(stacked)[0].shape[0]
    for i in range(num_layers):
        unrolled[f"{prefix}_{i}"] = jax.tree.map(lambda leaf, i=i: leaf[i], stacked)
    return unrolled


def is_scanned(params: Mapping[str, Any]) -> bool:
    """Whether ``params`` are in the scanned layout."""
    return STACKED_LAYERS in params


def in_unrolled_order(transform: optax.GradientTransformation, prefix: str) -> optax.GradientTransformation:
    """``transform`` applied to the unrolled view of a scanned model's updates (its state in that view too), so
    that what it draws is the unrolled model's draw, coordinate for coordinate: the DP noise
    (:func:`dpscaling.dp.noise.standard_normal_like` splits one draw among the leaves in their order, which
    stacking changes). A run's noise, and so its curve, is then the same in either layout."""

    def view(tree):
        return unstack_layers(tree, prefix) if tree is not None and is_scanned(tree) else tree

    def init(params):
        return transform.init(view(params))

    def update(updates, state, params=None):
        unrolled, state = transform.update(view(updates), state, view(params))
        return (stack_layers(unrolled, prefix) if is_scanned(updates) else unrolled), state

    return optax.GradientTransformation(init, update)
