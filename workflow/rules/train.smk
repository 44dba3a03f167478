rule train_run:
    input:
        meta=rules.pack_sequences.output.meta,
        train=rules.pack_sequences.output.train,
    output:
        f"{RESULTS}/{RUN_PATHS.curve}",
    log:
        f"{RESULTS}/{RUN_PATHS.log}",
    conda:
        "../envs/dpscaling.yaml"
    threads: config["host_threads"]
    # Sized per model by dpscaling.cluster (GPUs, nodes, host memory and wall time;
    # retries scale memory and time with the attempt; tpu=1: a job owns all local
    # accelerators, so profiles/tpu runs one at a time).
    resources:
        **job_resources(CFG, grid_job),
    params:
        model=lambda wildcards: model_param(CFG, wildcards.model, int(wildcards.seq)),
        # Keys added later (Adam's b1, b2, eps; allow_repeats; sampling, truncated_batch_size,
        # accountant, delta) only when not at their defaults.
        training=training_params(CFG),
        checkpoint_dir=lambda wildcards: f"{RESULTS}/{RUN_PATHS.checkpoints}".format(
            **wildcards
        ),
    script:
        "../scripts/train.py"


rule train:
    input:
        lambda wildcards: run_outputs(f"{RESULTS}/{RUN_PATHS.curve}"),
        RUN_CONFIG,
