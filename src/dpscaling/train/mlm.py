"""Masked-language-model inputs and loss (paper §2 "Masked Language Modeling", §3.2).

Each sequence gets ``n = max(1, round(p_mask · n_candidates))`` positions chosen
uniformly at random among its non-special, non-padding tokens (capped at a static
``max_predictions`` so shapes are fixed under jit), with BERT's 80/10/10 rule:
80% → [MASK], 10% → a uniformly random token, 10% → unchanged. The loss of a sequence
is the mean cross-entropy over its masked tokens; one sequence = one privacy unit, so
this per-sequence loss is what DP-SGD clips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import optax


@dataclass(frozen=True)
class MaskingSpec:
    """Static description of the masking rule for one vocabulary / sequence length."""

    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...]  # never masked: [PAD] [UNK] [CLS] [SEP] [MASK]
    pad_id: int
    p_mask: float = 0.15
    max_predictions: int | None = None  # None → ceil(p_mask · seq_len)

    def n_predictions(self, seq_len: int) -> int:
        return self.max_predictions or max(1, math.ceil(self.p_mask * seq_len))


def mask_tokens(
    key: jax.Array, input_ids: jnp.ndarray, spec: MaskingSpec
) -> dict[str, jnp.ndarray]:
    """BERT MLM masking of a ``(batch, seq)`` batch.

    Returns a dict with ``input_ids`` (masked), ``masked_positions``, ``labels`` and
    ``label_weights`` (``(batch, n_predictions)``; weight 0 marks unused slots) and
    ``padding_mask``.
    """
    batch, seq = input_ids.shape
    m = spec.n_predictions(seq)
    k_choose, k_rule, k_random = jax.random.split(key, 3)
    special = jnp.isin(input_ids, jnp.asarray(spec.special_ids, input_ids.dtype))
    # Uniform random subset: the m largest i.i.d. scores, candidates ranked first.
    scores = jax.random.uniform(k_choose, (batch, seq)) + jnp.where(special, -2.0, 0.0)
    _, positions = jax.lax.top_k(scores, m)
    n_candidates = jnp.sum(~special, axis=1)
    n_mask = jnp.clip(jnp.round(spec.p_mask * n_candidates), 1, m).astype(jnp.int32)
    n_mask = jnp.minimum(n_mask, n_candidates)
    weights = (jnp.arange(m)[None, :] < n_mask[:, None]).astype(jnp.float32)
    labels = jnp.take_along_axis(input_ids, positions, axis=1)

    rule = jax.random.uniform(k_rule, (batch, m))
    random_tokens = jax.random.randint(k_random, (batch, m), 0, spec.vocab_size, input_ids.dtype)
    replacement = jnp.where(rule < 0.8, spec.mask_id, jnp.where(rule < 0.9, random_tokens, labels))
    replacement = jnp.where(weights > 0, replacement, labels)  # unused slots stay unchanged
    rows = jnp.arange(batch)[:, None]
    masked = input_ids.at[rows, positions].set(replacement.astype(input_ids.dtype))
    return {
        "input_ids": masked,
        "masked_positions": positions,
        "labels": labels,
        "label_weights": weights,
        "padding_mask": input_ids != spec.pad_id,
    }


def sequence_losses(logits: jnp.ndarray, batch: dict[str, jnp.ndarray]) -> jnp.ndarray:
    """Per-sequence mean cross-entropy over its masked tokens, ``(batch,)``, float32."""
    ce = optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), batch["labels"]
    )
    weights = batch["label_weights"]
    return jnp.sum(ce * weights, axis=1) / jnp.maximum(jnp.sum(weights, axis=1), 1.0)
