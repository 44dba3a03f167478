from dpscaling.core.io import atomic_path
from dpscaling.law import LawSettings
from dpscaling.law.collect import load_results
from dpscaling.law.heldout_length import (
    CAPTION,
    LABEL,
    error_table,
    held_out_length_points,
)
from dpscaling.core.logs import log_to_file
from dpscaling.report.tables.write import write_table

with log_to_file(snakemake.log[0]) as log:
    # Each length's curves with their run constants (its seq_len and physical batch).
    loaded = [load_results(path) for path in snakemake.input.results]
    modes = {
        name: LawSettings.from_json(settings)
        for name, settings in snakemake.params.modes.items()
    }
    points = held_out_length_points(
        {constants["seq_len"]: table for table, constants in loaded},
        modes,
        physical_batch=loaded[0][1]["physical_batch"],
    )
    with atomic_path(snakemake.output.points) as tmp:
        points.to_csv(tmp, index=False)
    table = error_table(points)
    write_table(table, snakemake.output.csv.removesuffix(".csv"), CAPTION, LABEL)
    log.info("held-out sequence lengths:\n%s", table.to_string(index=False))
