import dataclasses
import json
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

from dpscaling.workflow.cluster import (
    evaluation_work,
    grid_work,
    job_priority,
    job_resources,
    plan_work,
    savings_work,
)
from dpscaling.report.figures import ALL_FIGURES
from dpscaling.report.figures.common import (
    ABLATION as NEEDS_ABLATION,
    ACCOUNTING as NEEDS_ACCOUNTING,
    BOOTSTRAP as NEEDS_BOOTSTRAP,
    FLOOR as NEEDS_FLOOR,
    LENGTHS as NEEDS_LENGTHS,
    RESULTS as NEEDS_RESULTS,
)
from dpscaling.config.blocks import load_config
from dpscaling.config.checks import (
    check_config,
    check_epochs,
    corpus_spec,
    public_corpus_spec,
    settle_run_name,
    vocab_path,
)
from dpscaling.config.schema import validate_config
from dpscaling.design.rounds import (
    curve_runs,
    design_law_settings_json,
    design_wildcards,
    read_round,
    runs_after,
    shorter_wildcards,
    training_params as design_training_params,
)
from dpscaling.workflow.grid import (
    ablation_grid,
    alternation,
    correction_grid,
    finetune_grid,
    law_points,
    learning_rate_protocol_grid,
    main_grid,
    mechanisms,
    noise_levels_of_one_job,
    ladder_of_one_job,
    ablation_seeds_of_one_job,
    finetune_noise_levels_of_one_job,
    points_at_length,
    points_with_mechanism,
    possible_chosen,
    possible_grid,
    pretrain_grid,
    protocol_prefix,
    repeat_grid,
)
from dpscaling.tuning.rule import read_chosen
from dpscaling.core.io import SIGMA_CACHE_ENV, lock_results
from dpscaling.privacy.mechanisms import DPSGD, mechanism_named
from dpscaling.models.family import model_family, run_family
from dpscaling.private.savings_plan import trained_roles
from dpscaling.workflow import layout
from dpscaling.workflow.migration import migrate_older_layouts, older_layout_moves
from dpscaling.workflow.params import (
    ablation_figure_params,
    ablation_training,
    accounting_chunks,
    accounting_spec,
    analysis_settings,
    bootstrap_chunks,
    bootstrap_status,
    bundle_provenance,
    corpus_inputs,
    finetune_bundle_provenance,
    finetune_training,
    law_settings,
    model_param,
    private_model_models,
    pretrain_training,
    private_model_sizes,
    savings_plan_settings,
    savings_settings,
    training_params,
    validation_modes,
    learning_rate_choice_params,
    learning_rate_protocol_training,
)

min_version("9.0")


RUN_NAME_ORIGIN = settle_run_name(
    config, workflow.overwrite_configfiles or workflow.configfiles
)
validate_config(config, workflow.source_path("../schemas/config.schema.yaml"))
# The config as typed blocks (dpscaling.config): rules read derived values from it.
CFG = load_config(config)
check_config(CFG)

RESULTS = CFG.root
# σ slabs built on demand by this run's jobs (a query at another δ, ELS's tables) live with its results, not in
# the user's cache (dpscaling.accounting.on_demand): jobs inherit this, and a cluster job's re-parse sets it too.
os.environ[SIGMA_CACHE_ENV] = str(Path(RESULTS, layout.SIGMA_CACHE).resolve())
if workflow.is_main_process:  # once per invocation, not in every job's re-parse
    print(
        f"dpscaling: run {CFG.run_name!r} -> {RESULTS}/ ({RUN_NAME_ORIGIN})",
        file=sys.stderr,
    )


# One running snakemake per results directory (a second one is refused; --nolock skips this, as it
# skips Snakemake's own lock). Jobs spawned by Snakemake run with --no-hooks, so only the main
# process takes it; dry runs and --report do not.
onstart:
    if workflow.execution_settings.lock:
        lock_results(RESULTS)


