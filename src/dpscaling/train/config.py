"""Configuration of one training job = one grid point (paper §3.2, "Detailed Experimental Setup")."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import optax

from dpscaling.accounting.matched import matched_accountant
from dpscaling.config.schema import default as schema_default
from dpscaling.data.public_unigram import ZEROS, check_output_bias_start
from dpscaling.dp import CLIPPING_METHODS
from dpscaling.core.errors import UserError
from dpscaling.privacy.mechanisms import DPSGD, STRATEGIES, Mechanism, mechanism_named
from dpscaling.models.family import BERT, BERT_MAX_POSITIONS, PRESETS, Family, ModelConfig, family_named
from dpscaling.privacy.samplers import SAMPLERS, Sampler, sampler_named
from dpscaling.train.schedules import branch_step, learning_rates, schedule_refusal

# "none" = plain mean gradient without clipping: not the paper's σ̄ = 0 baseline (which
# clips), only for benchmarks and ablations.
GRADIENT_MODES: tuple[str, ...] = (*CLIPPING_METHODS, "none")


def configured(key: str, *, after_runs: bool = False) -> Any:
    """A field configured by the config key ``key`` (``training.<name>``, or ``accounting.delta``), its default
    the schema's: one set of defaults for the workflow and the library (:func:`job_train_config` reads it)."""
    return field(default=schema_default(key), metadata={"config_key": key, "after_runs": after_runs})


