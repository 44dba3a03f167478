from pathlib import Path

from dpscaling.data.public_unigram import write_public_unigram
from dpscaling.data.stage import pack_documents
from dpscaling.data.users import UserSpec
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    meta = pack_documents(
        documents=snakemake.input.documents,
        vocab=snakemake.input.vocab,
        tokenizer_name=snakemake.params.tokenizer,
        seq_len=snakemake.params.seq_len,
        shard_rows=snakemake.params.shard_rows,
        output_dir=Path(snakemake.output.meta).parent,
        source=snakemake.params.source,
        users=UserSpec.from_config(getattr(snakemake.params, "users", None)),
    )
    log.info("packed %d train and %d held-out sequences of %d tokens", meta.n_train, meta.n_heldout, meta.seq_len)
    if meta.users:
        log.info("train users: %d (%s), at most %d sequences each, %d sequences dropped by the cap",
                 meta.users["n_users"], meta.users["unit"], meta.users["examples_per_user"],
                 meta.users["dropped_sequences"])
    if hasattr(snakemake.output, "public_unigram"):  # counted on the public shards (these, or the public domain's)
        packed = Path(snakemake.output.meta).parent
        public = Path(snakemake.input.public_meta).parent if hasattr(snakemake.input, "public_meta") else packed
        unigram = write_public_unigram(public, packed, snakemake.params.objective)
        log.info("counted %d public tokens for the output bias's start", unigram.tokens)
