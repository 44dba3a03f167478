# The law's promise measured (docs/savings.md): target `savings`, not part of `all`.
# Per budget: the plan (the law bundle's answer, its re-optimised fractions of C, the baselines and the
# answer's neighbours, each priced as a private run) -> one private training job per run (held-out loss
# included) -> the runs' table, the budgets' table and two figures. The plan is a checkpoint: a fraction
# of C the law cannot answer, or a neighbour that rounds to the answer itself, trains nothing.
# savings.directory names the study's directory (config/worth.yaml keeps a second study beside the first).
SAVINGS_DIRS = layout.savings_paths(config["savings"].get("directory"))
SAVINGS, SAVINGS_BUDGET, SAVINGS_RUN = (f"{RESULTS}/{path}" for path in SAVINGS_DIRS)
SAVINGS_SETTINGS = savings_settings(CFG)
SAVINGS_BUDGETS = [budget.label for budget in SAVINGS_SETTINGS.budgets]


wildcard_constraints:
    savings_budget=alternation(SAVINGS_BUDGETS) if SAVINGS_BUDGETS else "no-budget",
    role=alternation(SAVINGS_SETTINGS.roles()),


checkpoint savings_plan:
    input:
        bundle=rules.law_bundle.output[0],
    output:
        f"{SAVINGS_BUDGET}/{layout.PLAN}",
    log:
        f"{RESULTS}/{layout.log_path(SAVINGS_DIRS[1], 'plan')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        settings=lambda wildcards: savings_plan_settings(CFG, wildcards.savings_budget),
        delta=config["accounting"]["delta"],
        microbatch=config["training"]["microbatch_size"],
    script:
        "../scripts/savings_plan.py"


rule savings_train:
    input:
        plan=f"{SAVINGS_BUDGET}/{layout.PLAN}",
        meta=PRIMARY_PACKED["meta"],
        train=PRIMARY_PACKED["train"],
        heldout=PRIMARY_PACKED["heldout"],
    output:
        curve=f"{SAVINGS_RUN}/{layout.METRICS}",
        evaluation=f"{SAVINGS_RUN}/{layout.EVALUATION}",
    log:
        f"{RESULTS}/{layout.log_path(SAVINGS_DIRS[1], '{role}')}",
    priority: job_priority(CFG, savings_job)
    conda:
        "../envs/dpscaling.yaml"
    threads: config["host_threads"]
    resources:
        **job_resources(CFG, savings_job),
    params:
        models={name: model_param(CFG, name) for name in config["models"]["names"]},
        training=private_training(config["training"]),
        evaluation=config["savings"]["evaluation"],
        checkpoint_dir=lambda wildcards: f"{SAVINGS_RUN}/{layout.CHECKPOINT}".format(
            **wildcards
        ),
    script:
        "../scripts/savings_train.py"


rule savings_report:
    input:
        unpack(savings_runs),
        plans=expand(rules.savings_plan.output[0], savings_budget=SAVINGS_BUDGETS),
        bundle=rules.law_bundle.output[0],
    output:
        runs_csv=f"{SAVINGS}/{layout.SAVINGS_RUNS}.csv",
        runs_md=f"{SAVINGS}/{layout.SAVINGS_RUNS}.md",
        runs_tex=f"{SAVINGS}/{layout.SAVINGS_RUNS}.tex",
        csv=f"{SAVINGS}/{layout.REPORT_TABLE}.csv",
        md=f"{SAVINGS}/{layout.REPORT_TABLE}.md",
        tex=f"{SAVINGS}/{layout.REPORT_TABLE}.tex",
        compare_pdf=f"{SAVINGS}/{layout.BASELINE_COMPARISON}.pdf",
        compare_png=f"{SAVINGS}/{layout.BASELINE_COMPARISON}.png",
        compare_csv=f"{SAVINGS}/{layout.BASELINE_COMPARISON}.csv",
        savings_pdf=f"{SAVINGS}/{layout.SAVINGS_FIGURE}.pdf",
        savings_png=f"{SAVINGS}/{layout.SAVINGS_FIGURE}.png",
        savings_csv=f"{SAVINGS}/{layout.SAVINGS_FIGURE}.csv",
        worth_csv=f"{SAVINGS}/{layout.WORTH}.csv",
        worth_md=f"{SAVINGS}/{layout.WORTH}.md",
        worth_tex=f"{SAVINGS}/{layout.WORTH}.tex",
        regret_pdf=f"{SAVINGS}/{layout.WORTH_FIGURE}.pdf",
        regret_png=f"{SAVINGS}/{layout.WORTH_FIGURE}.png",
        regret_csv=f"{SAVINGS}/{layout.WORTH_FIGURE}.csv",
    log:
        f"{RESULTS}/{layout.log_path(SAVINGS_DIRS[0], 'report')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        window=law_settings(CFG)["rolling_window"],
    script:
        "../scripts/savings_report.py"


rule savings:
    input:
        rules.savings_report.output,
        RUN_CONFIG,
