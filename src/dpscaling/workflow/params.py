"""Rule params: the run's typed config turned into what each Snakemake rule is given.

Imported by ``workflow/rules/common.smk`` only (the other rule files share its namespace); the library
never imports it (a test walks the imports). Every param holds exactly what decides the rule's
output, so a change to an unrelated key reruns nothing; the training job's params keep the
config's key order (Snakemake compares params by ``repr``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from dpscaling.config.blocks import RunConfig, typed
from dpscaling.config.training_blocks import AblationBlock
from dpscaling.config.roles import FIGURE_RUNS, fields_with
from dpscaling.data.documents import CorpusSpec
from dpscaling.privacy.epsilon_scope import fitted_choices
from dpscaling.core.errors import UserError
from dpscaling.accounting.table_spec import table_spec_of
from dpscaling.report.figures.settings import analysis_settings_of
from dpscaling.law.settings import law_settings_of, mode_name
from dpscaling.models.family import known_model_names, model_param_of, run_family, run_model_config

Config = Mapping[str, Any] | RunConfig  # a validated config, typed or as its mapping


def training_params(config: Config, mechanism: str | None = None) -> dict[str, Any]:
    """A main-grid training job's ``training`` param (:meth:`TrainingBlock.job_params`), as ``mechanism`` (a
    ``mech`` wildcard; None: DP-SGD) trains it (a user-level one's sampler: :meth:`Mechanism.training`)."""
    from dpscaling.privacy.mechanisms import DPSGD, mechanism_named

    run = typed(config)
    return mechanism_named(mechanism or DPSGD.name).training(run.training.job_params(run.accounting.delta))


def pretrain_training(config: Config) -> dict[str, Any]:
    """A pretraining job's ``training`` param (:meth:`FinetuneBlock.pretrain_params`)."""
    run = typed(config)
    return run.finetune.pretrain_params(run.training, run.accounting.delta)


def finetune_training(config: Config, init_checkpoint: str) -> dict[str, Any]:
    """A fine-tuning job's ``training`` param, starting from ``init_checkpoint`` (:meth:`FinetuneBlock.finetune_params`)."""
    run = typed(config)
    return run.finetune.finetune_params(run.training, run.accounting.delta, init_checkpoint)


def learning_rate_protocol_training(config: Config) -> dict[str, Any]:
    """A learning-rate protocol job's ``training`` param (:meth:`LearningRateProtocolBlock.run_params`)."""
    run = typed(config)
    return run.learning_rate_protocol.run_params(run.training, run.accounting.delta)


def learning_rate_choice_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """The protocol's choice job's param: the ``learning_rate_protocol`` block as the config gives it, without
    ``domain`` at its default (added after results existed: a choice made before it is still this one)."""
    from dpscaling.config.training_blocks import PRIVATE_DOMAIN

    return {key: value for key, value in config["learning_rate_protocol"].items()
            if not (key == "domain" and value == PRIVATE_DOMAIN)}


def ablation_training(config: Config, batch: int) -> dict[str, Any]:
    """An ablation job's ``training`` param at physical batch ``batch`` (:meth:`AblationBlock.training`)."""
    run = typed(config)
    return run.ablation_batch.training(run.training, batch)


def ablation_figure_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ablation figures' param: the ``ablation_batch`` keys that decide which run belongs to which
    figure (role :data:`~dpscaling.config.roles.FIGURE_RUNS`), as the config gives them."""
    block = config["ablation_batch"]
    return {key: block[key] for key in fields_with(AblationBlock, FIGURE_RUNS)}


def model_param(config: Config, name: str, seq_len: int | None = None) -> str | dict[str, Any]:
    """A training job's ``model`` param (:func:`dpscaling.models.family.model_param_of`) at sequence length ``seq_len`` (None =
    ``data.seq_len``)."""
    run = typed(config)
    return model_param_of(run.models, name, seq_len or run.data.seq_len)


def law_settings(config: Config) -> dict[str, Any]:
    """The law's settings as JSON."""
    return law_settings_of(typed(config)).to_json()


def validation_modes(config: Config) -> dict[str, dict[str, Any]]:
    """The settings ``validate`` scores side by side: paper mode and reference-compatible mode (same
    windows and warm-up), as JSON."""
    run = typed(config)
    return {mode_name(reference): law_settings_of(run, reference).to_json() for reference in (False, True)}


