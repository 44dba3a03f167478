"""Scanned layer stacks (dpscaling.dp.layers, docs/train.md "Compiling deep models"): the same model, the same
start, the same clipped gradients (ghost norms and book-keeping over the stacked layers against per-example
gradients of the unrolled model) and the same training curve as the unrolled layout, for both families; the
noise drawn as the unrolled model's."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpscaling.dp import CLIPPED_SUMS, clipped_mean_grad
from dpscaling.dp.layers import STACKED_LAYERS, stack_layers, unstack_layers
from dpscaling.models.family import FAMILIES
from dpscaling.models.stacking import in_layout, init_params
from dpscaling.train.checkpoint import config_differences, config_record
from dpscaling.train.config import TrainConfig
from dpscaling.train.objectives import loss_fn, objective_for
from dpscaling.train.step import init_state, make_optimizer, make_train_step, step_hyperparams

pytestmark = pytest.mark.slow(minutes=2)

VOCAB, SEQ, BATCH, LAYERS = 96, 16, 4, 3
META = SimpleNamespace(vocab_size=VOCAB, mask_id=4, special_ids=(0, 1, 2, 3, 4), pad_id=0)  # a packed dataset's
SHAPES = {"bert-post": ("bert", {}), "bert-pre": ("bert", {"layer_norm": "pre"}), "decoder": ("decoder", {})}


@functools.cache
def _setup(shape: str, scan: bool, remat: bool = False):
    """A 3-layer model of ``shape`` (its family's objective, vocabulary 96), its loss and parameters at seed 0, a
    token batch of 4 with repeated tokens (the tied table's cross term) and one padded sequence."""
    family_name, extra = SHAPES[shape]
    family = FAMILIES[family_name]
    config = family.config("custom", vocab_size=VOCAB, max_positions=SEQ, num_layers=LAYERS, num_heads=2,
                           hidden_size=16, scan_layers=scan, remat=remat, **extra)
    model = family.module_class()(config)
    objective = objective_for(family.objective, META)
    params = init_params(model, jax.random.PRNGKey(0), *objective.init_inputs(SEQ))
    tokens = jax.random.randint(jax.random.PRNGKey(1), (BATCH, SEQ), 5, 20).at[0, SEQ - 3:].set(0)
    batch = objective.batch(jax.random.PRNGKey(2), tokens)
    return model, loss_fn(objective, model), params, batch


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_scanned_model_starts_from_the_unrolled_start_and_computes_the_same_losses(shape) -> None:
    _, unrolled_loss, unrolled, batch = _setup(shape, False)
    model, scanned_loss, scanned, _ = _setup(shape, True)
    assert STACKED_LAYERS in scanned and f"{model.layer_prefix}_0" not in scanned
    assert jax.tree.leaves(scanned[STACKED_LAYERS])[0].shape[0] == LAYERS
    prefix = model.layer_prefix
    assert jax.tree.all(jax.tree.map(np.array_equal, stack_layers(unrolled, prefix, LAYERS), scanned))
    assert jax.tree.all(jax.tree.map(np.array_equal, unstack_layers(scanned, prefix), unrolled))
    np.testing.assert_allclose(scanned_loss(scanned, batch), unrolled_loss(unrolled, batch), rtol=2e-6)


@pytest.mark.parametrize(("shape", "remat"), [("bert-post", False), ("bert-pre", True), ("decoder", False)])
def test_ghost_clipping_over_stacked_layers_is_the_unrolled_models_per_example_clipping(shape, remat) -> None:
    """Ghost clipping of the scanned model (each layer's input and output gradient stacked out of the scan)
    against vmap clipping of the unrolled model (per-example gradients): the same norms and clipped mean, with
    a padding example weighted 0."""
    _, unrolled_loss, unrolled, batch = _setup(shape, False)
    model, scanned_loss, scanned, _ = _setup(shape, True, remat)
    weights = jnp.array([1.0, 1.0, 0.0, 1.0])

    def clipped(loss, params, method):
        return jax.jit(lambda p: clipped_mean_grad(loss, p, batch, clipped_sum=CLIPPED_SUMS[method], clip_norm=1.0,
                                                   microbatch_size=2, example_weights=weights))(params)

    reference = clipped(unrolled_loss, unrolled, "vmap")
    for method in ("ghost", "vmap"):
        result = clipped(scanned_loss, scanned, method)
        np.testing.assert_allclose(result.norms, reference.norms, rtol=1e-5)
        assert (np.asarray(result.norms) > 1.0).any()  # clipping is exercised
        got = unstack_layers(result.grad, model.layer_prefix)
        for (path, want), found in zip(jax.tree_util.tree_leaves_with_path(reference.grad), jax.tree.leaves(got),
                                       strict=True):
            np.testing.assert_allclose(found, want, atol=2e-6, err_msg=f"{method} {jax.tree_util.keystr(path)}")


@pytest.mark.parametrize(("family", "clipping"), [("bert", "ghost"), ("decoder", "ghost")])
def test_the_training_curve_does_not_depend_on_the_layout(family, clipping) -> None:
    """Ten DP-Adam steps (σ̄ 2^-6, learning rate 2^-6) of the same seed: the same losses and parameters (vmap
    through the scan: its clipped sums above)."""
    objective = objective_for(FAMILIES[family].objective, META)
    tokens = jax.random.randint(jax.random.PRNGKey(3), (10, 8, SEQ), 5, VOCAB)
    curves, finals = {}, {}
    for scan in (False, True):
        config = TrainConfig(model="custom", family=family, max_positions=SEQ, batch_size=8, microbatch_size=4,
                             model_overrides={"num_layers": LAYERS, "num_heads": 2, "hidden_size": 16},
                             noise_batch_ratio=2.0**-6, learning_rate=2.0**-6, num_steps=10, warmup_steps=2,
                             decay_steps=10, clipping=clipping, scan_layers=scan, log_every=1, checkpoint_every=10)
        model = config.model_family.module_class()(config.model_config(VOCAB))
        optimizer = make_optimizer(config)
        state = init_state(model, objective, optimizer, config, SEQ)
        step = jax.jit(make_train_step(model, objective, config))
        hyperparams = step_hyperparams(config)
        losses = []
        for batch in tokens:
            state, metrics = step(state, hyperparams, batch)
            losses.append(float(metrics["loss"]))
        curves[scan] = np.array(losses)
        finals[scan] = in_layout(state.params, FAMILIES[family].module_class()(config.model_config(VOCAB).replace(
            scan_layers=False)))
    np.testing.assert_allclose(curves[True], curves[False], rtol=1e-5)
    assert curves[False][-1] < curves[False][0]  # it trains
    for found, want in zip(jax.tree.leaves(finals[True]), jax.tree.leaves(finals[False]), strict=True):
        np.testing.assert_allclose(found, want, atol=1e-5)


def test_a_checkpoint_records_its_layout_and_is_resumed_only_in_it(tmp_path) -> None:
    import json

    unrolled = TrainConfig(model="BertTiny")
    scanned = TrainConfig(model="BertTiny", scan_layers=True)
    assert "scan_layers" not in config_record(unrolled)  # the records of runs before the option, unchanged
    (tmp_path / "config.json").write_text(json.dumps(config_record(scanned)))
    assert config_differences(tmp_path, unrolled) == ["scan_layers"]
    assert config_differences(tmp_path, scanned) == []


@pytest.mark.parametrize("prefix", ["layer", "block"])
def test_a_scanned_model_draws_the_unrolled_models_noise(prefix) -> None:
    """12 layers (their names sort layer_10 before layer_2) among keys sorting before and after them: the
    scanned tree's DP-SGD draw is the unrolled draw stacked, bit for bit; BandMF's (jax-privacy draws per leaf)
    through the unrolled view."""
    from dpscaling.dp.correlated import correlated_noise
    from dpscaling.dp.noise import standard_normal_like
    from dpscaling.privacy.mechanisms import mechanism_named

    unrolled = {"a_embeddings": jnp.zeros((5, 3)), "final_norm": {"scale": jnp.zeros(3)}, "z_bias": jnp.zeros(4),
                **{f"{prefix}_{i}": {"kernel": jnp.zeros((3, 2)), "bias": jnp.zeros(2)} for i in range(12)}}
    scanned = stack_layers(unrolled, prefix)
    key = jax.random.PRNGKey(7)
    want = stack_layers(standard_normal_like(key, unrolled), prefix)
    found = standard_normal_like(key, scanned, prefix)
    assert jax.tree.all(jax.tree.map(np.array_equal, found, want))
    assert not np.array_equal(standard_normal_like(key, scanned)[STACKED_LAYERS]["kernel"],
                              want[STACKED_LAYERS]["kernel"])  # without the prefix the order differs
    bandmf = mechanism_named("bandmf-b2")
    plain = correlated_noise(bandmf, 1.0, key, 8, "mean_error")
    viewed = correlated_noise(bandmf, 1.0, key, 8, "mean_error", layer_prefix=prefix)
    want, _ = plain.update(unrolled, plain.init(unrolled))
    found, _ = viewed.update(scanned, viewed.init(scanned))
    assert jax.tree.all(jax.tree.map(np.array_equal, found, stack_layers(want, prefix)))
