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
Table 1's "109M". Adding a pooler (shared/notes/dp-training.md) moves Small…Base
closer and Large/Mega further; no standard convention puts Tiny/Mini within 1%.
Table 1's 778M for Mega matches only untied output weights, which the throughput
table's 729M rules out. The count runs report is :func:`count_params`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp

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
    """Embedding-table sizes of a *custom* model trained on sequences of ``seq_len`` (issue 15, docs/models.md).

    Only rows the MLM loss reaches are created: ``seq_len`` learned positions (not BERT's 512) and one
    token type (packed single segments never use type 1). A row that the data never reaches gets zero
    data gradient yet DP noise and Adam updates, and would count in M and C = 6MBST. The paper's family
    (``BertTiny`` …) keeps BERT's 512 positions and 2 types, as paper Table 1 counts them.
    """
    return {"max_positions": seq_len, "type_vocab_size": 1}


@dataclass(frozen=True)
class ParamCount:
    """Trained parameters; ``non_embedding`` excludes the word/position/type tables (Kaplan et al.)."""

    total: int
    non_embedding: int
    embedding: int


def count_params(config: BertConfig) -> ParamCount:
    """Count the parameters of :class:`~dpscaling.models.bert.BertMlm` by abstract init.

    Uses :func:`jax.eval_shape`, so no memory is allocated even for BertMega.
    """
    from dpscaling.models.bert import BertMlm, embedding_table_paths  # avoid import cycle

    model = BertMlm(config)
    ids = jax.ShapeDtypeStruct((1, 8), jnp.int32)
    positions = jax.ShapeDtypeStruct((1, 2), jnp.int32)
    shapes = jax.eval_shape(model.init, jax.random.key(0), ids, positions)["params"]
    total = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes))
    embedding = sum(
        math.prod(leaf.shape)
        for path, leaf in jax.tree_util.tree_leaves_with_path(shapes)
        if _path_str(path) in embedding_table_paths()
    )
    return ParamCount(total=total, non_embedding=total - embedding, embedding=embedding)


def _path_str(path) -> str:
    return "/".join(str(getattr(key, "key", key)) for key in path)
