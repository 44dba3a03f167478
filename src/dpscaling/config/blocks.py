"""The run's configuration as frozen, typed blocks: one dataclass per block of the schema.

:func:`load_config` turns the schema-validated mapping (every default filled by
:func:`dpscaling.config.schema.validate_config`) into a :class:`RunConfig`. The dataclasses declare
no defaults of their own: every value comes from the config, and so from the schema when the user
left it out. Values derived from a block are its methods (the training job's param, the accounting
table's spec, the law's settings, the audit's settings, …).

Each block remembers the order (and presence) of its keys as the config gave them, and
:meth:`Block.to_mapping` gives them back in that order: Snakemake compares a job's params by their
``repr``, so a param rebuilt in another key order would rerun every finished job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dpscaling.config.roles import (
    ABLATION_OWN, ABLATION_SHARED, FIGURE_RUNS, GRID_AXIS, LATE, MODEL_START, PRIVATE_RUNS, SELECTS_JOBS, fields_with,
    role)
from dpscaling.errors import UserError


@dataclass(frozen=True, kw_only=True)
class Block:
    """A config block: one field per key; nested blocks named in ``NESTED`` (one block), ``NESTED_LISTS``
    (a list of blocks) and ``NESTED_MAPS`` (a mapping of names to blocks)."""

    NAME: ClassVar[str] = ""
    NESTED: ClassVar[Mapping[str, type[Block]]] = {}
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {}
    NESTED_MAPS: ClassVar[Mapping[str, type[Block]]] = {}
    keys: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str | None = None) -> Block:
        where = where or cls.NAME
        names = {f.name for f in dataclasses.fields(cls)} - {"keys"}
        unknown = sorted(set(values) - names)
        if unknown:
            raise UserError(f"config key {where!r}: unknown key(s) {unknown}; accepted keys: {sorted(names)}")
        converted = {}
        for key, value in values.items():
            inner = f"{where}.{key}" if where else key
            if key in cls.NESTED:
                value = cls.NESTED[key].from_mapping(value, inner)
            elif key in cls.NESTED_LISTS:
                value = tuple(cls.NESTED_LISTS[key].from_mapping(v, f"{inner}[{i}]") for i, v in enumerate(value))
            elif key in cls.NESTED_MAPS:
                value = {name: cls.NESTED_MAPS[key].from_mapping(v, f"{inner}.{name}") for name, v in value.items()}
            converted[key] = _frozen(value)
        try:
            return cls(**converted, keys=tuple(values))
        except TypeError as error:  # a key the schema requires is missing: not validated
            raise UserError(f"config key {where!r}: {error} (validate the config against the schema first)") from None

    def to_mapping(self) -> dict[str, Any]:
        """The block as plain data (lists, dicts), its keys in the config's order."""
        return {key: _plain(getattr(self, key)) for key in self.keys}


def _frozen(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, Mapping) and not isinstance(value, Block):
        return {k: _frozen(v) for k, v in value.items()}
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Block):
        return value.to_mapping()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------- data

VENDORED_VOCAB_SIZES = {"bert-base-uncased": 30522, "wordpiece-core-8192": 8192}  # resources/vocab/


@dataclass(frozen=True, kw_only=True)
class DataBlock(Block):
    NAME: ClassVar[str] = "data"
    source: str
    paths: tuple[str, ...]
    text_column: str
    hf_dataset: str | None
    hf_config: str | None
    hf_split: str
    max_documents: int | None
    sources: tuple[str, ...] | None = None  # no schema default: absent unless set (results before it stay)
    public_sources: tuple[str, ...] | None = None  # the public domain beside the private one (likewise)
    tokenizer: str
    vocab_size: int | None
    vocab_file: str | None
    seq_len: int
    heldout_fraction: float
    split_seed: int
    shard_sequences: int

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


@dataclass(frozen=True, kw_only=True)
class CustomModel(Block):
    """A ``models.custom`` entry: a model of free shape in one family (absent ``family`` = ``bert``)."""

    layers: int
    heads: int
    hidden: int
    intermediate: int | None = None
    family: str | None = None


