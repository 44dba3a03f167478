from pathlib import Path

from dpscaling.logs import log_to_file
from dpscaling.private_model import report_from_files

with log_to_file(snakemake.log[0]) as log:
    table = report_from_files(
        snakemake.input.law,
        snakemake.input.bootstrap,
        snakemake.input.plans,
        snakemake.input.curves,
        snakemake.input.evaluations,
        snakemake.input.audits,
        snakemake.params.settings,
        Path(snakemake.output.csv).parent,
    )
    log.info("predicted vs achieved:\n%s", table.to_string())
