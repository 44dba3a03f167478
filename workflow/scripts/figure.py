from pathlib import Path

from dpscaling.report.figures import render
from dpscaling.report.figures.context import load_context
from dpscaling.report.figures.physical_batch import load_ablation_context
from dpscaling.report.figures.settings import AnalysisSettings
from dpscaling.law.bootstrap import NO_REPEATS
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    if "ablation" in snakemake.input.keys():  # the ablation's figures: its own curves only
        context = load_ablation_context(snakemake.input.ablation)
        source = "none (ablation curves)"
    else:
        context = load_context(
            snakemake.input.law,
            AnalysisSettings.from_mapping(snakemake.params.analysis),
            sigma_table=snakemake.input.get("sigma_table"),
            results=snakemake.input.get("results"),
            sampling=snakemake.params.sampling,
            results_format=snakemake.params.results_format,
            bootstrap=snakemake.input.get("bootstrap"),
            interval_note=snakemake.params.no_interval or NO_REPEATS,
            floor=snakemake.input.get("floor"),
            lengths=(
                Path(snakemake.input.lengths).parent
                if "lengths" in snakemake.input.keys()
                else None
            ),
        )
        source = context.accounting_source
    written = render(snakemake.wildcards.figure, context, Path(snakemake.output.pdf).with_suffix(""))
    log.info("wrote %s (accounting: %s)", ", ".join(map(str, written)), source)
