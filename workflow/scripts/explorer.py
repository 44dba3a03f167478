"""Rule explorer_page: the explorer page of the run's law bundle (dpscaling.report.explorer)."""

from dpscaling.report.explorer import default_grid, write_explorer
from dpscaling.law.loading import load_primary_law
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    grid_settings = snakemake.params.grid
    bundle = snakemake.input.bundle
    law = load_primary_law(bundle)
    grid = default_grid(law, epsilons=grid_settings["epsilons"], data=grid_settings["data_budgets"],
                        compute_range=grid_settings["compute_range"],
                        compute_steps_per_octave=grid_settings["compute_steps_per_octave"])
    summary = write_explorer(law, bundle, snakemake.output[0], grid, workers=snakemake.threads)
    log.info("explorer: %s", {key: value for key, value in summary.items() if key != "grid"})
