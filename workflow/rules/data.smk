from dataclasses import asdict


rule prepare_documents:
    input:
        corpus_inputs(CORPUS),
    output:
        f"{RESULTS}/data/documents.parquet",
    log:
        f"{RESULTS}/logs/data/prepare_documents.log",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        spec=asdict(CORPUS),
        heldout_fraction=config["data"]["heldout_fraction"],
        seed=config["data"]["split_seed"],
    script:
        "../scripts/prepare_documents.py"


# data.tokenizer 'train': a WordPiece vocabulary of data.vocab_size entries, trained on the train
# split only (docs/data.md); VOCAB is then this rule's output.
rule train_vocabulary:
    input:
        rules.prepare_documents.output[0],
    output:
        f"{RESULTS}/{TRAINED_VOCAB}",
    log:
        f"{RESULTS}/logs/data/train_vocabulary.log",
    conda:
        "../envs/dpscaling.yaml"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        vocab_size=config["data"]["vocab_size"],
    script:
        "../scripts/train_vocabulary.py"


rule pack_sequences:
    input:
        documents=rules.prepare_documents.output[0],
        vocab=VOCAB,
    output:
        meta=f"{RESULTS}/data/packed/meta.json",
        train=directory(f"{RESULTS}/data/packed/train"),
        heldout=directory(f"{RESULTS}/data/packed/heldout"),
    log:
        f"{RESULTS}/logs/data/pack_sequences.log",
    conda:
        "../envs/dpscaling.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        tokenizer=config["data"]["tokenizer"],
        seq_len=config["data"]["seq_len"],
        shard_rows=config["data"]["shard_sequences"],
        source=asdict(CORPUS),
    script:
        "../scripts/pack_sequences.py"


# The floor to beat: held-out unigram entropy under the run's tokenizer (docs/data.md).
rule unigram_floor:
    input:
        **rules.pack_sequences.output,
    output:
        f"{RESULTS}/data/unigram_floor.json",
    log:
        f"{RESULTS}/logs/data/unigram_floor.log",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        # the floor of what the run's models predict (dpscaling.data.floor.TARGETS)
        objective=CFG.models.run_family().objective,
    script:
        "../scripts/unigram_floor.py"


rule data:
    input:
        rules.pack_sequences.output,
        rules.unigram_floor.output,
        RUN_CONFIG,
