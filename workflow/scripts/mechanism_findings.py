from dpscaling.figures.context import load_context
from dpscaling.figures.mechanisms import mechanism_figure
from dpscaling.figures.settings import AnalysisSettings
from dpscaling.findings import findings_table
from dpscaling.logs import log_to_file
from dpscaling.mechanism_findings import (
    CAPTION,
    COMPARISON_CAPTION,
    COMPARISON_LABEL,
    FINDING_NAMES,
    LABEL,
    check_mechanism_findings,
)
from dpscaling.tables.write import write_table

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
    findings, table = check_mechanism_findings(contexts)
    findings_frame = findings_table(findings, FINDING_NAMES[: len(findings)])
    log.info("mechanism findings:\n%s", findings_frame.to_string(index=False))
    write_table(
        findings_frame, snakemake.output.csv.removesuffix(".csv"), CAPTION, LABEL
    )
    write_table(
        table,
        snakemake.output.comparison.removesuffix(".csv"),
        COMPARISON_CAPTION,
        COMPARISON_LABEL,
    )
    mechanism_figure(table, snakemake.output.figure.removesuffix(".pdf"))
