"""Ghost norms + book-keeping: clipped gradient sums without per-example gradients.

For a layer y = x W, example b's gradient is x_bᵀ G_b (G_b = ∂ℓ_b/∂y_b), so

    ‖x_bᵀ G_b‖²_F = ⟨x_b x_bᵀ, G_b G_bᵀ⟩          ("ghost norm", Goodfellow 2015;
                                                    Li et al. 2022)
    Σ_b s_b x_bᵀ G_b = einsum('b,bni,bno->io')     (book-keeping, Bu et al. 2023)

One forward and one backward pass (w.r.t. zero "perturbations" added to every layer
output, which yields all G_b at once) give everything: the norms, then the clipped
sum from the stored x_b and G_b — no second backward pass. The weight-gradient
matmuls of the backward pass are never requested, so XLA drops them.

Exact for the layers BERT uses: Dense / DenseGeneral, Embed (lookup, and ``attend``
for the tied output projection — the tied table's norm includes the cross term
2⟨lookup grad, attend grad⟩), LayerNorm, and :class:`~dpscaling.dp.layers.Bias`.
Layers are found with ``flax.linen.intercept_methods``; a parameter not covered
raises instead of being silently left out of the norm.

Inside a scanned layer stack (:func:`dpscaling.dp.layers.layer_stack`) each layer's input and output exist
only inside the scan, so ghost clipping gives the stack the body it scans (:class:`_Stack`, through
:data:`~dpscaling.dp.layers.STACK_BODY`): the body adds each layer's slice of stacked perturbations (a scanned
input) and returns its layers' prepared inputs (a scanned output). The backward pass then gives every layer's
output gradient stacked along the layer axis, and the same norms and book-keeping run over that axis with
``vmap``: one pass, and a compilation that does not grow with depth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
from flax import linen as nn

from dpscaling.dp.layers import STACK_BODY, STACKED_LAYERS, Bias
from dpscaling.dp.per_example import BatchLossFn, PyTree, clip_factors
from dpscaling.core.errors import UserError

_f32 = lambda x: x.astype(jnp.float32)  # noqa: E731


class GhostUnsupported(UserError):
    """A layer the ghost-norm path cannot handle exactly; train with ``clipping: vmap`` instead."""


@jax.tree_util.register_dataclass
@dataclass
class _Use:
    """One parametrised layer call: its kind, module path, input and output gradient."""

    kind: str = field(metadata=dict(static=True))  # dense, embed, attend, layernorm, bias
    path: tuple[str, ...] = field(metadata=dict(static=True))
    input: jnp.ndarray | None
    params: dict  # leaf name -> parameter (shapes, and which leaves exist)
    grad: jnp.ndarray | None = None


def _classify(context: nn.module.InterceptorContext) -> str | None:
    module, method = context.module, context.method_name
    if method == "attend" and isinstance(module, nn.Embed):
        return "attend"
    if method != "__call__":
        return None
    if isinstance(module, nn.Embed):
        return "embed"
    if isinstance(module, nn.Dense):
        return "dense"
    if isinstance(module, nn.DenseGeneral):
        if module.batch_dims:
            raise GhostUnsupported("ghost clipping: DenseGeneral with batch_dims")
        return "dense"
    if isinstance(module, nn.LayerNorm):
        if module.reduction_axes != -1 or module.feature_axes != -1:
            raise GhostUnsupported("ghost clipping: LayerNorm over axes other than -1")
        return "layernorm"
    if isinstance(module, Bias):
        return "bias"
    return None


def _prepare_input(kind: str, module: nn.Module, x: jnp.ndarray) -> jnp.ndarray:
    """What book-keeping needs from a layer input, flattened to (B, tokens, features)."""
    batch = x.shape[0]
    if kind == "embed":
        return x.reshape(batch, -1)
    if kind == "dense":
        n_in = len(module.axis) if isinstance(getattr(module, "axis", -1), tuple) else 1
        x = x.reshape(x.shape[: x.ndim - n_in] + (-1,))
        return _f32(x.reshape(batch, -1, x.shape[-1]))
    if kind == "layernorm":
        # Same statistics as flax's LayerNorm (fast variance, clipped at 0).
        x = _f32(x)
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.maximum(jnp.mean(jnp.square(x), axis=-1, keepdims=True) - jnp.square(mean), 0)
        xhat = (x - mean) * jax.lax.rsqrt(var + module.epsilon)
        return xhat.reshape(batch, -1, x.shape[-1])
    if kind == "attend":
        return _f32(x.reshape(batch, -1, x.shape[-1]))
    return None  # bias: only the output gradient matters


@dataclass
class _Stack:
    """A scanned layer stack as ghost clipping traces it: the body the stack scans adds each layer's slice of the
    stacked ``perturbations`` (one per parametrised use inside a layer, in call order; empty: add none) and returns
    the layer's prepared inputs, which the scan stacks into ``inputs``. ``uses`` (kind, path) and ``shapes``
    (one layer's output) are the uses' static description, recorded while the body is traced."""

    perturbations: list
    uses: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    shapes: list[jax.ShapeDtypeStruct] = field(default_factory=list)
    inputs: list | None = None
    _layer: tuple[list, list] | None = None  # (this layer's perturbation slices, its recorded inputs)

    def body(self, layer: nn.Module, x: jnp.ndarray, perturbations: list, *shared):
        self.uses, self.shapes, recorded = [], [], []
        self._layer = (perturbations, recorded)
        try:
            y = layer(x, *shared)
        finally:
            self._layer = None
        return y, recorded

    def intercept(self, kind: str, module: nn.Module, x: jnp.ndarray, y: jnp.ndarray) -> jnp.ndarray:
        if self._layer is None:
            raise GhostUnsupported(f"ghost clipping: {module.path} is outside its scanned stack's body")
        perturbations, recorded = self._layer
        self.uses.append((kind, tuple(module.path)))
        self.shapes.append(jax.ShapeDtypeStruct(y.shape, y.dtype))
        recorded.append(_prepare_input(kind, module, x))
        if perturbations:
            y = y + perturbations[len(recorded) - 1].astype(y.dtype)
        return y


def _forward(loss_fn: BatchLossFn, params: PyTree, batch: PyTree, perturbations, stack: _Stack | None = None):
    """Per-example losses, with every parametrised layer's output shifted by a perturbation (those inside a
    scanned stack through ``stack``, which then holds their stacked inputs).

    Returns (losses, uses, output shapes); with ``perturbations=None`` nothing is added outside a stack.
    """
    uses: list[_Use] = []
    shapes: list[jax.ShapeDtypeStruct] = []

    def interceptor(next_fun, args, kwargs, context):
        kind = _classify(context)
        if kind is None:
            return next_fun(*args, **kwargs)
        y = next_fun(*args, **kwargs)
        module = context.module
        if module.path and module.path[0] == STACKED_LAYERS:  # inside the scan: its values stay there
            if kind in ("embed", "attend", "bias") or stack is None:
                raise GhostUnsupported(f"ghost clipping: a {kind} layer inside a scanned stack ({module.path})")
            return stack.intercept(kind, module, args[0], y)
        uses.append(
            _Use(
                kind=kind,
                path=tuple(module.path),
                input=_prepare_input(kind, module, args[0]),
                params=dict(module.variables.get("params", {})),
            )
        )
        shapes.append(jax.ShapeDtypeStruct(y.shape, y.dtype))
        if perturbations is not None:
            y = y + perturbations[len(uses) - 1].astype(y.dtype)
        return y

    token = STACK_BODY.set(stack)
    try:
        with nn.intercept_methods(interceptor):
            losses = loss_fn(params, batch)
    finally:
        STACK_BODY.reset(token)
    return losses, uses, shapes


def _gram_inner(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """Per-example ‖aᵀb‖²_F = ⟨a aᵀ, b bᵀ⟩ for a (B,N,I), b (B,N,O), without forming aᵀb."""
    return jnp.einsum(
        "bnm,bnm->b", jnp.einsum("bni,bmi->bnm", a, a), jnp.einsum("bno,bmo->bnm", b, b)
    )


def _ghost_is_cheaper(n: int, i: int, o: int) -> bool:
    """Gram matrices cost N²(I+O) multiply-adds per example, forming xᵀG costs N·I·O.

    At BERT's shapes (N = seq ≥ hidden) forming one layer's per-example gradients is
    usually cheaper, and they are then reused for the clipped sum (Bu et al.'s "mixed"
    book-keeping). Ghost norms win when N(I+O) < I·O, and always for the tied
    vocabulary-sized embedding, which is never formed per example.
    """
    return n * (i + o) < i * o


def _sq_norms_and_sum(use: _Use, scale: jnp.ndarray | None):
    """Per-example squared norms of this use's gradient for each parameter leaf, and,
    given clip factors ``scale``, its clipped sum Σ_b s_b g_b per leaf (else empty)."""
    x = use.input
    if use.kind == "dense":  # output features (possibly several axes) flattened like x's
        g = _f32(use.grad).reshape(x.shape[0], x.shape[1], -1)
    else:  # (B, tokens, features)
        g = _f32(use.grad).reshape(use.grad.shape[0], -1, use.grad.shape[-1])
    sq, total = {}, {}
    if use.kind == "dense":
        kernel = use.params["kernel"]
        if _ghost_is_cheaper(*x.shape[1:], g.shape[2]):
            sq["kernel"] = _gram_inner(x, g)
            if scale is not None:
                total["kernel"] = jnp.einsum("b,bni,bno->io", scale, x, g).reshape(kernel.shape)
        else:
            per_example = jnp.einsum("bni,bno->bio", x, g)  # this layer only
            sq["kernel"] = jnp.sum(jnp.square(per_example), axis=(1, 2))
            if scale is not None:
                total["kernel"] = jnp.tensordot(scale, per_example, axes=1).reshape(kernel.shape)
        if "bias" in use.params:
            per_example = g.sum(axis=1)
            sq["bias"] = jnp.sum(jnp.square(per_example), axis=1)
            if scale is not None:
                total["bias"] = jnp.tensordot(scale, per_example, axes=1).reshape(
                    use.params["bias"].shape
                )
    elif use.kind == "embed":
        same = x[:, :, None] == x[:, None, :]
        sq["embedding"] = jnp.einsum("bnm,bnm->b", same, jnp.einsum("bnd,bmd->bnm", g, g))
        if scale is not None:
            table = use.params["embedding"]
            total["embedding"] = (
                jnp.zeros(table.shape, jnp.float32)
                .at[x.reshape(-1)]
                .add((g * scale[:, None, None]).reshape(-1, g.shape[-1]))
            )
    elif use.kind == "attend":  # logits = h Eᵀ: grad E = Gᵀ h, G (B,M,V), h (B,M,D)
        sq["embedding"] = _gram_inner(g, x)
        if scale is not None:
            total["embedding"] = jnp.einsum("b,bmv,bmd->vd", scale, g, x)
    elif use.kind == "layernorm":
        per_example = {}
        if "scale" in use.params:
            per_example["scale"] = jnp.sum(g * x, axis=1)
        if "bias" in use.params:
            per_example["bias"] = g.sum(axis=1)
        for name, pe in per_example.items():
            sq[name] = jnp.sum(jnp.square(pe), axis=1)
            if scale is not None:
                total[name] = jnp.tensordot(scale, pe, axes=1)
    elif use.kind == "bias":
        pe = g.sum(axis=1)
        sq["bias"] = jnp.sum(jnp.square(pe), axis=1)
        if scale is not None:
            total["bias"] = jnp.tensordot(scale, pe, axes=1)
    return sq, total


def _tied_cross(embed: _Use, attend: _Use) -> jnp.ndarray:
    """⟨lookup grad, attend grad⟩ per example for a tied table:
    Σ_n Σ_m G[m, id_n] (h_m · g_n)."""
    ids, g_lookup = embed.input, _f32(embed.grad).reshape(embed.input.shape + (-1,))
    h, g_logits = attend.input, _f32(attend.grad).reshape(attend.input.shape[:2] + (-1,))
    gathered = jnp.take_along_axis(
        g_logits,
        jnp.broadcast_to(ids[:, None, :], (ids.shape[0], g_logits.shape[1], ids.shape[1])),
        axis=2,
    )
    return jnp.einsum("bmn,bmn->b", gathered, jnp.einsum("bmd,bnd->bmn", h, g_lookup))


def _leaf_key(path: tuple[str, ...], name: str) -> str:
    return "/".join(path + (name,))


def ghost_clipped_sum(
    loss_fn: BatchLossFn,
    params: PyTree,
    batch: PyTree,
    clip_norm: float,
    example_weights: jnp.ndarray | None = None,
) -> tuple[PyTree, jnp.ndarray, jnp.ndarray]:
    """Σ_b clip(g_b) of one microbatch via ghost norms and book-keeping.

    Same contract as :func:`dpscaling.dp.clipping.vmap_clipped_sum`.
    """
    stack = _Stack(perturbations=[])
    _, _, shapes = jax.eval_shape(lambda p, b: _forward(loss_fn, p, b, None, stack), params, batch)
    zeros = [jnp.zeros(s.shape, s.dtype) for s in shapes]
    stacked_uses = list(stack.uses)
    layers = jax.tree.leaves(params[STACKED_LAYERS])[0].shape[0] if stacked_uses else 0
    stacked_zeros = [jnp.zeros((layers, *s.shape), s.dtype) for s in stack.shapes]

    def summed(perturbations, stacked_perturbations):
        traced = _Stack(perturbations=stacked_perturbations)
        losses, uses, _ = _forward(loss_fn, params, batch, perturbations, traced if stacked_uses else None)
        return jnp.sum(losses), (losses, uses, traced.inputs or [])

    (output_grads, stacked_grads), (losses, uses, stacked_inputs) = jax.grad(
        summed, argnums=(0, 1), has_aux=True)(zeros, stacked_zeros)
    stacked = [(kind, path, x, g, _subtree(params, path))
               for (kind, path), x, g in zip(stacked_uses, stacked_inputs, stacked_grads, strict=True)]
    sq_norms = jnp.zeros(losses.shape, jnp.float32)
    for kind, path, x, g, leaves in stacked:  # each layer's norms, vmapped over the layer axis
        sq = jax.vmap(lambda x, g, p, kind=kind, path=path: _sq_norms_and_sum(_Use(kind, path, x, p, g), None)[0])(
            x, g, leaves)
        sq_norms = sq_norms + sum(value.sum(axis=0) for value in sq.values())
    norms = _norms(uses, output_grads, sq_norms)

    scale = clip_factors(norms, clip_norm)
    if example_weights is not None:
        scale = scale * example_weights
    totals: dict[str, jnp.ndarray] = {}
    for use in uses:
        _, total = _sq_norms_and_sum(use, scale)
        for name, value in total.items():
            key = _leaf_key(use.path, name)
            totals[key] = totals[key] + value if key in totals else value
    for kind, path, x, g, leaves in stacked:  # book-keeping per layer, stacked as the parameters are
        total = jax.vmap(lambda x, g, p, kind=kind, path=path: _sq_norms_and_sum(_Use(kind, path, x, p, g), scale)[1])(
            x, g, leaves)
        totals.update({_leaf_key(path, name): value for name, value in total.items()})

    def lookup(path, leaf):
        key = "/".join(str(getattr(k, "key", k)) for k in path)
        if key not in totals:
            raise GhostUnsupported(f"ghost clipping: no supported layer uses parameter {key}")
        return totals[key].reshape(leaf.shape)

    clipped = jax.tree_util.tree_map_with_path(lookup, params)
    return clipped, losses, norms


def _subtree(params: PyTree, path: tuple[str, ...]) -> dict:
    """The parameter leaves of the module at ``path`` (stacked, inside a scanned stack)."""
    node = params
    for key in path:
        node = node[key]
    return {name: leaf for name, leaf in node.items() if not isinstance(leaf, dict)}


def _norms(uses: list[_Use], output_grads: list[jnp.ndarray], sq_norms: jnp.ndarray) -> jnp.ndarray:
    """Per-example gradient norms: ``sq_norms`` (the scanned stack's layers') plus every use's, the tied table's cross
    term included; ``uses`` receive their output gradients."""
    for use, grad in zip(uses, output_grads, strict=True):
        use.grad = grad
    # Which parameter leaves each use touches; a leaf touched twice must be the tied
    # (lookup, attend) pair, whose norm needs the cross term.
    by_leaf: dict[str, list[_Use]] = {}
    for use in uses:
        for name in use.params:
            by_leaf.setdefault(_leaf_key(use.path, name), []).append(use)
    for use in uses:
        sq, _ = _sq_norms_and_sum(use, None)
        sq_norms = sq_norms + sum(sq.values())
    for key, shared in by_leaf.items():
        if len(shared) == 1:
            continue
        kinds = sorted(u.kind for u in shared)
        if kinds != ["attend", "embed"]:
            raise GhostUnsupported(f"ghost clipping: parameter {key} is used by {kinds}")
        embed = next(u for u in shared if u.kind == "embed")
        attend = next(u for u in shared if u.kind == "attend")
        sq_norms = sq_norms + 2.0 * _tied_cross(embed, attend)
    return jnp.sqrt(jnp.maximum(sq_norms, 0.0))  # the cross term can round below 0