def accounting_spec(config: Config, mechanism: str | None = None) -> dict[str, Any]:
    """The σ table's spec as a mapping, for ``mechanism`` (default: the run's primary one, the first of
    ``training.mechanisms``: its bands; dpscaling.privacy.mechanisms)."""
    import dataclasses

    from dpscaling.workflow.grid import mechanisms
    from dpscaling.privacy.mechanisms import mechanism_named

    run = typed(config)
    bands = mechanism_named(mechanism or mechanisms(run)[0]).bands
    return dataclasses.replace(table_spec_of(run.accounting), bands=bands).to_mapping()


def accounting_chunks(spec: dict[str, Any]) -> list[int]:
    """Indices of the table's chunks: one Snakemake job each."""
    from dpscaling.accounting.table_spec import TableSpec, plan_table

    return [chunk.index for chunk in plan_table(TableSpec.from_mapping(dict(spec)))]


def analysis_settings(config: Config) -> dict[str, Any]:
    """The figures' and tables' settings as a mapping."""
    return analysis_settings_of(typed(config)).to_mapping()


def bootstrap_chunks(config: Config) -> list[int]:
    """The bootstrap jobs of this run (one per ``fit.bootstrap.chunk_size`` replicates); none when the
    bootstrap is off or has no repeated seeds to resample (results_csv has none)."""
    from dpscaling.workflow.grid import possible_chosen, repeat_grid
    from dpscaling.law.bootstrap import chunk_count

    run = typed(config)
    block = run.fit.bootstrap
    if not block.replicates or run.results_csv or not repeat_grid(run, possible_chosen(run)):
        return []
    return list(range(chunk_count(block.replicates, block.chunk_size)))


def bootstrap_status(config: Config) -> str:
    """Why a run's answers have no interval ("" when they have one): the figures' footnote."""
    from dpscaling.law.bootstrap import BOOTSTRAP_OFF, NO_REPEATS

    run = typed(config)
    if not run.fit.bootstrap.replicates:
        return BOOTSTRAP_OFF
    return "" if bootstrap_chunks(run) else NO_REPEATS


def corpus_inputs(spec: CorpusSpec) -> list[str]:
    """Local files the data stage reads (Snakemake inputs, so edits trigger reruns)."""
    return [] if spec.source == "huggingface" else list(spec.paths)


def _sha256(block: Any) -> str:
    """The sha256 of a config block's canonical JSON (keys sorted): its identity in a bundle's provenance."""
    return hashlib.sha256(json.dumps(block, sort_keys=True, default=str).encode()).hexdigest()


def bundle_provenance(config: Config) -> dict[str, Any]:
    """What the run's config says of the law it fits, for its bundle (:mod:`dpscaling.law.bundle`): the sha256
    of the config blocks that decide the law (data, the grid's models, training, accounting, fit), the family
    and objective, the data (tokenizer, vocabulary size, corpus source, S), the privacy unit, δ and the σ
    table's sampling rule, the physical batch and microbatch, the mode, where each data-dependent choice of an
    answer was fitted (``fitted_on``: :func:`dpscaling.privacy.epsilon_scope.fitted_choices`), and every grid model's
    shape."""
    run = typed(config)
    family = run_family(run.models)
    seq_len = run.data.seq_len
    models = {}
    for name in run.models.names:
        shape = run_model_config(run, name, seq_len)
        models[name] = {"family": family.name, "layers": shape.num_layers, "heads": shape.num_heads,
                        "hidden": shape.hidden_size, "param_count": int(shape.param_count().total)}
    plain = run.to_mapping()
    # The blocks that decide the law (the grid's models only): its identity, not the run's other targets'.
    law_config = {block: plain[block] for block in ("results_csv", "data", "training", "accounting", "fit")}
    law_config["models"] = {"names": list(run.models.names),
                            "custom": {name: plain["models"]["custom"][name] for name in run.models.names
                                       if name in plain["models"]["custom"]}}
    provenance: dict[str, Any] = {
        "config_sha256": _sha256(law_config),
        "run_name": run.run_name, "family": family.name, "objective": family.objective, "seq_len": seq_len,
        "seq_lens": list(run.seq_lens()), "privacy_unit": analysis_settings_of(run).privacy_unit,
        "delta": run.accounting.delta, "sampling": run.accounting.sampling,
        "physical_batch": run.training.physical_batch, "microbatch_size": run.training.microbatch_size or 1,
        "mode": mode_name(run.fit.reference_compatible),
        # where each data-dependent choice of an answer was fitted: what its ε covers (dpscaling.privacy.epsilon_scope)
        "fitted_on": {name: choice.to_json() for name, choice in fitted_choices(run).items()}}
    if run.results_csv:  # the authors' format: no data stage, the presets at BERT's vocabulary
        provenance["results"] = {"format": "reference", "path": run.results_csv}
        provenance["vocab_size"] = family.vocab_size
    else:
        provenance.update(tokenizer=run.data.tokenizer, vocab_size=run.data.model_vocab_size(),
                          corpus={"source": run.data.source}, models=models)
    return provenance


