from pathlib import Path

from dpscaling.law.loading import load_mechanism_laws
from dpscaling.law.mechanisms import write_mechanisms
from dpscaling.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    names = snakemake.params.mechanisms
    replicates = [str(Path(path).parent) for path in snakemake.input.bootstrap] or [None] * len(names)
    target = write_mechanisms(
        Path(snakemake.output[0]).parent,
        {
            name: {"law": law, "bootstrap": bootstrap, "calibration": calibration}
            for name, law, bootstrap, calibration in zip(
                names, snakemake.input.laws, replicates, snakemake.input.calibrations
            )
        },
    )
    laws = load_mechanism_laws(target.parent)  # every law reads back with its files
    log.info("laws across mechanisms %s: %s", list(laws), target)
