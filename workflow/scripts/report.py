"""Snakemake's HTML report of the figures and tables (``snakemake --report``) for this config.

Runs from inside a workflow job: the merged config is handed over as a config file, and ``--nolock``
because the calling Snakemake holds the lock. Written atomically.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

from dpscaling.config.blocks import config_yaml
from dpscaling.core.errors import UserError
from dpscaling.core.io import atomic_path
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]), tempfile.TemporaryDirectory(prefix="dpscaling-report-") as scratch:
    config_file = Path(scratch) / "config.yaml"
    config_file.write_text(config_yaml(snakemake.params.config))
    html = Path(scratch) / "report.html"
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(snakemake.params.snakefile), "--configfile",
               str(config_file), "--nolock", "--report", str(html), *snakemake.params.targets]
    result = subprocess.run(command, capture_output=True, text=True)
    print(result.stdout, result.stderr, sep="\n")
    if result.returncode != 0 or not html.exists():
        raise UserError(f"snakemake --report failed ({result.returncode}); see the log above")
    with atomic_path(snakemake.output[0]) as tmp:
        tmp.write_bytes(html.read_bytes())
