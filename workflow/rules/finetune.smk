# DP fine-tuning from public pretraining (docs/finetune.md): target finetune, only with a finetune block.
# Every model is pretrained without privacy on the public domain (rule pretrain, resumable like any
# training job), then fine-tuned with DP-Adam on the private domain from the pretrained weights over
# model x noise-batch ratio x finetune.learning_rates (rule finetune_run). Both run at data.seq_len and
# live under results/<run>/pretrain/ and results/<run>/finetune/, apart from the grid's runs.
from dpscaling.findings import finetune as finetune_findings
from dpscaling.report.figures.finetune import NAME as FINETUNE_FIGURE
from dpscaling.report.tables import pretraining


# The training job (the same script) on the public domain's shards, without clipping or noise.
use rule train_run as pretrain with:
    input:
        meta=f"{RESULTS}/{layout.PUBLIC_PACKED}/{layout.PACKED_META}".format(
            seq=PRIMARY_SEQ_LEN
        ),
        train=f"{RESULTS}/{layout.PUBLIC_PACKED}/{layout.PACKED_TRAIN}".format(
            seq=PRIMARY_SEQ_LEN
        ),
    output:
        f"{RESULTS}/{PRETRAIN_RUN_PATHS.curve}",
    log:
        f"{RESULTS}/{PRETRAIN_RUN_PATHS.log}",
    priority: job_priority(CFG, pretrain_job)
    resources:
        **job_resources(CFG, pretrain_job),
    params:
        model=lambda wildcards: model_param(CFG, wildcards.model),
        training=lambda wildcards: pretrain_training(CFG),
        checkpoint_dir=lambda wildcards: f"{RESULTS}/{PRETRAIN_RUN_PATHS.checkpoints}".format(
            **wildcards
        ),


# The training job on the private domain, its first step from the pretrained parameters (fresh Adam).
use rule train_run as finetune_run with:
    input:
        meta=PRIMARY_PACKED["meta"],
        train=PRIMARY_PACKED["train"],
        pretrained=pretrained_curve,
    output:
        f"{RESULTS}/{FINETUNE_RUN_PATHS.curve}",
    log:
        f"{RESULTS}/{FINETUNE_RUN_PATHS.log}",
    priority: job_priority(CFG, finetune_job)
    resources:
        **job_resources(CFG, finetune_job),
    params:
        model=lambda wildcards: model_param(CFG, wildcards.model),
        training=lambda wildcards: finetune_training(
            CFG, pretrained_checkpoint(wildcards.model)
        ),
        checkpoint_dir=lambda wildcards: f"{RESULTS}/{FINETUNE_RUN_PATHS.checkpoints}".format(
            **wildcards
        ),


# training.runs_per_job: shape -- a model's fine-tuning noise levels at one rate in one job
# (dpscaling.workflow.grid.finetune_noise_levels_of_one_job).
if FINETUNE_NOISE_LEVELS_OF_ONE_JOB["nbr"]:

    ruleorder: finetune_noise_levels > finetune_run

    use rule finetune_run as finetune_noise_levels with:
        output:
            paths_of_one_job(
                f"{RESULTS}/{FINETUNE_RUN_PATHS.curve}",
                FINETUNE_NOISE_LEVELS_OF_ONE_JOB,
            ),
        log:
            paths_of_one_job(
                f"{RESULTS}/{FINETUNE_RUN_PATHS.log}", FINETUNE_NOISE_LEVELS_OF_ONE_JOB
            ),
        priority: job_priority(CFG, FINETUNE_NOISE_LEVELS_WORK)
        resources:
            **job_resources(CFG, FINETUNE_NOISE_LEVELS_WORK),
        params:
            model=lambda wildcards: model_param(CFG, wildcards.model),
            training=lambda wildcards: finetune_training(
                CFG, pretrained_checkpoint(wildcards.model)
            ),
            checkpoint_dir=lambda wildcards: paths_of_one_job(
                f"{RESULTS}/{FINETUNE_RUN_PATHS.checkpoints}",
                FINETUNE_NOISE_LEVELS_OF_ONE_JOB,
                wildcards,
            ),
            runs=runs_of_one_job(FINETUNE_NOISE_LEVELS_OF_ONE_JOB),


# The fine-tuning law: the paper's pipeline (collect, fit) on the fine-tuning curves, its compute the
# fine-tuning's own 6MBST (the pretraining is public and sunk).
FINETUNE_LAW_DIR = f"{RESULTS}/{layout.FINETUNE_LAW}"


use rule collect_curves as finetune_collect_curves with:
    input:
        run_outputs(f"{RESULTS}/{FINETUNE_RUN_PATHS.curve}", FINETUNE_GRID),
    output:
        f"{FINETUNE_LAW_DIR}/{layout.CURVES}",
    log:
        f"{RESULTS}/{layout.log_path(layout.FINETUNE_LAW_LOGS, 'collect_curves')}",


use rule fit_law as finetune_fit_law with:
    input:
        results=rules.finetune_collect_curves.output[0],
    output:
        directory(f"{FINETUNE_LAW_DIR}/{layout.FIT}"),
    log:
        f"{RESULTS}/{layout.log_path(layout.FINETUNE_LAW_LOGS, 'fit_law')}",


# The fine-tuning law's held-out validation and calibrated intervals (validate_law on its curves), beside it.
use rule validate_law as finetune_validate_law with:
    input:
        results=rules.finetune_collect_curves.output[0],
    output:
        **validation_outputs(f"{RESULTS}/{layout.FINETUNE}{layout.CALIBRATION}"),
    log:
        f"{RESULTS}/{layout.log_path(layout.FINETUNE_LAW_LOGS, 'validate')}",
    params:
        modes=validation_modes(CFG),
        results_format="dpscaling",
        caption=validation.CAPTION,
        coverage_caption=calibration.CAPTION,
        replicates=config["fit"]["validation"]["replicates"],
        seed=config["fit"]["bootstrap"]["seed"],
        interval_scale=config["fit"]["validation"]["interval_scale"],