# Results written by an older layout (one length: runs/model=..., data/packed/meta.json; run ids without their
# mechanism) move into the current one once, with Snakemake's records, so their finished runs stay finished
# (docs/failure-modes.md).
OLDER_LAYOUT_MOVES = (
    older_layout_moves(RESULTS, CFG.data.seq_len) if workflow.is_main_process else []
)
if OLDER_LAYOUT_MOVES:
    lock_results(RESULTS)  # not while another snakemake writes this directory
    MIGRATION = migrate_older_layouts(
        RESULTS, CFG.data.seq_len, moves=OLDER_LAYOUT_MOVES
    )
    print(f"dpscaling: {MIGRATION.summary()}", file=sys.stderr)

# Vendored resources are found next to the Snakefile, so --directory works.
CORPUS = corpus_spec(CFG, repo=workflow.basedir)
# The public domain (data.public_sources; None without one): CORPUS is then the private domain.
PUBLIC_CORPUS = public_corpus_spec(CFG, repo=workflow.basedir)
# The one-epoch guard, when the data stage's manifest is already there (else each training job checks).
check_epochs(CFG, CORPUS)
VOCAB = vocab_path(CFG, repo=workflow.basedir)
# The learning-rate protocol (training.learning_rates: tuned; workflow/rules/learning_rates.smk): the grid's
# rates are its output, so the grid is known only once its checkpoint has run. Every point the grid may hold
# (each ladder rate) names the wildcard values and run ids; the grid itself is read in input functions.
TUNED = CFG.training.tuned
LR_PROTOCOL_GRID = learning_rate_protocol_grid(CFG)
POSSIBLE_GRID = possible_grid(CFG)
POSSIBLE_CORRECTION_GRID = correction_grid(CFG, possible_chosen(CFG))


def chosen_rates():
    """The protocol's chosen rate per model (None when the config gives its rates). In an input function,
    Snakemake waits for the checkpoint and re-evaluates the function once it has run."""
    if not TUNED:
        return None
    return read_chosen(checkpoints.choose_learning_rates.get().output.chosen)


def grid_points():
    """The main grid, plus training.repeat_seeds at training.repeat_points (seed noise for the fit's
    intervals), at every sequence length (training.seq_lens; one, data.seq_len, unless set).
    """
    chosen = chosen_rates()
    return main_grid(CFG, chosen) + repeat_grid(CFG, chosen)


def primary_length_grid():
    return points_at_length(grid_points(), PRIMARY_SEQ_LEN)


def primary_grid():
    """The grid at the primary length and mechanism: the paper's figures and tables."""
    return points_with_mechanism(primary_length_grid(), PRIMARY_MECHANISM)


def correction_points():
    """The physical-batch correction's pairs (fit.physical_batch_correction; none unless enabled)."""
    return correction_grid(CFG, chosen_rates())


SEQ_LENS = list(CFG.seq_lens())
# The primary length and mechanism (training.mechanisms' first): the paper's figures and tables, the
# ablation and private_model run at them.
PRIMARY_SEQ_LEN = CFG.data.seq_len
MECHANISMS = list(mechanisms(CFG))
PRIMARY_MECHANISM = MECHANISMS[0]
# The other mechanisms, each with its own accounting table and law at the primary length (none by default).
OTHER_MECHANISMS = MECHANISMS[1:]
# The other lengths, each with its own law under law/lengths/ (none in a one-length run).
OTHER_SEQ_LENS = [length for length in SEQ_LENS if length != PRIMARY_SEQ_LEN]
# The physical-batch ablation's jobs (workflow/rules/ablation.smk): its own target, never in `all`.
ABLATION_GRID = ablation_grid(CFG)
CORRECTION_ENABLED = bool(POSSIBLE_CORRECTION_GRID)
# Fine-tuning (finetune block; none without it): public pretraining, then the private fine-tuning grid.
PRETRAIN_GRID = pretrain_grid(CFG)
FINETUNE_GRID = finetune_grid(CFG)
# Wildcards match the values the runs may take only: the main grid's, the ablation's, the correction's,
# fine-tuning's and the learning-rate protocol's.
POINTS = (
    POSSIBLE_GRID
    + ABLATION_GRID
    + POSSIBLE_CORRECTION_GRID
    + PRETRAIN_GRID
    + FINETUNE_GRID
    + LR_PROTOCOL_GRID
)


wildcard_constraints:
    **layout.run_constraints(layout.RUN_AXES, [point.wildcards for point in POINTS]),


