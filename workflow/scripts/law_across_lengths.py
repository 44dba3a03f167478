from pathlib import Path

from dpscaling.law.sequence_length import load_law_across_lengths, write_lengths
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    target = write_lengths(
        Path(snakemake.output[0]).parent,
        dict(zip(snakemake.params.lengths, snakemake.input.laws)),
    )
    across, _ = load_law_across_lengths(target.parent)  # checks each law's length and mode
    log.info("law across sequence lengths %s: %s", across.lengths, target)
