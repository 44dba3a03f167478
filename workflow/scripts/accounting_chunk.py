from dpscaling.accounting import TableSpec
from dpscaling.accounting.table import chunk_by_index, compute_chunk, save_table
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    spec = TableSpec.from_mapping(snakemake.params.spec)
    frame = compute_chunk(spec, chunk_by_index(spec, int(snakemake.wildcards.chunk)))
    save_table(frame, snakemake.output[0], spec)
    log.info("%d points, %d refused", len(frame), int((frame["status"] != "ok").sum()))
