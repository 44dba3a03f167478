"""From results on disk to a saved law: the one path the CLI (`dpscaling fit`) and the workflow share.

Paper §3.3: measurements → smoothing → extrapolation → interpolation. This
module only locates and reads the inputs (our training curves, a collected
table, or the authors' ``results.csv``; optional accounting CSVs), records
their provenance, and calls :func:`dpscaling.law.fit_law`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any


from dpscaling.core.errors import UserError
from dpscaling.law.artifact import Law, fit_law
from dpscaling.law.collect import load_results
from dpscaling.law.columns import PAPER_PHYSICAL_BATCH, PAPER_SEQUENCE_LENGTH
from dpscaling.law.noise import read_accounting_csv
from dpscaling.law.settings import LawSettings

def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def existing_file(path: str | Path | None, flag: str) -> Path | None:
    if path is None:
        return None
    if not Path(path).is_file():
        raise UserError(f"{flag}: no such file {path}")
    return Path(path)


def fit_from_files(
    results: str | Path,
    settings: LawSettings,
    *,
    results_format: str = "dpscaling",
    accounting_amplified: str | Path | None = None,
    accounting_unamplified: str | Path | None = None,
    parametric: bool = False,
    seq_len: int | None = None,
    physical_batch: int | None = None,
    sigma_table: str | Path | None = None,
    sampling: str = "min",
) -> Law:
    """Fit a law to the results at ``results``; every input's path and sha256 go into its sources.

    ``sigma_table`` (the run's dpscaling accounting table, which need not exist yet) and its ``sampling``
    rule are recorded in the law, so queries on it need no accounting flags.
    """
    table, constants = load_results(results, results_format)
    amplified = existing_file(accounting_amplified, "--accounting-amplified")
    unamplified = existing_file(accounting_unamplified, "--accounting-unamplified")
    sources: dict[str, Any] = {"results": {"path": str(Path(results).resolve()), "format": results_format}}
    if Path(results).is_file():
        sources["results"]["sha256"] = sha256(Path(results))
    for kind, path in (("accounting_amplified", amplified), ("accounting_unamplified", unamplified)):
        if path is not None:
            sources[kind] = {"path": str(path.resolve()), "sha256": sha256(path)}
    if not (amplified or unamplified):
        sources["accounting"] = "dpscaling.accounting at query time"
    return fit_law(
        table,
        settings,
        seq_len=seq_len or constants.get("seq_len", PAPER_SEQUENCE_LENGTH),
        physical_batch=physical_batch or constants.get("physical_batch", PAPER_PHYSICAL_BATCH),
        accounting_amplified=read_accounting_csv(amplified) if amplified else None,
        accounting_unamplified=read_accounting_csv(unamplified) if unamplified else None,
        parametric=parametric,
        sources=sources,
        sigma_table=sigma_table,
        sampling=sampling,
        mechanism=constants.get("mechanism"),
    )
