from dpscaling.report.figures.physical_batch import write_ablation_curves
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    table = write_ablation_curves(
        snakemake.input, {"ablation_batch": snakemake.params.ablation}, snakemake.output[0]
    )
    log.info("collected %d measurements from %d runs", len(table), len(snakemake.input))