@dataclass(frozen=True, kw_only=True)
class ModelsBlock(Block):
    NAME: ClassVar[str] = "models"
    NESTED_MAPS: ClassVar[Mapping[str, type[Block]]] = {"custom": CustomModel}
    names: tuple[str, ...]
    custom: Mapping[str, CustomModel]

    def known_names(self) -> tuple[str, ...]:
        """Every family's presets and the config's custom sizes."""
        from dpscaling.models.family import PRESETS

        return tuple(PRESETS) + tuple(sorted(self.custom))

    def family(self, name: str):
        """The :class:`~dpscaling.models.family.Family` of model ``name``."""
        from dpscaling.models.family import family_of

        return family_of(name, {key: entry.to_mapping() for key, entry in self.custom.items()})

    def run_family(self):
        """The one family of the run's models (a law is fitted on one family); refused when they mix."""
        families = {}
        for name in self.names:
            families.setdefault(self.family(name).name, []).append(name)
        if len(families) > 1:
            mixed = "; ".join(f"{family}: {', '.join(names)}" for family, names in sorted(families.items()))
            raise UserError(f"models.names: a law is fitted on one model family, but these mix families ({mixed}); "
                            "run each family under its own run_name")
        return self.family(self.names[0])

    def param(self, name: str, seq_len: int) -> str | dict[str, Any]:
        """A training job's ``model`` param: a preset's name, or a ``models.custom`` entry with the embedding
        rows it creates at ``seq_len`` (:meth:`dpscaling.models.family.Family.rows_trained_at`), so a change
        of those rows reruns the job."""
        if name not in self.custom:
            return name
        return {**self.custom[name].to_mapping(), **self.family(name).rows_trained_at(seq_len)}


# ------------------------------------------------------------------------------------------ training


@dataclass(frozen=True, kw_only=True)
class GridPoint(Block):
    """A point of the main grid (training.repeat_points, fit.physical_batch_correction.points)."""

    model: str
    noise_batch_ratio: float
    learning_rate: float | str  # a rate, or TUNED: the model's protocol rate


# training.learning_rates (and a grid point's learning_rate) when the learning-rate protocol chooses the rates.
TUNED = "tuned"


# The one job param that is not a training field: accounting.delta, handed to each job, a late key.
LATE_EXTRA = {"delta": "accounting.delta"}


@dataclass(frozen=True, kw_only=True)
class TrainingBlock(Block):
    NAME: ClassVar[str] = "training"
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {"repeat_points": GridPoint}
    noise_batch_ratios: tuple[float, ...] = role(GRID_AXIS)
    learning_rates: tuple[float, ...] | str = role(GRID_AXIS)  # or TUNED (dpscaling.rate_protocol)
    seq_lens: tuple[int, ...] | None = role(SELECTS_JOBS)
    physical_batch: int = role(GRID_AXIS)
    seed: int
    repeat_seeds: tuple[int, ...] = role(SELECTS_JOBS)
    repeat_points: tuple[GridPoint, ...] = role(SELECTS_JOBS)
    steps: int
    warmup_steps: int
    decay_steps: int
    decay_factor: float = role(ABLATION_SHARED, position=0)
    log_every: int
    checkpoint_every: int
    mask_rate: float = role(ABLATION_SHARED, position=3)
    clip_norm: float = role(ABLATION_SHARED, position=1)
    microbatch_size: int | None
    adam_b1: float = role(LATE)
    adam_b2: float = role(LATE)
    adam_eps: float = role(LATE)
    allow_repeats: bool = role(LATE)
    clipping: str = role(ABLATION_SHARED, position=2)
    sampling: str = role(LATE, PRIVATE_RUNS)
    truncated_batch_size: int | None = role(LATE, PRIVATE_RUNS)
    accountant: str | None = role(LATE, PRIVATE_RUNS)
    mechanisms: tuple[str, ...] = role(SELECTS_JOBS)
    mechanism_learning_rates: Mapping[str, tuple[float, ...]] = role(SELECTS_JOBS)
    bandmf_strategy: str = role(LATE)
    output_bias: str = role(LATE, MODEL_START)

    @property
    def tuned(self) -> bool:
        """Whether the learning-rate protocol chooses the grid's rates (``learning_rates: tuned``)."""
        return self.learning_rates == TUNED

    def learning_rates_of(self, mechanism: str) -> tuple[float, ...] | None:
        """The learning rates ``mechanism``'s noisy runs train at: its ``mechanism_learning_rates`` entry, or
        ``learning_rates`` (a mechanism's noise changes what Adam's second moment sees, so its best rate moves);
        None where the protocol chooses them per model (:func:`dpscaling.grid.main_grid`)."""
        rates = self.mechanism_learning_rates.get(mechanism, self.learning_rates)
        return None if rates == TUNED else tuple(float(v) for v in rates)

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