# A run's id (dpscaling.workflow.layout): a grid run's mechanism, length, then its grid point; the ablation's
# runs carry no length. Every level is always there, so a run's path depends on its own values only.
RUN = layout.run_id(layout.RUN_AXES)
ONE_LENGTH_RUN = layout.run_id(layout.ONE_LENGTH_AXES)
# Where a grid run and an ablation run write: curve, checkpoints and log.
RUN_PATHS = layout.run_paths(RUN)
# training.runs_per_job: shape (dpscaling.workflow.grid): the σ̄ of one train_noise_levels job (the main seed at the
# physical batch), the rates of one learning_rate_ladder job, the seeds of one ablation_seeds job and the σ̄ of
# one finetune_noise_levels job, each as {wildcard: values}; no values when each run is its own job.
NOISE_LEVELS_OF_ONE_JOB = {"nbr": noise_levels_of_one_job(CFG)}
LADDER_OF_ONE_JOB = {"lr": ladder_of_one_job(CFG)}
ABLATION_SEEDS_OF_ONE_JOB = {"seed": ablation_seeds_of_one_job(CFG)}
FINETUNE_NOISE_LEVELS_OF_ONE_JOB = {"nbr": finetune_noise_levels_of_one_job(CFG)}
GRID_SEED, GRID_BATCH = str(CFG.training.seed), str(CFG.training.physical_batch)
ABLATION_RUN_PATHS = layout.run_paths(ONE_LENGTH_RUN, layout.ABLATION)
PRETRAIN_RUN_PATHS = layout.run_paths(ONE_LENGTH_RUN, layout.PRETRAIN)
FINETUNE_RUN_PATHS = layout.run_paths(ONE_LENGTH_RUN, layout.FINETUNE)
# learning_rate_protocol.domain: the protocol's runs on the public domain are other runs, in a tree of their own.
LR_PROTOCOL_DIR = layout.learning_rate_protocol_dir(CFG.learning_rate_protocol.domain)
LR_PROTOCOL_RUN_PATHS = layout.run_paths(ONE_LENGTH_RUN, LR_PROTOCOL_DIR)


def run_outputs(pattern, points=None):
    """``pattern`` (containing RUN's wildcards) expanded over grid points (default: the whole grid; call it
    inside an input function, where the grid may wait for the learning-rate protocol).
    """
    points = grid_points() if points is None else points
    return [pattern.format(**point.wildcards) for point in points]


# The rules' helper functions live here (snakemake --lint: no functions beside rules).
TABLE_FILES = {"csv": "{stem}.csv", "md": "{stem}.md", "tex": "{stem}.tex"}


def run_metrics(wildcards):
    """The training curves behind the run-measured tables; none when the law comes from results_csv."""
    return (
        []
        if config["results_csv"]
        else run_outputs(f"{RESULTS}/{RUN_PATHS.curve}", primary_grid())
    )


def figure_inputs(wildcards):
    """Only what this figure reads, so e.g. a new accounting table does not redraw fig:training."""
    spec = ALL_FIGURES[wildcards.figure]
    if NEEDS_ABLATION in spec.needs:  # its own curves only: no law, no main grid
        return {"ablation": rules.ablation_curves.output[0]}
    inputs = {"law": LAW}
    if NEEDS_ACCOUNTING in spec.needs:
        inputs["sigma_table"] = SIGMA_TABLE
    if NEEDS_RESULTS in spec.needs:
        inputs["results"] = FIT_RESULTS
    if NEEDS_BOOTSTRAP in spec.needs and BOOTSTRAP:
        inputs["bootstrap"] = BOOTSTRAP[0]
    if NEEDS_FLOOR in spec.needs and not config["results_csv"]:
        inputs["floor"] = rules.unigram_floor.output[0]
    if NEEDS_LENGTHS in spec.needs:
        inputs["lengths"] = rules.law_across_lengths.output[0]
    return inputs


def table_outputs(label):
    """CSV (in the report), Markdown and LaTeX files of a paper table."""
    stem = f"{RESULTS}/{layout.table(label)}"
    files = {kind: pattern.format(stem=stem) for kind, pattern in TABLE_FILES.items()}
    files["csv"] = report(
        files["csv"], caption="../report/table.rst", category="Tables"
    )
    return files


