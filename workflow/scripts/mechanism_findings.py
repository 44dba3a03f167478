from dpscaling.report.figures.context import load_context
from dpscaling.report.figures.mechanisms import mechanism_figure
from dpscaling.report.figures.settings import AnalysisSettings
from dpscaling.findings.paper import write_comparison_stage
from dpscaling.core.logs import log_to_file
from dpscaling.findings import mechanisms as stage

with log_to_file(snakemake.log[0]) as log:
    settings = AnalysisSettings.from_mapping(snakemake.params.analysis)
    given = snakemake.input
    contexts = {
        name: load_context(
            law,
            settings,
            sigma_table=table,
            results=results,
            sampling=snakemake.params.sampling,
        )
        for name, law, table, results in zip(
            snakemake.params.mechanisms, given.laws, given.sigma_tables, given.results
        )
    }
    findings, table = stage.check_mechanism_findings(contexts)
    frame = write_comparison_stage(
        findings,
        stage.FINDING_NAMES,
        table,
        snakemake.output,
        caption=stage.CAPTION,
        label=stage.LABEL,
        comparison_caption=stage.COMPARISON_CAPTION,
        comparison_label=stage.COMPARISON_LABEL,
        draw=mechanism_figure,
    )
    log.info("mechanism findings:\n%s", frame.to_string(index=False))
