import logging
from pathlib import Path

from dpscaling.train.distributed import configure_job

# Before JAX starts its backend: use the cores this job was given, not all of them, and the config's
# job settings (compilation cache, deterministic GPU kernels; not params: they never change what a job computes).
configure_job(snakemake.threads, snakemake.config)

from dpscaling.core.logs import log_to_file  # noqa: E402
from dpscaling.private.savings_plan import train_role  # noqa: E402

with log_to_file(snakemake.log[0]) as log:
    logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every checkpoint step
    summary, scored = train_role(
        snakemake.input.plan,
        snakemake.wildcards.role,
        snakemake.params.models,
        snakemake.params.training,
        Path(snakemake.input.meta).parent,
        snakemake.output.curve,
        snakemake.params.checkpoint_dir,
        snakemake.params.evaluation,
        snakemake.output.evaluation,
    )
    log.info("%s: %s; held-out: %s", snakemake.wildcards.role, summary, scored)
