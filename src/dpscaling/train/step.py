"""The pure DP-Adam training step (paper Algorithm 1 with OptimizerUpdate = Adam)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpscaling.dp import CLIPPED_SUMS, clipped_mean_grad, dp_optimizer
from dpscaling.models.stacking import init_params
from dpscaling.core.streams import Stream
from dpscaling.train.config import TrainConfig, learning_rate_schedule
from dpscaling.train.objectives import Objective, loss_fn
from dpscaling.train.units import UNITS

PyTree = Any

# Independent random streams derived from the run seed; each step folds in its index,
# so the stream depends only on (seed, step) — the basis of exact resume.


class TrainState(NamedTuple):
    step: jnp.ndarray  # int32 scalar: steps completed
    params: PyTree
    opt_state: PyTree


class StepHyperparams(NamedTuple):
    """What differs between the grid points of one model and batch shape, passed to the step
    as data: one compiled step (and one entry of the persistent compilation cache) serves every
    σ̄, learning rate and seed of a shape, instead of each job compiling its own constants."""

    noise_batch_ratio: jnp.ndarray  # float32 scalar σ̄
    learning_rate: jnp.ndarray  # float32 scalar: the schedule's peak
    mask_key: jax.Array  # the objective's stream (BERT's masks); step t uses fold_in(mask_key, t)
    noise_key: jax.Array  # the study's noise stream (a private run's state key overrides it)


def step_hyperparams(config: TrainConfig, noise_batch_ratio: float | None = None) -> StepHyperparams:
    """The run's :class:`StepHyperparams`: σ̄ is ``config.noise_batch_ratio`` unless given (a
    run calibrated for a target ε); the keys are the seed's study streams."""
    ratio = config.noise_batch_ratio if noise_batch_ratio is None else noise_batch_ratio
    return StepHyperparams(
        jnp.float32(ratio),
        jnp.float32(config.learning_rate),
        _stream_key(config.seed, Stream.MASK),
        study_noise_key(config.seed),
    )


def make_optimizer(
    config: TrainConfig, hyperparams: StepHyperparams | None = None
) -> optax.GradientTransformation:
    """DP-Adam: N(0, σ̄²) on the clipped mean gradient (correlated across steps for a BandMF mechanism:
    :mod:`dpscaling.privacy.mechanisms`), then Adam with the paper's schedule.

    σ̄, the peak learning rate and the noise key come from ``hyperparams`` (default: the
    config's, :func:`step_hyperparams`); inside the step they are traced values. A private run
    replaces the noise key in the state by a secret one (:func:`dpscaling.dp.noise.replace_noise_key`).
    """
    hyperparams = step_hyperparams(config) if hyperparams is None else hyperparams
    adam = optax.adam(
        learning_rate_schedule(config, peak=hyperparams.learning_rate),
        b1=config.adam_b1,
        b2=config.adam_b2,
        eps=config.adam_eps,
    )
    # scanned layers: the unrolled model's noise, coordinate for coordinate (dpscaling.dp.layers)
    layer_prefix = config.model_family.module_class().layer_prefix if config.scan_layers else None
    noise = config.noise_mechanism.noise_transform(
        hyperparams.noise_batch_ratio, hyperparams.noise_key, config.num_steps, config.bandmf_strategy, layer_prefix
    )
    return dp_optimizer(adam, noise)


def study_noise_key(seed: int) -> jax.Array:
    """The study mode's reproducible noise key: a function of the seed only, NOT of σ̄, so the
    runs of one seed at different σ̄ share one standard-normal noise stream (common random
    numbers: the σ̄ columns differ by the noise scale, not by the draw)."""
    return _stream_key(seed, Stream.NOISE)


def _stream_key(seed: int, stream: int) -> jax.Array:
    return jax.random.fold_in(jax.random.PRNGKey(seed), stream)


def init_key(seed: int) -> jax.Array:
    """The key of the seed's parameter initialisation."""
    return _stream_key(seed, Stream.INIT)


def init_state(
    model,
    objective: Objective,
    optimizer: optax.GradientTransformation,
    config: TrainConfig,
    seq_len: int,
    key: jax.Array | None = None,
) -> TrainState:
    """The state at step 0; ``key`` (default :func:`init_key` of the seed) may be a jit argument."""
    key = init_key(config.seed) if key is None else key
    params = init_params(model, key, *objective.init_inputs(seq_len))  # either layer layout: the same start
    return TrainState(jnp.zeros([], jnp.int32), params, optimizer.init(params))