def after_runs(default: Any) -> Any:
    """A field added after runs existed: left out of :meth:`TrainConfig.to_dict` at its default, so a checkpoint
    written before it compares equal and resumes."""
    return field(default=default, metadata={"after_runs": True})


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training curve (together with the data)."""

    model: str = "BertTiny"  # a preset's name or "custom" (a shape of ``family``, from model_overrides)
    family: str = after_runs(BERT.name)  # the model family (dpscaling.models.family): module, objective, size
    model_name: str | None = None  # what curves call the model (a custom size's name); None = model
    model_overrides: Mapping[str, Any] = field(default_factory=dict)  # e.g. num_layers for "custom"
    max_positions: int = BERT_MAX_POSITIONS
    noise_batch_ratio: float = 0.0  # σ̄: std of the noise on the mean clipped gradient (a grid wildcard)
    learning_rate: float = schema_default("training.learning_rates")[0]  # peak (a grid wildcard)
    batch_size: int = schema_default("training.physical_batch")  # physical batch B (a grid wildcard)
    microbatch_size: int | None = configured("training.microbatch_size")  # examples per lax.scan step; None = B
    num_steps: int = configured("training.steps")
    warmup_steps: int = configured("training.warmup_steps")
    decay_steps: int = configured("training.decay_steps")  # exponential decay by decay_factor over this many steps
    decay_factor: float = configured("training.decay_factor")
    # The learning-rate schedule (dpscaling.train.schedules): paper, or constant_cooldown over its last
    # cooldown_fraction of the horizon
    schedule: str = configured("training.schedule", after_runs=True)
    cooldown_fraction: float = configured("training.cooldown_fraction", after_runs=True)
    clip_norm: float = configured("training.clip_norm")  # C of normalized clipping (same result for C ≤ ‖g‖)
    clipping: str = configured("training.clipping")  # "vmap" | "ghost" | "none"
    p_mask: float = configured("training.mask_rate")
    max_predictions: int | None = None  # None → ceil(p_mask · seq_len)
    adam_b1: float = configured("training.adam_b1")
    adam_b2: float = configured("training.adam_b2")
    adam_eps: float = configured("training.adam_eps")
    seed: int = schema_default("training.seed")  # a grid wildcard
    log_every: int = configured("training.log_every")  # paper: mean training loss of every 100 iterations
    checkpoint_every: int = configured("training.checkpoint_every")  # multiple of log_every
    model_dtype: str = "float32"  # compute dtype; clipped sums and noise stay float32
    # The layers scanned instead of unrolled, and rematerialised (dpscaling.dp.layers): how the step runs, not
    # what it computes; recorded, so a checkpoint is resumed only in its own layout
    scan_layers: bool = configured("training.scan_layers", after_runs=True)
    remat: bool = configured("training.remat", after_runs=True)
    # A padded batch's trailing microbatches of padding skipped (dpscaling.dp.per_example): how the step runs, not
    # what it computes (bit-identical), so left out of to_dict like allow_repeats
    skip_padding: bool = configured("training.skip_padding")
    distributed: bool | None = None  # None: initialise jax.distributed if Slurm/TPU-pod multi-host
    # More than one pass over the training sequences (steps × batch > sequences) is allowed; the
    # workflow sets False unless training.allow_repeats (dpscaling.data.epochs). A policy, not part
    # of what determines the curve: left out of to_dict, so checkpoints compare as before.
    allow_repeats: bool = True
    # Batch selection, a name in dpscaling.privacy.samplers: shuffle = the study's shuffled epochs, seeded;
    # truncated_poisson = truncated Poisson at the static shape truncated_batch_size, batch_size is then
    # the EXPECTED batch, and noise and sampling keys come from OS entropy (private training).
    sampling: str = configured("training.sampling", after_runs=True)
    # A user-level sampler's sequences per sampled user and step (dpscaling.train.units)
    examples_per_user_per_batch: int = configured("training.examples_per_user_per_batch", after_runs=True)
    # truncated_poisson's physical batch L; None = chosen by its privacy price when the run is accounted
    # (dpscaling.accounting.truncation), a multiple of the microbatch
    truncated_batch_size: int | None = configured("training.truncated_batch_size", after_runs=True)
    # None = the sampler's own (dpscaling.accounting.matched)
    accountant: str | None = configured("training.accountant", after_runs=True)
    target_epsilon: float | None = after_runs(None)  # set: σ is calibrated for it; else ε of noise_batch_ratio
    delta: float = configured("accounting.delta", after_runs=True)
    # Train on this many sequences of the train split (a subset drawn with ``seed``, public and
    # data-independent); None = all of them. The accountant's dataset size N is this number.
    train_sequences: int | None = after_runs(None)
    # Train on this many users of the data's users (a subset drawn with ``seed``, public and data-independent, all
    # of each chosen user's sequences); None = every user. For a sampler that reads users (a budget per user).
    train_users: int | None = after_runs(None)
    # k, the sequences of a user the run protects (a budget per user's); None: the most any user of the data has.
    examples_per_user: int | None = after_runs(None)
    # Start from the parameters of this training job's checkpoint directory (a run of this project, its
    # latest verified step; dpscaling.train.init) instead of random weights; None = from scratch.
    init_checkpoint: str | None = after_runs(None)
    # The noise mechanism (dpscaling.privacy.mechanisms: dpsgd, or bandmf-b<b>, a grid wildcard) and what its
    # banded Toeplitz strategy is optimised for.
    mechanism: str = after_runs(DPSGD.name)
    bandmf_strategy: str = configured("training.bandmf_strategy", after_runs=True)
    # Where the output bias starts (dpscaling.data.public_unigram): zeros, or the public domain's unigram
    # written beside the data's shards. A start from init_checkpoint takes the checkpoint's bias instead.
    output_bias: str = configured("training.output_bias", after_runs=True)

    def __post_init__(self) -> None:
        self._check_sampling_and_noise()
        self._check_user_level()
        self._check_steps_and_schedule()
        self._check_model_and_logging()
        object.__setattr__(self, "model_overrides", dict(self.model_overrides))

    def _need(self, condition: bool, name: str, message: str) -> None:
        """Refuse the field ``name`` unless ``condition``: a one-line error naming it, what it must be and its value."""
        if not condition:
            raise UserError(f"train.{name}: {message}, got {getattr(self, name)!r}")

    def _check_sampling_and_noise(self) -> None:
        """The grid point, the sampler, the noise mechanism and the accountant: what the run's guarantee is priced
        from (checked first, since the later checks read the sampler and the mechanism)."""
        need = self._need
        need(self.noise_batch_ratio >= 0, "noise_batch_ratio", "must be >= 0")
        need(self.learning_rate > 0, "learning_rate", "must be > 0")
        need(self.batch_size >= 1, "batch_size", "must be >= 1")
        need(self.sampling in SAMPLERS, "sampling", f"must be one of {tuple(SAMPLERS)}")
        need(
            self.truncated_batch_size is None
            or (self.sampler.truncated and self.truncated_batch_size >= self.batch_size),
            "truncated_batch_size",
            f"is a truncating sampler's physical batch: must be >= batch_size={self.batch_size}",
        )
        need(
            not self.sampler.private or self.clipping != "none",
            "clipping",
            f"{self.sampling} (private) training must clip",
        )
        need(
            self.target_epsilon is None or self.noise_batch_ratio == 0,
            "noise_batch_ratio",
            "is calibrated from target_epsilon; leave it at 0",
        )
        need(0 < self.delta < 1, "delta", "must be in (0, 1)")
        mechanism_named(self.mechanism, "train.mechanism")  # refuses an unknown name, naming the forms
        need(self.bandmf_strategy in STRATEGIES, "bandmf_strategy", f"must be one of {STRATEGIES}")
        check_output_bias_start(self.output_bias, self.model_family, "train.output_bias")
        need(self.output_bias == ZEROS or self.init_checkpoint is None, "output_bias",
             f"a start from init_checkpoint takes the checkpoint's output bias: must be {ZEROS!r}")
        need(self.num_steps >= self.noise_mechanism.bands, "num_steps",
             f"must be >= the {self.noise_mechanism.bands} bands of {self.mechanism}")
        need(
            self.train_sequences is None or self.train_sequences >= self.batch_size,
            "train_sequences",
            f"must be >= batch_size={self.batch_size} (or None: the whole train split)",
        )
        matched_accountant(self.sampling, self.accountant)  # refuses a mismatched pair

    def _check_user_level(self) -> None:
        """What samples or protects users against what samples sequences: a user-level mechanism needs a user-level
        sampler, and the per-user settings (and subsets of users) belong to such runs only."""
        need = self._need
        need(self.examples_per_user_per_batch >= 1, "examples_per_user_per_batch", "must be >= 1")
        need(self.noise_mechanism.unit == "sequence" or (
            self.sampler.unit == "user"
            and self.examples_per_user_per_batch == self.noise_mechanism.examples_per_user_per_batch),
            "mechanism", f"samples users: needs a user-level sampler with examples_per_user_per_batch = "
            f"{self.noise_mechanism.examples_per_user_per_batch}")
        need(self.sampler.unit == "user" or self.examples_per_user_per_batch == 1, "examples_per_user_per_batch",
             f"is a user-level sampler's; {self.sampling} samples sequences: leave it at 1")
        need(self.sampler.unit == "sequence" or self.clipping in ("vmap", "none"), "clipping",
             "ghost norms are per sequence; a user-level sampler clips a user's sequences as one: use 'vmap'")
        need("user" not in (self.sampler.unit, self.sampler.protects) or self.train_sequences is None,
             "train_sequences", f"draws sequences and splits users; {self.sampling} samples or protects users and "
             "takes a subset of users: set train_users")
        need(self.train_users is None or (self.train_users >= 1 and self.train_sequences is None), "train_users",
             "is a subset of the data's users (every sequence of each), without train_sequences: must be >= 1 or None")
        need(self.examples_per_user is None or (self.examples_per_user >= 1 and self.sampler.protects == "user"),
             "examples_per_user", "is the k of a sampler that protects users (user_poisson, els_poisson): must be "
             ">= 1 or None")

    def _check_steps_and_schedule(self) -> None:
        """The microbatch (against the physical batch, once L is known), the horizon and the learning-rate
        schedule (whose own refusal names its field)."""
        need = self._need
        need(
            self.microbatch_size is None
            or (
                self.microbatch_size >= 1
                and (not self.truncation_resolved or self.physical_batch_size % self.microbatch_size == 0)
            ),
            "microbatch_size",
            f"must divide the physical batch {self.physical_batch_size if self.truncation_resolved else 'L'}",
        )
        need(self.num_steps >= 1, "num_steps", "must be >= 1")
        need(self.warmup_steps >= 0, "warmup_steps", "must be >= 0")
        need(self.decay_steps >= 1, "decay_steps", "must be >= 1")
        need(self.decay_factor >= 1, "decay_factor", "must be >= 1")
        refusal = schedule_refusal(self.schedule, self.num_steps, self.warmup_steps, self.cooldown_fraction,
                                   self.log_every)
        if refusal is not None:
            raise UserError(f"train.{refusal}")

    def _check_model_and_logging(self) -> None:
        """Clipping, the model's family and masking, and the logging and checkpoint intervals (a checkpoint falls
        on a logged step)."""
        need = self._need
        need(self.clip_norm > 0, "clip_norm", "must be > 0")
        need(self.clipping in GRADIENT_MODES, "clipping", f"must be one of {GRADIENT_MODES}")
        need(self.model == "custom" or self.model not in PRESETS or PRESETS[self.model].name == self.family,
             "family", f"must be the family of preset {self.model!r}")
        need(0 < self.p_mask < 1, "p_mask", "must be in (0, 1)")
        need(self.log_every >= 1, "log_every", "must be >= 1")
        need(
            self.checkpoint_every >= 1 and self.checkpoint_every % self.log_every == 0,
            "checkpoint_every",
            f"must be a positive multiple of log_every={self.log_every}",
        )

    @property
    def display_name(self) -> str:
        return self.model_name or self.model

    @property
    def sampler(self) -> Sampler:
        """The batch sampler's record (:mod:`dpscaling.privacy.samplers`)."""
        return sampler_named(self.sampling)

    @property
    def noise_mechanism(self) -> Mechanism:
        """The noise mechanism's record (:mod:`dpscaling.privacy.mechanisms`)."""
        return mechanism_named(self.mechanism, "train.mechanism")

    @property
    def truncation_resolved(self) -> bool:
        """Whether the physical batch is known: always for B; for a truncated L once it is set (by
        the user, or by the run's accountant pricing it: :func:`dpscaling.train.loop.run_training`)."""
        return self.sampler.physical_batch(self.batch_size, self.truncated_batch_size) is not None

    @property
    def physical_batch_size(self) -> int:
        """Examples per step as computed: B, or a truncating sampler's padded batch L."""
        size = self.sampler.physical_batch(self.batch_size, self.truncated_batch_size)
        if size is None:
            raise ValueError("train.truncated_batch_size: not priced yet (the run's accountant chooses it)")
        return size

    @property
    def branch_step(self) -> int:
        """The last step whose learning rate is that of every longer horizon of this run
        (:func:`dpscaling.train.schedules.branch_step`): where a longer run may start from this one."""
        return branch_step(self.schedule, self.num_steps, self.cooldown_fraction, self.log_every)

    @property
    def microbatch(self) -> int:
        return self.microbatch_size or self.physical_batch_size

    @property
    def model_family(self) -> Family:
        return family_named(self.family, "train.family")

    def model_config(self, vocab_size: int) -> ModelConfig:
        return self.model_family.config(
            self.model,
            vocab_size=vocab_size,
            max_positions=self.max_positions,
            dtype=self.model_dtype,
            scan_layers=self.scan_layers,
            remat=self.remat,
            **self.model_overrides,
        )

    def to_dict(self) -> dict[str, Any]:
        """All fields, except the private-training ones at their defaults and the allow_repeats and skip_padding
        policies: a study run's dict (and so its checkpoint's config.json) is the one it had before they existed."""
        values = dataclasses.asdict(self)
        values.pop("allow_repeats")
        values.pop("skip_padding")
        for f in dataclasses.fields(self):
            if f.metadata.get("after_runs") and values[f.name] == f.default:
                del values[f.name]
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UserError(f"train: unknown option(s) {unknown}; known: {sorted(known)}")
        return cls(**values)


