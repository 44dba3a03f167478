from dpscaling.report.figures import ablation_figures
from dpscaling.workflow.grid import (
    ablation_curve_points,
    ablation_eval_points,
    ablation_sweep_points,
)
from dpscaling.report.tables import batch_gap, physical_batch

# The physical-batch ablation (paper appendix "Physical Batch Size Ablation"): target
# ablation_batch, never part of `all` or `figures`. Its jobs live under
# results/<run>/ablation/, apart from the main grid's (other steps, batches and seeds).
ABLATION = config["ablation_batch"]
ABLATION_RUN = f"{RESULTS}/{ABLATION_RUN_PATHS.curve}"
ABLATION_EVALUATION = f"{RESULTS}/{layout.ABLATION_EVALUATIONS}/{ONE_LENGTH_RUN}.json"
# The runs drawn by the figures; the evaluated runs are among them when the sweep's
# learning rates include the ablation's (as in the paper).
ABLATION_FIGURE_RUNS = sorted(
    set(ablation_curve_points(CFG)) | set(ablation_sweep_points(CFG))
)
ABLATION_EVALUATED = ablation_eval_points(CFG)


# The training job with the ablation's horizon, logging and microbatch (the same script), at data.seq_len.
use rule train_run as ablation_run with:
    input:
        meta=PRIMARY_PACKED["meta"],
        train=PRIMARY_PACKED["train"],
    output:
        ABLATION_RUN,
    log:
        f"{RESULTS}/{ABLATION_RUN_PATHS.log}",
    priority: job_priority(CFG, ablation_job)
    resources:
        **job_resources(CFG, ablation_job),
    params:
        model=lambda wildcards: model_param(CFG, wildcards.model),
        training=lambda wildcards: ablation_training(CFG, int(wildcards.batch)),
        checkpoint_dir=lambda wildcards: f"{RESULTS}/{ABLATION_RUN_PATHS.checkpoints}".format(
            **wildcards
        ),


# training.runs_per_job: shape -- every seed of one ablation point in one job (dpscaling.workflow.grid.ablation_seeds_of_one_job).
if ABLATION_SEEDS_OF_ONE_JOB["seed"]:

    ruleorder: ablation_seeds > ablation_run

    use rule ablation_run as ablation_seeds with:
        output:
            paths_of_one_job(ABLATION_RUN, ABLATION_SEEDS_OF_ONE_JOB),
        log:
            paths_of_one_job(
                f"{RESULTS}/{ABLATION_RUN_PATHS.log}", ABLATION_SEEDS_OF_ONE_JOB
            ),
        priority: job_priority(CFG, ABLATION_SEEDS_WORK)
        resources:
            **job_resources(CFG, ABLATION_SEEDS_WORK),
        params:
            model=lambda wildcards: model_param(CFG, wildcards.model),
            training=lambda wildcards: ablation_training(CFG, int(wildcards.batch)),
            checkpoint_dir=lambda wildcards: paths_of_one_job(
                f"{RESULTS}/{ABLATION_RUN_PATHS.checkpoints}",
                ABLATION_SEEDS_OF_ONE_JOB,
                wildcards,
            ),
            runs=runs_of_one_job(ABLATION_SEEDS_OF_ONE_JOB),


rule ablation_curves:
    input:
        run_outputs(ABLATION_RUN, ABLATION_FIGURE_RUNS),
    output:
        f"{RESULTS}/{layout.ABLATION_CURVES}",
    log:
        f"{RESULTS}/{layout.log_path(layout.ABLATION, 'curves')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        ablation=ablation_figure_params(config),
    script:
        "../scripts/ablation_curves.py"


# The final model of one run scored on training sequences (its last orbax checkpoint).
rule ablation_evaluate:
    input:
        meta=PRIMARY_PACKED["meta"],
        train=PRIMARY_PACKED["train"],
        curve=ABLATION_RUN,
    output:
        ABLATION_EVALUATION,
    log:
        f"{RESULTS}/{layout.log_path(layout.ABLATION_EVALUATE_LOGS, ONE_LENGTH_RUN)}",
    priority: job_priority(CFG, ablation_scoring_job)
    conda:
        "../envs/dpscaling.yaml"
    threads: config["host_threads"]
    resources:
        **job_resources(CFG, ablation_scoring_job),
    params:
        checkpoint_dir=lambda wildcards: f"{RESULTS}/{ABLATION_RUN_PATHS.checkpoints}".format(
            **wildcards
        ),
        evaluation=ABLATION["evaluation"],
    script:
        "../scripts/evaluate.py"


rule table_physical_batch:
    input:
        evaluations=run_outputs(ABLATION_EVALUATION, ABLATION_EVALUATED),
        curves=run_outputs(ABLATION_RUN, ABLATION_EVALUATED),
    output:
        **table_outputs(physical_batch.LABEL),
    log:
        f"{RESULTS}/{layout.log_path(layout.TABLES, 'physical_batch')}",
    conda:
        "../envs/dpscaling.yaml"
    params:
        caption=physical_batch.CAPTION,
    script:
        "../scripts/table_physical_batch.py"


# Per noise-batch ratio: the gap between the physical batches' final losses against the seed spread.
rule table_batch_gap:
    input:
        rules.ablation_curves.output,
    output:
        **table_outputs(batch_gap.LABEL),
    log:
        f"{RESULTS}/{layout.log_path(layout.TABLES, 'batch_gap')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        caption=batch_gap.CAPTION,
    script:
        "../scripts/table_batch_gap.py"


rule ablation_batch:
    input:
        expand(
            f"{RESULTS}/{layout.FIGURE}.{{ext}}",
            figure=ablation_figures(model_family(CFG.models, ABLATION["model"]).name),
            ext=["pdf", "png", "csv"],
        ),
        rules.table_physical_batch.output,
        rules.table_batch_gap.output,
        RUN_CONFIG,
