# Close the loop (docs/private-training.md "Closing the loop"): target `private_model`.
# Per budget: the law's compute-optimal configuration -> a private (truncated Poisson) training job on
# exactly N sequences -> its held-out loss and a matched audit; then one table and one figure.
from dpscaling.private.jobs import TWINS, private_training
from dpscaling.private.model import budgets as private_budgets

PRIVATE = f"{RESULTS}/{layout.PRIVATE_MODEL}"
PRIVATE_BUDGET = f"{RESULTS}/{layout.PRIVATE_BUDGET}"
PRIVATE_BUDGET_LIST = private_budgets(
    config["private_model"], config["accounting"]["delta"]
)
PRIVATE_BUDGETS = [budget.label for budget in PRIVATE_BUDGET_LIST]
# Budgets fine-tuned from the pretrained checkpoints (docs/finetune.md): planned by the fine-tuning law,
# reported beside it; the others are planned by the grid's law.
PRETRAINED_BUDGETS = [
    budget.label for budget in PRIVATE_BUDGET_LIST if budget.pretrained
]
SCRATCH_BUDGETS = [
    budget.label for budget in PRIVATE_BUDGET_LIST if not budget.pretrained
]
# Budgets per user (docs/private-training.md, "A budget per user"): planned on the users of the packed data.
USER_BUDGETS = [budget.label for budget in PRIVATE_BUDGET_LIST if budget.per_user]
# Budgets that name a noise mechanism (or choose one): planned from law/mechanisms (docs/mechanisms.md).
MECHANISM_BUDGETS = [
    budget.label for budget in PRIVATE_BUDGET_LIST if budget.mechanism is not None
]


wildcard_constraints:
    budget=alternation(PRIVATE_BUDGETS) if PRIVATE_BUDGETS else "no-budget",
    twin=alternation(TWINS),


rule private_model_plan:
    input:
        law=private_plan_law,
        sigma_table=SIGMA_TABLE,
        correction=private_plan_correction,
        users=private_plan_users,
    output:
        f"{PRIVATE_BUDGET}/{layout.PLAN}",
    log:
        f"{RESULTS}/{layout.log_path(layout.PRIVATE_BUDGET, 'plan')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        settings=config["private_model"],
        delta=config["accounting"]["delta"],
        models=config["models"]["names"],
        microbatch=config["training"]["microbatch_size"],
        # the parameter count of every model a budget's configuration may name (docs/query.md)
        fixed_sizes=lambda wildcards: private_model_sizes(CFG, wildcards.budget),
        seed=config["training"]["seed"],
    script:
        "../scripts/private_model_plan.py"


rule private_model_train:
    input:
        plan=rules.private_model_plan.output[0],
        meta=PRIMARY_PACKED["meta"],
        train=PRIMARY_PACKED["train"],
    output:
        f"{PRIVATE_BUDGET}/{layout.METRICS}",
    log:
        f"{RESULTS}/{layout.log_path(layout.PRIVATE_BUDGET, 'train')}",
    priority: job_priority(CFG, private_training_job)
    conda:
        "../envs/dpscaling.yaml"
    threads: config["host_threads"]
    resources:
        **job_resources(CFG, private_training_job),
    params:
        models=lambda wildcards: {
            name: model_param(CFG, name)
            for name in private_model_models(CFG, wildcards.budget)
        },
        training=private_budget_training,
        checkpoint_dir=lambda wildcards: f"{PRIVATE_BUDGET}/{layout.CHECKPOINT}".format(
            **wildcards
        ),
    script:
        "../scripts/private_model_train.py"


# The cause split: the plan retrained in study mode (shuffled batches, its sigma-bar as the study's noise)
# at the grid's physical batch and at the plan's B (docs/private-training.md "Why a prediction misses").
rule private_model_twin:
    input:
        plan=rules.private_model_plan.output[0],
        meta=PRIMARY_PACKED["meta"],
        train=PRIMARY_PACKED["train"],
    output:
        f"{PRIVATE_BUDGET}/{layout.TWIN}/{layout.METRICS}",
    log:
        f"{RESULTS}/{layout.log_path(layout.PRIVATE_BUDGET, layout.TWIN)}",
    priority: job_priority(CFG, private_training_job)
    conda:
        "../envs/dpscaling.yaml"
    threads: config["host_threads"]
    resources:
        **job_resources(CFG, private_training_job),
    params:
        models=lambda wildcards: {
            name: model_param(CFG, name)
            for name in private_model_models(CFG, wildcards.budget)
        },
        training=private_budget_training,
        grid_batch=config["training"]["physical_batch"],
        checkpoint_dir=lambda wildcards: f"{PRIVATE_BUDGET}/{layout.TWIN}/{layout.CHECKPOINT}".format(
            **wildcards
        ),
    script:
        "../scripts/private_model_train.py"