def job_train_config(model: str | Mapping[str, Any], training: Mapping[str, Any], wildcards: Mapping[str, str],
                     seq_len: int) -> TrainConfig:
    """The :class:`TrainConfig` of one workflow training job, from its Snakemake params.

    ``model`` is a preset's name or a ``models.custom`` entry (its ``family``, default ``bert``, and the
    embedding rows it trains: :meth:`dpscaling.models.family.Family.custom_overrides`); the grid point
    (model, batch, seed, noise-batch ratio, learning rate) comes from the job's wildcards; every
    :func:`config_keys` setting from ``training``, the job's training param, which leaves out keys at the
    schema's default (so adding a key retrains nothing): those take the schema's default here.
    """
    if isinstance(model, str):
        family = PRESETS[model] if model in PRESETS else BERT
        name, overrides, positions = model, {}, family.preset_positions(model, seq_len)
    else:  # a custom size creates only the embedding rows it trains (docs/models.md)
        family = family_named(model.get("family") or BERT.name, "models.custom.family")
        name = "custom"
        positions, overrides = family.custom_overrides(model, seq_len)
    settings = {name_: training.get(key.split(".")[-1], schema_default(key)) for name_, key in config_keys().items()}
    return TrainConfig(
        model=name,
        family=family.name,
        model_name=wildcards["model"],
        model_overrides=overrides,
        max_positions=positions,
        noise_batch_ratio=float(wildcards["nbr"]),
        learning_rate=float(wildcards["lr"]),
        batch_size=int(wildcards["batch"]),
        seed=int(wildcards["seed"]),
        allow_repeats=training.get("allow_repeats", schema_default("training.allow_repeats")),
        init_checkpoint=training.get("init_checkpoint"),  # a fine-tuning job's pretrained start
        mechanism=wildcards.get("mech", DPSGD.name),
        **settings,
    )


def config_keys() -> dict[str, str]:
    """Each :class:`TrainConfig` field configured by a config key (:func:`configured`) → that key."""
    return {f.name: f.metadata["config_key"] for f in dataclasses.fields(TrainConfig) if "config_key" in f.metadata}


def learning_rate_schedule(config: TrainConfig, peak: Any = None) -> optax.Schedule:
    """``config.schedule`` (:mod:`dpscaling.train.schedules`; paper §3.2: 1000 warm-up steps, then 10× decay over
    a 128K-iteration horizon). The peak is ``config.learning_rate`` unless given (a traced value inside the
    compiled step)."""
    return learning_rates(
        config.schedule, config.learning_rate if peak is None else peak, config.num_steps, config.warmup_steps,
        config.decay_steps, config.decay_factor, config.cooldown_fraction, config.log_every)
