from dpscaling.privacy.audit import write_audit
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    summary = write_audit(
        dict(snakemake.params.settings),
        snakemake.params.delta,
        snakemake.output.summary,
        snakemake.output.table,
    )
    log.info(
        "audit: accounted epsilon %s, audited %s; negative control flagged: %s",
        summary["accounted_epsilon"],
        summary["audited_epsilon"],
        summary["audit_has_power"],
    )
