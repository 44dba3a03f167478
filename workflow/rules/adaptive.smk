# The adaptive design (design: adaptive; docs/adaptive-design.md), not in the paper: a seed design, then rounds
# that each fit the law on the runs so far and choose the next ones, as Snakemake checkpoints. Target `adaptive`
# writes the rounds' records, table and figure and the design's law bundle; `adaptive_vs_grid` compares its law
# with the grid's (which it trains).


rule design_train:
    input:
        meta=PRIMARY_PACKED["meta"],
        train=PRIMARY_PACKED["train"],
        # A run past the shortest horizon continues the same run one horizon shorter (dpscaling.train.prefix).
        shorter=lambda wildcards: design_shorter_curve(wildcards),
    output:
        f"{RESULTS}/{DESIGN_RUN_PATHS.curve}",
    log:
        f"{RESULTS}/{DESIGN_RUN_PATHS.log}",
    wildcard_constraints:
        steps=r"\d+",
        seed=r"\d+",  # adaptive_design.repeat_seeds, which the grid's runs may not take
    priority: job_priority(CFG, design_job)
    conda:
        "../envs/dpscaling.yaml"
    threads: config["host_threads"]
    resources:
        **job_resources(CFG, design_job),
    params:
        model=lambda wildcards: model_param(CFG, wildcards.model, PRIMARY_SEQ_LEN),
        training=lambda wildcards: design_training_params(CFG, int(wildcards.steps)),
        checkpoint_dir=lambda wildcards: f"{RESULTS}/{DESIGN_RUN_PATHS.checkpoints}".format(
            **wildcards
        ),
        # Derived from the output, as train_run's: not a params rerun trigger.
        prefixes=lambda wildcards, output: design_prefixes(wildcards, output),
    script:
        "../scripts/train.py"


# Round 0 is the seed design; round R > 0 reads the curves of every run rounds 0..R-1 chose, fits the law and its
# committee, records the answers at the targets and chooses round R's runs, or stops (dpscaling.design.rounds).
checkpoint design_round:
    input:
        unpack(design_round_inputs),
    output:
        f"{RESULTS}/{layout.DESIGN_ROUND}",
    log:
        f"{RESULTS}/{layout.log_path(layout.DESIGN, 'round-{round}')}",
    wildcard_constraints:
        round=r"\d+",
    conda:
        "../envs/dpscaling.yaml"
    threads: 1
    resources:
        mem_mb=8000,
        runtime=120,
    params:
        # The design runs' curve template, filled per run by the script (not by Snakemake: a function).
        curve=lambda wildcards: f"{RESULTS}/{DESIGN_RUN_PATHS.curve}",
        # Whether adaptive_design.rounds stops the design at this round: raising it changes this param of the round
        # that stopped there only, which Snakemake plans again, so a stopped design continues from its records.
        round_limit_stops=lambda wildcards: int(wildcards.round)
        > CFG.adaptive_design.rounds,
    script:
        "../scripts/design_round.py"


rule design_law:
    input:
        records=design_records,
        curves=design_final_curves,
        sigma_table=rules.accounting_table.output.table,
    output:
        results=f"{RESULTS}/{layout.DESIGN_LAW}/{layout.CURVES}",
        law=directory(f"{RESULTS}/{layout.DESIGN_LAW}/{layout.FIT}"),
        bootstrap=f"{RESULTS}/{layout.DESIGN_LAW}/{layout.REPLICATES}",
    log:
        f"{RESULTS}/{layout.log_path(layout.DESIGN, 'law')}",
    conda:
        "../envs/dpscaling.yaml"
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        settings=design_law_settings_json(CFG),
        sampling=config["accounting"]["sampling"],
        bootstrap=config["fit"]["bootstrap"],
        replicates=config["adaptive_design"]["replicates"],
    script:
        "../scripts/design_law.py"


rule design_bundle:
    input:
        law=rules.design_law.output.law,
        bootstrap=rules.design_law.output.bootstrap,
        sigma_table=rules.accounting_table.output.table,
        data_meta=PRIMARY_PACKED["meta"],
    output:
        directory(f"{RESULTS}/{layout.DESIGN_LAW}/{layout.BUNDLE}"),
    log:
        f"{RESULTS}/{layout.log_path(layout.DESIGN, 'bundle')}",
    localrule: True
    conda:
        "../envs/dpscaling.yaml"
    params:
        # Which runs the law stands on: the bundle says it is the design's, not the grid's.
        provenance={**bundle_provenance(CFG), "design": "adaptive"},
    script:
        "../scripts/law_bundle.py"


rule design_report:
    input:
        records=design_records,
    output:
        csv=f"{RESULTS}/{layout.DESIGN_ROUNDS_TABLE}.csv",
        md=f"{RESULTS}/{layout.DESIGN_ROUNDS_TABLE}.md",
        pdf=f"{RESULTS}/{layout.DESIGN_FIGURE}.pdf",
        png=f"{RESULTS}/{layout.DESIGN_FIGURE}.png",
    log:
        f"{RESULTS}/{layout.log_path(layout.DESIGN, 'report')}",
    localrule: True
    conda:
        "../envs/dpscaling.yaml"
    script:
        "../scripts/design_report.py"


rule adaptive:
    input:
        rules.design_bundle.output,
        rules.design_report.output,
        RUN_CONFIG,


# The adaptive law against the grid's: its error on every grid measurement it did not train, beside the grid
# law's on the same ones; the regret of its answers under the grid's law; both designs' FLOPs.
rule adaptive_vs_grid:
    input:
        records=design_records,
        design_results=rules.design_law.output.results,
        design_law=rules.design_law.output.law,
        grid_results=FIT_RESULTS,
        grid_law=rules.fit_law.output[0],
        grid_validation=rules.validate_law.output.data,
        sigma_table=rules.accounting_table.output.table,
    output:
        f"{RESULTS}/{layout.DESIGN_COMPARISON}",
    log:
        f"{RESULTS}/{layout.log_path(layout.DESIGN, 'vs_grid')}",
    localrule: True
    conda:
        "../envs/dpscaling.yaml"
    script:
        "../scripts/design_vs_grid.py"
