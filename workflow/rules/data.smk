rule prepare_documents:
    input:
        corpus_inputs(CORPUS),
    output:
        f"{RESULTS}/{layout.DOCUMENTS}",
    log:
        f"{RESULTS}/{layout.log_path(layout.DATA, 'prepare_documents')}",
    priority: DATA_PRIORITY
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        spec=CORPUS.record(),
        heldout_fraction=config["data"]["heldout_fraction"],
        seed=config["data"]["split_seed"],
    script:
        "../scripts/prepare_documents.py"


# The public domain (data.public_sources of the same corpus, split the same way).
rule prepare_public_documents:
    input:
        corpus_inputs(CORPUS),
    output:
        f"{RESULTS}/{layout.PUBLIC_DOCUMENTS}",
    log:
        f"{RESULTS}/{layout.log_path(layout.PUBLIC_DATA, 'prepare_documents')}",
    priority: DATA_PRIORITY
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        spec=PUBLIC_CORPUS.record() if PUBLIC_CORPUS else None,
        heldout_fraction=config["data"]["heldout_fraction"],
        seed=config["data"]["split_seed"],
    script:
        "../scripts/prepare_documents.py"


# data.tokenizer 'train': a WordPiece vocabulary of data.vocab_size entries, trained on the train
# split only (docs/data.md); VOCAB is then this rule's output. With a public domain it is trained on the
# public domain's train split: the vocabulary sees no private text.
rule train_vocabulary:
    input:
        (
            rules.prepare_public_documents.output[0]
            if PUBLIC_CORPUS
            else rules.prepare_documents.output[0]
        ),
    output:
        f"{RESULTS}/{layout.TRAINED_VOCAB}",
    log:
        f"{RESULTS}/{layout.log_path(layout.DATA, 'train_vocabulary')}",
    priority: DATA_PRIORITY
    conda:
        "../envs/dpscaling.yaml"
    # One core claimed (the tokenizer's own threads use what is free), as by packing: claiming two, the data
    # chain waited behind the single-core accounting chunks for both cores at once, holding up every training job.
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        vocab_size=config["data"]["vocab_size"],
    script:
        "../scripts/train_vocabulary.py"


# One set of packed shards per sequence length (training.seq_lens; dpscaling.workflow.layout.PACKED). With a public
# domain, the public train split's unigram beside them (dpscaling.data.public_unigram: where
# training.output_bias public_unigram starts the output bias).
# data.users only where set: data packed before users existed stays this rule's output.
rule pack_sequences:
    input:
        **(
            {"public_meta": f"{RESULTS}/{layout.PUBLIC_PACKED}/{layout.PACKED_META}"}
            if PUBLIC_CORPUS
            else {}
        ),
        documents=rules.prepare_documents.output[0],
        vocab=VOCAB,
    output:
        **(
            {"public_unigram": f"{RESULTS}/{layout.PUBLIC_UNIGRAM}"}
            if PUBLIC_CORPUS
            else {}
        ),
        meta=f"{RESULTS}/{layout.PACKED}/{layout.PACKED_META}",
        train=directory(f"{RESULTS}/{layout.PACKED}/{layout.PACKED_TRAIN}"),
        heldout=directory(f"{RESULTS}/{layout.PACKED}/{layout.PACKED_HELDOUT}"),
    log:
        f"{RESULTS}/{layout.PACK_LOG}",
    priority: DATA_PRIORITY
    conda:
        "../envs/dpscaling.yaml"
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        **({"objective": run_family(CFG.models).objective} if PUBLIC_CORPUS else {}),
        **({"users": CFG.data.users.to_mapping()} if CFG.data.users else {}),
        tokenizer=config["data"]["tokenizer"],
        seq_len=lambda wildcards: int(wildcards.seq),
        shard_rows=config["data"]["shard_sequences"],
        source=CORPUS.record(),
    script:
        "../scripts/pack_sequences.py"


# The public domain's shards, packed with the same vocabulary (the pretraining reads them), and their
# unigram beside them (a pretraining run may start its output bias there too).
rule pack_public_sequences:
    input:
        documents=rules.prepare_public_documents.output[0],
        vocab=VOCAB,
    output:
        meta=f"{RESULTS}/{layout.PUBLIC_PACKED}/{layout.PACKED_META}",
        train=directory(f"{RESULTS}/{layout.PUBLIC_PACKED}/{layout.PACKED_TRAIN}"),
        heldout=directory(f"{RESULTS}/{layout.PUBLIC_PACKED}/{layout.PACKED_HELDOUT}"),
        public_unigram=f"{RESULTS}/{layout.PUBLIC_PACKED}/{layout.PUBLIC_UNIGRAM_FILE}",
    log:
        f"{RESULTS}/{layout.PUBLIC_PACK_LOG}",
    priority: DATA_PRIORITY
    conda:
        "../envs/dpscaling.yaml"
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        tokenizer=config["data"]["tokenizer"],
        seq_len=lambda wildcards: int(wildcards.seq),
        shard_rows=config["data"]["shard_sequences"],
        source=PUBLIC_CORPUS.record() if PUBLIC_CORPUS else None,
        objective=run_family(CFG.models).objective,
    script:
        "../scripts/pack_sequences.py"


# The data at the primary length (data.seq_len): what the paper's figures, the ablation and private_model read.
PRIMARY_PACKED = {
    name: expand(path, seq=PRIMARY_SEQ_LEN)[0]
    for name, path in rules.pack_sequences.output.items()
}


# The floor to beat: held-out unigram entropy under the run's tokenizer (docs/data.md), at the primary length.
rule unigram_floor:
    input:
        **PRIMARY_PACKED,
    output:
        f"{RESULTS}/{layout.UNIGRAM_FLOOR}",
    log:
        f"{RESULTS}/{layout.log_path(layout.DATA, 'unigram_floor')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        # the floor of what the run's models predict (dpscaling.data.floor.TARGETS)
        objective=run_family(CFG.models).objective,
    script:
        "../scripts/unigram_floor.py"


rule data:
    input:
        expand(rules.pack_sequences.output, seq=SEQ_LENS),
        expand(rules.pack_public_sequences.output, seq=SEQ_LENS)
        if PUBLIC_CORPUS
        else [],
        rules.unigram_floor.output,
        RUN_CONFIG,
