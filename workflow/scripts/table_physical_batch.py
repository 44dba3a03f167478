from dpscaling.core.logs import log_to_file
from dpscaling.report.tables.physical_batch import CAPTION, LABEL, train_set_table
from dpscaling.report.tables.write import write_table

with log_to_file(snakemake.log[0]):
    table = train_set_table(snakemake.input.evaluations, snakemake.input.curves)
    write_table(table, snakemake.output.csv.removesuffix(".csv"), CAPTION, LABEL)