@dataclass(frozen=True, kw_only=True)
class LearningRateProtocolBlock(Block):
    """``learning_rate_protocol``: the rates tried per model, the runs' horizon and the choice rule's settings
    (:mod:`dpscaling.rate_protocol`)."""

    NAME: ClassVar[str] = "learning_rate_protocol"
    ladder: tuple[float, ...]
    steps: int
    window: int
    tolerance: float
    rates_below: int
    rates_above: int

    def __post_init__(self) -> None:
        from dpscaling.rate_protocol import check_ladder

        check_ladder(self.ladder)  # the library's callers get the schema's refusal too

    def run_params(self, training: TrainingBlock, delta: float) -> dict[str, Any]:
        """A protocol job's ``training`` param: the grid's (:meth:`TrainingBlock.job_params`: clipped as the
        grid is, the grid's warm-up and decay) stopped after this block's ``steps``, so a protocol run is the
        first ``steps`` steps of the grid's σ̄ = 0 run at its rate; one checkpoint at the end."""
        log_every = min(training.log_every, self.steps)
        return {**training.job_params(delta), "steps": self.steps, "log_every": log_every,
                "checkpoint_every": -(-self.steps // log_every) * log_every}


# ------------------------------------------------------------------------------------------ accounting


@dataclass(frozen=True, kw_only=True)
class AccountingTable(Block):
    epsilon_min: float
    epsilon_max: float
    epsilon_per_octave: int
    steps_min: int
    steps_max: int
    steps_per_octave: int
    q_min_log2: int
    q_per_octave: int
    accountant: str
    sigma_per_octave: int
    discretisation_fraction: float
    max_points: int
    q_per_chunk: int


@dataclass(frozen=True, kw_only=True)
class AccountingBlock(Block):
    NAME: ClassVar[str] = "accounting"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"table": AccountingTable}
    delta: float
    sampling: str
    check_points: int
    table: AccountingTable

    def table_spec(self):
        """The σ table's :class:`~dpscaling.accounting.table_spec.TableSpec` (δ = ``accounting.delta``)."""
        from dpscaling.accounting.table_spec import TableSpec

        return TableSpec.from_mapping({**self.table.to_mapping(), "delta": self.delta})


# ------------------------------------------------------------------------------------------------- fit


@dataclass(frozen=True, kw_only=True)
class Window(Block):
    start: float
    end: float
    unit: str


@dataclass(frozen=True, kw_only=True)
class Bootstrap(Block):
    replicates: int
    chunk_size: int
    seed: int


@dataclass(frozen=True, kw_only=True)
class Validation(Block):
    replicates: int
    interval_scale: str


@dataclass(frozen=True, kw_only=True)
class PhysicalBatchCorrectionBlock(Block):
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {"points": GridPoint}
    enabled: bool
    physical_batch: int
    points: tuple[GridPoint, ...]


@dataclass(frozen=True, kw_only=True)
class FitBlock(Block):
    NAME: ClassVar[str] = "fit"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"extrapolation_window": Window, "bootstrap": Bootstrap,
                                                   "physical_batch_correction": PhysicalBatchCorrectionBlock,
                                                   "validation": Validation}
    reference_compatible: bool
    near_optimal_tolerance: float
    rolling_window: int | None
    warmup_steps: int | None
    extrapolation_window: Window
    smooth_nonprivate_along_nbr: bool
    extrapolation_asymptote: str
    isotonic_skip_nan: bool
    interpolate_log_loss: bool
    fill_missing_nbr: str
    extension_doublings: int
    parametric: bool
    bootstrap: Bootstrap
    physical_batch_correction: PhysicalBatchCorrectionBlock
    validation: Validation

    def law_settings(self, training_warmup_steps: int, reference_compatible: bool | None = None):
        """The :class:`~dpscaling.law.LawSettings` this block asks for, in paper or reference-compatible mode
        (``reference_compatible``; None = the block's own). The reference mode fixes the keys the authors'
        code hard-wires, whatever the block says."""
        from dpscaling.law.settings import LawSettings
        from dpscaling.law.settings import Window as LawWindow

        reference = self.reference_compatible if reference_compatible is None else reference_compatible
        window = self.extrapolation_window
        choices: dict[str, Any] = dict(
            warmup_steps=training_warmup_steps if self.warmup_steps is None else self.warmup_steps,
            extrapolation_window=LawWindow(window.start, window.end, window.unit),
            extension_doublings=self.extension_doublings,
        )
        if not reference:
            choices["rolling_window"] = self.rolling_window
            for key in ("smooth_nonprivate_along_nbr", "extrapolation_asymptote", "isotonic_skip_nan",
                        "interpolate_log_loss", "fill_missing_nbr"):
                choices[key] = getattr(self, key)
        return LawSettings.create(reference, **choices)


