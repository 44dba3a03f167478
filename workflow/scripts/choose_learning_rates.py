from dpscaling.core.logs import log_to_file
from dpscaling.tuning.stage import run_protocol

with log_to_file(snakemake.log[0]):
    run_protocol(snakemake.config, snakemake.input.curves, snakemake.output.chosen,
                 snakemake.output.csv.removesuffix(".csv"))
