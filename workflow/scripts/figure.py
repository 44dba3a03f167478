from pathlib import Path

from dpscaling.figures import render
from dpscaling.figures.context import load_context
from dpscaling.figures.settings import AnalysisSettings
from dpscaling.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    context = load_context(
        snakemake.input.law,
        AnalysisSettings.from_mapping(snakemake.params.analysis),
        sigma_table=snakemake.input.get("sigma_table"),
        results=snakemake.input.get("results"),
        sampling=snakemake.params.sampling,
        results_format=snakemake.params.results_format,
    )
    written = render(snakemake.wildcards.figure, context, Path(snakemake.output.pdf).with_suffix(""))
    log.info("wrote %s (accounting: %s)", ", ".join(map(str, written)), context.accounting_source)