def make_train_step(
    model,
    objective: Objective,
    config: TrainConfig,
    microbatch_sharding: jax.sharding.Sharding | None = None,
) -> Callable[..., tuple[TrainState, dict[str, jnp.ndarray]]]:
    """``step(state, hyperparams, tokens, example_weights=None) -> (state, metrics)``: the
    objective's batch (BERT's masks, or next-token targets), clip, noise, Adam. Pure; jit it.

    ``hyperparams`` (:class:`StepHyperparams`) are arguments, not constants, so the compiled
    step depends only on the shapes and the config's fixed settings (clipping, schedule
    shape, Adam's b1/b2/eps). ``tokens`` is the ``(B, seq)`` physical batch of unmasked
    token ids (``(B, m, seq)``: B users' m sequences each, for a user-level sampler). A padded Poisson
    batch also passes ``example_weights`` (1 real, 0 padding): padding contributes nothing,
    the clipped sum is divided by the expected batch ``config.batch_size``, and the metrics
    average over real examples only.
    """
    unit = UNITS[config.sampler.unit]  # what one clipped contribution is: a sequence, or a user's sequences
    losses_of = unit.losses(loss_fn(objective, model))
    precision = clipping_precision(config)

    def step(
        state: TrainState,
        hyperparams: StepHyperparams,
        tokens: jnp.ndarray,
        example_weights: jnp.ndarray | None = None,
    ):
        with jax.default_matmul_precision(precision):
            return _step(state, hyperparams, tokens, example_weights)

    def _step(state, hyperparams, tokens, example_weights):
        optimizer = make_optimizer(config, hyperparams)
        batch = unit.batch(objective, jax.random.fold_in(hyperparams.mask_key, state.step), tokens)
        if config.clipping == "none":
            losses, grad = _mean_grad(losses_of, state.params, batch, config.microbatch)
            norms = jnp.full(losses.shape, jnp.nan)
        else:
            grad, losses, norms = clipped_mean_grad(
                losses_of,
                state.params,
                batch,
                clip_norm=config.clip_norm,
                microbatch_size=config.microbatch,
                clipped_sum=CLIPPED_SUMS[config.clipping],
                microbatch_sharding=microbatch_sharding,
                example_weights=example_weights,
                normaliser=None if example_weights is None else config.batch_size,
                skip_padding=config.skip_padding,
            )
        updates, opt_state = optimizer.update(grad, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        if example_weights is None:
            mean = jnp.mean
        else:
            real = jnp.maximum(jnp.sum(example_weights), 1.0)
            mean = lambda x: jnp.sum(jnp.where(example_weights > 0, x, 0.0)) / real  # noqa: E731
        metrics = {
            "loss": mean(losses),
            "grad_norm": mean(norms),
            "clipped_fraction": mean((norms > config.clip_norm).astype(jnp.float32)),
        }
        return TrainState(state.step + 1, params, opt_state), metrics

    return step


def clipping_precision(config: TrainConfig) -> str | None:
    """The matrix-product precision of the step: ``"highest"`` (exact float32 products) for a private
    run that clips with ghost norms, else None (the device's default).

    Ghost clipping computes each example's gradient norm in one pass and its clipped gradient in
    another. Where float32 products round their inputs by default (TF32 on NVIDIA GPUs since Ampere,
    bf16 passes on TPUs) the two passes round differently: measured on an H100, a clipped gradient's
    norm reached 1.000055 C. A private run's ε assumes C bounds every example's contribution, so its
    ghost products are exact; vmap clips the gradient it sums (exact at any precision), and the
    study's runs (a noise-batch ratio, no ε) keep the fast default. On a CPU both are exact."""
    return "highest" if config.sampler.private and config.clipping == "ghost" else None


def _mean_grad(loss_fn, params, batch, microbatch_size: int):
    """Non-private mean gradient, accumulated over microbatches (benchmark baseline)."""
    from dpscaling.dp.per_example import microbatches

    size = batch["input_ids"].shape[0]

    def accumulate(total, mb):
        losses, vjp = jax.vjp(lambda p: loss_fn(p, mb), params)
        (grad,) = vjp(jnp.ones_like(losses))
        return jax.tree.map(jnp.add, total, grad), losses

    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
    total, losses = jax.lax.scan(accumulate, zeros, microbatches(batch, microbatch_size))
    return losses.reshape(-1), jax.tree.map(lambda g: g / size, total)