# The fine-tuning law's bundle: its answers search the pretrained models only and name the checkpoint
# each starts from (docs/finetune.md).
use rule law_bundle as finetune_law_bundle with:
    input:
        law=rules.finetune_fit_law.output[0],
        sigma_table=rules.accounting_table.output.table,
        bootstrap=[],
        calibration=rules.finetune_validate_law.output.calibration,
        correction=[],
        lengths=[],
        data_meta=PRIMARY_PACKED["meta"],
    output:
        directory(f"{FINETUNE_LAW_DIR}/{layout.BUNDLE}"),
    log:
        f"{RESULTS}/{layout.log_path(layout.FINETUNE_LAW_LOGS, 'law_bundle')}",
    params:
        provenance=(
            finetune_bundle_provenance(
                CFG, {name: pretrained_checkpoint(name) for name in CFG.models.names}
            )
            if CFG.finetune
            else {}
        ),


# What changes against training from scratch on the same private data (docs/finetune.md "What changes"):
# the paper's findings on the fine-tuning law, the comparison at equal (C, eps, N), and its figure.
rule finetune_findings:
    input:
        scratch_law=LAW,
        scratch_results=FIT_RESULTS,
        finetune_law=rules.finetune_fit_law.output[0],
        finetune_results=rules.finetune_collect_curves.output[0],
        sigma_table=SIGMA_TABLE,
        # the pretraining curves: each model's D_pre, for the answers that pay it from C
        pretraining=run_outputs(f"{RESULTS}/{PRETRAIN_RUN_PATHS.curve}", PRETRAIN_GRID),
    output:
        **table_outputs(finetune_findings.LABEL),
        comparison=f"{RESULTS}/{layout.table(finetune_findings.COMPARISON_LABEL)}.csv",
        comparison_md=f"{RESULTS}/{layout.table(finetune_findings.COMPARISON_LABEL)}.md",
        comparison_tex=f"{RESULTS}/{layout.table(finetune_findings.COMPARISON_LABEL)}.tex",
        figure=f"{RESULTS}/{layout.FIGURES}/{FINETUNE_FIGURE}.pdf",
        figure_png=f"{RESULTS}/{layout.FIGURES}/{FINETUNE_FIGURE}.png",
        figure_data=f"{RESULTS}/{layout.FIGURES}/{FINETUNE_FIGURE}.csv",
    log:
        f"{RESULTS}/{layout.log_path(layout.TABLES, 'finetune_findings')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=6000,
        runtime=30,
    params:
        analysis=ANALYSIS,
        sampling=config["accounting"]["sampling"],
    script:
        "../scripts/finetune_findings.py"


# private_model's budgets fine-tuned from the pretrained checkpoints (pretrained: true), reported against
# the fine-tuning law's prediction and its calibrated interval (docs/finetune.md "Trained privately").
FINETUNE_PRIVATE = f"{RESULTS}/{layout.FINETUNE_PRIVATE_MODEL}"


use rule private_model_report as finetune_private_model_report with:
    input:
        law=rules.finetune_fit_law.output[0],
        bootstrap=[],
        plans=expand(rules.private_model_plan.output[0], budget=PRETRAINED_BUDGETS),
        curves=expand(rules.private_model_train.output[0], budget=PRETRAINED_BUDGETS),
        evaluations=expand(
            rules.private_model_evaluate.output[0], budget=PRETRAINED_BUDGETS
        ),
        audits=expand(
            rules.private_model_audit.output.summary, budget=PRETRAINED_BUDGETS
        ),
        twins=private_twin_curves(PRETRAINED_BUDGETS),
        correction=[],
        calibration=rules.finetune_validate_law.output.calibration,
    output:
        csv=f"{FINETUNE_PRIVATE}/{layout.REPORT_TABLE}.csv",
        md=f"{FINETUNE_PRIVATE}/{layout.REPORT_TABLE}.md",
        tex=f"{FINETUNE_PRIVATE}/{layout.REPORT_TABLE}.tex",
        pdf=f"{FINETUNE_PRIVATE}/{layout.PREDICTED_VS_ACHIEVED}.pdf",
        png=f"{FINETUNE_PRIVATE}/{layout.PREDICTED_VS_ACHIEVED}.png",
        data=f"{FINETUNE_PRIVATE}/{layout.PREDICTED_VS_ACHIEVED}.csv",
    log:
        f"{RESULTS}/{layout.log_path(layout.FINETUNE_PRIVATE_MODEL, 'report')}",


# What the pretraining cost, beside the law (its compute is not the law's).
rule table_pretraining:
    input:
        run_outputs(f"{RESULTS}/{PRETRAIN_RUN_PATHS.curve}", PRETRAIN_GRID),
    output:
        **table_outputs(pretraining.LABEL),
    log:
        f"{RESULTS}/{layout.log_path(layout.TABLES, 'pretraining')}",
    conda:
        "../envs/dpscaling.yaml"
    script:
        "../scripts/table_pretraining.py"


rule finetune:
    input:
        run_outputs(f"{RESULTS}/{FINETUNE_RUN_PATHS.curve}", FINETUNE_GRID),
        rules.finetune_fit_law.output,
        rules.finetune_validate_law.output,
        rules.finetune_law_bundle.output,
        rules.finetune_findings.output,
        rules.table_pretraining.output if PRETRAIN_GRID else [],
