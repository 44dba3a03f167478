"""Decoder-only causal transformer (GPT-2; NanoDO, the paper's appendix "Training Pipelines").

Token embedding + learned absolute positions, ``num_layers`` pre-LayerNorm blocks (x ← x +
Attn(LN(x)) with a causal mask; x ← x + MLP(LN(x)), a GELU MLP of width ``intermediate_size``), a
final LayerNorm, and logits through the token embedding (tied output layer). With ``use_bias`` every
dense layer and LayerNorm has a bias (GPT-2); without, none does (NanoDO). No dropout: the paper
trains for less than one epoch. GPT-2's initialisation: normal(0.02), the residual projections
scaled by 1/√(2·num_layers).

Every layer that holds parameters keeps the example axis first in its input and output (positions
are broadcast to ``(batch, seq)``): :mod:`dpscaling.dp.ghost` reads per-example activations there.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from flax import linen as nn

from dpscaling.dp.layers import layer_stack
from dpscaling.models.counting import count_module_params, token_ids
from dpscaling.models.shapes import DecoderConfig, ParamCount

_TOKEN = "token_embeddings"
_POSITION = "position_embeddings"


def _init(config: DecoderConfig, residual: bool = False) -> nn.initializers.Initializer:
    scale = 1.0 / math.sqrt(2 * config.num_layers) if residual else 1.0
    return nn.initializers.normal(config.initializer_range * scale)


class Block(nn.Module):
    """One pre-LN block: causal self-attention, then the MLP, each on a residual branch."""

    config: DecoderConfig

    @nn.compact
    def __call__(self, x: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
        cfg = self.config
        dtype = jnp.dtype(cfg.dtype)
        norm = lambda name: nn.LayerNorm(  # noqa: E731 — two norms, one setting
            epsilon=cfg.layer_norm_eps, use_bias=cfg.use_bias, dtype=dtype, name=name)
        h = norm("attention_norm")(x)
        h = nn.MultiHeadDotProductAttention(
            num_heads=cfg.num_heads,
            qkv_features=cfg.hidden_size,
            out_features=cfg.hidden_size,
            use_bias=cfg.use_bias,
            kernel_init=_init(cfg),
            out_kernel_init=_init(cfg, residual=True),
            dtype=dtype,
            deterministic=True,
            name="attention",
        )(h, h, mask=mask)
        x = x + h
        h = norm("mlp_norm")(x)
        h = nn.Dense(cfg.intermediate_size, use_bias=cfg.use_bias, kernel_init=_init(cfg), dtype=dtype,
                     name="mlp_in")(h)
        h = nn.gelu(h, approximate=True)  # GPT-2's tanh approximation
        h = nn.Dense(cfg.hidden_size, use_bias=cfg.use_bias, kernel_init=_init(cfg, residual=True), dtype=dtype,
                     name="mlp_out")(h)
        return x + h


class DecoderLM(nn.Module):
    """The decoder; returns next-token logits at every position.

    Args (of ``__call__``):
      input_ids: ``(batch, seq)`` int token ids.
      padding_mask: ``(batch, seq)`` bool, True for real tokens; None = no padding.

    Returns:
      ``(batch, seq, vocab_size)`` float32 logits; position t predicts token t + 1.
    """

    config: DecoderConfig
    layer_prefix = "block"  # unrolled block i is the module block_<i> (dpscaling.dp.layers)

    @nn.compact
    def __call__(self, input_ids: jnp.ndarray, padding_mask: jnp.ndarray | None = None) -> jnp.ndarray:
        cfg = self.config
        dtype = jnp.dtype(cfg.dtype)
        batch, seq = input_ids.shape
        token = nn.Embed(cfg.vocab_size, cfg.hidden_size, embedding_init=_init(cfg), dtype=dtype, name=_TOKEN)
        positions = jnp.broadcast_to(jnp.arange(seq), (batch, seq))
        x = token(input_ids) + nn.Embed(cfg.max_positions, cfg.hidden_size, embedding_init=_init(cfg),
                                        dtype=dtype, name=_POSITION)(positions)
        mask = nn.make_causal_mask(input_ids)
        if padding_mask is not None:
            mask = nn.combine_masks(mask, nn.make_attention_mask(padding_mask, padding_mask))
        x = layer_stack(lambda name: Block(cfg, name=name), cfg.num_layers, self.layer_prefix, x, mask,
                        scan=cfg.scan_layers, remat=cfg.remat)
        x = nn.LayerNorm(epsilon=cfg.layer_norm_eps, use_bias=cfg.use_bias, dtype=dtype, name="final_norm")(x)
        return token.attend(x).astype(jnp.float32)  # tied output layer


def embedding_table_paths() -> frozenset[str]:
    """Parameter paths of the embedding tables (excluded from the non-embedding count)."""
    return frozenset(f"{name}/embedding" for name in (_TOKEN, _POSITION))


def count_params(config: DecoderConfig) -> ParamCount:
    """The parameters of :class:`DecoderLM` as built; equal to :meth:`DecoderConfig.param_count` (tested)."""
    return count_module_params(DecoderLM(config), (token_ids(1, 8),), embedding_table_paths())