def finetune_bundle_provenance(config: Config, checkpoints: Mapping[str, str]) -> dict[str, Any]:
    """The fine-tuning law's bundle provenance: the grid's (:func:`bundle_provenance`) with the ``finetune``
    block's sha256, the public domain's sources, each model's pretrained checkpoint (``checkpoints``, model →
    directory), which an answer names as its start (:class:`dpscaling.law.answers.Runnable`), and the tokens
    each model's pretraining saw."""
    run = typed(config)
    block = run.to_mapping()["finetune"]
    pretrain = run.finetune.pretrain
    # D_pre of each model this run pretrains (`dpscaling query --count-pretraining`); unknown for a given checkpoint.
    tokens = pretrain.steps * pretrain.physical_batch * run.data.seq_len
    return {**bundle_provenance(config), "regime": "fine-tuning",
            "pretraining_tokens": {name: tokens for name in run.models.names if name not in run.finetune.checkpoints},
            "finetune_sha256": _sha256(block),
            "public_sources": list(run.data.public_sources or ()), "private_sources": list(run.data.sources or ()),
            "pretrained": {name: str(checkpoints[name]) for name in run.models.names}}


def private_model_models(config: Config, label: str) -> list[str]:
    """The models private_model's budget ``label`` may train: the model its ``configuration`` names (a grid
    model, or a ``models.custom`` entry the grid does not train, such as the shape ``dpscaling query``
    answered), else the grid's (the plan picks one). Per budget, so adding a budget reruns no other."""
    from dpscaling.private.model import budget_by_label

    run = typed(config)
    budget = budget_by_label(run.private_model.to_mapping(), run.accounting.delta, label)
    if budget.configuration is None:
        return list(run.models.names)
    known = set(known_model_names(run.models))
    if budget.configuration.model not in known:
        raise UserError(f"private_model.budgets {label}: configuration.model {budget.configuration.model!r} is not "
                        f"one of models.names, models.custom or the presets ({sorted(known)})")
    return [budget.configuration.model]


def private_model_sizes(config: Config, label: str) -> dict[str, int]:
    """The parameter count (at the primary length) of the model budget ``label``'s configuration names;
    none for a budget the law's search plans."""
    from dpscaling.private.model import budget_by_label

    run = typed(config)
    if budget_by_label(run.private_model.to_mapping(), run.accounting.delta, label).configuration is None:
        return {}
    return {name: int(run_model_config(run, name).param_count().total) for name in private_model_models(run, label)}


def savings_settings(config: Config):
    """The ``savings`` block typed (:class:`dpscaling.private.savings_plan.SavingsSettings`)."""
    from dpscaling.private.savings_plan import SavingsSettings

    run = typed(config)
    return SavingsSettings.from_mapping(run.savings.to_mapping(), run.accounting.delta)


def savings_plan_settings(config: Config, label: str) -> dict[str, Any]:
    """Rule ``savings_plan``'s param: the ``savings`` block with budget ``label`` only and without its
    evaluation and directory, so adding a budget, changing how runs are scored or where the study lives replans
    nothing."""
    run = typed(config)
    block = run.savings.to_mapping()
    budget = savings_settings(run).budget(label)
    entries = [entry for entry in block["budgets"] if _budget_label(entry, run.accounting.delta) == budget.label]
    return {**{key: value for key, value in block.items() if key not in ("evaluation", "directory")},
            "budgets": entries}


def _budget_label(entry: Mapping[str, Any], default_delta: float) -> str:
    from dpscaling.private.model import budgets

    return budgets({"budgets": [entry]}, default_delta)[0].label
