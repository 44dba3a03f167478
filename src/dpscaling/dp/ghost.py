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

Inside a scanned layer stack (:func:`dpscaling.dp.layers.layer_stack`) a layer's input and output gradient
exist only inside the scan, so each of its layers is tapped instead: an identity on the layer's output whose
backward pass adds the layer's per-example squared norm (the same formulas) to an accumulator that the scan
sums over layers. The clipped sum then comes from a second backward pass of the same forward pass (one
``jax.vjp``), with the clip factors as the losses' cotangents: Σ_b s_b ∇ℓ_b, the book-keeping sum computed by
the backward pass itself. Compilation then stays flat in depth; the step pays one more backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
from flax import linen as nn

from dpscaling.dp.layers import STACKED_LAYERS, Bias
from dpscaling.dp.per_example import BatchLossFn, PyTree, clip_factors
from dpscaling.errors import UserError

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


def _tapped(use: _Use, y: jnp.ndarray, accumulator: jnp.ndarray) -> jnp.ndarray:
    """``y`` unchanged; in the backward pass, ``use``'s per-example squared gradient norm (from its input and
    ``y``'s cotangent) becomes the accumulator's cotangent, summed over every tapped layer."""

    @jax.custom_vjp
    def tap(y, inputs, params, accumulator):
        return y

    def forward(y, inputs, params, accumulator):
        return y, (inputs, params)

    def backward(saved, grad):
        inputs, params = saved
        sq, _ = _sq_norms_and_sum(_Use(use.kind, use.path, inputs, params, grad), None)
        return grad, jax.tree.map(jnp.zeros_like, inputs), jax.tree.map(jnp.zeros_like, params), sum(sq.values())

    tap.defvjp(forward, backward)
    return tap(y, jax.lax.stop_gradient(use.input), use.params, accumulator)


def _forward(loss_fn: BatchLossFn, params: PyTree, batch: PyTree, perturbations, accumulator=None,
             stacked: list[str] | None = None):
    """Per-example losses, with every parametrised layer's output shifted by a perturbation, and every layer of a
    scanned stack tapped into ``accumulator`` (:func:`_tapped`; its paths appended to ``stacked``).

    Returns (losses, uses, output shapes); with ``perturbations=None`` nothing is added, with
    ``accumulator=None`` nothing is tapped.
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
            if kind in ("embed", "attend", "bias"):
                raise GhostUnsupported(f"ghost clipping: a {kind} layer inside a scanned stack ({module.path})")
            if stacked is not None:
                stacked.append("/".join(module.path))
            if accumulator is None:
                return y
            use = _Use(kind=kind, path=tuple(module.path), input=_prepare_input(kind, module, args[0]),
                       params=dict(module.variables.get("params", {})))
            return _tapped(use, y, accumulator)
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

    with nn.intercept_methods(interceptor):
        losses = loss_fn(params, batch)
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
    stacked: list[str] = []
    _, _, shapes = jax.eval_shape(lambda p, b: _forward(loss_fn, p, b, None, None, stacked), params, batch)
    zeros = [jnp.zeros(s.shape, s.dtype) for s in shapes]
    if stacked:
        return _stacked_clipped_sum(loss_fn, params, batch, clip_norm, example_weights, zeros)

    def summed(perturbations):
        losses, uses, _ = _forward(loss_fn, params, batch, perturbations)
        return jnp.sum(losses), (losses, uses)

    output_grads, (losses, uses) = jax.grad(summed, has_aux=True)(zeros)
    norms = _norms(uses, output_grads, jnp.zeros(losses.shape, jnp.float32))

    scale = clip_factors(norms, clip_norm)
    if example_weights is not None:
        scale = scale * example_weights
    totals: dict[str, jnp.ndarray] = {}
    for use in uses:
        _, total = _sq_norms_and_sum(use, scale)
        for name, value in total.items():
            key = _leaf_key(use.path, name)
            totals[key] = totals[key] + value if key in totals else value

    def lookup(path, leaf):
        key = "/".join(str(getattr(k, "key", k)) for k in path)
        if key not in totals:
            raise GhostUnsupported(f"ghost clipping: no supported layer uses parameter {key}")
        return totals[key].reshape(leaf.shape)

    clipped = jax.tree_util.tree_map_with_path(lookup, params)
    return clipped, losses, norms


def _stacked_clipped_sum(loss_fn: BatchLossFn, params: PyTree, batch: PyTree, clip_norm: float,
                         example_weights: jnp.ndarray | None, zeros: list[jnp.ndarray]):
    """:func:`ghost_clipped_sum` of a model with a scanned layer stack (module docstring): one forward pass, a
    backward pass for the norms (the layers outside the stack as above, those inside tapped), and one with the
    clip factors for the clipped sum."""

    def forward(perturbations, accumulator, p):
        losses, uses, _ = _forward(loss_fn, p, batch, perturbations, accumulator)
        return losses, uses

    accumulator = jnp.zeros(jax.tree.leaves(batch)[0].shape[:1], jnp.float32)
    losses, backward, uses = jax.vjp(forward, zeros, accumulator, params, has_aux=True)
    output_grads, stacked_sq_norms, _ = backward(jnp.ones_like(losses))
    norms = _norms(uses, output_grads, stacked_sq_norms)
    scale = clip_factors(norms, clip_norm)
    if example_weights is not None:
        scale = scale * example_weights
    _, _, clipped = backward(scale.astype(losses.dtype))
    clipped = jax.tree.map(lambda g, p: g.astype(jnp.float32).reshape(p.shape), clipped, params)
    return clipped, losses, norms


def _norms(uses: list[_Use], output_grads: list[jnp.ndarray], sq_norms: jnp.ndarray) -> jnp.ndarray:
    """Per-example gradient norms: ``sq_norms`` (the tapped layers') plus every use's, the tied table's cross
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
