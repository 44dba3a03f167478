from dpscaling.law import LawSettings
from dpscaling.law.pipeline import fit_from_files
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    law = fit_from_files(
        snakemake.input.results,
        LawSettings.from_json(snakemake.params.settings),
        results_format=snakemake.params.results_format,
        parametric=snakemake.params.parametric,
        sigma_table=snakemake.params.sigma_table,
        sampling=snakemake.params.sampling,
    )
    law.save(snakemake.output[0])
    log.info("law report: %s", law.report)
