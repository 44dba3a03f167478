from pathlib import Path

from dpscaling.core.logs import log_to_file
from dpscaling.report.tables.private_model import write_report

with log_to_file(snakemake.log[0]) as log:
    table = write_report(
        snakemake.input,
        snakemake.params.settings,
        Path(snakemake.output.csv).with_suffix(""),
        Path(snakemake.output.pdf).with_suffix(""),
    )
    log.info("predicted vs achieved:\n%s", table.to_string())
