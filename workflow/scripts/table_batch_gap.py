from dpscaling.report.figures.physical_batch import load_ablation_context
from dpscaling.core.logs import log_to_file
from dpscaling.report.tables.batch_gap import CAPTION, LABEL, batch_gap_table
from dpscaling.report.tables.write import write_table

with log_to_file(snakemake.log[0]) as log:
    table = batch_gap_table(load_ablation_context(snakemake.input[0]).curves)
    write_table(table, snakemake.output.csv.removesuffix(".csv"), CAPTION, LABEL)
    log.info("%s", table.to_string(index=False))
