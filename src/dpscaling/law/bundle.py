"""The law bundle: one directory that holds everything an answer needs (docs/query.md, "The law bundle").

Copy the directory anywhere and it answers the same questions with the same numbers. Paths inside are
relative to it::

    bundle.json                     manifest: format, provenance, validated ranges, contents
    law/                            the fitted law (paper §3.3; a ``dpscaling fit`` directory) whose σ
                                    pointer names ../sigma_table.parquet
    sigma_table.parquet             σ(ε, T, q) at the provenance's δ (a law fitted with the authors'
                                    accounting tables carries those inside law/ instead)
    bootstrap/replicates.parquet    the seed-only interval's bootstrap replicates
    calibration.json                the held-out calibration (the calibrated interval)
    physical_batch.json             the physical-batch correction (not in the paper; applied on request)
    lengths/lengths.json            with several sequence lengths: every length's law,
    lengths/seq=S/law/, lengths/seq=S/bootstrap/   ... each with its replicates beside it

**Provenance** (what the loss means and where it came from): the noise mechanism whose price σ̄ is, with
each sampling branch's sampler and adjacency (:mod:`dpscaling.accounting.pricing`), the model family and its objective, the
tokenizer and vocabulary size (and the vocabulary's sha256), S, the privacy unit, δ and the sampling rule
of the σ table, the corpus (source and sha256), the sha256 of the config blocks that decide the law, the
physical batch and microbatch the curves trained with, the law's mode, and every measured model's shape.

**Validated ranges** (:class:`dpscaling.law.range_checks.ValidatedRanges`): the measured models and σ̄
columns, the first measured step and the horizon H, the law's extrapolated T range, the extrapolation
factor the held-out horizon set validated (1/2 of every curve predicts the rest: 2×; 1× without a
calibration) and the calibrated interval's region.

A law directory that is not a bundle (``dpscaling fit --out``) is read by :func:`bundle_from_law` into
the same object, with the files its caller gives (a workflow's, beside the law: :mod:`dpscaling.layout`).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dpscaling.errors import UserError
from dpscaling.io import atomic_path
from dpscaling.law.artifact import Law, read_law
from dpscaling.law.bootstrap import Replicates, load_replicates, replicate_files
from dpscaling.law.calibration import Calibration, load_calibration
from dpscaling.law.columns import ITERATIONS, NOISE_BATCH_RATIO, SOURCE
from dpscaling.law.physical_batch import PhysicalBatchCorrection, load_correction
from dpscaling.law.pipeline import existing_file, sha256
from dpscaling.law.range_checks import ValidatedRanges
from dpscaling.law.runnable import ModelShape, preset_shapes
from dpscaling.law.sequence_length import (
    LawAcrossLengths, is_law_across_lengths, law_directories, load_law_across_lengths, replicate_laws, write_lengths)
from dpscaling.law.validation import HORIZON, HORIZON_FRACTION

BUNDLE_FILE = "bundle.json"
FORMAT = "dpscaling-law-bundle"
FORMAT_VERSION = 1
LAW, SIGMA_TABLE, BOOTSTRAP = "law", "sigma_table.parquet", "bootstrap/replicates.parquet"
CALIBRATION, CORRECTION, LENGTHS = "calibration.json", "physical_batch.json", "lengths"
OBJECTIVE_UNITS = {
    "masked_lm": "masked-LM cross entropy in nats per masked token (the mean training loss)",
    "causal_lm": "next-token cross entropy in nats per token (the mean training loss)",
}


@dataclass(frozen=True)
class LengthLaws:
    """The laws at several sequence lengths: the law across them, each length's law, their bootstrap
    replicates paired by index (none when a length has none) and why there are none."""

    across: LawAcrossLengths
    laws: dict[int, Law]
    replicates: list[LawAcrossLengths]
    note: str


@dataclass
class Bundle:
    """Everything an answer needs, read from a bundle directory or assembled around a bare law."""

    law: Law
    provenance: dict[str, Any]
    ranges: ValidatedRanges
    replicates: Replicates | None = None
    calibration: Calibration | None = None
    correction: PhysicalBatchCorrection | None = None
    lengths: LengthLaws | None = None
    root: Path | None = None
    notes: dict[str, str] = field(default_factory=dict)  # why an item is missing

    @property
    def shapes(self) -> list[ModelShape]:
        """The measured models' shapes (recorded by the workflow; presets' otherwise)."""
        recorded = self.provenance.get("models") or {}
        if recorded:
            return [ModelShape.from_json({**shape, "name": name, "measured": True}) for name, shape in recorded.items()]
        return preset_shapes(sorted(set(self.law.grid["Model"])))

    @property
    def loss_units(self) -> str:
        """What the predicted loss is, in words: the objective's cross entropy on the law's own data."""
        provenance = self.provenance
        units = OBJECTIVE_UNITS.get(provenance.get("objective", ""), "cross entropy in nats (the law's own data)")
        where = [f"corpus {provenance['corpus']['source']}" if provenance.get("corpus") else None,
                 f"tokenizer {provenance['tokenizer']}" if provenance.get("tokenizer") else None,
                 f"vocabulary {provenance['vocab_size']:,}" if provenance.get("vocab_size") else None,
                 f"S = {self.law.seq_len}"]
        return f"{units}; {', '.join(item for item in where if item)}: comparable only to losses on the same data"

    def manifest(self) -> dict[str, Any]:
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "provenance": self.provenance,
                "validated_ranges": self.ranges.to_json(), "loss_units": self.loss_units,
                "contents": self.contents(), "missing": self.notes}

    def contents(self) -> dict[str, Any]:
        return {"law": LAW, "sigma_table": SIGMA_TABLE if self.law.sigma_table else None,
                "accounting_tables": sorted(self.law.accounting) or None,
                "bootstrap_replicates": len(self.replicates) if self.replicates else 0,
                "calibration": CALIBRATION if self.calibration else None,
                "physical_batch_correction": CORRECTION if self.correction else None,
                "sequence_lengths": self.lengths.across.lengths if self.lengths else [self.law.seq_len]}


def data_provenance(data_meta: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """From the packed data's manifest: the vocabulary's sha256 and the sha256 of every corpus file it was
    built from."""
    found: dict[str, Any] = {}
    if data_meta is not None:
        meta = json.loads(Path(data_meta).read_text(encoding="utf-8"))
        source = meta.get("source") or {}
        files = {Path(path).name: sha256(Path(path)) for path in source.get("paths") or [] if Path(path).is_file()}
        found["vocab_sha256"] = meta.get("vocab_sha256")
        found["corpus"] = {"source": source.get("source"), "hf_dataset": source.get("hf_dataset"),
                           "hf_split": source.get("hf_split") if source.get("hf_dataset") else None,
                           "max_documents": source.get("max_documents"), "files_sha256": files or None}
    return found


def law_provenance(law: Law) -> dict[str, Any]:
    """What the law itself knows of its provenance (a bundle written by the workflow knows more)."""
    from dpscaling.models.family import family_named

    from dpscaling.accounting.pricing import deterministic_sampler
    from dpscaling.accounting.branches import ADD_REMOVE, ZERO_OUT
    from dpscaling.mechanisms import mechanism_named
    from dpscaling.samplers import POISSON

    mechanism = mechanism_named(law.mechanism, "mechanism")
    provenance: dict[str, Any] = {
        "family": law.family, "objective": family_named(law.family).objective, "seq_len": int(law.seq_len),
        "physical_batch": int(law.physical_batch),
        # What σ̄ costs (dpscaling.accounting.pricing): the mechanism, and per branch of the sampling rule the
        # sampler that trains an answer and the neighbouring relation of its guarantee.
        "mechanism": mechanism.name, "bands": mechanism.bands,
        "samplers": {"poisson": POISSON.name, "deterministic": deterministic_sampler(mechanism)},
        "adjacency": {"poisson": ZERO_OUT if mechanism.correlated else ADD_REMOVE, "deterministic": ZERO_OUT},
        "mode": "reference-compatible" if law.settings.reference_compatible else "paper",
        "results": law.sources.get("results")}
    if law.sigma_table:
        provenance["sampling"] = law.sigma_table.get("sampling", "min")
    return provenance


def validated_ranges(law: Law, calibration: Calibration | None,
                     horizon_fraction: float = HORIZON_FRACTION) -> ValidatedRanges:
    """The law's measured ranges, and what its calibration validated (module docstring)."""
    measured = law.grid[law.grid[SOURCE] == "measured"].dropna(subset=["Cross Entropy"])
    steps = measured[ITERATIONS].to_numpy(float)
    noisy = measured.loc[measured[NOISE_BATCH_RATIO] > 0, NOISE_BATCH_RATIO].to_numpy(float)
    horizon_validated = calibration is not None and any(name.startswith(HORIZON) for name in calibration.sets)
    return ValidatedRanges(
        model_size=law.model_size_range(), first_iteration=float(steps.min()), horizon=float(steps.max()),
        law_iterations=law.iteration_bounds(),
        extrapolation_factor=1.0 / horizon_fraction if horizon_validated else 1.0,
        noise_batch_ratio=(float(noisy.min()), float(noisy.max())) if len(noisy) else (0.0, 0.0),
        calibration_iterations_from=calibration.iterations_from if calibration is not None else None)


