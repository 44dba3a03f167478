rule accounting_table:
    output:
        f"{RESULTS}/accounting/sigma_table.parquet",
    log:
        f"{RESULTS}/logs/accounting/sigma_table.log",
    conda:
        "../envs/dpscaling.yaml"
    params:
        message=not_built_message("accounting", 4),
    script:
        "../scripts/not_built.py"


rule accounting:
    input:
        rules.accounting_table.output,