rule private_model_evaluate:
    input:
        plan=rules.private_model_plan.output[0],
        meta=PRIMARY_PACKED["meta"],
        heldout=PRIMARY_PACKED["heldout"],
        curve=rules.private_model_train.output[0],
    output:
        f"{PRIVATE_BUDGET}/{layout.EVALUATION}",
    log:
        f"{RESULTS}/{layout.log_path(layout.PRIVATE_BUDGET, 'evaluate')}",
    priority: job_priority(CFG, private_scoring_job)
    conda:
        "../envs/dpscaling.yaml"
    threads: config["host_threads"]
    resources:
        **job_resources(CFG, private_scoring_job),
    params:
        checkpoint_dir=lambda wildcards: f"{PRIVATE_BUDGET}/{layout.CHECKPOINT}".format(
            **wildcards
        ),
        evaluation={**config["private_model"]["evaluation"], "split": "heldout"},
    script:
        "../scripts/evaluate.py"


rule private_model_audit:
    input:
        plan=rules.private_model_plan.output[0],
    output:
        summary=f"{PRIVATE_BUDGET}/{layout.PRIVATE_AUDIT}",
        table=f"{PRIVATE_BUDGET}/{layout.PRIVATE_AUDIT_TABLE}",
    log:
        f"{RESULTS}/{layout.log_path(layout.PRIVATE_BUDGET, 'audit')}",
    conda:
        "../envs/dpscaling.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        audit=config["audit"],
        microbatch=config["training"]["microbatch_size"],
        # a correlated mechanism's strategy criterion, as its private run optimises it
        strategy=config["training"].get("bandmf_strategy"),
    script:
        "../scripts/private_model_audit.py"


rule private_model_report:
    input:
        law=rules.fit_law.output[0],
        bootstrap=BOOTSTRAP,
        plans=expand(rules.private_model_plan.output[0], budget=SCRATCH_BUDGETS),
        curves=expand(rules.private_model_train.output[0], budget=SCRATCH_BUDGETS),
        evaluations=expand(
            rules.private_model_evaluate.output[0], budget=SCRATCH_BUDGETS
        ),
        audits=expand(rules.private_model_audit.output.summary, budget=SCRATCH_BUDGETS),
        twins=private_twin_curves(SCRATCH_BUDGETS),
        correction=CORRECTION,
        calibration=rules.validate_law.output.calibration,
        # Budgets that name a mechanism are predicted by that mechanism's law.
        mechanisms=rules.law_bundle.output[0] if MECHANISM_BUDGETS else [],
    output:
        csv=f"{PRIVATE}/{layout.REPORT_TABLE}.csv",
        md=f"{PRIVATE}/{layout.REPORT_TABLE}.md",
        tex=f"{PRIVATE}/{layout.REPORT_TABLE}.tex",
        pdf=f"{PRIVATE}/{layout.PREDICTED_VS_ACHIEVED}.pdf",
        png=f"{PRIVATE}/{layout.PREDICTED_VS_ACHIEVED}.png",
        data=f"{PRIVATE}/{layout.PREDICTED_VS_ACHIEVED}.csv",
    log:
        f"{RESULTS}/{layout.log_path(layout.PRIVATE_MODEL, 'report')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        settings=law_settings(CFG),
    script:
        "../scripts/private_model_report.py"


# The fine-tuned budgets' report is finetune_private_model_report (finetune.smk), beside the fine-tuning law.
rule private_model:
    input:
        rules.private_model_report.output
        if SCRATCH_BUDGETS or not PRETRAINED_BUDGETS
        else [],
        lambda wildcards: (
            rules.finetune_private_model_report.output if PRETRAINED_BUDGETS else []
        ),
        RUN_CONFIG,
