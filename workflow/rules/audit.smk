# The one-run privacy audit of the private training step (docs/private-training.md, "Audit"): target `audit`.


rule audit:
    output:
        summary=f"{RESULTS}/audit/audit.json",
        table=f"{RESULTS}/audit/audit.csv",
    log:
        f"{RESULTS}/logs/audit/audit.log",
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
