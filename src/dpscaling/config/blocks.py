"""The run's configuration as frozen, typed blocks: one dataclass per block of the schema.

:func:`load_config` turns the schema-validated mapping (every default filled by
:func:`dpscaling.config.schema.validate_config`) into a :class:`RunConfig`. The dataclasses declare
no defaults of their own: every value comes from the config, and so from the schema when the user
left it out. Values derived from a block are its methods (the training job's param, the accounting
table's spec, the law's settings, the audit's settings, …).

The blocks themselves live beside it, by what they configure: :mod:`dpscaling.config.training_blocks` (what
is trained) and :mod:`dpscaling.config.analysis_blocks` (what is computed from the runs), over
:class:`dpscaling.config.block.Block`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from dpscaling.config.block import Block, from_schema, plain
from dpscaling.config.analysis_blocks import (
    AccountingBlock, AdaptiveDesignBlock, AuditBlock, ExplorerBlock, FitBlock, PrivateModelBlock, SavingsBlock)
from dpscaling.config.training_blocks import (
    AblationBlock, DataBlock, FinetuneBlock, LearningRateProtocolBlock, ModelsBlock, TrainingBlock)


# ------------------------------------------------------------------------------------------- the run


@from_schema("")
class RunConfig(Block):
    """The whole validated config."""

    NESTED: ClassVar[Mapping[str, type[Block]]] = {
        "data": DataBlock, "models": ModelsBlock, "training": TrainingBlock,
        "learning_rate_protocol": LearningRateProtocolBlock, "accounting": AccountingBlock,
        "fit": FitBlock, "ablation_batch": AblationBlock, "audit": AuditBlock, "private_model": PrivateModelBlock,
        "savings": SavingsBlock, "explorer": ExplorerBlock, "finetune": FinetuneBlock,
        "adaptive_design": AdaptiveDesignBlock}

    @property
    def root(self) -> str:
        """Where this run's outputs land: ``results/<run_name>``."""
        # The one declaration of the results root: the schema has no key for it (run_name's description names
        # the directory in prose, and compilation_cache's default results/.jax-cache is a key of its own).
        return f"results/{self.run_name}"

    def seq_lens(self) -> tuple[int, ...]:
        """The sequence lengths the grid trains at, shortest first: ``training.seq_lens``, or the one length
        ``data.seq_len`` when it is unset (the paper's setting)."""
        lengths = self.training.seq_lens or (self.data.seq_len,)
        return tuple(sorted(int(length) for length in lengths))


def load_config(config: Mapping[str, Any]) -> RunConfig:
    """The validated ``config`` (defaults filled) as a :class:`RunConfig`."""
    return RunConfig.from_mapping(config, "")


def typed(config: Mapping[str, Any] | RunConfig) -> RunConfig:
    """``config`` as a :class:`RunConfig` (a validated mapping is converted)."""
    return config if isinstance(config, RunConfig) else load_config(config)


def config_yaml(config: Mapping[str, Any] | RunConfig) -> str:
    """The effective config (every key, defaults filled) as YAML, its blocks in the schema's order:
    what a run used (``results/<run>/config.yaml``, the report)."""
    import yaml

    from dpscaling.config.schema import schema

    mapping = config.to_mapping() if isinstance(config, RunConfig) else plain(config)
    rank = {key: index for index, key in enumerate(schema()["properties"])}
    ordered = dict(sorted(mapping.items(), key=lambda item: rank.get(item[0], len(rank))))
    return yaml.safe_dump(ordered, sort_keys=False)
