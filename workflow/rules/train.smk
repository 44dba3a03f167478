from dpscaling.cluster import train_resource
from dpscaling.workflow import model_param, training_params


rule train_run:
    input:
        meta=rules.pack_sequences.output.meta,
        train=rules.pack_sequences.output.train,
    output:
        f"{RESULTS}/runs/{RUN}/metrics.parquet",
    log:
        f"{RESULTS}/logs/train/{RUN}.log",
    conda:
        "../envs/dpscaling.yaml"
    threads: config["host_threads"]
    # Sized per model by dpscaling.cluster (GPUs, nodes, host memory and wall time;
    # retries scale memory and time with the attempt); tpu=1: a job owns all local
    # accelerators, so profiles/tpu runs one at a time.
    resources:
        mem_mb=lambda wc, attempt: train_resource(config, wc.model, "mem_mb", attempt),
        runtime=lambda wc, attempt: train_resource(config, wc.model, "runtime", attempt),
        cpus_per_task=lambda wc: train_resource(config, wc.model, "cpus_per_task"),
        nodes=lambda wc: train_resource(config, wc.model, "nodes"),
        gpu=lambda wc: train_resource(config, wc.model, "gpu"),
        gres=lambda wc: train_resource(config, wc.model, "gres"),
        tasks=lambda wc: train_resource(config, wc.model, "tasks"),
        tasks_per_gpu=lambda wc: train_resource(config, wc.model, "tasks_per_gpu"),
        mpi=lambda wc: train_resource(config, wc.model, "mpi"),
        tpu=1,
    params:
        model=lambda wildcards: model_param(config, wildcards.model),
        # Keys added later (Adam's b1, b2, eps; allow_repeats; sampling, truncated_batch_size,
        # accountant, delta) only when not at their defaults.
        training=training_params(config["training"], config["accounting"]["delta"]),
        checkpoint_dir=lambda wildcards: f"{RESULTS}/checkpoints/{RUN}".format(
            **wildcards
        ),
    script:
        "../scripts/train.py"


rule train:
    input:
        run_outputs(f"{RESULTS}/runs/{RUN}/metrics.parquet"),
        RUN_CONFIG,