# What validate_law writes beside the calibration file `calibration` (<dir>/validate/calibration.json): the
# error table, predicted against measured, and how often the seed-only and the calibrated 90% intervals cover
# (docs/fit.md "Calibrated intervals"); `dpscaling query --law <dir>/law/fit` finds the calibration.
def validation_outputs(calibration):
    where = os.path.dirname(calibration)
    return {
        "csv": report(
            f"{where}/{layout.VALIDATION}.csv",
            caption="../report/table.rst",
            category="Validation",
        ),
        "md": f"{where}/{layout.VALIDATION}.md",
        "tex": f"{where}/{layout.VALIDATION}.tex",
        "pdf": report(
            f"{where}/{layout.PREDICTED_VS_MEASURED}.pdf",
            caption="../report/validation.rst",
            category="Validation",
        ),
        "png": f"{where}/{layout.PREDICTED_VS_MEASURED}.png",
        "data": f"{where}/{layout.PREDICTED_VS_MEASURED}.csv",
        "coverage": report(
            f"{where}/{layout.COVERAGE}.csv",
            caption="../report/coverage.rst",
            category="Validation",
        ),
        "coverage_md": f"{where}/{layout.COVERAGE}.md",
        "coverage_tex": f"{where}/{layout.COVERAGE}.tex",
        "calibration": calibration,
    }


# What one job of each training-like rule computes (dpscaling.workflow.cluster.Work); job_resources turns it into
# the rule's whole resources mapping (GPUs, nodes, CPUs, memory, time), the same way for every rule.
def mechanism_sigma_table(mechanism):
    """The sigma table of ``mechanism``'s law: the run's own for the primary mechanism and for one priced the same
    (a user-level DP-SGD's is DP-SGD's, over users: the same table)."""
    if accounting_spec(CFG, mechanism) == accounting_spec(CFG):
        return f"{RESULTS}/{layout.ACCOUNTING}/{layout.SIGMA_TABLE}"
    return f"{RESULTS}/{layout.MECHANISM_SIGMA_TABLE}".format(mech=mechanism)


def mechanism_calibration(mechanism):
    """The calibration of ``mechanism``'s law (validate_law's, or validate_law_for_mechanism's)."""
    if mechanism == PRIMARY_MECHANISM:
        return f"{RESULTS}/{layout.CALIBRATION}"
    return f"{RESULTS}/{layout.MECHANISM_CALIBRATION}".format(mech=mechanism)


def grid_job(wildcards, input):
    return grid_work(
        CFG,
        wildcards.model,
        seq_len=int(wildcards.seq),
        mechanism=wildcards.mech,
    )


def work_of_one_job(work, values):
    """The resources' ``work`` of a job that trains one run per value of ``values`` (a *_OF_ONE_JOB mapping),
    one after another: ``work``'s, its steps times the runs."""

    ((_, levels),) = values.items()

    def sized(wildcards, input):
        one = work(wildcards, input)
        return dataclasses.replace(one, steps=one.steps * len(levels))

    return sized


def runs_of_one_job(values):
    """A job's ``runs`` param (workflow/scripts/train.py): each run's own wildcard, from ``values``
    (one of the *_OF_ONE_JOB mappings: one wildcard and its values).
    """
    ((name, levels),) = values.items()
    return [{name: level} for level in levels]


def _continued_protocol_runs(wildcards, runs):
    """(curve, protocol run's wildcards) of each run of a grid job (``runs`` as in runs_of_one_job; the job's one
    run when None) that continues a learning-rate protocol run (dpscaling.workflow.grid.protocol_prefix). None in the rules
    derived from train_run, whose runs carry no length."""
    for run in runs or [{}]:
        values = {**dict(wildcards), **run}
        found = protocol_prefix(CFG, values)
        if found is not None:
            yield f"{RESULTS}/{RUN_PATHS.curve}".format(**values), found


def protocol_prefixes(wildcards, runs=None):
    """A grid job's ``prefixes`` param (workflow/scripts/train.py): curve -> the checkpoint directory of the
    protocol run it continues."""
    return {
        curve: f"{RESULTS}/{LR_PROTOCOL_RUN_PATHS.checkpoints}".format(**found)
        for curve, found in _continued_protocol_runs(wildcards, runs)
    }


