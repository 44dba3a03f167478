"""The checks a JSON schema cannot express, and the config's paths on disk.

The schema (:mod:`dpscaling.config.schema`) checks types, ranges and unknown keys;
:func:`check_config` adds model names against the family, files that must exist and cross-field
rules, always naming the config key and the accepted values. :func:`check_epochs` is the one-epoch
guard at DAG time.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dpscaling.config.blocks import RunConfig, typed
from dpscaling.config.training_blocks import DataBlock, ModelsBlock, TrainingBlock
from dpscaling.data.documents import CorpusSpec, source_of_documents
from dpscaling.data.epochs import check_one_epoch
from dpscaling.data.public_unigram import PUBLIC_UNIGRAM, check_output_bias_start
from dpscaling.privacy.epsilon_scope import check_private_runs
from dpscaling.core.errors import UserError
from dpscaling.workflow.layout import PACKED, PACKED_META, TRAINED_VOCAB
from dpscaling.privacy.mechanisms import CHOOSE, mechanism_named
from dpscaling.models.family import PRESETS, known_model_names, run_family
from dpscaling.privacy.samplers import sampler_named, truncating_samplers

VENDORED_CORPUS = "resources/corpus/core.txt.xz"
VENDORED_VOCAB = "resources/vocab/{name}/vocab.txt"


def settle_run_name(config: dict[str, Any], config_files: Sequence[str | Path]) -> str:
    """Give ``config`` a ``run_name`` when no config file set one: the stem of the last config file (so
    ``--configfile mine.yaml`` writes ``results/mine``, never another run's directory). Returns where the
    name came from, for the run's first line."""
    if config.get("run_name"):
        return "run_name in the config"
    if not config_files:
        raise UserError("run_name: no config file to name the run after; set run_name")
    config["run_name"] = Path(config_files[-1]).stem
    return f"no run_name set: the stem of {Path(config_files[-1]).name}"


def check_config(config: Mapping[str, Any] | RunConfig) -> None:
    """Semantic checks beyond the schema; raises :class:`UserError` naming the key. The blocks are checked in
    a fixed order, so a config with several faults is always refused for the same one."""
    from dpscaling.workflow.grid import possible_chosen, repeat_grid

    run = typed(config)
    check_models(run.models)
    check_mechanism_names(run)
    family = run_family(run.models)  # one family per run: its law is fitted on one family
    from dpscaling.design.rounds import check_design  # the design's refusals, beside its rounds

    check_design(run)
    check_output_bias_start(run.training.output_bias, family, "training.output_bias")
    check_schedule(run)
    check_batch_sizes(run.training)
    check_seq_lens(run)
    check_privacy_unit(run)
    check_ablation(run)
    # repeat_points must be main-grid points (under a tuned config: for every rate the protocol may choose),
    # repeat_seeds must not hold training.seed
    repeat_grid(run, possible_chosen(run))
    check_tokenizer(run.data)
    corpus_spec(run)  # source-specific checks
    # private runs resting on a vocabulary or output bias fitted on the private domain; the protocol's domain
    check_private_runs(run)
    check_finetune(run)


def check_models(models: ModelsBlock) -> None:
    """``models``: every name known to the family, no custom architecture redefining a preset, and heads that
    split the hidden width."""
    known = known_model_names(models)
    for name in models.names:
        if name not in known:
            raise UserError(f"models.names: {name!r} is not one of {list(known)} (add it under models.custom)")
    clash = set(models.custom) & set(PRESETS)
    if clash:
        raise UserError(f"models.custom: {sorted(clash)} would redefine presets; choose other names")
    for name, arch in models.custom.items():
        if arch.hidden % arch.heads:
            raise UserError(f"models.custom.{name}: hidden ({arch.hidden}) must be divisible by heads ({arch.heads})")


def check_mechanism_names(run: RunConfig) -> None:
    """Every mechanism the config names is one the registry knows (the schema takes any safe name), and every
    budget per user has users to protect."""
    training, data = run.training, run.data
    for name in training.mechanisms:
        mechanism_named(name, "training.mechanisms")
    for name in training.mechanism_learning_rates:
        mechanism_named(name, f"training.mechanism_learning_rates.{name}")
    for block in (run.private_model, run.savings):
        for index, budget in enumerate(block.budgets):
            if budget.mechanism not in (None, CHOOSE):
                mechanism_named(budget.mechanism, f"{block.NAME}.budgets[{index}].mechanism")
            check_budget_per_user(budget.to_mapping(), f"{block.NAME}.budgets[{index}]", data.users)


def check_schedule(run: RunConfig) -> None:
    """The warmup ends before training does, and a learning-rate protocol run is the first steps of the grid's
    schedule (past its warmup)."""
    training, protocol = run.training, run.learning_rate_protocol
    if training.warmup_steps >= training.steps and training.steps > 1:
        raise UserError(
            f"training.warmup_steps: {training.warmup_steps} must be below training.steps ({training.steps})")
    if training.tuned and not training.warmup_steps < protocol.steps <= training.steps:
        raise UserError(f"learning_rate_protocol.steps: {protocol.steps} must be above training.warmup_steps "
                        f"({training.warmup_steps}) and at most training.steps ({training.steps}): a protocol run is "
                        "the first steps of the grid's schedule")


def check_batch_sizes(training: TrainingBlock) -> None:
    """The microbatch divides the batch it splits (the truncated cap under a truncating sampler, else the
    physical batch), and only a truncating sampler takes a cap, at least the expected batch."""
    micro, truncated = training.microbatch_size, training.truncated_batch_size
    if sampler_named(training.sampling, "training").truncated:
        if truncated is not None and truncated < training.physical_batch:
            raise UserError(f"training.truncated_batch_size: {truncated} is below the expected batch "
                            f"training.physical_batch ({training.physical_batch})")
        if micro is not None and truncated is not None and truncated % micro:
            raise UserError(f"training.microbatch_size: {micro} must divide training.truncated_batch_size ({truncated})")
    elif truncated is not None:
        raise UserError("training.truncated_batch_size: only used with training.sampling "
                        + " or ".join(repr(name) for name in truncating_samplers()))
    elif micro is not None and training.physical_batch % micro:
        raise UserError(f"training.microbatch_size: {micro} must divide training.physical_batch "
                        f"({training.physical_batch})")


def check_seq_lens(run: RunConfig) -> None:
    """Several sequence lengths hold the primary one (``data.seq_len``) and train their own curves (the
    authors' results have one length)."""
    training, data = run.training, run.data
    if training.seq_lens is None:
        return
    if data.seq_len not in training.seq_lens:
        raise UserError(f"data.seq_len: {data.seq_len} must be one of training.seq_lens {list(training.seq_lens)} "
                        "(the primary length: the paper's figures and tables, the ablation and private_model "
                        "run at it)")
    if len(training.seq_lens) > 1 and run.results_csv:
        raise UserError("training.seq_lens: results_csv (the authors' results, one length) has no curves at "
                        f"other lengths; set training.seq_lens to null or [{data.seq_len}]")


def check_privacy_unit(run: RunConfig) -> None:
    """The privacy unit the sampler and the mechanisms protect: an accountant matched to the sampler, user
    identities in the data wherever users are protected, and users drawn once (by the sampler or by a user-level
    mechanism, not both)."""
    from dpscaling.accounting.matched import matched_accountant

    training, data = run.training, run.data
    matched_accountant(training.sampling, training.accountant, block="training")
    sampler = sampler_named(training.sampling, "training")
    if sampler.protects == "user" and data.users is None:
        raise UserError(f"data.users: training.sampling {training.sampling!r} protects users, and the data has no "
                        "user identities; set data.users (unit: document, synthetic or column) or protect sequences")
    if sampler.unit == "sequence" and training.examples_per_user_per_batch != 1:
        raise UserError(f"training.examples_per_user_per_batch: a user-level sampler's (user_shuffle, user_poisson); "
                        f"training.sampling {training.sampling!r} samples sequences: leave it at 1")
    for name in training.mechanisms:
        mechanism = mechanism_named(name)
        if mechanism.unit == "user":
            if data.users is None:
                raise UserError(f"data.users: training.mechanisms {name!r} samples users, and the data has no user "
                                "identities; set data.users (unit: document, synthetic or column)")
            if sampler.unit == "user":
                raise UserError(f"training.sampling: {training.sampling!r} already samples users; a user-level "
                                f"mechanism ({name!r}) draws users the way a sequence sampler draws sequences")
            mechanism.training(training.to_mapping())  # its sampler's user-level form exists


def check_tokenizer(data: DataBlock) -> None:
    """``data.vocab_file`` exactly with the ``custom`` tokenizer, ``data.vocab_size`` exactly with ``train``."""
    if data.tokenizer == "custom" and not data.vocab_file:
        raise UserError("data.vocab_file: required when data.tokenizer is 'custom'")
    if data.tokenizer != "custom" and data.vocab_file:
        raise UserError(f"data.vocab_file: only used with data.tokenizer 'custom' (got tokenizer {data.tokenizer!r})")
    if (data.tokenizer == "train") != (data.vocab_size is not None):
        raise UserError(f"data.vocab_size: set it exactly when data.tokenizer is 'train' (got tokenizer "
                        f"{data.tokenizer!r}, vocab_size {data.vocab_size!r})")


def check_finetune(run: RunConfig) -> None:
    """Pretrained budgets need the ``finetune`` block and a checkpoint of one of ``models.names``; the block
    itself trains its own curves (not with ``results_csv``) from checkpoints of the run's models."""
    models = run.models
    for index, budget in enumerate(run.private_model.budgets):
        if not budget.pretrained:
            continue
        if run.finetune is None:
            raise UserError(f"private_model.budgets[{index}].pretrained: needs a finetune block (the pretrained "
                            "checkpoints and the fine-tuning law that plans it; docs/finetune.md)")
        fixed = budget.configuration
        if fixed is not None and fixed["model"] not in models.names:
            raise UserError(f"private_model.budgets[{index}].configuration.model: {fixed['model']!r} has no "
                            f"pretrained checkpoint; a pretrained budget trains one of models.names "
                            f"{list(models.names)}")
    if run.finetune is None:
        return
    if run.results_csv:
        raise UserError("finetune: not with results_csv (the authors' results replace training; fine-tuning "
                        "trains its own curves)")
    unknown = sorted(set(run.finetune.checkpoints) - set(models.names))
    if unknown:
        raise UserError(f"finetune.checkpoints: {unknown} are not in models.names {list(models.names)}")
    if run.finetune.pretrain.warmup_steps >= run.finetune.pretrain.steps > 1:
        raise UserError(f"finetune.pretrain.warmup_steps: {run.finetune.pretrain.warmup_steps} must be below "
                        f"finetune.pretrain.steps ({run.finetune.pretrain.steps})")


def check_ablation(config: Mapping[str, Any] | RunConfig) -> None:
    """The ``ablation_batch`` block's cross-field rules (its types and ranges are the schema's)."""
    run = typed(config)
    block = run.ablation_batch
    known = known_model_names(run.models)
    if block.model not in known:
        raise UserError(f"ablation_batch.model: {block.model!r} is not one of {list(known)} "
                        "(add it under models.custom)")
    if block.warmup_steps >= block.steps and block.steps > 1:
        raise UserError(f"ablation_batch.warmup_steps: {block.warmup_steps} must be below ablation_batch.steps "
                        f"({block.steps})")
    if block.checkpoint_every % block.log_every:
        raise UserError(f"ablation_batch.checkpoint_every: {block.checkpoint_every} must be a multiple of "
                        f"ablation_batch.log_every ({block.log_every})")
    micro = block.microbatch_size
    if micro is not None:
        bad = [batch for batch in block.physical_batches if batch > micro and batch % micro]
        if bad:
            raise UserError(f"ablation_batch.microbatch_size: {micro} must divide every larger physical batch "
                            f"(not {bad})")


def corpus_spec(config: Mapping[str, Any] | RunConfig, repo: str | Path = ".") -> CorpusSpec:
    """The corpus the config asks for; ``core`` means the corpus vendored in ``repo``."""
    data = typed(config).data
    if data.source == "core":
        if data.paths:
            raise UserError("data.paths: not used with data.source 'core' (use source 'text' for your own files)")
        paths: tuple[str, ...] = (str(Path(repo) / VENDORED_CORPUS),)
    else:
        paths = tuple(data.paths)
    spec = CorpusSpec(source=data.source, paths=paths, text_column=data.text_column, hf_dataset=data.hf_dataset,
                      hf_config=data.hf_config, hf_split=data.hf_split, max_documents=data.max_documents,
                      sources=tuple(data.sources or ()),
                      user_column=data.users.column if data.users is not None and data.users.unit == "column" else None)
    # Unknown names are refused when the workflow loads (it passes the repository), not when the data job runs.
    if spec.sources and Path(spec.paths[0]).is_file():
        source_of_documents(spec.paths[0], spec.sources)
    return spec


def public_corpus_spec(config: Mapping[str, Any] | RunConfig, repo: str | Path = ".") -> CorpusSpec | None:
    """The public domain (``data.public_sources`` of the vendored corpus), or None where none is named.
    Refused unless the private domain is named too (``data.sources``, from the same vendored corpus) and the
    two share no source: the privacy unit lives in the private domain, and what is built from the public one
    (the vocabulary, a pretraining, the output bias's start) sees no private text. The stages that need a
    public domain (``finetune``, ``training.output_bias: public_unigram``) are refused without one."""
    run = typed(config)
    names = run.data.public_sources
    if not names:
        for needs, why in ((run.finetune is not None, "finetune: pretrains on the public domain"),
                           (run.training.output_bias == PUBLIC_UNIGRAM,
                            f"training.output_bias: {PUBLIC_UNIGRAM} starts from the public domain's unigram")):
            if needs:
                raise UserError(f"{why}; name it in data.public_sources (sources of the vendored corpus, none of "
                                "them in data.sources)")
        return None
    private = corpus_spec(config, repo)
    if run.data.source != "core" or not private.sources:
        raise UserError("data.public_sources: needs data.source 'core' and data.sources naming the private domain "
                        f"(sources of the vendored corpus), got source {run.data.source!r}, "
                        f"sources {list(private.sources) or None}")
    shared = sorted(set(names) & set(private.sources))
    if shared:
        raise UserError(f"data.public_sources: {shared} are also in data.sources; the public and the "
                        "private domain must share no source")
    public = dataclasses.replace(private, sources=tuple(names))
    if Path(public.paths[0]).is_file():
        source_of_documents(public.paths[0], public.sources)  # unknown names, when the workflow loads
    return public


def check_epochs(config: Mapping[str, Any] | RunConfig, corpus: CorpusSpec) -> float | None:
    """The one-epoch guard at DAG time, from the data stage's manifests (``data/packed/seq=S/meta.json``, one
    per sequence length: a longer S packs fewer sequences).

    Returns the most epochs any length's runs see, or None when no manifest is there yet or each was built
    for other data settings (it will be rebuilt; each training job checks again before step 1).
    Raises :class:`UserError` naming the numbers when above one epoch without ``training.allow_repeats``.
    """
    run = typed(config)
    data, training = run.data, run.training
    epochs = []
    for seq_len in run.seq_lens():
        path = Path(run.root) / PACKED.format(seq=seq_len) / PACKED_META
        if not path.is_file():
            continue
        meta = json.loads(path.read_text(encoding="utf-8"))
        same_data = (meta.get("source") == json.loads(json.dumps(corpus.record()))
                     and meta.get("seq_len") == seq_len and meta.get("tokenizer") == data.tokenizer
                     and (data.tokenizer != "train" or meta.get("vocab_size") == data.vocab_size))
        if same_data and "n_train" in meta:
            epochs.append(check_one_epoch(training.steps, training.physical_batch, int(meta["n_train"]),
                                          training.allow_repeats, keys=("training.steps", "training.physical_batch")))
    return max(epochs) if epochs else None


def vocab_path(config: Mapping[str, Any] | RunConfig, repo: str | Path = ".") -> str:
    """The vocabulary file: a vendored one in ``repo``, the user's ``vocab_file``, or the one the data
    stage trains (``data.tokenizer: train``, ``results/<run>/data/vocab.txt``)."""
    run = typed(config)
    data = run.data
    if data.tokenizer == "train":
        return f"{run.root}/{TRAINED_VOCAB}"
    if data.tokenizer == "custom":
        return str(data.vocab_file)
    return str(Path(repo) / VENDORED_VOCAB.format(name=data.tokenizer))


def check_budget_per_user(entry: Mapping[str, Any], where: str, users: Any) -> None:
    """A budget per user (``examples_per_user`` k; private_model's only: the schema) trains on users: the data
    must name them, capped at most at k (``data.users.max_examples``), so that every user of the run is one the
    budget protects."""
    k = entry.get("examples_per_user")
    if k is None:
        return
    if users is None:
        raise UserError(f"{where}.examples_per_user: a budget per user trains on users, and the data has no user "
                        "identities; set data.users (unit: document, synthetic or column) or remove examples_per_user")
    cap = users.max_examples
    if cap is None or int(cap) > int(k):
        raise UserError(f"{where}.examples_per_user: {k} protects users of up to {k} sequences; set "
                        f"data.users.max_examples to at most {k} (it is {cap})")
