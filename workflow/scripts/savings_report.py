from pathlib import Path

from dpscaling.core.logs import log_to_file
from dpscaling.private.savings_report import write_report

with log_to_file(snakemake.log[0]) as log:
    budgets = write_report(
        snakemake.input.plans,
        snakemake.input.curves,
        snakemake.input.evaluations,
        snakemake.params.window,
        Path(snakemake.output.runs_csv).with_suffix(""),
        Path(snakemake.output.csv).with_suffix(""),
        Path(snakemake.output.compare_pdf).with_suffix(""),
        Path(snakemake.output.savings_pdf).with_suffix(""),
        Path(snakemake.output.worth_csv).with_suffix(""),
        Path(snakemake.output.regret_pdf).with_suffix(""),
        snakemake.input.get("bundle"),
    )
    log.info("savings:\n%s", budgets.to_string())
