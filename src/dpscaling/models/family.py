"""BERT model configurations: the paper's family (Table 1) and free custom sizes.

Paper §3.2, Table 1 ("Models used in this study, taken from Devlin et al."):
layers / heads / hidden size, with the feed-forward (intermediate) size 4 × hidden.

Parameter-count convention (checked against the paper's appendix "Training Throughput"
table: 4.52M, 11.4M, 29.0M, 41.6M, 110M, 335M, 729M). We count exactly the parameters
that are trained: embeddings (word, 512 learned positions, 2 token types, LayerNorm),
the post-LN encoder, and the MLM head (transform Dense + LayerNorm, output bias), with
the output projection *tied* to the word embedding and *no* pooler / next-sentence
head (MLM-only pretraining never uses them, and under DP an unused parameter would
only receive noise). With vocab 30522 this gives 4.42M, 11.2M, 28.8M, 41.4M, 109.5M,
335.2M, 730.0M: every size within 2.3% of the throughput table (Tiny -2.3%, Mini
-1.7%, Small…Base within 0.7%, Large/Mega within 0.15%), and Base's 109.5M agrees with
Table 1's "109M". Adding a pooler (docs/models.md, "Parameter-count conventions") moves Small…Base
closer and Large/Mega further; no standard convention puts Tiny/Mini within 1%.
Table 1's 778M for Mega matches only untied output weights, which the throughput
table's 729M rules out. :meth:`BertConfig.param_count` gives these counts in closed form, without
JAX (the Snakefile sizes cluster jobs with it); :func:`dpscaling.models.bert.count_params` counts
the built model's parameter tree, and a test holds the two equal.

This module is JAX-free on purpose: the workflow imports it to check and size models.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpscaling.errors import UserError

BERT_VOCAB_SIZE = 30522  # bert-base-uncased WordPiece vocabulary
BERT_MAX_POSITIONS = 512


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

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "hidden_size", "vocab_size", "max_positions"):
            if getattr(self, name) < 1:
                raise UserError(
                    f"model.{name}: must be a positive integer, got {getattr(self, name)}"
                )
        if self.hidden_size % self.num_heads:
            raise UserError(
                f"model.hidden_size: {self.hidden_size} is not divisible by "
                f"num_heads={self.num_heads}"
            )
        if self.intermediate_size is None:
            object.__setattr__(self, "intermediate_size", 4 * self.hidden_size)

    def replace(self, **changes) -> BertConfig:
        return dataclasses.replace(self, **changes)

    def param_count(self) -> ParamCount:
        """Trained parameters of :class:`~dpscaling.models.bert.BertMlm` in closed form: embeddings
        (word, positions, token types) and their LayerNorm; per layer attention 4·(H² + H), two
        LayerNorms 4·H and the feed-forward 2·H·I + I + H; the MLM head's dense H² + H, LayerNorm
        2·H and output bias V (the output projection is tied to the word embedding)."""
        hidden, inner = self.hidden_size, self.intermediate_size
        embedding = (self.vocab_size + self.max_positions + self.type_vocab_size) * hidden
        layer = 4 * (hidden * hidden + hidden) + 4 * hidden + 2 * hidden * inner + inner + hidden
        head = hidden * hidden + 3 * hidden + self.vocab_size
        total = embedding + 2 * hidden + self.num_layers * layer + head
        return ParamCount(total=total, non_embedding=total - embedding, embedding=embedding)


@dataclass(frozen=True)
class ParamCount:
    """Trained parameters; ``non_embedding`` excludes the word/position/type tables (Kaplan et al.)."""

    total: int
    non_embedding: int
    embedding: int


# Paper Table 1: (layers, heads, hidden).
FAMILY: dict[str, tuple[int, int, int]] = {
    "BertTiny": (2, 2, 128),
    "BertMini": (4, 4, 256),
    "BertSmall": (4, 4, 512),
    "BertMedium": (8, 8, 512),
    "BertBase": (12, 12, 768),
    "BertLarge": (24, 16, 1024),
    "BertMega": (24, 24, 1536),
}

# Paper appendix "Training Throughput" table: the sizes the analysis calls "Model Size".
PAPER_PARAMS: dict[str, float] = {
    "BertTiny": 4.52e6,
    "BertMini": 11.4e6,
    "BertSmall": 29.0e6,
    "BertMedium": 41.6e6,
    "BertBase": 110e6,
    "BertLarge": 335e6,
    "BertMega": 729e6,
}


def bert_config(
    name: str,
    *,
    vocab_size: int = BERT_VOCAB_SIZE,
    max_positions: int = BERT_MAX_POSITIONS,
    **overrides,
) -> BertConfig:
    """The named family member (``BertTiny`` … ``BertMega``), or ``custom`` from overrides.

    ``custom`` needs ``num_layers``, ``num_heads`` and ``hidden_size`` in ``overrides``.
    """
    if name == "custom":
        missing = [k for k in ("num_layers", "num_heads", "hidden_size") if k not in overrides]
        if missing:
            raise UserError(f"model: a custom model needs {', '.join(missing)}")
        return BertConfig(vocab_size=vocab_size, max_positions=max_positions, **overrides)
    if name not in FAMILY:
        raise UserError(f"model: {name!r} is not one of {sorted(FAMILY)} or 'custom'")
    layers, heads, hidden = FAMILY[name]
    base = dict(num_layers=layers, num_heads=heads, hidden_size=hidden)
    base.update(overrides)
    return BertConfig(vocab_size=vocab_size, max_positions=max_positions, **base)


def trained_rows(seq_len: int) -> dict[str, int]:
    """Embedding-table sizes of a *custom* model trained on sequences of ``seq_len`` (docs/models.md).

    Only rows the MLM loss reaches are created: ``seq_len`` learned positions (not BERT's 512) and one
    token type (packed single segments never use type 1). A row that the data never reaches gets zero
    data gradient yet DP noise and Adam updates, and would count in M and C = 6MBST. The paper's family
    (``BertTiny`` …) keeps BERT's 512 positions and 2 types, as paper Table 1 counts them.
    """
    return {"max_positions": seq_len, "type_vocab_size": 1}


def custom_overrides(entry: Mapping[str, Any], seq_len: int) -> tuple[int, dict[str, Any]]:
    """(max_positions, :func:`bert_config` overrides) of a ``models.custom`` entry (layers, heads, hidden,
    optional intermediate) trained on ``seq_len``: only the rows it trains (:func:`trained_rows`) unless
    the entry sets ``max_positions`` or ``type_vocab_size``."""
    rows = {**trained_rows(seq_len), **{k: entry[k] for k in ("max_positions", "type_vocab_size") if k in entry}}
    return int(rows["max_positions"]), {
        "num_layers": entry["layers"],
        "num_heads": entry["heads"],
        "hidden_size": entry["hidden"],
        "intermediate_size": entry.get("intermediate"),
        "type_vocab_size": int(rows["type_vocab_size"]),
    }


def configured_model(name: str, custom: Mapping[str, Mapping[str, Any]], vocab_size: int, seq_len: int,
                     dtype: str = "float32") -> BertConfig:
    """The :class:`BertConfig` a workflow config means by ``name``: a paper family member (BERT's 512
    positions and 2 token types, or ``seq_len`` positions if longer) or a ``models.custom`` entry."""
    if name in custom:
        positions, overrides = custom_overrides(custom[name], seq_len)
        return bert_config("custom", vocab_size=vocab_size, max_positions=positions, dtype=dtype, **overrides)
    return bert_config(name, vocab_size=vocab_size, max_positions=max(BERT_MAX_POSITIONS, seq_len), dtype=dtype)
