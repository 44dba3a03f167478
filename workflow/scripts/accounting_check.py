from dpscaling.accounting.interpolation_check import report_interpolation_error
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    summary = report_interpolation_error(snakemake.input[0], snakemake.params.points, snakemake.output[0])
    log.info("interpolation error vs direct calibration: %s", summary)
