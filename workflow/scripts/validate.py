from dpscaling.report.figures.validation import predicted_vs_measured
from dpscaling.law import LawSettings
from dpscaling.law.calibration import CAPTION as COVERAGE_CAPTION
from dpscaling.law.calibration import LABEL as COVERAGE_LABEL
from dpscaling.law.calibration import coverage, interval_scale, write_calibration
from dpscaling.law.collect import load_results
from dpscaling.law.validation import CAPTION, LABEL, error_table, validate
from dpscaling.core.logs import log_to_file
from dpscaling.report.tables.write import write_table

with log_to_file(snakemake.log[0]) as log:
    results, constants = load_results(snakemake.input.results, snakemake.params.results_format)
    modes = {
        name: LawSettings.from_json(settings)
        for name, settings in snakemake.params.modes.items()
    }
    points = validate(
        results,
        modes,
        seq_len=constants["seq_len"],
        physical_batch=constants["physical_batch"],
        replicates=snakemake.params.replicates,
        seed=snakemake.params.seed,
    )
    table = error_table(points)
    write_table(table, snakemake.output.csv.removesuffix(".csv"), CAPTION, LABEL)
    predicted_vs_measured(points, snakemake.output.pdf.removesuffix(".pdf"))
    log.info("held-out validation:\n%s", table.to_string(index=False))
    covered, calibrations = coverage(
        points, modes, scale=interval_scale(snakemake.params.interval_scale, results)
    )
    write_table(
        covered,
        snakemake.output.coverage.removesuffix(".csv"),
        COVERAGE_CAPTION,
        COVERAGE_LABEL,
    )
    write_calibration(calibrations, snakemake.output.calibration)
    log.info("interval coverage:\n%s", covered.to_string(index=False))
