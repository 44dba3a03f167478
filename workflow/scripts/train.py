from pathlib import Path

from dpscaling.logs import log_to_file
from dpscaling.train import run_training
from dpscaling.workflow import train_config

with log_to_file(snakemake.log[0]):
    run_training(
        train_config(
            model=snakemake.params.model,
            training=snakemake.params.training,
            wildcards=dict(snakemake.wildcards),
        ),
        data_dir=Path(snakemake.input.meta).parent,
        output=Path(snakemake.output[0]),
        checkpoint_dir=Path(snakemake.params.checkpoint_dir),
    )
