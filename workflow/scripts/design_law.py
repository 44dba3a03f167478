from dpscaling.law import LawSettings
from dpscaling.law.bootstrap import bootstrap_from_files
from dpscaling.law.collect import collect_to_parquet
from dpscaling.law.pipeline import fit_from_files
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    given, out = snakemake.input, snakemake.output
    settings = LawSettings.from_json(snakemake.params.settings)
    table = collect_to_parquet(given.curves, out.results)
    law = fit_from_files(
        out.results,
        settings,
        sigma_table=given.sigma_table,
        sampling=snakemake.params.sampling,
    )
    law.save(out.law)
    bootstrap_from_files(
        out.results,
        settings,
        range(snakemake.params.replicates),
        out.bootstrap,
        seed=snakemake.params.bootstrap["seed"],
    )
    log.info("design law on %d runs (%d measurements): %s", len(given.curves), len(table), law.report)
