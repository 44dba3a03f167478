from dpscaling.figures.context import load_context
from dpscaling.figures.finetune import finetune_figure
from dpscaling.figures.settings import AnalysisSettings
from dpscaling.finetune_findings import (
    CAPTION,
    COMPARISON_CAPTION,
    COMPARISON_LABEL,
    FINDING_NAMES,
    LABEL,
    check_finetune_findings,
)
from dpscaling.findings import findings_table
from dpscaling.tables.pretraining import pretraining_tokens
from dpscaling.logs import log_to_file
from dpscaling.tables.write import write_table

with log_to_file(snakemake.log[0]) as log:
    settings = AnalysisSettings.from_mapping(snakemake.params.analysis)
    given = snakemake.input
    scratch, finetuned = (
        load_context(
            law,
            settings,
            sigma_table=given.sigma_table,
            results=results,
            sampling=snakemake.params.sampling,
        )
        for law, results in (
            (given.scratch_law, given.scratch_results),
            (given.finetune_law, given.finetune_results),
        )
    )
    findings, table = check_finetune_findings(
        scratch, finetuned, pretraining_tokens=pretraining_tokens(given.pretraining)
    )
    findings_frame = findings_table(findings, FINDING_NAMES[: len(findings)])
    log.info("fine-tuning findings:\n%s", findings_frame.to_string(index=False))
    write_table(
        findings_frame, snakemake.output.csv.removesuffix(".csv"), CAPTION, LABEL
    )
    write_table(
        table,
        snakemake.output.comparison.removesuffix(".csv"),
        COMPARISON_CAPTION,
        COMPARISON_LABEL,
    )
    finetune_figure(table, snakemake.output.figure.removesuffix(".pdf"))