def _lengths(directory: Path, law: Law) -> LengthLaws:
    """A bundle's laws across lengths, each with its replicates beside it (``seq=S/bootstrap/``)."""
    across, laws = load_law_across_lengths(directory)
    if any(other.settings.reference_compatible != law.settings.reference_compatible for other in laws.values()):
        raise UserError(f"{directory}: the laws across lengths and the main law differ in mode")
    beside = {length: path.parent / BOOTSTRAP for length, path in law_directories(directory).items()}
    replicates, note = replicate_laws(laws, beside)
    return LengthLaws(across, laws, replicates, note)


def read_bundle(directory: str | os.PathLike[str]) -> Bundle:
    """The bundle at ``directory`` (written by :func:`write_bundle`)."""
    root = Path(directory)
    try:
        manifest = json.loads((root / BUNDLE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{root}: not a law bundle ({BUNDLE_FILE}: {error})") from None
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{root}: bundle format {manifest.get('format')} {manifest.get('format_version')} is not "
                        f"{FORMAT} {FORMAT_VERSION}; rebuild it (`snakemake bundle`)")
    law = read_law(root / LAW)
    calibration = (load_calibration(root / CALIBRATION, law.settings) if (root / CALIBRATION).is_file() else None)
    return Bundle(
        law=law, provenance=manifest["provenance"], ranges=ValidatedRanges.from_json(manifest["validated_ranges"]),
        replicates=load_replicates(root / BOOTSTRAP, law.settings) if (root / BOOTSTRAP).is_file() else None,
        calibration=calibration, correction=load_correction(root / CORRECTION),
        lengths=_lengths(root / LENGTHS, law) if is_law_across_lengths(root / LENGTHS) else None,
        root=root, notes=dict(manifest.get("missing") or {}))


def is_bundle(directory: str | os.PathLike[str]) -> bool:
    return (Path(directory) / BUNDLE_FILE).is_file()


def bundle_from_law(directory: str | os.PathLike[str], *, bootstrap: str | os.PathLike[str] | None = None,
                    calibration: str | os.PathLike[str] | None = None,
                    correction: str | os.PathLike[str] | None = None,
                    length_replicates: Mapping[int, str | os.PathLike[str]] | None = None) -> Bundle:
    """A law directory that is not a bundle (``dpscaling fit``'s, or a workflow's ``law/fit`` or
    ``law/lengths``) with the files given: ``bootstrap`` (replicates: a Parquet file or a directory of
    them), ``calibration``, ``correction``, and for a law across lengths each length's replicates file
    (``length_replicates``; a length without one has no band)."""
    directory = Path(directory)
    lengths = None
    if is_law_across_lengths(directory):
        across, laws = load_law_across_lengths(directory)
        law = laws[across.lengths[0]]
        replicates, note = replicate_laws(laws, length_replicates or {})
        lengths = LengthLaws(across, laws, replicates, note)
    else:
        if not (directory / "manifest.json").is_file():
            raise UserError(f"{directory} is neither a law bundle ({BUNDLE_FILE}) nor a fitted law (manifest.json); "
                            "create one with `dpscaling fit` or `snakemake bundle`")
        law = read_law(directory)
    notes = {}
    replicates = None
    if bootstrap is not None:
        if not Path(bootstrap).exists():
            raise UserError(f"--bootstrap: no such file or directory {bootstrap}")
        replicates = load_replicates(bootstrap, law.settings)
        if replicates is None:
            raise UserError(f"--bootstrap {bootstrap}: no replicate files (*.parquet) in it")
    if replicates is None and lengths is None:
        notes["bootstrap"] = "no bootstrap replicates next to the law (pass --bootstrap, or query the run's bundle)"
    found = None
    if calibration is not None:
        found = load_calibration(existing_file(calibration, "--calibration"), law.settings)
    if found is None:
        notes["calibration"] = ("no calibration next to the law (run `snakemake validate`, pass --calibration, or "
                                "query the run's bundle)")
    existing_file(correction, "--physical-batch-correction")
    return Bundle(law=law, provenance=law_provenance(law), ranges=validated_ranges(law, found),
                  replicates=replicates, calibration=found,
                  correction=load_correction(correction) if correction is not None else None,
                  lengths=lengths, root=None, notes=notes)


def load_bundle(directory: str | os.PathLike[str], **files: Any) -> Bundle:
    """A bundle directory, or a bare law directory with ``files`` (:func:`bundle_from_law`)."""
    if is_bundle(directory):
        given = [name for name, value in files.items() if value is not None]
        if given:
            raise UserError(f"{directory} is a law bundle: it carries its own {', '.join(sorted(given))}")
        return read_bundle(directory)
    if not Path(directory).is_dir():
        raise UserError(f"--law: no such directory {directory}")
    return bundle_from_law(directory, **files)


# ----------------------------------------------------------------------------------------------- writing

def _copy_replicates(source: str | os.PathLike[str], target: Path) -> None:
    """The replicates at ``source`` (a file, or a directory of chunk files) as one file ``target``."""
    files = replicate_files(source)
    if not files:
        raise UserError(f"no bootstrap replicates at {source}")
    target.parent.mkdir(parents=True, exist_ok=True)
    pd.concat([pd.read_parquet(path) for path in files], ignore_index=True).to_parquet(target, index=False)


def _copy_law(source: str | os.PathLike[str], target: Path, sigma_table: Path | None) -> Law:
    """The law at ``source`` saved under ``target``, its σ pointer aimed at the bundle's table."""
    law = read_law(source)
    if sigma_table is not None and law.sigma_table:
        law.sigma_table = {**law.sigma_table, "path": str(sigma_table)}
    elif law.sigma_table:
        law.sigma_table = None  # the run's table is not in the bundle: σ on demand, never outside it
    law.save(target)
    return law


def write_bundle(out: str | os.PathLike[str], law_dir: str | os.PathLike[str], *,
                 provenance: dict[str, Any] | None = None, sigma_table: str | os.PathLike[str] | None = None,
                 bootstrap: str | os.PathLike[str] | None = None, calibration: str | os.PathLike[str] | None = None,
                 correction: str | os.PathLike[str] | None = None, lengths: str | os.PathLike[str] | None = None,
                 length_replicates: Mapping[int, str | os.PathLike[str]] | None = None,
                 horizon_fraction: float = HORIZON_FRACTION) -> Bundle:
    """Assemble the bundle at ``out`` (atomically) from a fitted law and the files beside it; ``provenance``
    adds to what the law knows of itself (:func:`law_provenance`). ``length_replicates``: the replicates
    file of each length's law listed in ``lengths`` (a length without one is copied without)."""
    out = Path(out)
    with atomic_path(out, directory=True) as tmp:
        table = None
        if sigma_table is not None:
            if not Path(sigma_table).is_file():
                raise UserError(f"no σ table at {sigma_table}: build it (`snakemake accounting`)")
            table = tmp / SIGMA_TABLE
            shutil.copy2(sigma_table, table)
        law = _copy_law(law_dir, tmp / LAW, table)
        notes = {}
        if bootstrap is not None:
            _copy_replicates(bootstrap, tmp / BOOTSTRAP)
        else:
            notes["bootstrap"] = "no bootstrap replicates (no repeated seeds, or fit.bootstrap.replicates = 0)"
        found = None
        if calibration is not None:
            found = load_calibration(calibration, law.settings)  # refuses a file without this law's mode
            shutil.copy2(calibration, tmp / CALIBRATION)
        else:
            notes["calibration"] = "no held-out calibration (run `snakemake validate` before bundling)"
        if correction is not None:
            shutil.copy2(correction, tmp / CORRECTION)
        if lengths is not None:
            _copy_lengths(Path(lengths), tmp, law_dir, table, length_replicates or {})
        record = {**law_provenance(law), **(provenance or {})}
        record.setdefault("created", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        record.setdefault("dpscaling_version", law.manifest()["versions"]["dpscaling"])
        bundle = Bundle(law=law, provenance=record, ranges=validated_ranges(law, found, horizon_fraction),
                        replicates=load_replicates(tmp / BOOTSTRAP, law.settings) if bootstrap is not None else None,
                        calibration=found, correction=load_correction(tmp / CORRECTION), notes=notes)
        document = bundle.manifest()
        document["contents"]["sequence_lengths"] = _length_list(lengths) or [law.seq_len]
        (tmp / BUNDLE_FILE).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return read_bundle(out)


def _length_list(lengths: str | os.PathLike[str] | None) -> list[int]:
    return sorted(law_directories(lengths)) if lengths is not None else []


def _copy_lengths(lengths: Path, tmp: Path, primary: str | os.PathLike[str], table: Path | None,
                  replicates: Mapping[int, str | os.PathLike[str]]) -> None:
    """Every length's law (and its ``replicates``, beside it) under lengths/, the primary length's as ../law."""
    laws: dict[int, Path] = {}
    primary = Path(primary).resolve()
    for length, directory in law_directories(lengths).items():
        if directory.resolve() == primary:
            laws[length] = tmp / LAW
            continue
        target = tmp / LENGTHS / f"seq={length}" / LAW
        _copy_law(directory, target, table)
        if length in replicates and Path(replicates[length]).exists():
            _copy_replicates(replicates[length], target.parent / BOOTSTRAP)
        laws[length] = target
    write_lengths(tmp / LENGTHS, laws)
