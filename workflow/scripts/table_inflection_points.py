from dpscaling.report.figures.context import load_context
from dpscaling.report.figures.settings import AnalysisSettings
from dpscaling.core.logs import log_to_file
from dpscaling.report.tables.inflection_points import CAPTION, LABEL, inflection_points_table
from dpscaling.report.tables.write import write_table

with log_to_file(snakemake.log[0]):
    context = load_context(
        snakemake.input.law,
        AnalysisSettings.from_mapping(snakemake.params.analysis),
        sigma_table=snakemake.input.sigma_table,
        sampling=snakemake.params.sampling,
    )
    table = inflection_points_table(context)
    write_table(table, snakemake.output.csv.removesuffix(".csv"), CAPTION, LABEL)
