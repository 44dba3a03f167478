from dpscaling.core.logs import log_to_file
from dpscaling.private.jobs import audit_budget

with log_to_file(snakemake.log[0]) as log:
    summary = audit_budget(
        snakemake.input.plan,
        snakemake.params.audit,
        snakemake.params.microbatch,
        snakemake.output.summary,
        snakemake.output.table,
        snakemake.params.strategy,
    )
    log.info("matched audit: %s", summary)
