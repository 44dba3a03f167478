from dpscaling.accounting.reference_csv import export_reference_csv
from dpscaling.accounting.table import SigmaTable, merge_chunks, read_frame, save_table
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    merged = merge_chunks(snakemake.input)
    save_table(merged, snakemake.output.table, read_frame(snakemake.input[0])[1])
    export_reference_csv(SigmaTable(merged), snakemake.output.amplified_csv, snakemake.output.unamplified_csv)
    log.info("sigma table: %d points", len(merged))
