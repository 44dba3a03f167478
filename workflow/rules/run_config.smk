# The effective config of this run (the CPU default or a --configfile, with every unset key
# at its schema default = the paper's value), beside its results. Every named target
# depends on it, so `snakemake <target>` always leaves the config it used in
# results/<run_name>/config.yaml; a config change rewrites only this file.
rule run_config:
    output:
        report(
            f"{RESULTS}/{layout.RUN_CONFIG}",
            caption="../report/config.rst",
            category="Configuration",
        ),
    log:
        f"{RESULTS}/{layout.log_path('', 'run_config')}",
    conda:
        "../envs/dpscaling.yaml"
    params:
        config=config,
    script:
        "../scripts/run_config.py"


RUN_CONFIG = rules.run_config.output[0]
