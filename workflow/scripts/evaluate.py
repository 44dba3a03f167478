import logging
from pathlib import Path

from dpscaling.train.distributed import configure_job

# Before JAX starts its CPU backend: use the cores this job was given, not all of them, and the
# shared compilation cache (read from the config, not a param: it never changes what a job computes).
configure_job(snakemake.threads, snakemake.config["compilation_cache"], snakemake.config["deterministic_gpu_ops"])

from dpscaling.io import write_json_atomic  # noqa: E402
from dpscaling.logs import log_to_file  # noqa: E402
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
