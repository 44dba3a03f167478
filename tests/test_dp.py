"""DP-SGD pieces (paper Algorithm 1): normalized clipping, both clipping paths, noise."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpscaling.dp import (
    CLIPPED_SUMS,
    add_gaussian_noise,
    clip_factors,
    clipped_mean_grad,
    dp_optimizer,
    weighted_sum,
)
from dpscaling.models.bert import BertMlm
from dpscaling.models.family import bert_config
from dpscaling.train.mlm import MaskingSpec, mask_tokens, sequence_losses

pytestmark = pytest.mark.slow(minutes=2)  # orders this module among the long ones (tests/conftest.py)

VOCAB, SEQ, BATCH = 120, 24, 8


def _setup(seq: int = SEQ, hidden: int = 16, layer_norm: str = "post"):
    return _cached_setup(seq, hidden, layer_norm)  # one cache entry whether or not defaults are spelled out


@functools.cache
def _cached_setup(seq: int, hidden: int, layer_norm: str):
    """A small BERT on a batch with repeated tokens (exercises the tied-embedding cross
    term) and one padded sequence."""
    config = bert_config(
        "custom", vocab_size=VOCAB, max_positions=32, num_layers=2, num_heads=2, hidden_size=hidden,
        layer_norm=layer_norm,
    )
    model = BertMlm(config)
    spec = MaskingSpec(vocab_size=VOCAB, mask_id=4, special_ids=(0, 1, 2, 3, 4), pad_id=0)
    ids = jax.random.randint(jax.random.PRNGKey(1), (BATCH, seq), 5, 25)  # few distinct tokens
    ids = ids.at[:, 0].set(2).at[:, -1].set(3).at[0, seq - 2 :].set(0)
    batch = mask_tokens(jax.random.PRNGKey(2), ids, spec)
    params = model.init(jax.random.PRNGKey(0), batch["input_ids"], batch["masked_positions"])[
        "params"
    ]

    def loss_fn(p, b):
        logits = model.apply(
            {"params": p}, b["input_ids"], b["masked_positions"], b["padding_mask"]
        )
        return sequence_losses(logits, b)

    return loss_fn, params, batch


def _example(batch, i):
    return jax.tree.map(lambda x: x[i : i + 1], batch)


def _global_norm(tree):
    return float(optax.tree.norm(tree))


@functools.cache
def _independent_grads():
    """Each example's gradient, computed on its own (a batch of one), in float64."""
    loss_fn, params, batch = _setup()
    grad = jax.jit(jax.grad(lambda p, b: loss_fn(p, b)[0]))
    return [
        jax.tree.map(lambda x: np.asarray(x, np.float64), grad(params, _example(batch, i)))
        for i in range(BATCH)
    ]


def _reference_clipped_mean(clip_norm):
    """Independently computed per-example gradients, clipped in numpy, averaged."""
    total = None
    for g in _independent_grads():
        norm = np.sqrt(sum(np.sum(x**2) for x in jax.tree.leaves(g)))
        scale = min(1.0, clip_norm / norm) / clip_norm
        g = jax.tree.map(lambda x: x * scale, g)
        total = g if total is None else jax.tree.map(np.add, total, g)
    return jax.tree.map(lambda x: x / BATCH, total)


def _max_abs_diff(a, b):
    diffs = jax.tree.map(lambda x, y: float(np.max(np.abs(np.asarray(x) - np.asarray(y)))), a, b)
    return max(jax.tree.leaves(diffs))


def _clipper(method: str, seq: int = SEQ, hidden: int = 16, layer_norm: str = "post"):
    return _cached_clipper(method, seq, hidden, layer_norm)


@functools.cache
def _cached_clipper(method: str, seq: int, hidden: int, layer_norm: str):
    """``f(params, batch, clip_norm, loss_scale)``: the clipped mean gradient, 4 microbatches
    of 2. C and the loss scale are traced, so every test reuses one compilation per path."""
    loss_fn, _, _ = _setup(seq, hidden, layer_norm)

    def clipped(params, batch, clip_norm, loss_scale):
        scaled = lambda p, b: loss_scale * loss_fn(p, b)  # noqa: E731
        return clipped_mean_grad(
            scaled, params, batch, clip_norm=clip_norm, microbatch_size=2, clipped_sum=CLIPPED_SUMS[method]
        )

    return jax.jit(clipped)


@pytest.mark.parametrize("method", ["vmap", "ghost"])
@pytest.mark.parametrize("clip_norm", [1.0, 50.0])
def test_clipped_mean_equals_mean_of_independent_clipped_grads(method, clip_norm):
    _, params, batch = _setup()
    got = _clipper(method)(params, batch, clip_norm, 1.0)
    want = _reference_clipped_mean(clip_norm)
    assert _max_abs_diff(got.grad, want) < 1e-5
    # clip_norm = 50 leaves some examples unclipped: both regimes are covered.
    assert (np.asarray(got.norms) > clip_norm).any() == (clip_norm == 1.0)


