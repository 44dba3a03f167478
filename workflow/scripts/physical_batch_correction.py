from dpscaling.core.io import atomic_path, write_json_atomic
from dpscaling.law.collect import read_curve
from dpscaling.law.physical_batch import correction_from_curves
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    pairs, correction = correction_from_curves(
        [read_curve(path) for path in snakemake.input],
        snakemake.params.grid_batch,
        snakemake.params.warmup_steps,
    )
    with atomic_path(snakemake.output.pairs) as tmp:
        pairs.to_csv(tmp, index=False)
    write_json_atomic(snakemake.output.correction, correction.to_json())
    log.info("physical-batch correction: %s", correction)
