from dpscaling.core.logs import log_to_file
from dpscaling.report.tables.models import CAPTION, LABEL, models_table
from dpscaling.report.tables.write import write_table

with log_to_file(snakemake.log[0]):
    table = models_table(snakemake.input, snakemake.params.custom)
    write_table(table, snakemake.output.csv.removesuffix(".csv"), CAPTION, LABEL)