# ------------------------------------------------------------------------------------- ablation, audit


@dataclass(frozen=True, kw_only=True)
class Sweep(Block):
    noise_batch_ratio: float
    learning_rates: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class Evaluation(Block):
    examples: int
    batch_size: int
    seed: int


@dataclass(frozen=True, kw_only=True)
class AblationBlock(Block):
    NAME: ClassVar[str] = "ablation_batch"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"sweep": Sweep, "evaluation": Evaluation}
    model: str = role(FIGURE_RUNS)
    noise_batch_ratios: tuple[float, ...] = role(FIGURE_RUNS)
    physical_batches: tuple[int, ...] = role(FIGURE_RUNS)
    seeds: tuple[int, ...] = role(FIGURE_RUNS)
    learning_rate: float = role(FIGURE_RUNS)
    steps: int = role(ABLATION_OWN)
    warmup_steps: int = role(ABLATION_OWN)
    decay_steps: int = role(ABLATION_OWN)
    log_every: int = role(ABLATION_OWN)
    checkpoint_every: int = role(ABLATION_OWN)
    microbatch_size: int | None
    sweep: Sweep = role(FIGURE_RUNS)
    evaluation: Evaluation

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


@dataclass(frozen=True, kw_only=True)
class AuditBlock(Block):
    NAME: ClassVar[str] = "audit"
    n_canaries: int
    expected_batch_size: int
    steps: int
    epsilon: float
    significance: float
    microbatch_size: int
    seed: int


@dataclass(frozen=True, kw_only=True)
class BudgetEntry(Block):
    epsilon: float
    delta: float | None = None
    data_budget: int
    compute: float
    # {model, batch_size, iterations, learning_rate}: train this instead of the law's search (None: search)
    configuration: Mapping[str, Any] | None = None
    pretrained: bool | None = None  # fine-tuned from the run's pretrained checkpoints (needs a finetune block)
    mechanism: str | None = None  # a mechanism of training.mechanisms, or "choose" (docs/mechanisms.md)


@dataclass(frozen=True, kw_only=True)
class PrivateModelBlock(Block):
    NAME: ClassVar[str] = "private_model"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"evaluation": Evaluation}
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {"budgets": BudgetEntry}
    budgets: tuple[BudgetEntry, ...]
    learning_rate: float | None
    decision_rule: str
    evaluation: Evaluation


@dataclass(frozen=True, kw_only=True)
class SavingsBaseline(Block):
    name: str
    model: str | None = None
    tokens_per_parameter: float | None = None
    iterations: int


@dataclass(frozen=True, kw_only=True)
class SavingsBlock(Block):
    """Target ``savings`` (typed further by :class:`dpscaling.savings.plan.SavingsSettings`)."""

    NAME: ClassVar[str] = "savings"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"evaluation": Evaluation}
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {"budgets": BudgetEntry, "baselines": SavingsBaseline}
    budgets: tuple[BudgetEntry, ...]
    fractions: tuple[float, ...]
    seeds: tuple[int, ...]
    baselines: tuple[SavingsBaseline, ...]
    neighbours: tuple[str, ...]
    neighbour_factor: float
    physical_batch_correction: bool
    decision_rule: str
    evaluation: Evaluation


@dataclass(frozen=True, kw_only=True)
class PretrainBlock(Block):
    steps: int
    warmup_steps: int
    physical_batch: int
    learning_rate: float
    seed: int


