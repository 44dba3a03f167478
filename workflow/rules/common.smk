from snakemake.utils import min_version

from dpscaling.grid import alternation, main_grid
from dpscaling.workflow import (
    check_config,
    corpus_spec,
    output_root,
    validate_config,
    vocab_path,
)

min_version("9.0")


validate_config(config, workflow.source_path("../schemas/config.schema.yaml"))
check_config(config)

RESULTS = output_root(config)
# Vendored resources are found next to the Snakefile, so --directory works.
CORPUS = corpus_spec(config, repo=workflow.basedir)
VOCAB = vocab_path(config, repo=workflow.basedir)
GRID = main_grid(config)


wildcard_constraints:
    model=alternation(point.model for point in GRID),
    batch=alternation(point.batch for point in GRID),
    seed=alternation(point.seed for point in GRID),
    nbr=alternation(point.noise_batch_ratio for point in GRID),
    lr=alternation(point.learning_rate for point in GRID),


RUN = "model={model}/batch={batch}/seed={seed}/nbr={nbr}/lr={lr}"


def run_outputs(pattern, points=GRID):
    """``pattern`` (containing RUN's wildcards) expanded over grid points."""
    return [pattern.format(**point.wildcards) for point in points]