def protocol_prefix_curves(wildcards, runs=None):
    """The curves of the protocol runs a grid job continues: its inputs, so they have finished."""
    return [
        f"{RESULTS}/{LR_PROTOCOL_RUN_PATHS.curve}".format(**found)
        for _, found in _continued_protocol_runs(wildcards, runs)
    ]


def paths_of_one_job(pattern, values, wildcards=None):
    """``pattern`` (a run's path) at each of ``values`` (as in runs_of_one_job), in the order of its runs: its
    other wildcards left in (an output or log), or filled from ``wildcards`` (the checkpoint directories).
    """
    paths = expand(pattern, **values, allow_missing=True)
    return paths if wildcards is None else [path.format(**wildcards) for path in paths]


def learning_rate_job(wildcards, input):
    return grid_work(CFG, wildcards.model, learning_rate_protocol_training(CFG))


def ablation_job(wildcards, input):
    return grid_work(CFG, wildcards.model, ablation_training(CFG, int(wildcards.batch)))


def pretrain_job(wildcards, input):
    return grid_work(CFG, wildcards.model, pretrain_training(CFG))


def finetune_job(wildcards, input):
    return grid_work(CFG, wildcards.model)


# The data chain runs ahead of every other ready job: each training job waits for it, while the accounting
# table's chunks (ready at the start too) are needed only by the analysis. Started behind them, it held the first
# training job back 74 s of the default's run (docs/runs.md).
DATA_PRIORITY = 100

# The work of each grouped rule's job (its resources).
NOISE_LEVELS_WORK = work_of_one_job(grid_job, NOISE_LEVELS_OF_ONE_JOB)
LADDER_WORK = work_of_one_job(learning_rate_job, LADDER_OF_ONE_JOB)
ABLATION_SEEDS_WORK = work_of_one_job(ablation_job, ABLATION_SEEDS_OF_ONE_JOB)
FINETUNE_NOISE_LEVELS_WORK = work_of_one_job(
    finetune_job, FINETUNE_NOISE_LEVELS_OF_ONE_JOB
)


def pretrained_checkpoint(model):
    """Where fine-tuning ``model`` starts: finetune.checkpoints' directory, or its pretraining run's."""
    given = CFG.finetune.checkpoints.get(model)
    if given:
        return given
    (point,) = [point for point in PRETRAIN_GRID if point.model == model]
    return f"{RESULTS}/{PRETRAIN_RUN_PATHS.checkpoints}".format(**point.wildcards)


def pretrained_curve(wildcards):
    """The pretraining run a fine-tuning job waits for (none for a model given a checkpoint)."""
    return run_outputs(
        f"{RESULTS}/{PRETRAIN_RUN_PATHS.curve}",
        [point for point in PRETRAIN_GRID if point.model == wildcards.model],
    )


def private_plan_law(wildcards):
    """The law bundle that plans private_model's budget: the fine-tuning law's for a pretrained budget, else
    the run's (which holds every mechanism's law: a budget that names one is planned by it, or chooses).
    """
    if wildcards.budget in PRETRAINED_BUDGETS:
        return rules.finetune_law_bundle.output[0]
    return rules.law_bundle.output[0]


def private_plan_correction(wildcards):
    """The physical-batch correction (fitted on the grid's runs) for a budget the grid's law plans."""
    return [] if wildcards.budget in PRETRAINED_BUDGETS else CORRECTION


def private_twin_curves(budgets):
    """The study twins' curves (private_model_twin) of ``budgets`` that a private_model report reads, or none
    when private_model.cause_split is off."""
    if not config["private_model"]["cause_split"]:
        return []
    return expand(rules.private_model_twin.output[0], budget=budgets, twin=TWINS)


def private_plan_users(wildcards):
    """The packed data's train split, whose users a budget per user trains on (none for the other budgets)."""
    return (
        [PRIMARY_PACKED["meta"], PRIMARY_PACKED["train"]]
        if wildcards.budget in USER_BUDGETS
        else []
    )


