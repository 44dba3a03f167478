"""Post-LN BERT encoder with a masked-language-model head (paper §3.2, Table 1).

Devlin et al. (2018) architecture: word + learned-position + token-type embeddings,
LayerNorm, then ``num_layers`` post-LN Transformer layers (self-attention → add →
LayerNorm, GELU feed-forward → add → LayerNorm), and the MLM head (Dense → GELU →
LayerNorm → output projection tied to the word embedding + output bias). No pooler,
no next-sentence head and no dropout: the paper pretrains with MLM only, for less
than one epoch.

Every layer that holds parameters keeps the example axis first in its input and
output (positions and token types are broadcast to ``(batch, seq)``): the ghost-norm
clipping in :mod:`dpscaling.dp.ghost` relies on it to read per-example activations.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import linen as nn

from dpscaling.dp.layers import Bias, layer_stack
from dpscaling.models.counting import count_module_params, token_ids
from dpscaling.models.shapes import BertConfig, ParamCount

_WORD = "word_embeddings"
_POSITION = "position_embeddings"
_TOKEN_TYPE = "token_type_embeddings"


def embedding_table_paths() -> frozenset[str]:
    """Parameter paths of the embedding tables (excluded from the non-embedding count)."""
    return frozenset(f"{name}/embedding" for name in (_WORD, _POSITION, _TOKEN_TYPE))


def _dense_init(config: BertConfig) -> nn.initializers.Initializer:
    return nn.initializers.truncated_normal(config.initializer_range)


class TransformerLayer(nn.Module):
    """One encoder layer: post-LN x ← LN(x + Attn(x)); x ← LN(x + FFN(x)), or pre-LN x ← x + Attn(LN(x));
    x ← x + FFN(LN(x)) (``config.layer_norm``)."""

    config: BertConfig

    @nn.compact
    def __call__(self, x: jnp.ndarray, attention_mask: jnp.ndarray) -> jnp.ndarray:
        cfg = self.config
        dtype = jnp.dtype(cfg.dtype)
        pre = cfg.layer_norm == "pre"
        attention_norm = nn.LayerNorm(epsilon=cfg.layer_norm_eps, dtype=dtype, name="attention_norm")
        output_norm = nn.LayerNorm(epsilon=cfg.layer_norm_eps, dtype=dtype, name="output_norm")
        h = attention_norm(x) if pre else x
        h = nn.MultiHeadDotProductAttention(
            num_heads=cfg.num_heads,
            qkv_features=cfg.hidden_size,
            out_features=cfg.hidden_size,
            kernel_init=_dense_init(cfg),
            dtype=dtype,
            deterministic=True,
            name="attention",
        )(h, h, mask=attention_mask)
        x = x + h if pre else attention_norm(x + h)
        h = nn.Dense(
            cfg.intermediate_size, kernel_init=_dense_init(cfg), dtype=dtype, name="intermediate"
        )(output_norm(x) if pre else x)
        h = nn.gelu(h, approximate=False)  # BERT's exact (erf) GELU
        h = nn.Dense(cfg.hidden_size, kernel_init=_dense_init(cfg), dtype=dtype, name="output")(h)
        return x + h if pre else output_norm(x + h)


class BertMlm(nn.Module):
    """BERT encoder + MLM head; returns logits at the masked positions only.

    Args (of ``__call__``):
      input_ids: ``(batch, seq)`` int token ids (already masked).
      masked_positions: ``(batch, n_predictions)`` indices into ``seq`` whose tokens are
        predicted; computing logits only there saves the ``seq × vocab`` projection.
      padding_mask: ``(batch, seq)`` bool, True for real tokens; None = no padding.
      token_type_ids: ``(batch, seq)`` segment ids; None = all zeros (one segment).

    Returns:
      ``(batch, n_predictions, vocab_size)`` float32 logits.
    """

    config: BertConfig
    layer_prefix = "layer"  # unrolled layer i is the module layer_<i> (dpscaling.dp.layers)

    @nn.compact
    def __call__(
        self,
        input_ids: jnp.ndarray,
        masked_positions: jnp.ndarray,
        padding_mask: jnp.ndarray | None = None,
        token_type_ids: jnp.ndarray | None = None,
    ) -> jnp.ndarray:
        cfg = self.config
        dtype = jnp.dtype(cfg.dtype)
        batch, seq = input_ids.shape
        embed = lambda n, name: nn.Embed(  # noqa: E731 — three tables, one initializer
            n, cfg.hidden_size, embedding_init=_dense_init(cfg), dtype=dtype, name=name
        )
        word = embed(cfg.vocab_size, _WORD)
        positions = jnp.broadcast_to(jnp.arange(seq), (batch, seq))
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        x = word(input_ids) + embed(cfg.max_positions, _POSITION)(positions)
        x = x + embed(cfg.type_vocab_size, _TOKEN_TYPE)(token_type_ids)
        x = nn.LayerNorm(epsilon=cfg.layer_norm_eps, dtype=dtype, name="embeddings_norm")(x)

        if padding_mask is None:
            padding_mask = jnp.ones((batch, seq), dtype=bool)
        attention_mask = nn.make_attention_mask(padding_mask, padding_mask)
        x = layer_stack(lambda name: TransformerLayer(cfg, name=name), cfg.num_layers, self.layer_prefix, x,
                        attention_mask, scan=cfg.scan_layers, remat=cfg.remat)
        if cfg.layer_norm == "pre":  # the residual stream is never normalised inside a pre-LN layer
            x = nn.LayerNorm(epsilon=cfg.layer_norm_eps, dtype=dtype, name="final_norm")(x)

        h = jnp.take_along_axis(x, masked_positions[..., None], axis=1)
        h = nn.Dense(
            cfg.hidden_size, kernel_init=_dense_init(cfg), dtype=dtype, name="mlm_transform"
        )(h)
        h = nn.gelu(h, approximate=False)
        h = nn.LayerNorm(epsilon=cfg.layer_norm_eps, dtype=dtype, name="mlm_norm")(h)
        logits = word.attend(h)  # tied output projection
        logits = Bias(cfg.vocab_size, name="mlm_output_bias")(logits)
        return logits.astype(jnp.float32)


def count_params(config: BertConfig) -> ParamCount:
    """The parameters of :class:`BertMlm` as built; equal to :meth:`BertConfig.param_count` (tested)."""
    return count_module_params(BertMlm(config), (token_ids(1, 8), token_ids(1, 2)), embedding_table_paths())
