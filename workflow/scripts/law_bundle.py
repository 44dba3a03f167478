from pathlib import Path

from dpscaling.law.bundle import data_provenance, write_bundle
from dpscaling.workflow.layout import length_replicates
from dpscaling.core.logs import log_to_file


def first(files):
    """The one file of an input the run may not have (a path, or an empty list when absent)."""
    if isinstance(files, str):
        return files
    return files[0] if files else None


with log_to_file(snakemake.log[0]) as log:
    given = snakemake.input
    lengths = first(given.get("lengths", []))
    lengths = Path(lengths).parent if lengths else None
    # Each other mechanism's files, in the run's order (none: one mechanism, or the fine-tuning law's bundle).
    names = snakemake.params.get("mechanisms", [])
    bootstraps = given.get("mechanism_bootstrap", []) or [None] * len(names)
    mechanisms = {
        name: {"law": law, "sigma_table": table, "bootstrap": bootstrap, "calibration": calibration}
        for name, law, table, bootstrap, calibration in zip(
            names,
            given.get("mechanism_laws", []),
            given.get("mechanism_sigma_tables", []),
            bootstraps,
            given.get("mechanism_calibrations", []),
            strict=True,
        )
    }
    bundle = write_bundle(
        snakemake.output[0],
        given.law,
        provenance={**snakemake.params.provenance, **data_provenance(first(given.data_meta))},
        sigma_table=given.sigma_table,
        bootstrap=first(given.bootstrap),
        calibration=first(given.get("calibration", [])),
        correction=first(given.get("correction", [])),
        lengths=lengths,
        length_replicates=length_replicates(lengths) if lengths else None,
        mechanisms=mechanisms,
    )
    log.info("law bundle %s: %s", snakemake.output[0], bundle.contents())
