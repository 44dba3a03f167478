rule train_run:
    input:
        meta=rules.pack_sequences.output.meta,
        train=rules.pack_sequences.output.train,
        # A σ̄ = 0 run at a protocol rate continues the protocol's run, its first steps (dpscaling.train.prefix).
        prefixes=lambda wildcards: protocol_prefix_curves(wildcards),
    output:
        f"{RESULTS}/{RUN_PATHS.curve}",
    log:
        f"{RESULTS}/{RUN_PATHS.log}",
    # The largest jobs first (dpscaling.workflow.cluster.job_priority).
    priority: job_priority(CFG, grid_job)
    conda:
        "../envs/dpscaling.yaml"
    threads: config["host_threads"]
    # Sized per model by dpscaling.workflow.cluster (GPUs, nodes, host memory and wall time;
    # retries scale memory and time with the attempt; tpu=1: a job owns all local
    # accelerators, so profiles/tpu runs one at a time).
    resources:
        **job_resources(CFG, grid_job),
    params:
        model=lambda wildcards: model_param(CFG, wildcards.model, int(wildcards.seq)),
        # Keys added later (Adam's b1, b2, eps; allow_repeats; sampling, truncated_batch_size,
        # accountant, delta) only when not at their defaults.
        training=lambda wildcards: training_params(CFG, wildcards.get("mech")),
        checkpoint_dir=lambda wildcards: f"{RESULTS}/{RUN_PATHS.checkpoints}".format(
            **wildcards
        ),
        # Derived from the outputs (their paths are its keys), so not a params rerun trigger of any run.
        prefixes=lambda wildcards, output: protocol_prefixes(wildcards),
    script:
        "../scripts/train.py"


# training.runs_per_job: shape -- every noise level of one (mechanism, length, model, rate) of the main seed at
# the physical batch in one job (dpscaling.workflow.grid.noise_levels_of_one_job); the other runs stay train_run's.
if NOISE_LEVELS_OF_ONE_JOB["nbr"]:

    ruleorder: train_noise_levels > train_run

    rule train_noise_levels:
        input:
            meta=rules.pack_sequences.output.meta,
            train=rules.pack_sequences.output.train,
            prefixes=lambda wildcards: protocol_prefix_curves(
                wildcards, runs_of_one_job(NOISE_LEVELS_OF_ONE_JOB)
            ),
        output:
            paths_of_one_job(f"{RESULTS}/{RUN_PATHS.curve}", NOISE_LEVELS_OF_ONE_JOB),
        log:
            paths_of_one_job(f"{RESULTS}/{RUN_PATHS.log}", NOISE_LEVELS_OF_ONE_JOB),
        wildcard_constraints:
            seed=GRID_SEED,
            batch=GRID_BATCH,
        priority: job_priority(CFG, NOISE_LEVELS_WORK)
        conda:
            "../envs/dpscaling.yaml"
        threads: config["host_threads"]
        resources:
            **job_resources(CFG, NOISE_LEVELS_WORK),
        params:
            model=lambda wildcards: model_param(
                CFG, wildcards.model, int(wildcards.seq)
            ),
            training=lambda wildcards: training_params(CFG, wildcards.get("mech")),
            checkpoint_dir=lambda wildcards: paths_of_one_job(
                f"{RESULTS}/{RUN_PATHS.checkpoints}",
                NOISE_LEVELS_OF_ONE_JOB,
                wildcards,
            ),
            runs=runs_of_one_job(NOISE_LEVELS_OF_ONE_JOB),
            prefixes=lambda wildcards, output: protocol_prefixes(
                wildcards, runs_of_one_job(NOISE_LEVELS_OF_ONE_JOB)
            ),
        script:
            "../scripts/train.py"


rule train:
    input:
        lambda wildcards: run_outputs(f"{RESULTS}/{RUN_PATHS.curve}"),
        RUN_CONFIG,
