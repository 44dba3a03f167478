"""Reading a law to answer with (docs/api.md): ``dpscaling.load_law`` on a bundle, a law directory or a run's
laws across mechanisms, each with the files the workflow writes beside it (:mod:`dpscaling.layout`).
The one loader of every caller: the command line, the Python API, the explorer, ``private_model`` and
``savings``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dpscaling import layout
from dpscaling.errors import UserError
from dpscaling.law.answers import ScalingLaw
from dpscaling.law.bootstrap import replicate_files
from dpscaling.law.bundle import is_bundle, load_bundle
from dpscaling.law.mechanisms import LawAcrossMechanisms, is_law_across_mechanisms, mechanism_entries
from dpscaling.law.noise import read_accounting_csv
from dpscaling.law.pipeline import existing_file
from dpscaling.law.sequence_length import is_law_across_lengths


def workflow_files(directory: str | os.PathLike[str], *, bootstrap: str | os.PathLike[str] | None,
                   calibration: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The files a law directory that is not a bundle is read with (:func:`bundle_from_law`): those given,
    else those of them the workflow wrote beside it (:mod:`dpscaling.layout`), when present."""
    if is_law_across_lengths(directory):
        return {"bootstrap": bootstrap, "calibration": calibration,
                "length_replicates": layout.length_replicates(directory)}
    if bootstrap is None and replicate_files(beside := layout.bootstrap_beside(directory)):
        bootstrap = beside
    if calibration is None and (found := layout.calibration_beside(directory)).is_file():
        calibration = found
    return {"bootstrap": bootstrap, "calibration": calibration}


def load_law(path: str | os.PathLike[str], *, bootstrap: str | os.PathLike[str] | None = None,
             calibration: str | os.PathLike[str] | None = None,
             physical_batch_correction: str | os.PathLike[str] | None = None,
             accounting_amplified: str | os.PathLike[str] | None = None,
             accounting_unamplified: str | os.PathLike[str] | None = None,
             mechanism: str | None = None) -> ScalingLaw | LawAcrossMechanisms:
    """A law to query: a bundle directory (``results/<run>/law/bundle``, everything inside), or a law
    directory of ``dpscaling fit`` with the files given here (bootstrap replicates, calibration.json, a
    physical-batch correction, the authors' accounting CSVs); a workflow's law directory (``law/fit``,
    ``law/lengths``) is read with the files the workflow writes beside it unless they are given. A run's
    ``law/mechanisms`` gives a :class:`~dpscaling.law.mechanisms.LawAcrossMechanisms` (every mechanism's law,
    or ``mechanism``'s only), whose ``query`` chooses among them with the decision rule."""
    if is_law_across_mechanisms(path):
        given = [name for name, value in (("bootstrap", bootstrap), ("calibration", calibration),
                                          ("physical_batch_correction", physical_batch_correction),
                                          ("accounting_amplified", accounting_amplified),
                                          ("accounting_unamplified", accounting_unamplified)) if value is not None]
        if given:
            raise UserError(f"{path}: a law across mechanisms names each mechanism's files itself "
                            f"(mechanisms.json); drop {', '.join(given)}")
        return LawAcrossMechanisms(load_mechanism_laws(path, mechanism), path)
    if mechanism is not None:
        raise UserError(f"--mechanism: {path} is one mechanism's law; give <run>/law/mechanisms (a run whose "
                        "training.mechanisms lists several) to choose among mechanisms")
    files = {"bootstrap": bootstrap, "calibration": calibration}
    if not is_bundle(path):
        files = workflow_files(path, **files)
    bundle = load_bundle(path, **files, correction=physical_batch_correction)
    tables = tuple(read_accounting_csv(existing_file(csv, flag)) if csv is not None else None
                   for csv, flag in ((accounting_amplified, "--accounting-amplified"),
                                     (accounting_unamplified, "--accounting-unamplified")))
    return ScalingLaw(bundle, tables if any(t is not None for t in tables) else None)


def load_mechanism_laws(directory: str | os.PathLike[str], only: str | None = None) -> dict[str, ScalingLaw]:
    """The law of each mechanism ``directory``/mechanisms.json lists (or of ``only``), each read with its own
    replicates and calibration."""
    entries = mechanism_entries(directory)
    if only is not None:
        if only not in entries:
            raise UserError(f"--mechanism: must be one of {list(entries)} (the mechanisms this run measured), "
                            f"got {only!r}")
        entries = {only: entries[only]}
    laws = {}
    for name, entry in entries.items():
        calibration = entry["calibration"] if entry["calibration"] and Path(entry["calibration"]).is_file() else None
        law = load_law(entry["law"], bootstrap=entry["bootstrap"], calibration=calibration)
        assert isinstance(law, ScalingLaw)
        laws[name] = law
    return laws


__all__ = ["load_law", "load_mechanism_laws", "workflow_files"]
