from dpscaling.law.bootstrap import combine_chunks
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    table = combine_chunks(snakemake.input, snakemake.output[0])
    log.info("%d bootstrap replicates from %d chunks", table["Replicate"].nunique(), len(snakemake.input))
