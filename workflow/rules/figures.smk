rule make_figures:
    input:
        rules.fit.input,
    output:
        f"{RESULTS}/figures/index.json",
    log:
        f"{RESULTS}/logs/figures/figures.log",
    conda:
        "../envs/dpscaling.yaml"
    params:
        message=not_built_message("figures", 6),
    script:
        "../scripts/not_built.py"


rule make_tables:
    input:
        rules.fit.input,
    output:
        f"{RESULTS}/tables/index.json",
    log:
        f"{RESULTS}/logs/tables/tables.log",
    conda:
        "../envs/dpscaling.yaml"
    params:
        message=not_built_message("tables", 6),
    script:
        "../scripts/not_built.py"


rule figures:
    input:
        rules.make_figures.output,


rule tables:
    input:
        rules.make_tables.output,


rule report:
    input:
        rules.figures.input,
        rules.tables.input,
