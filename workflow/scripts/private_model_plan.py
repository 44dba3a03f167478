from pathlib import Path

from dpscaling.core.logs import log_to_file
from dpscaling.private.model import write_plan

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
        # a budget per user: the packed data whose users it trains on
        Path(snakemake.input.users[0]).parent if snakemake.input.users else None,
        snakemake.params.seed,
    )
    log.info("plan: %s", plan)
