from pathlib import Path

from dpscaling.law.bundle import run_files_provenance, write_bundle
from dpscaling.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    given = snakemake.input
    bundle = write_bundle(
        snakemake.output[0],
        given.law,
        provenance={
            **snakemake.params.provenance,
            **run_files_provenance(given.run_config, given.data_meta or None),
        },
        sigma_table=given.sigma_table,
        bootstrap=given.bootstrap or None,
        calibration=given.calibration,
        correction=given.correction or None,
        lengths=Path(given.lengths).parent if given.lengths else None,
    )
    log.info("law bundle %s: %s", snakemake.output[0], bundle.contents())
