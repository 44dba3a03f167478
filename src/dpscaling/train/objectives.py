"""Training objectives: how a family turns a batch of packed token ids into per-sequence losses.

A family names its objective (:attr:`dpscaling.models.family.Family.objective`); the train step and
the held-out evaluation ask it, never the family's name (the unigram floor counts the same targets:
:data:`dpscaling.data.floor.TARGETS`).

* ``masked_lm`` (BERT, paper §2 "Masked Language Modeling"): BERT's masking
  (:mod:`dpscaling.train.mlm`); a sequence's loss is the mean cross entropy over its masked tokens.
* ``causal_lm`` (decoders): next-token prediction at every position; a sequence's loss is the mean
  cross entropy over its targets (tokens 2…S of the packed sequence, padding excluded). Packed
  sequences are ``[CLS] t1 … [SEP]`` with ``[SEP]`` also between documents, so the targets are the
  text's tokens and its document boundaries.

One sequence is one privacy unit under both, so the per-sequence loss is what DP-SGD clips.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import optax

from dpscaling.train.mlm import MaskingSpec, mask_tokens

PyTree = Any


class Objective(Protocol):
    name: str

    def batch(self, key: jax.Array, tokens: jnp.ndarray) -> dict[str, jnp.ndarray]:
        """The model's inputs and targets for ``(batch, seq)`` token ids (``key``: this step's randomness)."""

    def predictions(self, model, params: PyTree, batch: dict[str, jnp.ndarray]
                    ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        """(logits ``(B, n, V)``, labels ``(B, n)``, weights ``(B, n)``: 1 for a target, 0 for an unused slot)."""

    def init_inputs(self, seq_len: int) -> tuple[jnp.ndarray, ...]:
        """Dummy inputs for ``model.init``."""


def per_sequence_losses(logits: jnp.ndarray, labels: jnp.ndarray, weights: jnp.ndarray) -> jnp.ndarray:
    """Each sequence's mean cross entropy over its targets, ``(B,)``, float32."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
    return jnp.sum(ce * weights, axis=1) / jnp.maximum(jnp.sum(weights, axis=1), 1.0)


def loss_fn(objective: Objective, model) -> Callable[[PyTree, dict[str, jnp.ndarray]], jnp.ndarray]:
    """``(params, batch) -> (batch,)`` per-sequence losses of ``model`` under ``objective``: what DP-SGD clips."""
    def losses(params, batch):
        return per_sequence_losses(*objective.predictions(model, params, batch))
    return losses


@dataclass(frozen=True)
class MaskedLM:
    """BERT's masked-language-model objective (:mod:`dpscaling.train.mlm`)."""

    masking: MaskingSpec
    name: str = "masked_lm"

    def batch(self, key, tokens):
        return mask_tokens(key, tokens, self.masking)

    def predictions(self, model, params, batch):
        logits = model.apply({"params": params}, batch["input_ids"], batch["masked_positions"], batch["padding_mask"])
        return logits, batch["labels"], batch["label_weights"]

    def init_inputs(self, seq_len):
        return jnp.zeros((1, seq_len), jnp.int32), jnp.zeros((1, 1), jnp.int32)


@dataclass(frozen=True)
class CausalLM:
    """Next-token prediction at every position of a packed sequence."""

    pad_id: int
    name: str = "causal_lm"

    def batch(self, key, tokens):
        targets = jnp.concatenate([tokens[:, 1:], jnp.full_like(tokens[:, :1], self.pad_id)], axis=1)
        return {"input_ids": tokens, "padding_mask": tokens != self.pad_id, "targets": targets,
                "target_weights": (targets != self.pad_id).astype(jnp.float32)}

    def predictions(self, model, params, batch):
        logits = model.apply({"params": params}, batch["input_ids"], batch["padding_mask"])
        return logits, batch["targets"], batch["target_weights"]

    def init_inputs(self, seq_len):
        return (jnp.zeros((1, seq_len), jnp.int32),)


def objective_for(name: str, meta, p_mask: float = 0.15, max_predictions: int | None = None) -> MaskedLM | CausalLM:
    """The objective ``name`` over a packed dataset's vocabulary (:class:`dpscaling.data.shards.DatasetMeta`)."""
    if name == "masked_lm":
        return MaskedLM(MaskingSpec(vocab_size=meta.vocab_size, mask_id=meta.mask_id, special_ids=meta.special_ids,
                                    pad_id=meta.pad_id, p_mask=p_mask, max_predictions=max_predictions))
    if name == "causal_lm":
        return CausalLM(meta.pad_id)
    raise ValueError(f"unknown objective {name!r}; known: masked_lm, causal_lm")


def run_objective(config, meta) -> MaskedLM | CausalLM:
    """The objective of a training run (:class:`dpscaling.train.config.TrainConfig`): its family's."""
    return objective_for(config.model_family.objective, meta, config.p_mask, config.max_predictions)
