from dpscaling.design.rounds import compare_with_grid
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    given = snakemake.input
    report = compare_with_grid(
        snakemake.config,
        given.records,
        given.grid_results,
        given.grid_law,
        given.design_law,
        given.sigma_table,
        snakemake.output[0],
        given.grid_validation,
    )
    log.info("adaptive design against the grid: %s", report)
