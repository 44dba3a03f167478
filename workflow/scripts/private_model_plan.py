from dpscaling.logs import log_to_file
from dpscaling.private_model import write_plan

with log_to_file(snakemake.log[0]) as log:
    plan = write_plan(
        snakemake.input.law,
        snakemake.params.settings,
        snakemake.params.delta,
        snakemake.wildcards.budget,
        snakemake.params.models,
        snakemake.params.microbatch,
        snakemake.output[0],
        snakemake.input.correction[0] if snakemake.input.correction else None,
        snakemake.params.fixed_sizes,
    )
    log.info("plan: %s", plan)
