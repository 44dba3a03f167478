from dpscaling.core.io import write_text_atomic
from dpscaling.core.logs import log_to_file
from dpscaling.config.blocks import config_yaml

with log_to_file(snakemake.log[0]):
    write_text_atomic(snakemake.output[0], config_yaml(snakemake.params.config))
