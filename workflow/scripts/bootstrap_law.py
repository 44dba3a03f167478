from dpscaling.law import LawSettings
from dpscaling.law.bootstrap import bootstrap_from_files, chunk_replicates
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    block = snakemake.params.bootstrap
    replicates = chunk_replicates(block["replicates"], block["chunk_size"], int(snakemake.wildcards.chunk))
    bootstrap_from_files(
        snakemake.input.results,
        LawSettings.from_json(snakemake.params.settings),
        replicates,
        snakemake.output[0],
        seed=block["seed"],
        results_format=snakemake.params.results_format,
    )
    log.info("bootstrap replicates %s refitted", replicates)
