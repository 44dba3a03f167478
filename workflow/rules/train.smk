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
    threads: 2
    resources:
        mem_mb=8000,
        runtime=240,
    params:
        model=lambda wildcards: config["models"]["custom"].get(
            wildcards.model, wildcards.model
        ),
        training=config["training"],
        checkpoint_dir=lambda wildcards: f"{RESULTS}/checkpoints/{RUN}".format(
            **wildcards
        ),
    script:
        "../scripts/train.py"


rule train:
    input:
        run_outputs(f"{RESULTS}/runs/{RUN}/metrics.parquet"),
