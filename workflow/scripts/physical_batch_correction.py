from dpscaling.law.physical_batch import correction_from_files
from dpscaling.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    correction = correction_from_files(
        list(snakemake.input),
        snakemake.params.grid_batch,
        snakemake.params.warmup_steps,
        snakemake.output.correction,
        snakemake.output.pairs,
    )
    log.info("physical-batch correction: %s", correction)