@dataclass(frozen=True, kw_only=True)
class FinetuneBlock(Block):
    """DP fine-tuning from public pretraining (docs/finetune.md); the private domain is ``data.sources``, the
    public one ``data.public_sources``."""

    NAME: ClassVar[str] = "finetune"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"pretrain": PretrainBlock}
    pretrain: PretrainBlock
    learning_rates: tuple[float, ...]
    checkpoints: Mapping[str, str]

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


@dataclass(frozen=True, kw_only=True)
class ExplorerBlock(Block):
    """Rule ``explorer``: the grid of budgets the explorer page answers (:mod:`dpscaling.explorer`)."""

    NAME: ClassVar[str] = "explorer"
    epsilons: tuple[float, ...]
    data_budgets: tuple[float, ...] | None
    compute_range: tuple[float, ...] | None
    compute_steps_per_octave: int


# ------------------------------------------------------------------------------------------- the run


@dataclass(frozen=True, kw_only=True)
class RunConfig(Block):
    """The whole validated config."""

    NESTED: ClassVar[Mapping[str, type[Block]]] = {
        "data": DataBlock, "models": ModelsBlock, "training": TrainingBlock,
        "learning_rate_protocol": LearningRateProtocolBlock, "accounting": AccountingBlock,
        "fit": FitBlock, "ablation_batch": AblationBlock, "audit": AuditBlock, "private_model": PrivateModelBlock,
        "savings": SavingsBlock, "explorer": ExplorerBlock, "finetune": FinetuneBlock}
    run_name: str
    host_threads: int
    compilation_cache: str | None
    deterministic_gpu_ops: bool
    results_csv: str | None
    data: DataBlock
    models: ModelsBlock
    training: TrainingBlock
    learning_rate_protocol: LearningRateProtocolBlock
    accounting: AccountingBlock
    fit: FitBlock
    analysis: Mapping[str, Any]  # typed as dpscaling.figures.settings.AnalysisSettings by analysis_settings()
    ablation_batch: AblationBlock
    audit: AuditBlock
    private_model: PrivateModelBlock
    savings: SavingsBlock
    explorer: ExplorerBlock
    finetune: FinetuneBlock | None = None  # no schema default: absent unless set

    @property
    def root(self) -> str:
        """Where this run's outputs land: ``results/<run_name>``."""
        return f"results/{self.run_name}"

    def law_settings(self, reference_compatible: bool | None = None):
        return self.fit.law_settings(self.training.warmup_steps, reference_compatible)

    def seq_lens(self) -> tuple[int, ...]:
        """The sequence lengths the grid trains at, shortest first: ``training.seq_lens``, or the one length
        ``data.seq_len`` when it is unset (the paper's setting)."""
        lengths = self.training.seq_lens or (self.data.seq_len,)
        return tuple(sorted(int(length) for length in lengths))

    def analysis_settings(self):
        """The figures' and tables' :class:`~dpscaling.figures.settings.AnalysisSettings`; the near-optimal
        tolerance is the fit's, so queries and figures agree."""
        from dpscaling.figures.settings import AnalysisSettings

        return AnalysisSettings.from_mapping({**_plain(self.analysis),
                                              "near_optimal_tolerance": self.fit.near_optimal_tolerance})

    def audit_settings(self):
        """The ``audit`` target's :class:`~dpscaling.audit.AuditSettings` (δ = ``accounting.delta``)."""
        from dpscaling.audit import AuditSettings

        return AuditSettings(**self.audit.to_mapping(), delta=self.accounting.delta)

    def model_config(self, name: str, seq_len: int | None = None):
        """The :class:`~dpscaling.models.family.BertConfig` the run means by model ``name`` trained at
        ``seq_len`` (None = ``data.seq_len``): a custom size's position rows follow the length."""
        from dpscaling.models.family import configured_model

        custom = {key: entry.to_mapping() for key, entry in self.models.custom.items()}
        return configured_model(name, custom, self.data.model_vocab_size(), seq_len or self.data.seq_len)


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

    plain = config.to_mapping() if isinstance(config, RunConfig) else _plain(config)
    rank = {key: index for index, key in enumerate(schema()["properties"])}
    ordered = dict(sorted(plain.items(), key=lambda item: rank.get(item[0], len(rank))))
    return yaml.safe_dump(ordered, sort_keys=False)
