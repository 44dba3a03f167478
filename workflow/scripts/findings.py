import pandas as pd

from dpscaling.report.figures.context import load_context
from dpscaling.report.figures.settings import AnalysisSettings
from dpscaling.findings.paper import CAPTION, LABEL, check_findings, findings_table, report
from dpscaling.core.logs import log_to_file
from dpscaling.report.tables.write import write_table

with log_to_file(snakemake.log[0]) as log:
    context = load_context(
        snakemake.input.law,
        AnalysisSettings.from_mapping(snakemake.params.analysis),
        sigma_table=snakemake.input.sigma_table,
        results=snakemake.input.results,
        sampling=snakemake.params.sampling,
        results_format=snakemake.params.results_format,
    )
    findings = check_findings(context, pd.read_csv(snakemake.input.inflection_points))
    log.info("accounting: %s\n%s", context.accounting_source, report(findings))
    write_table(
        findings_table(findings),
        snakemake.output.csv.removesuffix(".csv"),
        CAPTION,
        LABEL,
    )
