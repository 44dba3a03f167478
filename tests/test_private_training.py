"""Private training (docs/private-training.md): truncated Poisson batches at a static shape,
accounting matched to the sampler that ran, and a secret noise key."""

from __future__ import annotations

import dataclasses

import copy
import logging
import math
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pyarrow.parquet as pq
import pytest

from dp_training_data import build_packed_corpus, resume_from_midpoint
from dpscaling.accounting.matched import account_run
from dpscaling.data.shards import load_meta
from dpscaling.dp import CLIPPED_SUMS, add_gaussian_noise, clipped_mean_grad
from dpscaling.dp.noise import noise_key_of
from dpscaling.dp.per_example import real_examples_first
from dpscaling.core.errors import UserError
from dpscaling.models.bert import BertMlm
from dpscaling.train import TrainConfig, run_training
from dpscaling.train.data import BatchSampler
from dpscaling.train.mlm import MaskingSpec
from dpscaling.train.objectives import MaskedLM
from dpscaling.train.sampling import PADDING_INDEX, PoissonBatches, secret_key
from dpscaling.privacy.samplers import shuffle_max_participations
from dpscaling.train.step import (
    init_state,
    make_optimizer,
    make_train_step,
    step_hyperparams,
    study_noise_key,
)
from private_step_job import EXPECTED, REAL, flat_leaves, padded_grads, unpadded_grads, weights
from test_config_schema import validated
from test_dp import BATCH, _setup

pytestmark = pytest.mark.slow(minutes=3)  # orders this module among the long ones (tests/conftest.py)

JOB = Path(__file__).with_name("private_step_job.py")
TARGET_EPSILON = 4.0
PRIVATE = dict(
    model="custom",
    model_overrides=dict(num_layers=1, num_heads=2, hidden_size=32),
    batch_size=16,
    truncated_batch_size=None,  # priced by the run's accountant
    microbatch_size=8,
    num_steps=20,
    warmup_steps=5,
    learning_rate=2.0**-8,
    log_every=5,
    checkpoint_every=10,
    sampling="truncated_poisson",
    target_epsilon=TARGET_EPSILON,
)


# --- padding contributes nothing; microbatching, ghost and sharding keep working ----------


@pytest.mark.parametrize("method", ["vmap", "ghost"])
@pytest.mark.parametrize("microbatch", [2, BATCH])
def test_padding_contributes_nothing_to_the_clipped_gradient(method, microbatch):
    padded = padded_grads(method, microbatch=microbatch, sharded=False)
    unpadded = unpadded_grads(method)
    for key in unpadded:
        # The reference divides by EXPECTED = 4: a padded sum divided by L = 8 or by the
        # realised 5 would fail here.
        np.testing.assert_allclose(padded[key], unpadded[key], rtol=1e-5, atol=1e-7, err_msg=key)


