from dpscaling.logs import log_to_file
from dpscaling.workflow import write_report

with log_to_file(snakemake.log[0]):
    write_report(snakemake.params.snakefile, snakemake.params.config, snakemake.output[0])
