from dpscaling.report.figures.settings import AnalysisSettings
from dpscaling.core.logs import log_to_file
from dpscaling.findings.user_level import write_user_level_stage

with log_to_file(snakemake.log[0]) as log:
    frame = write_user_level_stage(
        snakemake.input.bundle,
        snakemake.input.meta,
        AnalysisSettings.from_mapping(snakemake.params.analysis),
        snakemake.output,
        progress=log.info,
    )
    log.info("user-level findings:\n%s", frame.to_string(index=False))
