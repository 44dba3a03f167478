import logging
from pathlib import Path

from dpscaling.train.distributed import configure_job

# Before JAX starts its backend: use the cores this job was given, not all of them, and the config's
# job settings (compilation cache, deterministic GPU kernels; not params: they never change what a job computes).
configure_job(snakemake.threads, snakemake.config)

from dpscaling.core.io import write_json_atomic  # noqa: E402
from dpscaling.core.logs import log_to_file  # noqa: E402
from dpscaling.train.evaluate import evaluate_checkpoint  # noqa: E402

with log_to_file(snakemake.log[0]) as log:
    logging.getLogger("absl").setLevel(logging.WARNING)
    evaluation = evaluate_checkpoint(
        snakemake.params.checkpoint_dir,
        Path(snakemake.input.meta).parent,
        **snakemake.params.evaluation,
    )
    log.info("%s", evaluation)
    write_json_atomic(snakemake.output[0], evaluation.to_dict())
