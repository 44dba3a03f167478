# The one-run privacy audit of the private training step (docs/private-training.md, "Audit"): target `audit`.


rule audit:
    output:
        summary=f"{RESULTS}/{layout.AUDIT_SUMMARY}",
        table=f"{RESULTS}/{layout.AUDIT_TABLE}",
    log:
        f"{RESULTS}/{layout.log_path(layout.AUDIT, 'audit')}",
    conda:
        "../envs/dpscaling.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        settings=config["audit"],
        delta=config["accounting"]["delta"],
    script:
        "../scripts/audit.py"
