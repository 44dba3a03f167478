"""The paper's qualitative findings, checked on a fitted law of ours (docs/appendix-experiments.md).

Usage (after `snakemake --cores 2` on the default config):
    .venv/bin/python benchmarks/findings.py [--run results/default] [--configfile config/config.yaml]

Prints each claim as "holds" / "does not hold on this data" with the measured numbers
beside it; the budgets are the config's `analysis:` block (those the figures use).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import yaml

from dpscaling.report.figures.context import load_context
from dpscaling.report.figures.settings import AnalysisSettings
from dpscaling.findings.paper import check_findings, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", default="results/default", type=Path, help="results/<run_name> of a finished run")
    parser.add_argument("--configfile", default="config/config.yaml", type=Path)
    args = parser.parse_args()
    config = yaml.safe_load(args.configfile.read_text())
    analysis = {**config.get("analysis", {}),
                "near_optimal_tolerance": config.get("fit", {}).get("near_optimal_tolerance", 0.01)}
    context = load_context(args.run / "law" / "fit", AnalysisSettings.from_mapping(analysis),
                           sigma_table=args.run / "accounting" / "sigma_table.parquet",
                           sampling=config.get("accounting", {}).get("sampling", "min"))
    print(f"law: {args.run / 'law' / 'fit'}; accounting: {context.accounting_source}")
    # The run's table:inflection_points, when the workflow wrote it, saves (b)'s queries.
    table = args.run / "tables" / "table-inflection_points.csv"
    print(report(check_findings(context, pd.read_csv(table) if table.is_file() else None)))


if __name__ == "__main__":
    main()
