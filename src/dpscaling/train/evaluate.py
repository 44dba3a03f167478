"""A trained model's cross entropy and accuracy on a split's sequences, under its own objective.

Paper appendix "Physical Batch Size Ablation - Extended", item 2 ("Differences in
Train / Eval Loss"): the final model of each physical batch size is measured on
training examples it has already seen (1M in the paper); the ``private_model`` target scores
held-out sequences. :func:`evaluate_checkpoint` restores the last orbax checkpoint a training job
left in its checkpoint directory (:mod:`dpscaling.train.loop`), rebuilds the model from the
configuration saved beside it, and scores a seeded sample of sequences with the training job's own
objective (:mod:`dpscaling.train.objectives`: BERT's masks and 80/10/10 rule, or next-token
targets) and per-sequence loss.

- **Cross entropy** is the training curve's quantity: the mean over sequences of each
  sequence's mean cross entropy over its targets.
- **Accuracy** is the fraction of all targets whose most likely prediction is the original token
  (BERT's masked-LM accuracy; next-token accuracy for a decoder).

The sample and every sequence's mask depend only on ``seed`` and the sequence's row, so
all models are scored on the same masked tokens, whatever ``batch_size`` (which bounds
memory only).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpscaling.data.shards import load_meta, load_split
from dpscaling.dp.noise import replace_noise_key
from dpscaling.core.errors import UserError
from dpscaling.core.streams import Stream
from dpscaling.train.checkpoint import open_manager, restore_verified_read_only
from dpscaling.train.config import TrainConfig
from dpscaling.train.checkpoint import CONFIG_FILE, STATE_DIR
from dpscaling.train.objectives import Objective, per_sequence_losses, run_objective
from dpscaling.train.step import init_state, make_optimizer



@dataclass(frozen=True)
class Evaluation:
    """One model's score on ``examples`` sequences of a split, with the run it belongs to."""

    loss: float  # mean over sequences of the per-sequence mean cross entropy over masked tokens
    accuracy: float  # correct predictions / masked tokens
    examples: int  # sequences scored (all of the split when it holds fewer than asked for)
    masked_tokens: int
    step: int  # the checkpoint's step: the model after this many updates
    split: str
    # The run, from the configuration saved with the checkpoint.
    model: str
    batch_size: int
    seed: int
    noise_batch_ratio: float
    learning_rate: float
    num_steps: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_run_config(checkpoint_dir: str | Path) -> TrainConfig:
    """The :class:`TrainConfig` a training job saved beside its checkpoints."""
    path = Path(checkpoint_dir) / CONFIG_FILE
    if not path.is_file():
        raise UserError(f"{path}: no training configuration; is {checkpoint_dir} a training job's checkpoint directory?")
    return TrainConfig.from_dict(json.loads(path.read_text(encoding="utf-8")))


def restore_params(checkpoint_dir: str | Path, model, objective: Objective, config: TrainConfig,
                   seq_len: int) -> tuple[Any, int]:
    """(parameters, step) of the latest checkpoint in ``checkpoint_dir``/state, verified against its
    digest (:mod:`dpscaling.train.checkpoint`), on the default device."""
    state_dir = (Path(checkpoint_dir) / STATE_DIR).absolute()
    if not state_dir.is_dir():
        raise UserError(f"{state_dir}: no checkpoints")
    optimizer = make_optimizer(config)

    def layout():
        state = init_state(model, objective, optimizer, config, seq_len)
        if config.sampler.private:  # a private run's state holds its secret key (never read here)
            state = state._replace(opt_state=replace_noise_key(state.opt_state, jnp.zeros(2, jnp.uint32)))
        return state

    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=device), jax.eval_shape(layout)
    )
    manager = open_manager(state_dir, read_only=True)
    try:
        restored = restore_verified_read_only(manager, abstract, state_dir)
    finally:
        manager.close()
    return restored.state.params, int(restored.step)


def sample_rows(n_rows: int, examples: int, seed: int) -> np.ndarray:
    """Sorted indices of ``min(examples, n_rows)`` distinct rows, a function of ``seed`` only."""
    if examples >= n_rows:
        return np.arange(n_rows)
    return np.sort(np.random.default_rng([seed, Stream.EVAL_SAMPLE]).choice(n_rows, examples, replace=False))


def evaluate_checkpoint(
    checkpoint_dir: str | Path,
    data_dir: str | Path,
    examples: int,
    *,
    batch_size: int = 256,
    seed: int = 0,
    split: str = "train",
) -> Evaluation:
    """Cross entropy and accuracy (the training objective's) of the last checkpoint in ``checkpoint_dir`` on
    ``examples`` sequences of ``split`` (a seeded sample; all of them if the split is smaller)."""
    if examples < 1 or batch_size < 1:
        raise UserError(f"evaluation: examples ({examples}) and batch_size ({batch_size}) must be >= 1")
    config = load_run_config(checkpoint_dir)
    meta = load_meta(data_dir)
    model = config.model_family.module_class()(config.model_config(meta.vocab_size))
    objective = run_objective(config, meta)
    params, step = restore_params(checkpoint_dir, model, objective, config, meta.seq_len)
    rows = load_split(data_dir, split)
    chosen = sample_rows(len(rows), examples, seed)
    sums = _batch_sums(model, objective)
    mask_key = jax.random.fold_in(jax.random.PRNGKey(seed), Stream.EVAL_MASK)
    size = min(batch_size, len(chosen))
    loss_sum = correct = masked = 0.0
    for start in range(0, len(chosen), size):
        index = chosen[start : start + size]
        valid = np.ones(size, np.float32)
        if len(index) < size:  # pad the last batch to the compiled shape; padded rows do not count
            valid[len(index) :] = 0.0
            index = np.concatenate([index, np.repeat(index[:1], size - len(index))])
        keys = jax.vmap(lambda row: jax.random.fold_in(mask_key, row))(jnp.asarray(index, jnp.uint32))
        batch_loss, batch_correct, batch_masked = jax.device_get(sums(params, jnp.asarray(rows[index]), keys, valid))
        loss_sum += float(batch_loss)
        correct += float(batch_correct)
        masked += float(batch_masked)
    return Evaluation(
        loss=loss_sum / len(chosen),
        accuracy=correct / masked if masked else float("nan"),
        examples=int(len(chosen)),
        masked_tokens=int(masked),
        step=step,
        split=split,
        model=config.display_name,
        batch_size=config.batch_size,
        seed=config.seed,
        noise_batch_ratio=config.noise_batch_ratio,
        learning_rate=config.learning_rate,
        num_steps=config.num_steps,
    )


def _batch_sums(model, objective: Objective):
    """jit: (params, tokens (B, S), per-sequence keys, valid (B,)) → (Σ loss, Σ correct, Σ targets)."""

    def batch_one(key, tokens):
        prepared = objective.batch(key, tokens[None, :])
        return {name: value[0] for name, value in prepared.items()}

    @jax.jit
    def sums(params, tokens, keys, valid):
        batch = jax.vmap(batch_one)(keys, tokens)
        logits, labels, weights = objective.predictions(model, params, batch)
        losses = per_sequence_losses(logits, labels, weights)
        weights = weights * valid[:, None]
        hits = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
        return jnp.sum(losses * valid), jnp.sum(hits * weights), jnp.sum(weights)

    return sums
