from dpscaling.findings import finetune as stage
from dpscaling.report.figures.context import load_context
from dpscaling.report.figures.finetune import finetune_figure
from dpscaling.report.figures.settings import AnalysisSettings
from dpscaling.findings.paper import write_comparison_stage
from dpscaling.core.logs import log_to_file
from dpscaling.report.tables.pretraining import pretraining_tokens

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
    findings, table = stage.check_finetune_findings(
        scratch, finetuned, pretraining_tokens=pretraining_tokens(given.pretraining)
    )
    frame = write_comparison_stage(
        findings,
        stage.FINDING_NAMES,
        table,
        snakemake.output,
        caption=stage.CAPTION,
        label=stage.LABEL,
        comparison_caption=stage.COMPARISON_CAPTION,
        comparison_label=stage.COMPARISON_LABEL,
        draw=finetune_figure,
    )
    log.info("fine-tuning findings:\n%s", frame.to_string(index=False))
