from dpscaling.law.collect import collect_to_parquet
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    table = collect_to_parquet(snakemake.input, snakemake.output[0])
    log.info("collected %d measurements from %d runs", len(table), len(snakemake.input))
