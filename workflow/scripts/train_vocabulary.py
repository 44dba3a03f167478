from dpscaling.data.stage import train_vocabulary
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    vocabulary = train_vocabulary(snakemake.input[0], snakemake.params.vocab_size, snakemake.output[0])
    log.info("trained a WordPiece vocabulary of %d entries on the train split (sha256 %s)",
             vocabulary.size, vocabulary.sha256)