@pytest.mark.parametrize("method", ["vmap", "ghost"])
def test_trailing_microbatches_of_padding_are_skipped_and_the_sum_is_bit_identical(method):
    """Laid out real examples first, the 3 padding slots of a batch of 8 in microbatches of 2 fill one whole
    microbatch (skipped: its losses read 0) and half of another (computed); the clipped sum is bit for bit the
    scan over every microbatch, and the unpadded batch's to float tolerance."""
    loss_fn, params, batch = _setup()
    order = real_examples_first(np.arange(BATCH), 2)
    laid_out = jax.tree.map(lambda leaf: leaf[order], batch)
    w = jnp.asarray(weights()[order])

    def clipped(skip_padding):
        return jax.jit(lambda p, b, w: clipped_mean_grad(
            loss_fn, p, b, clip_norm=1.0, microbatch_size=2, clipped_sum=CLIPPED_SUMS[method], example_weights=w,
            normaliser=EXPECTED, skip_padding=skip_padding))(params, laid_out, w)

    skipped, computed = clipped(True), clipped(False)
    for a, b in zip(jax.tree.leaves(skipped.grad), jax.tree.leaves(computed.grad), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    losses = np.asarray(skipped.losses)[np.argsort(order)]  # back in the batch's order: REAL real, then padding
    assert np.all(losses[: REAL + 1] > 0) and np.all(losses[REAL + 1 :] == 0)
    assert np.all(np.asarray(computed.losses) > 0)
    for key, value in unpadded_grads(method).items():
        np.testing.assert_allclose(flat_leaves(skipped.grad)[key], value, rtol=1e-5, atol=1e-7, err_msg=key)


def test_padded_train_step_ignores_what_the_padding_contains():
    """A whole noisy DP-Adam step: padding rows of [PAD] tokens or of arbitrary real-looking
    tokens give bit-identical parameters, optimizer state and metrics."""
    config = TrainConfig(**(PRIVATE | dict(batch_size=4, truncated_batch_size=BATCH,
                                           microbatch_size=4, target_epsilon=None,
                                           noise_batch_ratio=0.1, warmup_steps=0)))
    _, _, batch = _setup()
    vocab, seq = 120, batch["input_ids"].shape[1]
    model = BertMlm(config.model_config(vocab))
    optimizer = make_optimizer(config)
    objective = MaskedLM(MaskingSpec(vocab_size=vocab, mask_id=4, special_ids=(0, 1, 2, 3, 4), pad_id=0))
    step = jax.jit(make_train_step(model, objective, config))
    hyperparams = step_hyperparams(config)
    state = init_state(model, objective, optimizer, config, seq)
    tokens = np.asarray(jax.random.randint(jax.random.PRNGKey(5), (BATCH, seq), 5, vocab))
    arbitrary, pads = tokens.copy(), tokens.copy()
    pads[REAL:] = 0
    w = jnp.asarray(weights())
    one, metrics_one = step(state, hyperparams, jnp.asarray(arbitrary), w)
    two, metrics_two = step(state, hyperparams, jnp.asarray(pads), w)
    for a, b in zip(jax.tree.leaves((one, metrics_one)), jax.tree.leaves((two, metrics_two)),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The step does move the parameters, and a change in a REAL slot changes the update.
    moved = [not np.array_equal(a, b) for a, b in
             zip(jax.tree.leaves(state.params), jax.tree.leaves(two.params), strict=True)]
    assert all(moved)
    changed = pads.copy()
    changed[0] = tokens[REAL]
    three, _ = step(state, hyperparams, jnp.asarray(changed), w)
    assert any(not np.array_equal(a, b) for a, b in
               zip(jax.tree.leaves(three.params), jax.tree.leaves(two.params), strict=True))


@pytest.mark.parametrize("sampling, clipping, exact", [("truncated_poisson", "ghost", True),
                                                       ("truncated_poisson", "vmap", False),
                                                       ("shuffle", "ghost", False)])
def test_private_ghost_clipping_multiplies_exactly_whatever_the_device_default(sampling, clipping, exact):
    """A private run's ghost norms and its clipped gradient come from two passes: on a GPU whose default
    float32 products are TF32 they differed, and a clipped gradient's norm reached 1.000055 C. Its step
    therefore asks for exact products even where the device's default (here forced to DEFAULT) is not."""
    config = TrainConfig(**(PRIVATE | dict(sampling=sampling, clipping=clipping, batch_size=4, microbatch_size=4,
                                           truncated_batch_size=BATCH if sampling == "truncated_poisson" else None,
                                           target_epsilon=None, noise_batch_ratio=0.1)))
    vocab, seq = 120, 12
    model = BertMlm(config.model_config(vocab))
    objective = MaskedLM(MaskingSpec(vocab_size=vocab, mask_id=4, special_ids=(0, 1, 2, 3, 4), pad_id=0))
    state = jax.eval_shape(lambda: init_state(model, objective, make_optimizer(config), config, seq))
    rows = BATCH if sampling == "truncated_poisson" else 4
    tokens = jax.ShapeDtypeStruct((rows, seq), jnp.int32)
    weights_arg = (jax.ShapeDtypeStruct((rows,), jnp.float32),) if sampling == "truncated_poisson" else ()
    with jax.default_matmul_precision("default"):
        hlo = jax.jit(make_train_step(model, objective, config)).lower(
            state, step_hyperparams(config), tokens, *weights_arg).as_text()
    products = hlo.count("dot_general")
    assert products > 10
    assert hlo.count("HIGHEST") == (2 * products if exact else 0)  # both operands of every product


def test_padded_gradients_shard_over_two_devices(tmp_path):
    # two host-platform devices (JAX_PLATFORMS: the CPU's, also on a machine with an accelerator)
    env = dict(os.environ, XLA_FLAGS=f"{os.environ['XLA_FLAGS']} --xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent),
                                           str(Path(__file__).parents[1] / "src"),
                                           os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "two.npz"
    result = subprocess.run([sys.executable, str(JOB), str(out)], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    two = np.load(out)
    assert int(two["n_devices"]) == 2
    for method in ("vmap", "ghost"):
        reference = unpadded_grads(method)
        for i, key in enumerate(reference):
            np.testing.assert_allclose(two[f"{method}_{i}"], reference[key], rtol=2e-5, atol=1e-7,
                                       err_msg=f"{method} {key}")


# --- participations of both samplers, matched accounting, refusal -------------------------


def _counts(batches, n_rows: int) -> np.ndarray:
    counts = np.zeros(n_rows, np.int64)
    for batch in batches:
        real = batch[batch != PADDING_INDEX]
        assert len(np.unique(real)) == len(real), "an example twice in one batch"
        np.add.at(counts, real, 1)
    return counts


@pytest.mark.parametrize("n_rows, batch, steps", [(1000, 300, 10), (1000, 100, 25), (97, 10, 40)])
def test_shuffle_participations_are_counted_by_the_accountant(n_rows, batch, steps):
    sampler = BatchSampler(n_rows, batch, seed=3)
    counts = _counts((sampler.indices(s) for s in range(steps)), n_rows)
    k = shuffle_max_participations(n_rows, batch, steps)
    assert counts.max() == k
    privacy = account_run("shuffle", None, dataset_size=n_rows, expected_batch_size=batch,
                          steps=steps, delta=1e-8,
                          noise_batch_ratio=0.05)
    assert privacy.max_participations == k
    sigma = 0.05 * batch
    assert privacy.epsilon == pytest.approx(
        dp_accounting.get_epsilon_gaussian(sigma / math.sqrt(counts.max()), 1e-8), rel=1e-9)
    if (n_rows, batch, steps) == (1000, 300, 10):  # docs/private-training.md's example: 4 against ⌈q·T⌉ = 3
        assert counts.max() == 4 > math.ceil(batch / n_rows * steps)


def test_poisson_participations_follow_the_sampling_rate():
    n_rows, expected, truncated, steps = 1000, 50, 64, 400
    sampler = PoissonBatches(n_rows, expected, truncated, secret_key())
    batches = [sampler.indices(s) for s in range(steps)]
    assert all(len(b) == truncated for b in batches)  # static shape
    counts = _counts(batches, n_rows)
    q = expected / n_rows
    # Total participations ~ Binomial(N·T, q) (truncation at B + 2σ_B rarely bites):
    # within 6 standard deviations.
    assert abs(counts.sum() - q * n_rows * steps) < 6 * math.sqrt(q * n_rows * steps)
    # Each example's count ~ Binomial(T, q): its spread, not a fixed k.
    assert counts.var() == pytest.approx(steps * q * (1 - q), rel=0.2)
    assert np.array_equal(sampler.indices(7), batches[7])  # (key, step) fixes the batch
    truncating = PoissonBatches(n_rows, expected, expected, secret_key())
    sizes = [int(np.sum(truncating.indices(s) != PADDING_INDEX)) for s in range(200)]
    assert max(sizes) == expected  # batches above L are cut to L


@pytest.mark.parametrize(
    "sampling, accountant",
    [("truncated_poisson", "deterministic"), ("truncated_poisson", "untruncated_poisson"),
     ("shuffle", "untruncated_poisson"),
     ("shuffle", "truncated_poisson")],
)
def test_sampler_and_accountant_that_disagree_are_refused(sampling, accountant):
    with pytest.raises(UserError, match="disagree"):
        TrainConfig(**(PRIVATE | dict(sampling=sampling, accountant=accountant,
                                      truncated_batch_size=None)))
    from dpscaling.config.checks import check_config

    config = validated({"training": {"sampling": sampling, "accountant": accountant}})
    with pytest.raises(UserError, match="training.accountant.*disagree"):
        check_config(config)


def test_private_config_checks():
    with pytest.raises(UserError, match="train.clipping"):
        TrainConfig(**(PRIVATE | dict(clipping="none")))
    with pytest.raises(UserError, match="train.truncated_batch_size"):
        TrainConfig(**(PRIVATE | dict(truncated_batch_size=8)))
    with pytest.raises(UserError, match="train.truncated_batch_size"):
        TrainConfig(**(PRIVATE | dict(sampling="shuffle", truncated_batch_size=32)))
    with pytest.raises(UserError, match="train.microbatch_size"):
        TrainConfig(**(PRIVATE | dict(truncated_batch_size=36)))
    with pytest.raises(UserError, match="train.noise_batch_ratio"):
        TrainConfig(**(PRIVATE | dict(noise_batch_ratio=0.1)))
    priced = TrainConfig(**(PRIVATE | dict(batch_size=100)))
    assert not priced.truncation_resolved  # L is priced by the run's accountant, once N is known
    with pytest.raises(ValueError, match="truncated_batch_size"):
        priced.physical_batch_size
    assert priced.microbatch == 8


# --- a private run: its recorded guarantee, its secret key, exact resume ------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("packed")
    build_packed_corpus(directory, seq_len=64, n_documents=60)
    return directory


@pytest.fixture(scope="module")
def private_run(corpus, tmp_path_factory):
    """One calibrated truncated_poisson run, with everything it logged."""
    out = tmp_path_factory.mktemp("private")
    config = TrainConfig(**PRIVATE)
    log = StringIO()
    handler = logging.StreamHandler(log)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        summary = run_training(config, corpus, out / "metrics.parquet", out / "ckpt")
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    return config, summary, out, log.getvalue()


def _stored_key(checkpoint_dir: Path, step: int) -> np.ndarray:
    from dpscaling.train.checkpoint import STATE_ITEM

    restored = ocp.StandardCheckpointer().restore((checkpoint_dir / "state" / str(step) / STATE_ITEM).absolute())
    found = []

    def visit(path, leaf):
        if any(getattr(k, "key", getattr(k, "name", None)) == "noise_key" for k in path):
            found.append(np.asarray(leaf))

    jax.tree_util.tree_map_with_path(visit, restored)
    assert len(found) == 1
    return found[0].astype(np.uint32)


def test_private_run_epsilon_recomputed_independently(private_run, corpus):
    config, summary, out, _ = private_run
    frame = pq.read_table(out / "metrics.parquet").to_pandas()
    row = frame.iloc[-1]
    assert (row["sampler"], row["accountant"]) == ("truncated_poisson", "truncated_poisson")
    assert summary.privacy["epsilon"] == pytest.approx(row["epsilon"])
    # Every input from the run's own record, checked against what the run was given.
    n = int(row["dataset_size"])
    assert n == load_meta(corpus).n_train
    assert row["sampling_probability"] == pytest.approx(config.batch_size / n, rel=1e-12)
    assert int(row["accounted_steps"]) == config.num_steps
    # L priced by the run (config.truncated_batch_size is None), a multiple of the microbatch.
    assert bool(row["truncation_priced"]) and int(row["truncated_batch_size"]) % config.microbatch_size == 0
    assert row["noise_batch_ratio"] == pytest.approx(row["sigma"] / config.batch_size)
    # dp-accounting alone (not jax-privacy's event, not dpscaling's discretisation rule: a fixed interval).
    interval = 3e-4

    def epsilon_at(sigma: float) -> float:
        event = dp_accounting.SelfComposedDpEvent(
            dp_accounting.TruncatedSubsampledGaussianDpEvent(
                dataset_size=n, sampling_probability=float(row["sampling_probability"]),
                truncated_batch_size=int(row["truncated_batch_size"]), noise_multiplier=sigma),
            int(row["accounted_steps"]))
        return dp_accounting.pld.PLDAccountant(value_discretization_interval=interval).compose(event).get_epsilon(
            float(row["delta"]))

    epsilon = epsilon_at(float(row["sigma"]))
    assert row["epsilon"] == pytest.approx(epsilon, rel=0.01)
    assert row["epsilon"] <= TARGET_EPSILON * (1 + 1e-9)
    assert epsilon == pytest.approx(TARGET_EPSILON, rel=0.01)  # calibrated, not merely below
    # The calibrated σ, not a configured one: a slightly smaller σ overspends.
    assert epsilon_at(0.97 * float(row["sigma"])) > TARGET_EPSILON


def test_private_key_is_secret_fresh_and_kept_in_the_checkpoint(private_run):
    config, _, out, log = private_run
    key = _stored_key(out / "ckpt", config.num_steps)
    assert not np.array_equal(key, np.asarray(study_noise_key(config.seed)))
    assert not np.array_equal(secret_key(), secret_key())
    words = [int(w) for w in key]
    needles = [str(w) for w in words] + [f"{w:08x}" for w in words] + [f"{w:x}" for w in words]
    needles += [str(words[0] << 32 | words[1]), str(words[1] << 32 | words[0]), key.tobytes().hex()]
    needles = [n for n in needles if len(n) >= 6]  # a short number could occur by chance
    outputs = [out / "metrics.parquet", out / "ckpt" / "metrics.partial.parquet",
               out / "ckpt" / "config.json"]
    assert log.strip(), "the run logged nothing to search"
    for path in outputs:
        data = path.read_bytes()
        assert key.tobytes() not in data, path
        text = data.decode("latin-1")
        for needle in needles:
            assert needle not in text, (path, "key")
    for needle in needles:
        assert needle not in log


def test_private_run_resumes_exactly(private_run, corpus, tmp_path):
    config, _, out, _ = private_run
    resumed = tmp_path / "resumed"
    resume_from_midpoint(config, corpus, out, resumed)
    np.testing.assert_array_equal(_stored_key(resumed / "ckpt", config.num_steps),
                                  _stored_key(out / "ckpt", config.num_steps))


def test_computing_the_padding_microbatches_too_gives_the_identical_curve(private_run, corpus, tmp_path):
    """DP-SGD, truncated Poisson, vmap: the second half computed with every microbatch of padding
    (``skip_padding=False``) logs, bit for bit, the curve of the run that skipped them."""
    config, _, out, _ = private_run
    assert config.skip_padding and config.clipping == "vmap"
    resume_from_midpoint(config, corpus, out, tmp_path / "unskipped", dataclasses.replace(config, skip_padding=False))


# --- the study mode's reproducible, shared noise stream ------------------------------------


def test_study_runs_at_different_noise_ratios_share_one_noise_stream():
    """The study's DP-Adam of one seed draws the same standard-normal noise at every σ̄: on a
    zero gradient Adam's first step is −lr·n/(|n| + eps) ≈ −lr·sign(n), the same for σ̄ = 0.1
    and 0.4, and different for another seed."""
    params = {"w": jnp.zeros((64, 32))}
    base = dict(model="custom", batch_size=8, learning_rate=1.0, warmup_steps=0)
    steps = {}
    for seed, ratio in ((4, 0.1), (4, 0.4), (5, 0.1)):
        optimizer = make_optimizer(TrainConfig(**(base | dict(noise_batch_ratio=ratio, seed=seed))))
        state = optimizer.init(params)
        assert noise_key_of(state) is None  # the study key is the seed's, not stored per run
        steps[seed, ratio], _ = optimizer.update(params, state, params)
    np.testing.assert_array_equal(np.sign(steps[4, 0.4]["w"]), np.sign(steps[4, 0.1]["w"]))
    np.testing.assert_allclose(steps[4, 0.4]["w"], steps[4, 0.1]["w"], atol=1e-3)
    assert np.mean(np.sign(steps[4, 0.1]["w"]) == np.sign(steps[5, 0.1]["w"])) < 0.6
    # The same draw, scaled by σ̄: the σ̄ columns share a noise direction.
    draws = {}
    for ratio in (0.1, 0.4):
        noise = add_gaussian_noise(ratio, study_noise_key(4))
        draws[ratio], _ = noise.update(params, noise.init(params))
    np.testing.assert_allclose(draws[0.4]["w"], 4 * draws[0.1]["w"], rtol=1e-6)


def test_workflow_passes_sampling_and_delta_to_the_run():
    from dpscaling.train.config import job_train_config
    from dpscaling.workflow.params import training_params

    wildcards = {"model": "BertTiny", "nbr": "0.5", "lr": "0.01", "batch": "32", "seed": "0"}
    config = validated({"training": {"sampling": "truncated_poisson", "truncated_batch_size": 48,
                                     "physical_batch": 32, "microbatch_size": 16}, "accounting": {"delta": 1e-6}})
    params = training_params(config)
    made = job_train_config("BertTiny", copy.deepcopy(params), wildcards, seq_len=64)
    assert (made.sampling, made.truncated_batch_size, made.accountant, made.delta) == (
        "truncated_poisson", 48, None, 1e-6)
    assert made.physical_batch_size == 48
    # A study job's param and config dict are what they were before these keys existed.
    study = validated({})
    params = training_params(study)
    assert not {"sampling", "truncated_batch_size", "accountant", "delta"} & set(params)
    made = job_train_config("BertTiny", params, wildcards, seq_len=64)
    assert made.sampling == "shuffle" and made.delta == 1e-8
    assert not {"sampling", "truncated_batch_size", "accountant", "target_epsilon",
                "delta"} & set(made.to_dict())
    # allow_repeats is a policy, not part of the dict (train/config.py): compare everything else
    assert TrainConfig.from_dict(made.to_dict()) == dataclasses.replace(made, allow_repeats=True)


# --- what closing the loop needs from training -----------------------------------------


def test_a_private_checkpoint_is_evaluated_on_held_out_sequences(private_run, corpus):
    from dpscaling.train.evaluate import evaluate_checkpoint

    config, summary, out, _ = private_run
    evaluation = evaluate_checkpoint(out / "ckpt", corpus, 64, batch_size=32, split="heldout")
    assert evaluation.step == config.num_steps  # the final private model, secret key slot and all
    assert evaluation.split == "heldout" and math.isfinite(evaluation.loss)
    # A trained model, not a fresh one: below the uniform guess over the vocabulary.
    assert evaluation.loss < math.log(load_meta(corpus).vocab_size)


def test_train_sequences_is_a_seeded_data_independent_subset(corpus):
    from dpscaling.train.run_privacy import training_rows

    rows = np.arange(1000)[:, None] * np.ones((1, 4), np.int32)
    config = TrainConfig(**PRIVATE, train_sequences=100)
    subset = training_rows(rows, config)
    assert subset.shape == (100, 4) and len(np.unique(subset[:, 0])) == 100
    assert np.all(np.diff(subset[:, 0]) > 0)  # original order
    np.testing.assert_array_equal(subset, training_rows(rows * 7, config) // 7)  # positions, not contents
    assert not np.array_equal(subset, training_rows(rows, dataclasses.replace(config, seed=1)))
    assert training_rows(rows, TrainConfig(**PRIVATE)) is rows
    assert "train_sequences" not in TrainConfig(**PRIVATE).to_dict()  # study checkpoints compare as before
    with pytest.raises(UserError, match="train_sequences"):
        TrainConfig(**PRIVATE, train_sequences=8)  # below the expected batch
    with pytest.raises(UserError, match="train_sequences"):
        run_training(TrainConfig(**PRIVATE, train_sequences=10**9), corpus, corpus / "x.parquet", corpus / "x")