def private_budget_training(wildcards):
    """A private_model job's ``training`` param; a pretrained budget's adds ``init_checkpoints`` (model ->
    pretrained checkpoint: its plan picks the model), so the other budgets' params stay as they were.
    """
    training = private_training(config["training"])
    if wildcards.budget not in PRETRAINED_BUDGETS:
        return training
    checkpoints = {name: pretrained_checkpoint(name) for name in CFG.models.names}
    return {**training, "init_checkpoints": checkpoints}


def ablation_scoring_job(wildcards, input):
    return evaluation_work(wildcards.model, CFG.ablation_batch.evaluation.examples)


# A private_model job is sized from its plan (model, T, L) once the plan exists.
def private_training_job(wildcards, input):
    return plan_work(CFG, input.plan)


def private_scoring_job(wildcards, input):
    return plan_work(CFG, input.plan, scoring=CFG.private_model.evaluation.examples)


# A savings run is sized from its budget's plan (model, T, L) once the plan exists.
def savings_job(wildcards, input):
    return savings_work(CFG, input.plan, wildcards.role)


def savings_runs(wildcards):
    """Every trained run's curve and evaluation, once each budget's plan says which runs it has."""
    runs = {"curves": [], "evaluations": []}
    for label in SAVINGS_BUDGETS:
        plan = checkpoints.savings_plan.get(savings_budget=label).output[0]
        for role in trained_roles(json.loads(open(plan, encoding="utf-8").read())):
            outputs = rules.savings_train.output
            runs["curves"].append(outputs.curve.format(savings_budget=label, role=role))
            runs["evaluations"].append(
                outputs.evaluation.format(savings_budget=label, role=role)
            )
    return runs


# The adaptive design (design: adaptive; workflow/rules/adaptive.smk, dpscaling.design.rounds).
DESIGN_RUN_PATHS = layout.run_paths(
    layout.run_id(layout.DESIGN_AXES), f"{layout.DESIGN}"
)
DESIGN_BATCH = CFG.training.physical_batch


def design_job(wildcards, input):
    return grid_work(
        CFG, wildcards.model, design_training_params(CFG, int(wildcards.steps))
    )


def design_shorter_curve(wildcards):
    """The curve of the run a design run continues (none at the shortest horizon): its input, so it has finished."""
    shorter = shorter_wildcards(CFG, wildcards)
    return (
        []
        if shorter is None
        else [f"{RESULTS}/{DESIGN_RUN_PATHS.curve}".format(**shorter)]
    )


def design_prefixes(wildcards, output):
    """A design job's ``prefixes`` param: its curve -> the checkpoints of the run it continues."""
    shorter = shorter_wildcards(CFG, wildcards)
    if shorter is None:
        return {}
    return {output[0]: f"{RESULTS}/{DESIGN_RUN_PATHS.checkpoints}".format(**shorter)}


def design_curves(runs):
    return {
        f"{RESULTS}/{DESIGN_RUN_PATHS.curve}".format(
            **design_wildcards(run, DESIGN_BATCH)
        ): run
        for run in runs
    }


def design_round_inputs(wildcards):
    """Round R's inputs: the protocol's choice (its grid's rates); past round 0 the record of round R-1 and the
    curves of every run trained by then (each run of the records, waiting on the checkpoint before).
    """
    inputs = {
        "chosen": (
            [checkpoints.choose_learning_rates.get().output.chosen] if TUNED else []
        )
    }
    index = int(wildcards.round)
    if index == 0:
        return inputs
    previous = checkpoints.design_round.get(round=index - 1).output[0]
    curves = design_curves(runs_after(read_round(previous)))
    return {
        **inputs,
        "previous": previous,
        "curves": list(curves),
        "sigma_table": rules.accounting_table.output.table,
    }


def design_records(wildcards):
    """Every round's record, up to the one that stopped the design."""
    records = []
    for index in range(CFG.adaptive_design.rounds + 2):
        path = checkpoints.design_round.get(round=index).output[0]
        records.append(path)
        if read_round(path)["stopped"]:
            break
    return records


def design_final_curves(wildcards):
    """The curves the design's law is fitted on: each point and seed's longest horizon."""
    final = read_round(design_records(wildcards)[-1])
    return list(design_curves(curve_runs(runs_after(final))))
