"""Glue between the workflow's config and the library: checks and path layout.

The JSON schema (``workflow/schemas/config.schema.yaml``) checks types, ranges
and unknown keys; :func:`check_config` adds the checks a schema cannot express
(model names against the family, files that must exist, cross-field rules),
always naming the config key and the accepted values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpscaling.data.documents import CorpusSpec
from dpscaling.data.epochs import check_one_epoch
from dpscaling.errors import UserError
from dpscaling.grid import repeat_grid
from dpscaling.models.family import BERT_MAX_POSITIONS, FAMILY, trained_rows

if TYPE_CHECKING:
    from dpscaling.train.config import TrainConfig

PAPER_MODEL_NAMES = tuple(FAMILY)  # paper Table 1
VENDORED_CORPUS = "resources/corpus/core.txt.xz"
VENDORED_VOCAB = "resources/vocab/{name}/vocab.txt"


def validate_config(config: dict[str, Any], schema: str | Path) -> None:
    """Validate ``config`` with ``snakemake.utils.validate`` (filling defaults).

    The JSON-schema error is re-raised as a :class:`UserError` of one line that
    names the config key, what is wrong and what is accepted, instead of
    jsonschema's dump of the whole schema.
    """
    from jsonschema.exceptions import ValidationError
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    try:
        validate(config, str(schema))
    except WorkflowError as error:
        cause = error.__context__  # WorkflowError keeps only the text; the original is the context
        if not isinstance(cause, ValidationError):
            raise
        raise UserError(describe_schema_error(cause)) from error


def describe_schema_error(error: Any) -> str:
    """``config key 'a.b': <problem>; accepted: <what the schema allows>``."""
    key = ".".join(str(part) for part in error.absolute_path) or "(top level)"
    accepted = ""
    if error.validator == "additionalProperties" and isinstance(error.schema, dict):
        accepted = f"; accepted keys: {sorted(error.schema.get('properties', {}))}"
    elif error.validator == "pattern":  # every pattern in the schema is a name that becomes a path
        accepted = (
            "; it names a directory, so it must be one safe path component: letters, digits, _ and -"
            f" (the pattern {error.validator_value})"
        )
    elif error.validator == "type":
        if "number" in str(error.validator_value) and isinstance(error.instance, str):
            accepted = "; write numbers as 1.0e-3, not 1e-3 (YAML reads that as a string)"
    return f"config key {key!r}: {error.message}{accepted}"


def output_root(config: Mapping[str, Any]) -> str:
    """Where this config's outputs land: ``results/<run_name>``."""
    return f"results/{config['run_name']}"


RESULTS_LOCK = ".snakemake-running"
_HELD_LOCKS: dict[str, Any] = {}  # open lock files, held until this process exits


