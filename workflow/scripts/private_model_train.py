import logging
from pathlib import Path

from dpscaling.train.distributed import configure_job

# Before JAX starts its backend: use the cores this job was given, not all of them, and the config's
# job settings (compilation cache, deterministic GPU kernels; not params: they never change what a job computes).
configure_job(snakemake.threads, snakemake.config)

import sys  # noqa: E402

from dpscaling.workflow.launch import relaunch_per_node  # noqa: E402
from dpscaling.core.logs import log_to_file  # noqa: E402
from dpscaling.private.jobs import train_plan  # noqa: E402

# A multi-node Slurm job starts here once, in its batch step: run one copy per
# node under srun (each joins jax.distributed) and exit with its status.
if (status := relaunch_per_node()) is not None:
    sys.exit(status)

with log_to_file(snakemake.log[0]) as log:
    logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every checkpoint step
    # Rule private_model_twin runs the plan's study twin (its `twin` wildcard); private_model_train the plan.
    summary = train_plan(
        snakemake.input.plan,
        snakemake.params.models,
        snakemake.params.training,
        Path(snakemake.input.meta).parent,
        snakemake.output[0],
        snakemake.params.checkpoint_dir,
        snakemake.wildcards.get("twin"),
        snakemake.params.get("grid_batch"),
    )
    log.info("%s: %s", snakemake.rule, summary)
