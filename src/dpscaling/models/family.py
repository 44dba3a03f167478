"""Model families: one record per architecture, holding everything the rest of the code asks of one.

A :class:`Family` supplies its named presets, its typed shape (:mod:`dpscaling.models.shapes`, with
the parameter count in closed form), its Flax module (imported only when a job builds it), its
training objective (:mod:`dpscaling.train.objectives`: the loss and the targets the unigram floor
counts), which embedding rows a custom size trains, and how jobs are sized on a cluster. Training,
accounting, the law, the figures and :mod:`dpscaling.workflow.cluster` ask the family; none tests which
family it is.

* ``bert`` — the paper's BERT masked-LM family (§3.2, Table 1).

  Parameter-count convention (checked against the paper's appendix "Training Throughput" table:
  4.52M, 11.4M, 29.0M, 41.6M, 110M, 335M, 729M): exactly the trained parameters — embeddings (word,
  512 positions, 2 token types, LayerNorm), the post-LN encoder and the MLM head (transform Dense +
  LayerNorm, output bias), the output projection tied to the word embedding and no pooler or
  next-sentence head (MLM-only pretraining never uses them; under DP an unused parameter would only
  receive noise). At vocabulary 30,522: 4.42M, 11.2M, 28.8M, 41.4M, 109.5M, 335.2M, 730.0M, within
  2.3% of the throughput table (docs/models.md, "Parameter-count conventions").
* ``decoder`` — a decoder-only causal transformer: GPT-2's three sizes with its exact
  parameterisation (biases everywhere, 1,024 positions), and ``NanoDO30M``, the ~30M-parameter
  decoder of the paper's appendix "Training Pipelines" (NanoDO's width and no biases; docs/models.md).

This module is JAX-free on purpose: the workflow imports it to check and size models.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dpscaling.core.errors import UserError
from dpscaling.models.shapes import (
    BERT_MAX_POSITIONS, BERT_VOCAB_SIZE, GPT2_MAX_POSITIONS, GPT2_VOCAB_SIZE, BertConfig, DecoderConfig, ParamCount)

if TYPE_CHECKING:  # the config's blocks, for the annotations only
    from dpscaling.config.blocks import RunConfig
    from dpscaling.config.training_blocks import ModelsBlock

__all__ = ["BERT", "BERT_PRESETS", "BERT_MAX_POSITIONS", "BERT_VOCAB_SIZE", "DECODER", "FAMILIES", "GPT2_VOCAB_SIZE",
           "PAPER_PARAMS", "PRESETS", "BertConfig", "DecoderConfig", "Family", "ParamCount", "bert_config",
           "configured_model", "family_named", "family_of"]

ModelConfig = BertConfig | DecoderConfig
# Optional shape settings of a models.custom entry, passed to the family's shape as they are named
SHAPE_OPTIONS = ("layer_norm",)


@dataclass(frozen=True)
class Family:
    """Everything the code asks of one model family."""

    name: str  # "bert" | "decoder": the ``family`` of a models.custom entry, recorded with every curve
    presets: Mapping[str, tuple[int, int, int]]  # name → (layers, heads, hidden)
    shape: type  # BertConfig | DecoderConfig
    module: str  # "package.module:Class", the Flax module, imported when a job builds it
    objective: str  # a name in dpscaling.train.objectives.OBJECTIVES: the loss and its targets
    max_positions: int  # a preset's learned positions (more if the data's sequences are longer)
    vocab_size: int  # the family's own vocabulary, which its published parameter counts assume
    trained_rows: tuple[str, ...]  # the embedding-row settings a custom size sets to what it trains
    throughput: str  # how cluster jobs are sized (dpscaling.workflow.cluster.param_tokens_per_gpu_second)
    preset_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per-preset shape fields
    # The output layer's bias (a path in the parameter tree), which training.output_bias may start away
    # from zero (dpscaling.data.public_unigram); None: the family has none (its logits are the tied embedding's)
    output_bias: tuple[str, ...] | None = None

    def config(self, name: str, *, vocab_size: int, max_positions: int | None = None, dtype: str = "float32",
               **overrides: Any) -> ModelConfig:
        """Preset ``name``'s shape (or ``"custom"`` from ``num_layers``, ``num_heads``, ``hidden_size`` in
        ``overrides``) at ``vocab_size``, ``max_positions`` (None = the preset's) and compute ``dtype``."""
        if name == "custom":
            missing = [k for k in ("num_layers", "num_heads", "hidden_size") if k not in overrides]
            if missing:
                raise UserError(f"model: a custom {self.name} model needs {', '.join(missing)}")
            base: dict[str, Any] = {}
        elif name in self.presets:
            layers, heads, hidden = self.presets[name]
            base = dict(num_layers=layers, num_heads=heads, hidden_size=hidden, **self.preset_settings.get(name, {}))
        else:
            raise UserError(f"model: {name!r} is not one of {sorted(self.presets)} or 'custom'")
        base.update(overrides)
        if max_positions is not None:
            base["max_positions"] = max_positions
        base.setdefault("max_positions", self.max_positions)
        return self.shape(vocab_size=vocab_size, dtype=dtype, **base)

    def rows_trained_at(self, seq_len: int) -> dict[str, int]:
        """The embedding-table sizes a *custom* size creates at sequence length ``seq_len``: only rows the
        loss reaches (docs/models.md). BERT: ``seq_len`` positions and one token type (packed single
        segments never use type 1); a decoder: ``seq_len`` positions. A row the data never reaches gets no
        data gradient yet DP noise and Adam updates, and would count in M and C = 6MBST. Presets keep
        their published rows, as their parameter counts are published."""
        rows = {"max_positions": seq_len, "type_vocab_size": 1}
        return {key: rows[key] for key in self.trained_rows}

    def custom_overrides(self, entry: Mapping[str, Any], seq_len: int) -> tuple[int, dict[str, Any]]:
        """(max_positions, :meth:`config` overrides) of a ``models.custom`` entry (layers, heads, hidden,
        optional intermediate) trained on ``seq_len``: the rows it trains unless the entry sets them."""
        rows = {**self.rows_trained_at(seq_len), **{k: entry[k] for k in self.trained_rows if k in entry}}
        overrides = {"num_layers": entry["layers"], "num_heads": entry["heads"], "hidden_size": entry["hidden"],
                     "intermediate_size": entry.get("intermediate"),
                     **{k: int(v) for k, v in rows.items() if k != "max_positions"}}
        for key in SHAPE_OPTIONS:  # set only where the entry sets it, so the family's own default stays
            if entry.get(key) is not None:
                if key not in {f.name for f in dataclasses.fields(self.shape)}:
                    raise UserError(f"models.custom.*.{key}: the {self.name} family has no such setting "
                                    f"(set it on bert models only)")
                overrides[key] = entry[key]
        return int(rows["max_positions"]), overrides

    def preset_positions(self, name: str, seq_len: int) -> int:
        """A preset's learned positions: its own, or ``seq_len`` if the data's sequences are longer."""
        own = self.preset_settings.get(name, {}).get("max_positions", self.max_positions)
        return max(int(own), seq_len)

    def module_class(self):
        """The family's Flax module class (imports JAX)."""
        module, _, name = self.module.partition(":")
        return getattr(importlib.import_module(module), name)


# Paper Table 1: (layers, heads, hidden).
BERT_PRESETS: dict[str, tuple[int, int, int]] = {
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

BERT = Family(name="bert", presets=BERT_PRESETS, shape=BertConfig, module="dpscaling.models.bert:BertMlm",
              objective="masked_lm", max_positions=BERT_MAX_POSITIONS, vocab_size=BERT_VOCAB_SIZE,
              trained_rows=("max_positions", "type_vocab_size"), throughput="paper_table",
              output_bias=("mlm_output_bias", "bias"))

# GPT-2's sizes (Radford et al. 2019). NanoDO30M: NanoDO's default width (D 512, 8 heads, F 2048,
# context 512) with 4 blocks instead of 6, so that at NanoDO's 32,101-entry vocabulary it has 29.3M
# parameters, the "30 million parameter" model of the paper's appendix; NanoDO has no biases.
DECODER = Family(name="decoder",
                 presets={"GPT2Small": (12, 12, 768), "GPT2Medium": (24, 16, 1024), "GPT2Large": (36, 20, 1280),
                          "NanoDO30M": (4, 8, 512)},
                 shape=DecoderConfig, module="dpscaling.models.decoder:DecoderLM", objective="causal_lm",
                 max_positions=GPT2_MAX_POSITIONS, vocab_size=GPT2_VOCAB_SIZE, trained_rows=("max_positions",),
                 throughput="flops",
                 preset_settings={"NanoDO30M": {"use_bias": False, "max_positions": 512}})

FAMILIES: dict[str, Family] = {family.name: family for family in (BERT, DECODER)}
PRESETS: dict[str, Family] = {name: family for family in FAMILIES.values() for name in family.presets}


def family_named(name: str, key: str = "family") -> Family:
    if name not in FAMILIES:
        raise UserError(f"{key}: {name!r} is not one of {sorted(FAMILIES)}")
    return FAMILIES[name]


def family_of(name: str, custom: Mapping[str, Mapping[str, Any]] | None = None) -> Family:
    """The family of model ``name``: a preset's, or a ``models.custom`` entry's ``family`` (default ``bert``)."""
    custom = custom or {}
    if name in custom:
        return family_named(custom[name].get("family") or BERT.name, f"models.custom.{name}.family")
    if name in PRESETS:
        return PRESETS[name]
    raise UserError(f"models.names: {name!r} is not one of {sorted(PRESETS)} (add it under models.custom)")


def bert_config(name: str, *, vocab_size: int = BERT_VOCAB_SIZE, max_positions: int = BERT_MAX_POSITIONS,
                **overrides: Any) -> BertConfig:
    """A BERT preset (``BertTiny`` … ``BertMega``), or ``custom`` from overrides."""
    return BERT.config(name, vocab_size=vocab_size, max_positions=max_positions, **overrides)


def configured_model(name: str, custom: Mapping[str, Mapping[str, Any]], vocab_size: int, seq_len: int,
                     dtype: str = "float32") -> ModelConfig:
    """The shape a workflow config means by ``name``: a preset (its published rows, or ``seq_len``
    positions if longer) or a ``models.custom`` entry (only the rows it trains)."""
    family = family_of(name, custom)
    if name in custom:
        positions, overrides = family.custom_overrides(custom[name], seq_len)
        return family.config("custom", vocab_size=vocab_size, max_positions=positions, dtype=dtype, **overrides)
    return family.config(name, vocab_size=vocab_size, max_positions=family.preset_positions(name, seq_len),
                         dtype=dtype)


# ------------------------------------------------------------------------------------------ a run's models


def known_model_names(models: ModelsBlock) -> tuple[str, ...]:
    """Every family's presets and the config's custom sizes (``models``: the config's block)."""
    return tuple(PRESETS) + tuple(sorted(models.custom))


def _custom(models: ModelsBlock) -> dict[str, dict[str, Any]]:
    return {key: entry.to_mapping() for key, entry in models.custom.items()}


def model_family(models: ModelsBlock, name: str) -> Family:
    """The :class:`Family` of model ``name`` of the config's ``models`` block."""
    return family_of(name, _custom(models))


def run_family(models: ModelsBlock) -> Family:
    """The one family of the run's models (a law is fitted on one family); refused when they mix."""
    families: dict[str, list[str]] = {}
    for name in models.names:
        families.setdefault(model_family(models, name).name, []).append(name)
    if len(families) > 1:
        mixed = "; ".join(f"{family}: {', '.join(names)}" for family, names in sorted(families.items()))
        raise UserError(f"models.names: a law is fitted on one model family, but these mix families ({mixed}); "
                        "run each family under its own run_name")
    return model_family(models, models.names[0])


def model_param_of(models: ModelsBlock, name: str, seq_len: int) -> str | dict[str, Any]:
    """A training job's ``model`` param: a preset's name, or a ``models.custom`` entry with the embedding rows
    it creates at ``seq_len`` (:meth:`Family.rows_trained_at`), so a change of those rows reruns the job."""
    if name not in models.custom:
        return name
    return {**models.custom[name].to_mapping(), **model_family(models, name).rows_trained_at(seq_len)}


def run_model_config(run: RunConfig, name: str, seq_len: int | None = None) -> ModelConfig:
    """The model config the run means by ``name`` trained at ``seq_len`` (None = ``data.seq_len``): a custom
    size's position rows follow the length."""
    return configured_model(name, _custom(run.models), run.data.model_vocab_size(), seq_len or run.data.seq_len)
