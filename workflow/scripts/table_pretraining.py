from dpscaling.core.logs import log_to_file
from dpscaling.report.tables.pretraining import CAPTION, LABEL, pretraining_table
from dpscaling.report.tables.write import write_table

with log_to_file(snakemake.log[0]):
    table = pretraining_table(snakemake.input)
    write_table(table, snakemake.output.csv.removesuffix(".csv"), CAPTION, LABEL)
