ACCOUNTING_SPEC = accounting_spec(CFG)


rule accounting_chunk:
    output:
        f"{RESULTS}/{layout.ACCOUNTING}/{layout.ACCOUNTING_CHUNK}",
    log:
        f"{RESULTS}/{layout.log_path(layout.ACCOUNTING, 'chunk-{chunk}')}",
    wildcard_constraints:
        chunk=r"\d+",
    conda:
        "../envs/dpscaling.yaml"
    threads: 1
    resources:
        mem_mb=lambda wildcards, attempt: 6000 * attempt,
        runtime=lambda wildcards, attempt: 120 * attempt,
    params:
        spec=ACCOUNTING_SPEC,
    script:
        "../scripts/accounting_chunk.py"


rule accounting_table:
    input:
        expand(
            f"{RESULTS}/{layout.ACCOUNTING}/{layout.ACCOUNTING_CHUNK}",
            chunk=accounting_chunks(ACCOUNTING_SPEC),
        ),
    output:
        table=f"{RESULTS}/{layout.ACCOUNTING}/{layout.SIGMA_TABLE}",
        amplified_csv=f"{RESULTS}/{layout.ACCOUNTING}/{layout.AMPLIFIED}",
        unamplified_csv=f"{RESULTS}/{layout.ACCOUNTING}/{layout.UNAMPLIFIED}",
    log:
        f"{RESULTS}/{layout.log_path(layout.ACCOUNTING, 'sigma_table')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=8000,
        runtime=30,
    script:
        "../scripts/accounting_table.py"


rule accounting_check:
    input:
        rules.accounting_table.output.table,
    output:
        f"{RESULTS}/{layout.INTERPOLATION_ERRORS}",
    log:
        f"{RESULTS}/{layout.log_path(layout.ACCOUNTING, 'interpolation_errors')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=6000,
        runtime=60,
    params:
        points=config["accounting"]["check_points"],
    script:
        "../scripts/accounting_check.py"


rule accounting:
    input:
        rules.accounting_table.output,
        rules.accounting_check.output,
        RUN_CONFIG,


# Not in the paper (training.mechanisms with a mechanism other than the primary): each other mechanism's
# sigma table, sigma(eps, T, q; b) on the same grid (docs/mechanisms.md), under accounting/mech=M/.
use rule accounting_chunk as accounting_chunk_for_mechanism with:
    output:
        f"{RESULTS}/{layout.MECHANISM_ACCOUNTING}/{layout.ACCOUNTING_CHUNK}",
    log:
        f"{RESULTS}/{layout.log_path(layout.MECHANISM_ACCOUNTING, 'chunk-{chunk}')}",
    params:
        spec=lambda wildcards: accounting_spec(CFG, wildcards.mech),


use rule accounting_table as accounting_table_for_mechanism with:
    input:
        expand(
            f"{RESULTS}/{layout.MECHANISM_ACCOUNTING}/{layout.ACCOUNTING_CHUNK}",
            chunk=accounting_chunks(ACCOUNTING_SPEC),
            allow_missing=True,
        ),
    output:
        table=f"{RESULTS}/{layout.MECHANISM_SIGMA_TABLE}",
        amplified_csv=f"{RESULTS}/{layout.MECHANISM_ACCOUNTING}/{layout.AMPLIFIED}",
        unamplified_csv=f"{RESULTS}/{layout.MECHANISM_ACCOUNTING}/{layout.UNAMPLIFIED}",
    log:
        f"{RESULTS}/{layout.log_path(layout.MECHANISM_ACCOUNTING, 'sigma_table')}",