def lock_results(root: str | Path) -> None:
    """Claim ``root`` (``results/<run_name>``) for this Snakemake process, or refuse.

    Snakemake only locks the files of its own DAG, so two invocations with different targets
    could both write one results directory (e.g. retrain and collect curves at once). The
    workflow's ``onstart`` hook calls this: an exclusive ``flock`` on ``root/.snakemake-running``,
    released by the kernel when the process ends, however it ends (no stale lock after kill -9).
    """
    import fcntl
    import os
    import socket
    import time

    from dpscaling.io import raise_if_storage_full_or_read_only

    root = Path(root)
    key = str(root.resolve())
    if key in _HELD_LOCKS:
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = open(root / RESULTS_LOCK, "a+", encoding="utf-8")  # noqa: SIM115 - held open on purpose
    except OSError as error:
        raise_if_storage_full_or_read_only(error, f"cannot lock {root}")
        raise
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UserError(
            f"run_name: {root} is in use by another snakemake ({holder}); wait for it to finish, "
            "or use another run_name (two invocations writing one results directory would mix their outputs)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    handle.flush()
    _HELD_LOCKS[key] = handle


def known_model_names(config: Mapping[str, Any]) -> tuple[str, ...]:
    return PAPER_MODEL_NAMES + tuple(sorted(config["models"]["custom"]))


def check_config(config: Mapping[str, Any]) -> None:
    """Semantic checks beyond the schema; raises :class:`UserError` naming the key."""
    known = known_model_names(config)
    for name in config["models"]["names"]:
        if name not in known:
            raise UserError(f"models.names: {name!r} is not one of {list(known)} (add it under models.custom)")
    clash = set(config["models"]["custom"]) & set(PAPER_MODEL_NAMES)
    if clash:
        raise UserError(f"models.custom: {sorted(clash)} would redefine the paper's models; choose other names")
    for name, arch in config["models"]["custom"].items():
        if arch["hidden"] % arch["heads"]:
            raise UserError(
                f"models.custom.{name}: hidden ({arch['hidden']}) must be divisible by heads ({arch['heads']})"
            )
    training = config["training"]
    if training["warmup_steps"] >= training["steps"] and training["steps"] > 1:
        raise UserError(
            f"training.warmup_steps: {training['warmup_steps']} must be below training.steps ({training['steps']})"
        )
    micro = training["microbatch_size"]
    if training["sampling"] == "poisson":
        truncated = training["truncated_batch_size"]
        if truncated is not None and truncated < training["physical_batch"]:
            raise UserError(
                f"training.truncated_batch_size: {truncated} is below the expected batch "
                f"training.physical_batch ({training['physical_batch']})"
            )
        if micro is not None and truncated is not None and truncated % micro:
            raise UserError(
                f"training.microbatch_size: {micro} must divide training.truncated_batch_size ({truncated})"
            )
    elif training["truncated_batch_size"] is not None:
        raise UserError("training.truncated_batch_size: only used with training.sampling 'poisson'")
    elif micro is not None and training["physical_batch"] % micro:
        raise UserError(
            f"training.microbatch_size: {micro} must divide training.physical_batch ({training['physical_batch']})"
        )
    from dpscaling.accounting.matched import matched_accountant

    matched_accountant(training["sampling"], training["accountant"], block="training")
    check_ablation(config)
    repeat_grid(config)  # repeat_points must be main-grid points, repeat_seeds must not hold training.seed
    data = config["data"]
    if data["tokenizer"] == "custom" and not data["vocab_file"]:
        raise UserError("data.vocab_file: required when data.tokenizer is 'custom'")
    if data["tokenizer"] != "custom" and data["vocab_file"]:
        raise UserError(
            f"data.vocab_file: only used with data.tokenizer 'custom' (got tokenizer {data['tokenizer']!r})"
        )
    if (data["tokenizer"] == "train") != (data["vocab_size"] is not None):
        raise UserError(
            f"data.vocab_size: set it exactly when data.tokenizer is 'train' (got tokenizer "
            f"{data['tokenizer']!r}, vocab_size {data['vocab_size']!r})"
        )
    corpus_spec(config)  # source-specific checks


def check_ablation(config: Mapping[str, Any]) -> None:
    """The ``ablation_batch`` block's cross-field rules (its types and ranges are the schema's)."""
    block = config["ablation_batch"]
    known = known_model_names(config)
    if block["model"] not in known:
        raise UserError(
            f"ablation_batch.model: {block['model']!r} is not one of {list(known)} (add it under models.custom)"
        )
    if block["warmup_steps"] >= block["steps"] and block["steps"] > 1:
        raise UserError(
            f"ablation_batch.warmup_steps: {block['warmup_steps']} must be below ablation_batch.steps "
            f"({block['steps']})"
        )
    if block["checkpoint_every"] % block["log_every"]:
        raise UserError(
            f"ablation_batch.checkpoint_every: {block['checkpoint_every']} must be a multiple of "
            f"ablation_batch.log_every ({block['log_every']})"
        )
    micro = block["microbatch_size"]
    if micro is not None:
        bad = [batch for batch in block["physical_batches"] if batch > micro and batch % micro]
        if bad:
            raise UserError(
                f"ablation_batch.microbatch_size: {micro} must divide every larger physical batch (not {bad})"
            )


# Training keys added after runs existed, with their defaults (= TrainConfig's and the schema's). At their
# default they are left out of a training job's Snakemake params, so adding them retrains nothing; a
# changed value is a changed param, and Snakemake reruns the job. "delta" is accounting.delta (the δ each
# run records).
OPTIONAL_TRAINING_KEYS: dict[str, Any] = {
    "adam_b1": 0.9,
    "adam_b2": 0.999,
    "adam_eps": 1e-8,
    "allow_repeats": False,
    "sampling": "shuffle",
    "truncated_batch_size": None,
    "accountant": None,
    "delta": 1e-8,
}
# The private-training keys: the physical-batch ablation always runs the study's shuffled sampler.
PRIVATE_TRAINING_KEYS = ("sampling", "truncated_batch_size", "accountant")


# Keys that choose which training jobs exist, not how one trains: never a job's param (adding repeats
# retrains nothing).
GRID_ONLY_TRAINING_KEYS = ("repeat_seeds", "repeat_points")


def training_params(training: Mapping[str, Any], delta: float = 1e-8) -> dict[str, Any]:
    """The ``training`` block (plus ``delta``) as a training job's param: optional keys only where
    they differ from the default; the grid-only keys never."""
    return {key: value for key, value in {**training, "delta": delta}.items()
            if not (key in OPTIONAL_TRAINING_KEYS and value == OPTIONAL_TRAINING_KEYS[key])
            and key not in GRID_ONLY_TRAINING_KEYS}


# The training settings an ablation job takes from the ablation_batch block; the rest come from `training`.
ABLATION_TRAINING_KEYS = ("steps", "warmup_steps", "decay_steps", "log_every", "checkpoint_every")
# What train_config reads from the `training` block (so a change to the main grid retrains no ablation job).
_TRAINING_SETTINGS = ("decay_factor", "clip_norm", "clipping", "mask_rate")


def ablation_training(config: Mapping[str, Any], batch: int) -> dict[str, Any]:
    """The ``training`` mapping of an ablation job at physical batch ``batch`` (for :func:`train_config`
    and :func:`dpscaling.cluster.train_resource`): the ablation's horizon, logging and microbatch, the
    training block's optimiser, clipping and masking settings."""
    block, training = config["ablation_batch"], config["training"]
    micro = block["microbatch_size"]
    return {
        **{key: training[key] for key in _TRAINING_SETTINGS},
        **{key: value for key, value in training_params(training).items()
           if key in OPTIONAL_TRAINING_KEYS and key not in PRIVATE_TRAINING_KEYS},
        **{key: block[key] for key in ABLATION_TRAINING_KEYS},
        "microbatch_size": None if micro is None or micro >= batch else micro,
        "physical_batch": int(batch),
    }


def corpus_spec(config: Mapping[str, Any], repo: str | Path = ".") -> CorpusSpec:
    """The corpus the config asks for; ``core`` means the corpus vendored in ``repo``."""
    data = config["data"]
    if data["source"] == "core":
        if data["paths"]:
            raise UserError("data.paths: not used with data.source 'core' (use source 'text' for your own files)")
        paths: tuple[str, ...] = (str(Path(repo) / VENDORED_CORPUS),)
    else:
        paths = tuple(data["paths"])
    return CorpusSpec(
        source=data["source"],
        paths=paths,
        text_column=data["text_column"],
        hf_dataset=data["hf_dataset"],
        hf_config=data["hf_config"],
        hf_split=data["hf_split"],
        max_documents=data["max_documents"],
    )


def check_epochs(config: Mapping[str, Any], corpus: CorpusSpec) -> float | None:
    """The one-epoch guard at DAG time, from the data stage's manifest (``data/packed/meta.json``).

    Returns the epochs the main grid's runs see, or None when there is no manifest yet or it was built
    for other data settings (it will be rebuilt; each training job checks again before step 1).
    Raises :class:`UserError` naming the numbers when above one epoch without ``training.allow_repeats``.
    """
    path = Path(output_root(config)) / "data" / "packed" / "meta.json"
    if not path.is_file():
        return None
    meta = json.loads(path.read_text(encoding="utf-8"))
    data = config["data"]
    same_data = (meta.get("source") == json.loads(json.dumps(asdict(corpus)))
                 and meta.get("seq_len") == data["seq_len"] and meta.get("tokenizer") == data["tokenizer"]
                 and (data["tokenizer"] != "train" or meta.get("vocab_size") == data["vocab_size"]))
    if not same_data or "n_train" not in meta:
        return None
    training = config["training"]
    return check_one_epoch(training["steps"], training["physical_batch"], int(meta["n_train"]),
                           training["allow_repeats"], keys=("training.steps", "training.physical_batch"))


TRAINED_VOCAB = "data/vocab.txt"  # under output_root: the data stage's trained vocabulary


def vocab_path(config: Mapping[str, Any], repo: str | Path = ".") -> str:
    """The vocabulary file: a vendored one in ``repo``, the user's ``vocab_file``, or the one the data
    stage trains (``data.tokenizer: train``, ``results/<run>/data/vocab.txt``)."""
    data = config["data"]
    if data["tokenizer"] == "train":
        return f"{output_root(config)}/{TRAINED_VOCAB}"
    if data["tokenizer"] == "custom":
        return str(data["vocab_file"])
    return str(Path(repo) / VENDORED_VOCAB.format(name=data["tokenizer"]))


def corpus_inputs(spec: CorpusSpec) -> list[str]:
    """Local files the data stage reads (Snakemake inputs, so edits trigger reruns)."""
    return [] if spec.source == "huggingface" else list(spec.paths)


def model_param(config: Mapping[str, Any], name: str) -> str | dict[str, Any]:
    """A training job's ``model`` param: a family name, or a ``models.custom`` entry with the embedding rows
    it creates at the run's ``data.seq_len`` (:func:`dpscaling.models.family.trained_rows`), so a change of
    those rows reruns the job."""
    custom = config["models"]["custom"]
    if name not in custom:
        return name
    return {**custom[name], **trained_rows(int(config["data"]["seq_len"]))}


def discard_outdated_checkpoints(checkpoint_dir: str | Path, config: TrainConfig) -> bool:
    """Remove ``checkpoint_dir`` when it was written for the same run with the embedding rows custom models had
    before issue 15 (BERT's 512 positions and 2 token types, now :func:`~dpscaling.models.family.trained_rows`):
    such a run retrains from scratch. Any other difference is left to the training loop, which refuses it."""
    import shutil

    from dpscaling.train.loop import CONFIG_FILE

    path = Path(checkpoint_dir) / CONFIG_FILE
    if config.model != "custom" or not path.is_file():
        return False
    found = json.loads(path.read_text(encoding="utf-8"))
    wanted = json.loads(json.dumps(config.to_dict()))
    old_overrides = {k: v for k, v in wanted["model_overrides"].items() if k != "type_vocab_size"}
    old = {**wanted, "max_positions": max(BERT_MAX_POSITIONS, wanted["max_positions"]),
           "model_overrides": old_overrides}
    if found == wanted or found != old:
        return False
    shutil.rmtree(checkpoint_dir)
    return True


def train_config(
    model: str | Mapping[str, Any],
    training: Mapping[str, Any],
    wildcards: Mapping[str, str],
    seq_len: int,
) -> TrainConfig:
    """The :class:`TrainConfig` of one training job.

    ``model`` is a family name or a ``models.custom`` entry; the grid point
    (batch, seed, noise-batch ratio, learning rate) comes from the job's
    wildcards, everything else from the config's ``training`` block (as
    :func:`training_params` passes it: keys of ``OPTIONAL_TRAINING_KEYS`` may be absent).
    """
    from dpscaling.train.config import TrainConfig

    if isinstance(model, str):
        name, overrides, positions = model, {}, max(BERT_MAX_POSITIONS, seq_len)
    else:  # a custom size creates only the embedding rows it trains (docs/models.md)
        rows = {**trained_rows(seq_len), **{k: model[k] for k in ("max_positions", "type_vocab_size") if k in model}}
        name, positions = "custom", int(rows["max_positions"])
        overrides = {
            "num_layers": model["layers"],
            "num_heads": model["heads"],
            "hidden_size": model["hidden"],
            "intermediate_size": model.get("intermediate"),
            "type_vocab_size": int(rows["type_vocab_size"]),
        }
    return TrainConfig(
        model=name,
        model_name=wildcards["model"],
        model_overrides=overrides,
        max_positions=positions,
        noise_batch_ratio=float(wildcards["nbr"]),
        learning_rate=float(wildcards["lr"]),
        batch_size=int(wildcards["batch"]),
        seed=int(wildcards["seed"]),
        microbatch_size=training["microbatch_size"],
        num_steps=training["steps"],
        warmup_steps=training["warmup_steps"],
        decay_steps=training["decay_steps"],
        decay_factor=training["decay_factor"],
        clip_norm=training["clip_norm"],
        clipping=training["clipping"],
        p_mask=training["mask_rate"],
        log_every=training["log_every"],
        checkpoint_every=training["checkpoint_every"],
        adam_b1=training.get("adam_b1", OPTIONAL_TRAINING_KEYS["adam_b1"]),
        adam_b2=training.get("adam_b2", OPTIONAL_TRAINING_KEYS["adam_b2"]),
        adam_eps=training.get("adam_eps", OPTIONAL_TRAINING_KEYS["adam_eps"]),
        allow_repeats=training.get("allow_repeats", OPTIONAL_TRAINING_KEYS["allow_repeats"]),
        sampling=training.get("sampling", OPTIONAL_TRAINING_KEYS["sampling"]),
        truncated_batch_size=training.get(
            "truncated_batch_size", OPTIONAL_TRAINING_KEYS["truncated_batch_size"]
        ),
        accountant=training.get("accountant", OPTIONAL_TRAINING_KEYS["accountant"]),
        delta=training.get("delta", OPTIONAL_TRAINING_KEYS["delta"]),
    )


def law_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`~dpscaling.law.LawSettings` the config asks for, as JSON (a rule param)."""
    from dpscaling.law.settings import LawSettings, Window

    fit = config["fit"]
    window = fit["extrapolation_window"]
    warmup = fit["warmup_steps"]
    choices: dict[str, Any] = dict(
        warmup_steps=config["training"]["warmup_steps"] if warmup is None else warmup,
        extrapolation_window=Window(window["start"], window["end"], window["unit"]),
        extension_doublings=fit["extension_doublings"],
    )
    if not fit["reference_compatible"]:  # the reference mode fixes these to the authors' choices
        choices["rolling_window"] = fit["rolling_window"]
        choices["smooth_nonprivate_along_nbr"] = fit["smooth_nonprivate_along_nbr"]
        choices["extrapolation_asymptote"] = fit["extrapolation_asymptote"]
        for key in ("isotonic_skip_nan", "interpolate_log_loss", "fill_missing_nbr"):
            choices[key] = fit[key]
    return LawSettings.create(fit["reference_compatible"], **choices).to_json()


def bootstrap_chunks(config: Mapping[str, Any]) -> list[int]:
    """The bootstrap jobs of this run (one per ``fit.bootstrap.chunk_size`` replicates); none when the
    bootstrap is off or has no repeated seeds to resample (results_csv has none)."""
    from dpscaling.law.bootstrap import chunk_count

    block = config["fit"]["bootstrap"]
    if not block["replicates"] or config["results_csv"] or not repeat_grid(config):
        return []
    return list(range(chunk_count(block["replicates"], block["chunk_size"])))


def bootstrap_status(config: Mapping[str, Any]) -> str:
    """Why a run's answers have no interval ("" when they have one): the figures' footnote."""
    from dpscaling.law.bootstrap import BOOTSTRAP_OFF, NO_REPEATS

    if not config["fit"]["bootstrap"]["replicates"]:
        return BOOTSTRAP_OFF
    return "" if bootstrap_chunks(config) else NO_REPEATS


def validation_modes(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The settings the ``validate`` target scores side by side: the config's ``fit`` block in paper mode and
    in reference-compatible mode (same windows and warm-up), as JSON (a rule param)."""
    modes = {}
    for name, reference in (("paper", False), ("reference-compatible", True)):
        fit = {**config["fit"], "reference_compatible": reference}
        modes[name] = law_settings({**config, "fit": fit})
    return modes


def accounting_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    """The accounting table's :class:`~dpscaling.accounting.TableSpec` as a mapping (a rule param).

    Unset ``accounting.table`` keys keep TableSpec's defaults; δ is ``accounting.delta``.
    """
    from dpscaling.accounting.table_spec import TableSpec

    values = {**config["accounting"]["table"], "delta": config["accounting"]["delta"]}
    return TableSpec.from_mapping(values).to_mapping()


def accounting_chunks(spec: Mapping[str, Any]) -> list[int]:
    """Indices of the table's chunks: one Snakemake job each."""
    from dpscaling.accounting.table import plan_table
    from dpscaling.accounting.table_spec import TableSpec

    return [chunk.index for chunk in plan_table(TableSpec.from_mapping(dict(spec)))]


def analysis_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The figures' and tables' :class:`~dpscaling.figures.settings.AnalysisSettings` as a mapping (a rule param).

    The near-optimal tolerance is the fit's (``fit.near_optimal_tolerance``), so queries and figures agree.
    """
    from dpscaling.figures.settings import AnalysisSettings

    values = {**config["analysis"], "near_optimal_tolerance": config["fit"]["near_optimal_tolerance"]}
    return AnalysisSettings.from_mapping(values).to_mapping()


REPORT_TARGETS = ("figures", "tables", "findings", "validate", "run_config")


def write_report(snakefile: str | Path, config: Mapping[str, Any], output: str | Path) -> None:
    """Snakemake's HTML report of the figures and tables (``snakemake --report``) for this config.

    Runs from inside a workflow job: the merged config is handed over as a config file, and
    ``--nolock`` because the calling Snakemake holds the lock. Written atomically.
    """
    import subprocess
    import sys
    import tempfile

    from dpscaling.io import atomic_path

    with tempfile.TemporaryDirectory(prefix="dpscaling-report-") as scratch:
        config_file = Path(scratch) / "config.yaml"
        config_file.write_text(config_yaml(config))
        html = Path(scratch) / "report.html"
        command = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--configfile",
                   str(config_file), "--nolock", "--report", str(html), *REPORT_TARGETS]
        result = subprocess.run(command, capture_output=True, text=True)
        print(result.stdout, result.stderr, sep="\n")
        if result.returncode != 0 or not html.exists():
            raise UserError(f"snakemake --report failed ({result.returncode}); see the log above")
        with atomic_path(output) as tmp:
            tmp.write_bytes(html.read_bytes())


# The effective config's top-level order (the schema's): names first, then the blocks in pipeline order.
CONFIG_ORDER = ("run_name", "host_threads", "results_csv", "data", "models", "training", "accounting", "fit",
                "analysis", "ablation_batch")


def config_yaml(config: Mapping[str, Any]) -> str:
    """The merged, validated config as YAML (what a run used: results/<run>/config.yaml, the report)."""
    import yaml

    plain = _plain(config)
    rank = {key: index for index, key in enumerate(CONFIG_ORDER)}
    ordered = dict(sorted(plain.items(), key=lambda item: rank.get(item[0], len(rank))))
    return yaml.safe_dump(ordered, sort_keys=False)


def _plain(value: Any) -> Any:
    """Snakemake's config (with its own mapping/sequence types) as plain YAML-able data."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
