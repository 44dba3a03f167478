rule fit_law:
    input:
        rules.train.input,
        rules.accounting.input,
    output:
        f"{RESULTS}/law/law.json",
    log:
        f"{RESULTS}/logs/fit/law.log",
    conda:
        "../envs/dpscaling.yaml"
    params:
        message=not_built_message("fit", 5),
    script:
        "../scripts/not_built.py"


rule fit:
    input:
        rules.fit_law.output,
