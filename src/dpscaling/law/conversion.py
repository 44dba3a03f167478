"""The law formats from before bundles, converted once into a bundle (``dpscaling law bundle``; docs/query.md,
"The law bundle").

The bundle (:mod:`dpscaling.law.bundle`) is the one format ``dpscaling.load_law`` reads. Before it held
sequence lengths and mechanisms, three other directories answered queries: a fitted law (``manifest.json``:
``dpscaling fit --out`` before it wrote bundles, a workflow's ``law/fit``), a law across lengths
(``lengths.json``: ``law/lengths``) and a law across mechanisms (``mechanisms.json``: ``law/mechanisms``).
Each converts into one bundle, with the replicates and calibration the workflow wrote beside its laws
(:mod:`dpscaling.workflow.layout`) unless others are given; a bundle converts into a bundle with files added.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dpscaling.workflow import layout
from dpscaling.core.errors import UserError
from dpscaling.law.artifact import read_law
from dpscaling.law.bootstrap import replicate_files
from dpscaling.law.bundle import (
    BOOTSTRAP, CALIBRATION, CORRECTION, LAW, LENGTHS, MECHANISMS, SIGMA_TABLE, Bundle, is_bundle, read_bundle,
    write_bundle)
from dpscaling.law.sequence_length import is_law_across_lengths, law_directories

MECHANISMS_FILE = "mechanisms.json"  # the law across mechanisms before bundles held them
MANIFEST = "manifest.json"  # a fitted law's (dpscaling.law.artifact)


def old_format(directory: str | os.PathLike[str]) -> str | None:
    """What an old-format law directory is, in words (None: not one)."""
    directory = Path(directory)
    if (directory / MECHANISMS_FILE).is_file():
        return "a law across mechanisms (mechanisms.json, the format before bundles held mechanisms)"
    if is_law_across_lengths(directory):
        return "a law across lengths (lengths.json, the format before bundles held lengths)"
    if (directory / MANIFEST).is_file():
        return "a fitted law directory (manifest.json: a workflow's law/fit, or `dpscaling fit` before it wrote bundles)"
    return None


def old_format_message(path: str | os.PathLike[str]) -> str:
    """Why ``path`` does not load, and the one command that converts it."""
    if not Path(path).is_dir():
        return f"--law: no such directory {path}"
    what = old_format(path)
    if what is None:
        return (f"{path} is not a law bundle (no bundle.json): give a bundle (`snakemake bundle` writes "
                "<run>/law/bundle; `dpscaling fit --out` writes one)")
    return (f"{path} is {what}, not a law bundle: convert it once with `dpscaling law bundle --law {path} --out "
            "BUNDLE` (it takes the replicates and calibration the workflow wrote beside it), or query the run's "
            "bundle <run>/law/bundle")


def _sigma_table(law_dir: str | os.PathLike[str]) -> str | None:
    """The σ table a fitted law points to (None: it prices σ on demand); refused when it is not there."""
    pointer = read_law(law_dir).sigma_table
    if not pointer:
        return None
    if not Path(pointer["path"]).is_file():
        raise UserError(f"{law_dir}: its σ table {pointer['path']} (sigma_table.parquet) is not there: build it "
                        "(`snakemake accounting`) or give --sigma-table")
    return pointer["path"]


def _beside(law_dir: str | os.PathLike[str], sigma_table: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """A workflow's fitted law's σ table (``sigma_table`` if given), and its replicates and calibration when
    it wrote them beside it."""
    bootstrap = layout.bootstrap_beside(law_dir)
    calibration = layout.calibration_beside(law_dir)
    return {"law": Path(law_dir), "sigma_table": sigma_table or _sigma_table(law_dir),
            "bootstrap": bootstrap if replicate_files(bootstrap) else None,
            "calibration": calibration if calibration.is_file() else None}


def _inside(bundle: Path) -> dict[str, Any]:
    """A bundle's own files, as :func:`write_bundle` takes them."""
    present = {key: bundle / name if (bundle / name).exists() else None
               for key, name in (("sigma_table", SIGMA_TABLE), ("bootstrap", BOOTSTRAP), ("calibration", CALIBRATION),
                                 ("correction", CORRECTION))}
    return {"law": bundle / LAW, **present}


def _sources(source: Path, sigma_table: str | os.PathLike[str] | None
             ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], Path | None]:
    """The primary law's files (its σ table ``sigma_table`` if given), every other mechanism's, and a directory
    of laws across lengths."""
    if is_bundle(source):
        found: Bundle = read_bundle(source)
        lengths = source / LENGTHS if found.lengths is not None else None
        return _inside(source), {name: _inside(source / MECHANISMS / name) for name in found.mechanisms}, lengths
    if (source / MECHANISMS_FILE).is_file():
        document = json.loads((source / MECHANISMS_FILE).read_text(encoding="utf-8"))
        order = document.get("order") or list(document.get("mechanisms") or {})
        if not order:
            raise UserError(f"{source / MECHANISMS_FILE}: lists no mechanism")
        entries = {name: document["mechanisms"][name] for name in order}
        files = {}
        for name, entry in entries.items():
            law = source / entry["law"]
            calibration = source / entry["calibration"] if entry.get("calibration") else None
            files[name] = {"law": law, "sigma_table": _sigma_table(law),
                           "bootstrap": source / entry["bootstrap"] if entry.get("bootstrap") else None,
                           "calibration": calibration if calibration is not None and calibration.is_file() else None}
        primary = files.pop(order[0])
        return primary, files, None
    if is_law_across_lengths(source):
        laws = law_directories(source)
        return _beside(laws[min(laws)], sigma_table), {}, source
    if (source / MANIFEST).is_file():
        return _beside(source, sigma_table), {}, None
    raise UserError(old_format_message(source))


def convert_to_bundle(source: str | os.PathLike[str], out: str | os.PathLike[str], *,
                      sigma_table: str | os.PathLike[str] | None = None,
                      bootstrap: str | os.PathLike[str] | None = None,
                      calibration: str | os.PathLike[str] | None = None,
                      correction: str | os.PathLike[str] | None = None,
                      lengths: str | os.PathLike[str] | None = None) -> Bundle:
    """The law at ``source`` (a bundle, or a format from before bundles) written as a bundle at ``out``, with
    the primary law's files given here in place of those found beside it (or inside a bundle source)."""
    source = Path(source)
    if not source.is_dir():
        raise UserError(f"--law: no such directory {source}")
    primary, mechanisms, found_lengths = _sources(source, sigma_table)
    given = {"sigma_table": sigma_table, "bootstrap": bootstrap, "calibration": calibration, "correction": correction}
    flags = {"sigma_table": "--sigma-table", "bootstrap": "--bootstrap", "calibration": "--calibration",
             "correction": "--physical-batch-correction"}
    for key, path in given.items():
        if path is not None and not Path(path).exists():
            raise UserError(f"{flags[key]}: no such file or directory {path}")
    files = {**primary, **{key: value for key, value in given.items() if value is not None}}
    lengths = Path(lengths) if lengths is not None else found_lengths
    if Path(out).resolve() == source.resolve():
        raise UserError(f"--out: {out} is the law being converted; write the bundle elsewhere")
    replicates = ({length: path for length, path in layout.length_replicates(lengths).items() if replicate_files(path)}
                  if lengths is not None else None)  # a length without replicates is bundled without
    return write_bundle(out, files.pop("law"), lengths=lengths, length_replicates=replicates, mechanisms=mechanisms,
                        **files)


__all__ = ["convert_to_bundle", "old_format", "old_format_message"]
