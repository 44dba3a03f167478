# The learning-rate protocol (paper §3.2 "Learning Rates"; docs/learning-rates.md): with
# training.learning_rates: tuned, one clipped, noise-free run per model and rate of
# learning_rate_protocol.ladder (rule learning_rate_run, the training job's script), the rate chosen per
# model by a stated rule (checkpoint choose_learning_rates), and the grid trained at it: the grid's input
# functions read the choice (workflow/rules/common.smk, grid_points). Target learning_rates.
# learning_rate_protocol.domain: public -- the protocol's runs train on the public domain's packed data (their
# own tree, LR_PROTOCOL_DIR), and no grid run continues them (dpscaling.workflow.grid.protocol_prefix).
LR_PROTOCOL_DATA = (
    {
        name: expand(path, seq=PRIMARY_SEQ_LEN)[0]
        for name, path in rules.pack_public_sequences.output.items()
    }
    if CFG.learning_rate_protocol.public
    else PRIMARY_PACKED
)


use rule train_run as learning_rate_run with:
    input:
        meta=LR_PROTOCOL_DATA["meta"],
        train=LR_PROTOCOL_DATA["train"],
    output:
        f"{RESULTS}/{LR_PROTOCOL_RUN_PATHS.curve}",
    log:
        f"{RESULTS}/{LR_PROTOCOL_RUN_PATHS.log}",
    priority: job_priority(CFG, learning_rate_job)
    resources:
        **job_resources(CFG, learning_rate_job),
    params:
        model=lambda wildcards: model_param(CFG, wildcards.model),
        training=learning_rate_protocol_training(CFG),
        checkpoint_dir=lambda wildcards: f"{RESULTS}/{LR_PROTOCOL_RUN_PATHS.checkpoints}".format(
            **wildcards
        ),


# training.runs_per_job: shape -- each model's whole ladder in one job (dpscaling.workflow.grid.ladder_of_one_job).
if LADDER_OF_ONE_JOB["lr"]:

    ruleorder: learning_rate_ladder > learning_rate_run

    use rule learning_rate_run as learning_rate_ladder with:
        output:
            paths_of_one_job(
                f"{RESULTS}/{LR_PROTOCOL_RUN_PATHS.curve}", LADDER_OF_ONE_JOB
            ),
        log:
            paths_of_one_job(
                f"{RESULTS}/{LR_PROTOCOL_RUN_PATHS.log}", LADDER_OF_ONE_JOB
            ),
        priority: job_priority(CFG, LADDER_WORK)
        resources:
            **job_resources(CFG, LADDER_WORK),
        params:
            model=lambda wildcards: model_param(CFG, wildcards.model),
            training=learning_rate_protocol_training(CFG),
            checkpoint_dir=lambda wildcards: paths_of_one_job(
                f"{RESULTS}/{LR_PROTOCOL_RUN_PATHS.checkpoints}",
                LADDER_OF_ONE_JOB,
                wildcards,
            ),
            runs=runs_of_one_job(LADDER_OF_ONE_JOB),


checkpoint choose_learning_rates:
    input:
        curves=run_outputs(f"{RESULTS}/{LR_PROTOCOL_RUN_PATHS.curve}", LR_PROTOCOL_GRID),
    output:
        **table_outputs("learning-rates"),
        chosen=f"{RESULTS}/{layout.learning_rate_choice(CFG.learning_rate_protocol.domain)}",
    log:
        f"{RESULTS}/{layout.log_path(LR_PROTOCOL_DIR, 'choose')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        # the block and the grid it names (the cost beside it); the curves' order is the protocol grid's
        protocol=learning_rate_choice_params(config),
    script:
        "../scripts/choose_learning_rates.py"


rule learning_rate_figure:
    input:
        table=rules.choose_learning_rates.output.csv,
        floor=rules.unigram_floor.output[0],
    output:
        pdf=report(
            f"{RESULTS}/{layout.LR_FIGURE}.pdf",
            caption="../report/figure.rst",
            category="Figures",
        ),
        png=f"{RESULTS}/{layout.LR_FIGURE}.png",
        data=f"{RESULTS}/{layout.LR_FIGURE}.csv",
    log:
        f"{RESULTS}/{layout.log_path(LR_PROTOCOL_DIR, 'figure')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../scripts/learning_rate_figure.py"


rule learning_rates:
    input:
        rules.choose_learning_rates.output.chosen if TUNED else [],
        rules.learning_rate_figure.output.pdf if TUNED else [],
