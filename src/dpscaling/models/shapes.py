"""Model shapes as typed configs, with their parameter counts in closed form (JAX-free).

* :class:`BertConfig` — the paper's post-LN BERT encoder with a tied masked-LM head (paper §3.2,
  Table 1; the module is :mod:`dpscaling.models.bert`).
* :class:`DecoderConfig` — a pre-LN decoder-only causal transformer with learned positions and an
  output layer tied to the token embedding (GPT-2, Radford et al. 2019; NanoDO, the paper's
  appendix "Training Pipelines"; the module is :mod:`dpscaling.models.decoder`). ``use_bias``
  switches GPT-2's biases in every dense layer and LayerNorm on (GPT-2) or off (NanoDO).

``param_count`` counts exactly the parameters the module creates (a test builds the module and
compares); the workflow sizes jobs with it without importing JAX.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dpscaling.core.errors import UserError

BERT_VOCAB_SIZE = 30522  # bert-base-uncased WordPiece vocabulary
BERT_MAX_POSITIONS = 512
GPT2_VOCAB_SIZE = 50257  # GPT-2's byte-pair vocabulary
GPT2_MAX_POSITIONS = 1024
LAYER_NORM_PLACEMENTS = ("post", "pre")  # BertConfig.layer_norm


@dataclass(frozen=True)
class ParamCount:
    """Trained parameters; ``non_embedding`` excludes the token/position/type tables (Kaplan et al.)."""

    total: int
    non_embedding: int
    embedding: int


def _check_shape(config) -> None:
    for name in ("num_layers", "num_heads", "hidden_size", "vocab_size", "max_positions"):
        if getattr(config, name) < 1:
            raise UserError(f"model.{name}: must be a positive integer, got {getattr(config, name)}")
    if config.hidden_size % config.num_heads:
        raise UserError(f"model.hidden_size: {config.hidden_size} is not divisible by num_heads={config.num_heads}")
    if config.intermediate_size is None:
        object.__setattr__(config, "intermediate_size", 4 * config.hidden_size)


@dataclass(frozen=True)
class BertConfig:
    """Shape of a post-LN BERT encoder with a tied MLM head."""

    num_layers: int
    num_heads: int
    hidden_size: int
    intermediate_size: int | None = None  # None → 4 × hidden_size (paper Table 1)
    vocab_size: int = BERT_VOCAB_SIZE
    max_positions: int = BERT_MAX_POSITIONS
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12  # BERT's value
    initializer_range: float = 0.02  # BERT's truncated-normal std
    dtype: str = "float32"  # compute dtype; parameters are always float32
    # Where each layer's LayerNorm sits: "post" (BERT's, the paper's: x ← LN(x + f(x))) or "pre" (Xiong et al.
    # 2020: x ← x + f(LN(x)), and one more LayerNorm after the last layer)
    layer_norm: str = "post"
    # How the layers are applied, not what they compute (dpscaling.dp.layers.layer_stack): scanned (one layer
    # compiled, parameters with a leading layer axis) instead of unrolled, and activations rematerialised
    scan_layers: bool = False
    remat: bool = False

    def __post_init__(self) -> None:
        _check_shape(self)
        if self.layer_norm not in LAYER_NORM_PLACEMENTS:
            raise UserError(f"model.layer_norm: {self.layer_norm!r} is not one of {list(LAYER_NORM_PLACEMENTS)}")

    def replace(self, **changes) -> BertConfig:
        return dataclasses.replace(self, **changes)

    def param_count(self) -> ParamCount:
        """Embeddings (word, positions, token types) and their LayerNorm; per layer attention
        4·(H² + H), two LayerNorms 4·H and the feed-forward 2·H·I + I + H; the MLM head's dense
        H² + H, LayerNorm 2·H and output bias V (the output projection is tied to the word embedding); pre-LN's
        final LayerNorm 2·H."""
        hidden, inner = self.hidden_size, self.intermediate_size
        embedding = (self.vocab_size + self.max_positions + self.type_vocab_size) * hidden
        layer = 4 * (hidden * hidden + hidden) + 4 * hidden + 2 * hidden * inner + inner + hidden
        head = hidden * hidden + 3 * hidden + self.vocab_size
        final_norm = 2 * hidden if self.layer_norm == "pre" else 0
        total = embedding + 2 * hidden + self.num_layers * layer + final_norm + head
        return ParamCount(total=total, non_embedding=total - embedding, embedding=embedding)


@dataclass(frozen=True)
class DecoderConfig:
    """Shape of a pre-LN decoder-only causal transformer with a tied output layer."""

    num_layers: int
    num_heads: int
    hidden_size: int
    intermediate_size: int | None = None  # None → 4 × hidden_size (GPT-2, NanoDO)
    vocab_size: int = GPT2_VOCAB_SIZE
    max_positions: int = GPT2_MAX_POSITIONS
    use_bias: bool = True  # GPT-2: a bias in every dense layer and LayerNorm; NanoDO: none
    layer_norm_eps: float = 1e-5  # GPT-2's value
    initializer_range: float = 0.02  # GPT-2's normal std (residual projections scaled by 1/√(2L))
    dtype: str = "float32"
    scan_layers: bool = False  # as BertConfig's
    remat: bool = False

    def __post_init__(self) -> None:
        _check_shape(self)

    def replace(self, **changes) -> DecoderConfig:
        return dataclasses.replace(self, **changes)

    def param_count(self) -> ParamCount:
        """Token and position tables; per block two LayerNorms (scale, and bias with ``use_bias``),
        attention q, k, v and output projections 4·H² (+ 4·H biases) and the MLP 2·H·I (+ I + H biases);
        the final LayerNorm. The output layer is the token table again (tied): no parameters."""
        hidden, inner, bias = self.hidden_size, self.intermediate_size, int(self.use_bias)
        embedding = (self.vocab_size + self.max_positions) * hidden
        norm = hidden * (1 + bias)
        block = 2 * norm + 4 * hidden * hidden + bias * 4 * hidden + 2 * hidden * inner + bias * (inner + hidden)
        total = embedding + self.num_layers * block + norm
        return ParamCount(total=total, non_embedding=total - embedding, embedding=embedding)
