from dpscaling.core.logs import log_to_file
from dpscaling.private.savings_plan import write_savings_plan

with log_to_file(snakemake.log[0]) as log:
    plan = write_savings_plan(
        snakemake.input.bundle,
        snakemake.params.settings,
        snakemake.params.delta,
        snakemake.wildcards.savings_budget,
        snakemake.params.microbatch,
        snakemake.output[0],
    )
    log.info("savings plan: %s", plan)
