import logging
from pathlib import Path

from dpscaling.train.distributed import configure_job

# Before JAX starts its CPU backend: use the cores this job was given (as private_model_train.py).
configure_job(snakemake.threads, snakemake.config["compilation_cache"])

import sys  # noqa: E402

from dpscaling.cluster import relaunch_per_node  # noqa: E402
from dpscaling.logs import log_to_file  # noqa: E402
from dpscaling.private_model import train_twin  # noqa: E402

if (status := relaunch_per_node()) is not None:
    sys.exit(status)

with log_to_file(snakemake.log[0]) as log:
    logging.getLogger("absl").setLevel(logging.WARNING)
    summary = train_twin(
        snakemake.input.plan,
        snakemake.wildcards.twin,
        snakemake.params.models,
        snakemake.params.training,
        snakemake.params.grid_batch,
        Path(snakemake.input.meta).parent,
        snakemake.output[0],
        snakemake.params.checkpoint_dir,
    )
    log.info("study twin: %s", summary)
