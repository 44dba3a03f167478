from snakemake.utils import min_version

from dpscaling.cluster import evaluation_resource, train_resource
from dpscaling.figures import ALL_FIGURES
from dpscaling.figures.common import (
    ABLATION as NEEDS_ABLATION,
    ACCOUNTING as NEEDS_ACCOUNTING,
    BOOTSTRAP as NEEDS_BOOTSTRAP,
    FLOOR as NEEDS_FLOOR,
    RESULTS as NEEDS_RESULTS,
)
from dpscaling.grid import ablation_grid, alternation, main_grid, repeat_grid
from dpscaling.workflow import (
    ablation_training,
    check_config,
    check_epochs,
    corpus_spec,
    lock_results,
    output_root,
    validate_config,
    vocab_path,
)

min_version("9.0")


validate_config(config, workflow.source_path("../schemas/config.schema.yaml"))
check_config(config)

RESULTS = output_root(config)


# One running snakemake per results directory (a second one is refused; --nolock skips this, as it
# skips Snakemake's own lock). Jobs spawned by Snakemake run with --no-hooks, so only the main
# process takes it; dry runs and --report do not.
onstart:
    if workflow.execution_settings.lock:
        lock_results(RESULTS)


# Vendored resources are found next to the Snakefile, so --directory works.
CORPUS = corpus_spec(config, repo=workflow.basedir)
# The one-epoch guard, when the data stage's manifest is already there (else each training job checks).
check_epochs(config, CORPUS)
VOCAB = vocab_path(config, repo=workflow.basedir)
# The main grid, plus training.repeat_seeds at training.repeat_points (seed noise for the fit's intervals).
GRID = main_grid(config) + repeat_grid(config)
# The physical-batch ablation's jobs (workflow/rules/ablation.smk): its own target, never in `all`.
ABLATION_GRID = ablation_grid(config)
# Wildcards match the configured values only: the main grid's and the ablation's.
POINTS = GRID + ABLATION_GRID


wildcard_constraints:
    model=alternation(point.model for point in POINTS),
    batch=alternation(point.batch for point in POINTS),
    seed=alternation(point.seed for point in POINTS),
    nbr=alternation(point.noise_batch_ratio for point in POINTS),
    lr=alternation(point.learning_rate for point in POINTS),


RUN = "model={model}/batch={batch}/seed={seed}/nbr={nbr}/lr={lr}"


def run_outputs(pattern, points=GRID):
    """``pattern`` (containing RUN's wildcards) expanded over grid points."""
    return [pattern.format(**point.wildcards) for point in points]


# The rules' helper functions live here (snakemake --lint: no functions beside rules).
TABLE_FILES = {"csv": "{stem}.csv", "md": "{stem}.md", "tex": "{stem}.tex"}


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
    return inputs


def table_outputs(label):
    """CSV (in the report), Markdown and LaTeX files of a paper table."""
    stem = f"{RESULTS}/tables/{label.replace(':', '-')}"
    files = {kind: pattern.format(stem=stem) for kind, pattern in TABLE_FILES.items()}
    files["csv"] = report(
        files["csv"], caption="../report/table.rst", category="Tables"
    )
    return files


def ablation_sizing(name):
    """One resource of an ablation training job: dpscaling.cluster's sizing at the
    ablation's horizon and the job's physical batch."""

    def resource(wildcards, attempt):
        sized = {**config, "training": ablation_training(config, int(wildcards.batch))}
        return train_resource(sized, wildcards.model, name, attempt)

    return resource


def evaluation_sizing(name):
    """One resource of scoring an ablation model (dpscaling.cluster.evaluation_resource)."""

    def resource(wildcards, attempt):
        examples = config["ablation_batch"]["evaluation"]["examples"]
        return evaluation_resource(config, wildcards.model, examples, name, attempt)

    return resource
