import logging
import sys
from pathlib import Path

from dpscaling.train.distributed import configure_job

# Before JAX starts its backend: use the cores this job was given, not all of them, and the config's
# job settings (compilation cache, deterministic GPU kernels; not params: they never change what a job computes).
configure_job(snakemake.threads, snakemake.config)

from dpscaling.workflow.launch import relaunch_per_node  # noqa: E402
from dpscaling.data.shards import load_meta  # noqa: E402
from dpscaling.core.logs import log_to_file  # noqa: E402
from dpscaling.train import run_training  # noqa: E402
from dpscaling.train.loop import CompiledSteps  # noqa: E402
from dpscaling.train.checkpoint import discard_outdated_checkpoints  # noqa: E402
from dpscaling.train.config import job_train_config  # noqa: E402

# A multi-node Slurm job starts here once, in its batch step: run one copy per
# node under srun (each joins jax.distributed) and exit with its status.
if (status := relaunch_per_node()) is not None:
    sys.exit(status)

# One run, or (training.runs_per_job: shape) the runs of one shape, one after another with one compiled step:
# params.runs holds each run's wildcards that differ from the job's, in the order of the outputs and logs.
runs = snakemake.params.get("runs") or [{}]
checkpoint_dirs = snakemake.params.checkpoint_dir
checkpoint_dirs = [checkpoint_dirs] if isinstance(checkpoint_dirs, str) else checkpoint_dirs
# A run that continues a shorter run of its config (a learning-rate protocol run) maps its curve to that run's
# checkpoint directory (dpscaling.train.prefix).
prefixes = snakemake.params.get("prefixes") or {}
data_dir = Path(snakemake.input.meta).parent
compiled_steps = CompiledSteps()
for run, output, log_file, checkpoint_dir in zip(runs, snakemake.output, snakemake.log, checkpoint_dirs, strict=True):
    with log_to_file(log_file) as log:
        logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every checkpoint step
        config = job_train_config(
            model=snakemake.params.model,
            training=snakemake.params.training,
            wildcards={**dict(snakemake.wildcards), **run},
            seq_len=load_meta(data_dir).seq_len,
        )
        if discard_outdated_checkpoints(checkpoint_dir, config):
            log.info("discarded checkpoints with untrained embedding rows (docs/models.md); retraining")
        run_training(
            config,
            data_dir=data_dir,
            output=Path(output),
            checkpoint_dir=Path(checkpoint_dir),
            compiled_steps=compiled_steps,
            prefix_dir=prefixes.get(output),
        )