# At seq 24 / hidden 16 the ghost path forms each Dense layer's per-example gradients
# (cheaper there); at seq 6 / hidden 32 it uses Gram matrices for every layer. Pre-LN adds a
# LayerNorm after the last layer, which the ghost path must count too.
@pytest.mark.parametrize("seq, hidden, layer_norm", [(SEQ, 16, "post"), (6, 32, "post"), (SEQ, 16, "pre")])
def test_vmap_and_ghost_paths_agree(seq, hidden, layer_norm):
    _, params, batch = _setup(seq, hidden, layer_norm)
    vmap = _clipper("vmap", seq, hidden, layer_norm)(params, batch, 1.0, 1.0)
    ghost = _clipper("ghost", seq, hidden, layer_norm)(params, batch, 1.0, 1.0)
    assert _max_abs_diff(vmap.grad, ghost.grad) < 1e-5
    np.testing.assert_allclose(vmap.norms, ghost.norms, rtol=1e-5)
    np.testing.assert_allclose(vmap.losses, ghost.losses, rtol=1e-6)


@pytest.mark.parametrize("method", ["vmap", "ghost"])
def test_clipped_norms_bounded_for_adversarially_large_gradients(method):
    _, params, batch = _setup()
    for i in range(BATCH):
        # Only example i has a loss (the others' masked-token weights are 0), scaled so
        # its gradient norm is ~1e15: B × the clipped mean is its clipped gradient.
        weights = batch["label_weights"] * (jnp.arange(BATCH) == i)[:, None]
        result = _clipper(method)(params, batch | {"label_weights": weights}, 1.0, 1e15)
        assert float(result.norms[i]) > 1e12
        norm = BATCH * _global_norm(result.grad)
        assert norm <= 1.0 + 1e-6
        assert norm > 1.0 - 1e-4  # normalized clipping: exactly norm 1 when clipped


def test_clip_factors_normalized_and_finite():
    factors = clip_factors(jnp.array([0.0, 0.5, 1.0, 4.0, jnp.inf]), clip_norm=2.0)
    np.testing.assert_allclose(factors, [0.5, 0.5, 0.5, 0.25, 0.0])


def test_weighted_sum_is_the_weighted_sum():
    g = jax.random.normal(jax.random.PRNGKey(0), (5, 7, 3))
    w = jnp.arange(5.0)
    np.testing.assert_allclose(
        weighted_sum(w, {"g": g})["g"], np.einsum("b,bij->ij", w, g), rtol=1e-5
    )


def test_noise_std_matches_noise_batch_ratio():
    sigma = 0.37
    zeros = {"a": jnp.zeros((300, 500)), "b": jnp.zeros((50_000,))}
    noise = add_gaussian_noise(sigma, jax.random.PRNGKey(3))
    state = noise.init(zeros)
    updates, state = noise.update(zeros, state)
    values = np.concatenate([np.ravel(x) for x in jax.tree.leaves(updates)]).astype(np.float64)
    n = values.size  # 200,000 i.i.d. N(0, σ²) draws
    # The sample std has std σ/√(2n) and the mean σ/√n; tolerances of 6.5 such standard
    # errors give a false-failure probability below 1e-9 for each check.
    assert abs(values.std() / sigma - 1) < 6.5 / np.sqrt(2 * n)
    assert abs(values.mean()) < 6.5 * sigma / np.sqrt(n)
    assert updates["a"].dtype == jnp.float32
    # Fresh noise every step, identical noise for the same (key, step): exact resume.
    again, _ = noise.update(zeros, state)
    assert not np.allclose(again["b"], updates["b"])
    replay, _ = noise.update(zeros, noise.init(zeros))
    np.testing.assert_array_equal(replay["b"], updates["b"])
    # Step t's noise is one draw of every coordinate from fold_in(key, t), laid out leaf after leaf in the
    # tree's flattening order ("a" then "b"), so no two leaves share a value.
    draw = np.asarray(jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(3), 0), (n,), jnp.float32))
    np.testing.assert_array_equal(updates["a"], (sigma * draw[:150_000]).reshape(300, 500))
    np.testing.assert_array_equal(updates["b"], sigma * draw[150_000:])


def test_zero_noise_dp_optimizer_is_the_inner_optimizer():
    params = {"w": jnp.arange(6.0).reshape(2, 3)}
    grad = {"w": jnp.full((2, 3), 0.1)}
    dp = dp_optimizer(optax.adam(1e-2), add_gaussian_noise(0.0, jax.random.PRNGKey(0)))
    plain = optax.adam(1e-2)
    dp_updates, _ = dp.update(grad, dp.init(params), params)
    plain_updates, _ = plain.update(grad, plain.init(params), params)
    np.testing.assert_array_equal(dp_updates["w"], plain_updates["w"])
    noisy = dp_optimizer(optax.sgd(1.0), add_gaussian_noise(1.0, jax.random.PRNGKey(0)))
    noisy_updates, _ = noisy.update(grad, noisy.init(params), params)
    assert not np.allclose(noisy_updates["w"], -grad["w"])
