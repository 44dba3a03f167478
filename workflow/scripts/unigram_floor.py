from pathlib import Path

from dpscaling.data.floor import unigram_floor, write_floor
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    floor = unigram_floor(Path(snakemake.input.meta).parent, snakemake.params.objective)
    write_floor(floor, snakemake.output[0])
    log.info("held-out unigram entropy %.4f nats over %d held-out tokens", floor.nats, floor.heldout_tokens)
