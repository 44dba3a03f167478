"""A model's parameters in its layer layout (:mod:`dpscaling.dp.layers`): unrolled or scanned.

A scanned model starts from its unrolled twin's initialisation, stacked (``flax.linen.scan`` would draw each
layer from other random streams), so that the same seed gives the same parameters in either layout and a run's
curve does not depend on it. A checkpoint's parameters are converted to the layout of the model that loads them
(a pretrained start, an evaluation); resuming a run in another layout is refused by the training loop, which
names ``scan_layers`` (the Adam moments are in the saved layout).
"""

from __future__ import annotations

from typing import Any

import jax

from dpscaling.dp.layers import is_scanned, stack_layers, unstack_layers


def unrolled_twin(model):
    """The same model with its layers unrolled (``model`` itself when they are)."""
    if not model.config.scan_layers:
        return model
    return type(model)(model.config.replace(scan_layers=False, remat=False))


def init_params(model, key: jax.Array, *inputs: Any) -> Any:
    """``model``'s initial parameters for ``key``: its unrolled twin's, in ``model``'s layout."""
    params = unrolled_twin(model).init(key, *inputs)["params"]
    return in_layout(params, model)


def in_layout(params: Any, model) -> Any:
    """``params`` (either layout) in ``model``'s layout."""
    if is_scanned(params) == bool(model.config.scan_layers):
        return params
    if model.config.scan_layers:
        return stack_layers(params, model.layer_prefix, model.config.num_layers)
    return unstack_layers(params, model.layer_prefix)
