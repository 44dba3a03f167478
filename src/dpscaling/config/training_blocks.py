"""The blocks of what is trained (docs/config.md): ``data``, ``models``, ``training`` (each key's roles say which
jobs it reaches, :mod:`dpscaling.config.roles`), ``learning_rate_protocol``, ``ablation_batch`` and ``finetune``,
with the training params each job's rule passes (:meth:`TrainingBlock.job_params` and the ones built on it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from dpscaling.config.block import Block, from_schema
from dpscaling.config.roles import (
    ABLATION_OWN, ABLATION_SHARED, GRID_AXIS, LATE, MODEL_START, PRIVATE_RUNS, SELECTS_JOBS, fields_with)
from dpscaling.core.errors import UserError


# ---------------------------------------------------------------------------------------------- data

VENDORED_VOCAB_SIZES = {"bert-base-uncased": 30522, "wordpiece-core-8192": 8192}  # resources/vocab/


@from_schema("data.users")
class UsersBlock(Block):
    """``data.users``: the privacy unit of the data (:mod:`dpscaling.data.users`)."""


@from_schema("data")
class DataBlock(Block):
    NAME: ClassVar[str] = "data"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"users": UsersBlock}

    def model_vocab_size(self) -> int:
        """The vocabulary size models are built with: ``vocab_size`` when the data stage trains the
        vocabulary, a vendored vocabulary's size, or a custom file's line count (before that file exists,
        BERT's 30,522: only job sizing asks that early)."""
        if self.tokenizer == "train":
            return int(self.vocab_size)
        if self.tokenizer in VENDORED_VOCAB_SIZES:
            return VENDORED_VOCAB_SIZES[self.tokenizer]
        if self.vocab_file and Path(self.vocab_file).exists():
            with open(self.vocab_file, encoding="utf-8") as handle:
                return sum(1 for _ in handle)
        return VENDORED_VOCAB_SIZES["bert-base-uncased"]


# -------------------------------------------------------------------------------------------- models


@from_schema("models.custom.*")
class CustomModel(Block):
    """A ``models.custom`` entry: a model of free shape in one family (absent ``family`` = ``bert``)."""


@from_schema("models")
class ModelsBlock(Block):
    """``models``."""

    NAME: ClassVar[str] = "models"
    NESTED_MAPS: ClassVar[Mapping[str, type[Block]]] = {"custom": CustomModel}


# ------------------------------------------------------------------------------------------ training


@from_schema("training.repeat_points[]")
class GridPoint(Block):
    """A point of the main grid (training.repeat_points, fit.physical_batch_correction.points)."""



# training.learning_rates (and a grid point's learning_rate) when the learning-rate protocol chooses the rates.
TUNED = "tuned"
# A training.mechanism_learning_rates entry's key: that mechanism's noisy rates as doublings of the chosen rate.
TUNED_DOUBLINGS = "tuned_doublings"
# The data's two domains (data.sources, data.public_sources): the private one, where the privacy unit lives, and
# the public one; learning_rate_protocol.domain names where the protocol's runs train (dpscaling.privacy.epsilon_scope).
PRIVATE_DOMAIN, PUBLIC_DOMAIN = "private", "public"


# The one job param that is not a training field: accounting.delta, handed to each job, a late key.
LATE_EXTRA = {"delta": "accounting.delta"}


@from_schema("training")
class TrainingBlock(Block):
    """``training``."""

    NAME: ClassVar[str] = "training"
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {"repeat_points": GridPoint}

    @property
    def tuned(self) -> bool:
        """Whether the learning-rate protocol chooses the grid's rates (``learning_rates: tuned``)."""
        return self.learning_rates == TUNED

    def learning_rates_of(self, mechanism: str) -> tuple[float, ...] | None:
        """The learning rates ``mechanism``'s noisy runs train at: its ``mechanism_learning_rates`` entry, or
        ``learning_rates`` (a mechanism's noise changes what Adam's second moment sees, so its best rate moves);
        None where the protocol chooses them per model (:func:`dpscaling.workflow.grid.main_grid`)."""
        rates = self.mechanism_learning_rates.get(mechanism, self.learning_rates)
        return None if rates == TUNED or isinstance(rates, Mapping) else tuple(float(v) for v in rates)

    def tuned_doublings_of(self, mechanism: str) -> int | None:
        """``k`` where ``mechanism``'s ``mechanism_learning_rates`` entry is ``{tuned_doublings: k}``: its noisy
        runs train at each model's chosen rate times 2^k alone (BandMF's best rate is a constant multiple of
        DP-SGD's, docs/mechanisms.md); None otherwise."""
        entry = self.mechanism_learning_rates.get(mechanism)
        return int(entry[TUNED_DOUBLINGS]) if isinstance(entry, Mapping) else None

    def job_params(self, delta: float) -> dict[str, Any]:
        """The block (plus ``delta``) as a main-grid job's param, in the config's key order: the
        :data:`LATE` keys only where they differ from the schema's default, the :data:`SELECTS_JOBS` keys
        never."""
        from dpscaling.config.schema import default

        values = {**self.to_mapping(), "delta": delta}
        late = {key: default(f"training.{key}") for key in fields_with(TrainingBlock, LATE)}
        late.update({key: default(where) for key, where in LATE_EXTRA.items()})
        never = fields_with(TrainingBlock, SELECTS_JOBS)
        return {key: value for key, value in values.items()
                if not (key in late and value == late[key]) and key not in never}

    @staticmethod
    def starting_from(params: Mapping[str, Any], init_checkpoint: str) -> dict[str, Any]:
        """A job's ``training`` param ``params`` that starts from ``init_checkpoint``: the checkpoint is the
        start, its output bias too, so the :data:`MODEL_START` keys are left out (fine-tuning, pretrained
        private runs)."""
        start = fields_with(TrainingBlock, MODEL_START)
        return {**{key: value for key, value in params.items() if key not in start}, "init_checkpoint": init_checkpoint}

    @staticmethod
    def private_params(training: Mapping[str, Any]) -> dict[str, Any]:
        """The config's ``training`` mapping as a private run's param: without the :data:`GRID_AXIS` and
        :data:`SELECTS_JOBS` keys."""
        grid = set(fields_with(TrainingBlock, GRID_AXIS)) | set(fields_with(TrainingBlock, SELECTS_JOBS))
        return {key: value for key, value in training.items() if key not in grid}


@from_schema("learning_rate_protocol")
class LearningRateProtocolBlock(Block):
    """``learning_rate_protocol``: the rates tried per model, the runs' horizon and the choice rule's settings
    (:mod:`dpscaling.tuning.rule`)."""

    NAME: ClassVar[str] = "learning_rate_protocol"

    def __post_init__(self) -> None:
        check_ladder(self.ladder)  # the library's callers get the schema's refusal too

    @property
    def public(self) -> bool:
        """Whether the protocol's runs train on the public domain (``domain: public``), not the private one."""
        return self.domain == PUBLIC_DOMAIN

    def run_params(self, training: TrainingBlock, delta: float) -> dict[str, Any]:
        """A protocol job's ``training`` param: the grid's (:meth:`TrainingBlock.job_params`: clipped as the
        grid is, the grid's warm-up and decay) stopped after this block's ``steps``, so a protocol run is the
        first ``steps`` steps of the grid's σ̄ = 0 run at its rate; one checkpoint at the end."""
        log_every = min(training.log_every, self.steps)
        return {**training.job_params(delta), "steps": self.steps, "log_every": log_every,
                "checkpoint_every": -(-self.steps // log_every) * log_every}


# ------------------------------------------------------------------------------------------ ablation


@from_schema("ablation_batch.sweep")
class Sweep(Block):
    """``ablation_batch.sweep``."""


@from_schema("private_model.evaluation")
class Evaluation(Block):
    """How the final models are scored: ``private_model.evaluation`` (``savings.evaluation`` is the same node),
    and ``ablation_batch.evaluation`` with the same keys."""


@from_schema("ablation_batch")
class AblationBlock(Block):
    """``ablation_batch``."""

    NAME: ClassVar[str] = "ablation_batch"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"sweep": Sweep, "evaluation": Evaluation}

    def training(self, training: TrainingBlock, batch: int) -> dict[str, Any]:
        """The ``training`` param of an ablation job at physical batch ``batch``: the ablation's own
        horizon and logging (:data:`ABLATION_OWN`) and microbatch, the training block's
        :data:`ABLATION_SHARED` settings and its :data:`LATE` ones where not at their default; never the
        :data:`PRIVATE_RUNS` keys (the ablation runs the study's sampler) nor the :data:`MODEL_START` ones."""
        shared = training.to_mapping()
        micro = self.microbatch_size
        late = set(fields_with(TrainingBlock, LATE)) | set(LATE_EXTRA)
        private = {*fields_with(TrainingBlock, PRIVATE_RUNS), *fields_with(TrainingBlock, MODEL_START)}
        return {
            **{key: shared[key] for key in fields_with(TrainingBlock, ABLATION_SHARED)},
            **{key: value for key, value in training.job_params(_default_delta()).items()
               if key in late and key not in private},
            **{key: getattr(self, key) for key in fields_with(AblationBlock, ABLATION_OWN)},
            "microbatch_size": None if micro is None or micro >= batch else micro,
            "physical_batch": int(batch),
        }


def _default_delta() -> float:
    from dpscaling.config.schema import default

    return default("accounting.delta")


# ------------------------------------------------------------------------------------------ finetune


@from_schema("finetune.pretrain")
class PretrainBlock(Block):
    """``finetune.pretrain``."""


@from_schema("finetune")
class FinetuneBlock(Block):
    """DP fine-tuning from public pretraining (docs/finetune.md); the private domain is ``data.sources``, the
    public one ``data.public_sources``."""

    NAME: ClassVar[str] = "finetune"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"pretrain": PretrainBlock}

    def pretrain_params(self, training: TrainingBlock, delta: float) -> dict[str, Any]:
        """A pretraining job's ``training`` param: the grid's (:meth:`TrainingBlock.job_params`) with this
        block's horizon and batch, no clipping and no noise (public data)."""
        pretrain = self.pretrain
        return {**training.job_params(delta), "steps": pretrain.steps, "warmup_steps": pretrain.warmup_steps,
                "decay_steps": pretrain.steps, "physical_batch": pretrain.physical_batch, "clipping": "none"}

    def finetune_params(self, training: TrainingBlock, delta: float, init_checkpoint: str) -> dict[str, Any]:
        """A fine-tuning job's ``training`` param: the grid's without its :data:`MODEL_START` keys, starting from
        ``init_checkpoint``."""
        return TrainingBlock.starting_from(training.job_params(delta), init_checkpoint)


def check_ladder(ladder: Sequence[Any]) -> tuple[float, ...]:
    """The ladder as floats, descending; UserError naming the key when it is empty or holds a non-positive rate."""
    if not ladder:
        raise UserError("learning_rate_protocol.ladder: empty; list at least one learning rate > 0 "
                        "(e.g. [0.015625, 0.0078125, 0.00390625])")
    bad = [rate for rate in ladder if not isinstance(rate, (int, float)) or isinstance(rate, bool) or rate <= 0]
    if bad:
        raise UserError(f"learning_rate_protocol.ladder: every rate must be a number > 0, got {bad}")
    return tuple(sorted((float(rate) for rate in ladder), reverse=True))
