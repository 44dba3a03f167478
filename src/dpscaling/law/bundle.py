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
    mechanisms/M/                   with several noise mechanisms: each other mechanism's law as a bundle of
                                    its own (its law, σ table, replicates and calibration); bundle.json's
                                    ``contents.mechanisms`` lists them, this bundle's own mechanism first

**Provenance** (what the loss means and where it came from): the noise mechanism whose price σ̄ is, with
each sampling branch's sampler and adjacency (:mod:`dpscaling.accounting.pricing`), the model family and its objective, the
tokenizer and vocabulary size (and the vocabulary's sha256), S, the privacy unit, δ and the sampling rule
of the σ table, the corpus (source and sha256), the sha256 of the config blocks that decide the law, the
physical batch and microbatch the curves trained with, the law's mode, and every measured model's shape.

**Validated ranges** (:class:`dpscaling.law.range_checks.ValidatedRanges`): the measured models and σ̄
columns, the first measured step and the horizon H, the law's extrapolated T range, the extrapolation
factor the held-out horizon set validated (1/2 of every curve predicts the rest: 2×; 1× without a
calibration) and the calibrated interval's region.

The bundle is the one law format that answers (:func:`dpscaling.law.loading.load_law`). Format 1 (before
mechanisms were bundled) reads as a bundle of one mechanism; the formats before bundles (a fitted law
directory, a law across lengths, a law across mechanisms) are converted once by
:mod:`dpscaling.law.conversion` (``dpscaling law bundle``).
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

from dpscaling.core.errors import UserError
from dpscaling.core.io import atomic_path
from dpscaling.law.artifact import Law, read_law
from dpscaling.law.bootstrap import Replicates, load_replicates, replicate_files
from dpscaling.law.calibration import Calibration, load_calibration
from dpscaling.law.columns import ITERATIONS, NOISE_BATCH_RATIO, SOURCE
from dpscaling.law.physical_batch import PhysicalBatchCorrection, load_correction
from dpscaling.law.pipeline import sha256
from dpscaling.law.range_checks import ValidatedRanges
from dpscaling.law.runnable import ModelShape, preset_shapes
from dpscaling.law.settings import mode_name
from dpscaling.law.sequence_length import (
    LawAcrossLengths, is_law_across_lengths, law_directories, load_law_across_lengths, replicate_laws, write_lengths)
from dpscaling.law.validation import HORIZON, HORIZON_FRACTION

BUNDLE_FILE = "bundle.json"
FORMAT = "dpscaling-law-bundle"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # format 1: a bundle of one mechanism, without ``contents.mechanisms``
LAW, SIGMA_TABLE, BOOTSTRAP = "law", "sigma_table.parquet", "bootstrap/replicates.parquet"
CALIBRATION, CORRECTION, LENGTHS, MECHANISMS = "calibration.json", "physical_batch.json", "lengths", "mechanisms"
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
    mechanisms: dict[str, Bundle] = field(default_factory=dict)  # each other mechanism's bundle, in the run's order

    @property
    def mechanism(self) -> str:
        return str(self.law.mechanism)

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
                "sequence_lengths": self.lengths.across.lengths if self.lengths else [self.law.seq_len],
                "mechanisms": [self.mechanism, *self.mechanisms] if self.mechanisms else None}


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


PRICING_PROVENANCE = ("mechanism", "bands", "samplers", "adjacency")  # what σ̄ costs: each law's own


def law_provenance(law: Law) -> dict[str, Any]:
    """What the law itself knows of its provenance (a bundle written by the workflow knows more)."""
    from dpscaling.models.family import family_named

    from dpscaling.accounting.pricing import deterministic_sampler
    from dpscaling.accounting.branches import ADD_REMOVE, ZERO_OUT
    from dpscaling.privacy.mechanisms import mechanism_named
    from dpscaling.privacy.samplers import TRUNCATED_POISSON

    mechanism = mechanism_named(law.mechanism, "mechanism")
    provenance: dict[str, Any] = {
        "family": law.family, "objective": family_named(law.family).objective, "seq_len": int(law.seq_len),
        "physical_batch": int(law.physical_batch),
        # What σ̄ costs (dpscaling.accounting.pricing): the mechanism, and per branch of the sampling rule the
        # sampler that trains an answer and the neighbouring relation of its guarantee.
        "mechanism": mechanism.name, "bands": mechanism.bands,
        "samplers": {"poisson": TRUNCATED_POISSON.name, "deterministic": deterministic_sampler(mechanism)},
        "adjacency": {"poisson": ZERO_OUT if mechanism.correlated else ADD_REMOVE, "deterministic": ZERO_OUT},
        "mode": mode_name(law.settings.reference_compatible),
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
    if manifest.get("format") != FORMAT or manifest.get("format_version") not in READABLE_VERSIONS:
        raise UserError(f"{root}: bundle format {manifest.get('format')} {manifest.get('format_version')} is not "
                        f"{FORMAT} {' or '.join(map(str, READABLE_VERSIONS))}; rebuild it (`snakemake bundle`)")
    law = read_law(root / LAW)
    others = [name for name in manifest.get("contents", {}).get("mechanisms") or [] if name != str(law.mechanism)]
    calibration = (load_calibration(root / CALIBRATION, law.settings) if (root / CALIBRATION).is_file() else None)
    return Bundle(
        law=law, provenance=manifest["provenance"], ranges=ValidatedRanges.from_json(manifest["validated_ranges"]),
        replicates=load_replicates(root / BOOTSTRAP, law.settings) if (root / BOOTSTRAP).is_file() else None,
        calibration=calibration, correction=load_correction(root / CORRECTION),
        lengths=_lengths(root / LENGTHS, law) if is_law_across_lengths(root / LENGTHS) else None,
        root=root, notes=dict(manifest.get("missing") or {}),
        mechanisms={name: read_bundle(root / MECHANISMS / name) for name in others})


def is_bundle(directory: str | os.PathLike[str]) -> bool:
    return (Path(directory) / BUNDLE_FILE).is_file()


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
                 mechanisms: Mapping[str, Mapping[str, Any]] | None = None,
                 horizon_fraction: float = HORIZON_FRACTION) -> Bundle:
    """Assemble the bundle at ``out`` (atomically) from a fitted law and the files beside it; ``provenance``
    adds to what the law knows of itself (:func:`law_provenance`). ``length_replicates``: the replicates
    file of each length's law listed in ``lengths`` (a length without one is copied without).
    ``mechanisms``: each other mechanism's files (``law``, ``sigma_table``, ``bootstrap``, ``calibration``),
    bundled under mechanisms/M/ with the same provenance (an entry of the law's own mechanism is skipped)."""
    out = Path(out)
    with atomic_path(out, directory=True) as tmp:
        own = _assemble(tmp, law_dir, provenance, sigma_table, bootstrap, calibration, correction, horizon_fraction)
        if lengths is not None:
            table = tmp / SIGMA_TABLE if (tmp / SIGMA_TABLE).is_file() else None
            _copy_lengths(Path(lengths), tmp, law_dir, table, length_replicates or {})
        others = {name: files for name, files in (mechanisms or {}).items() if name != own}
        for name, files in others.items():
            mechanism = _assemble(tmp / MECHANISMS / name, files["law"], provenance, files.get("sigma_table"),
                                  files.get("bootstrap"), files.get("calibration"), None, horizon_fraction)
            if mechanism != name:
                raise UserError(f"{files['law']}: a law of mechanism {mechanism!r}, listed as {name!r}")
        manifest = json.loads((tmp / BUNDLE_FILE).read_text(encoding="utf-8"))
        contents = manifest["contents"]
        contents["sequence_lengths"] = _length_list(lengths) or contents["sequence_lengths"]
        contents["mechanisms"] = [own, *others] if others else None
        (tmp / BUNDLE_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return read_bundle(out)


def _assemble(tmp: Path, law_dir: str | os.PathLike[str], provenance: dict[str, Any] | None,
              sigma_table: str | os.PathLike[str] | None, bootstrap: str | os.PathLike[str] | None,
              calibration: str | os.PathLike[str] | None, correction: str | os.PathLike[str] | None,
              horizon_fraction: float) -> str:
    """One mechanism's bundle written into ``tmp`` (its manifest at one length); the name of its mechanism."""
    tmp.mkdir(parents=True, exist_ok=True)
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
        notes["calibration"] = ("no calibration of the law's held-out error (run `snakemake validate` before "
                                "bundling, or add one with `dpscaling law bundle --calibration`)")
    if correction is not None:
        shutil.copy2(correction, tmp / CORRECTION)
    own = law_provenance(law)
    # The run's provenance is shared by its mechanisms; what σ̄ costs is each law's own.
    record = {**own, **(provenance or {}), **{key: own[key] for key in PRICING_PROVENANCE}}
    record.setdefault("created", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    record.setdefault("dpscaling_version", law.manifest()["versions"]["dpscaling"])
    bundle = Bundle(law=law, provenance=record, ranges=validated_ranges(law, found, horizon_fraction),
                    replicates=load_replicates(tmp / BOOTSTRAP, law.settings) if bootstrap is not None else None,
                    calibration=found, correction=load_correction(tmp / CORRECTION), notes=notes)
    (tmp / BUNDLE_FILE).write_text(json.dumps(bundle.manifest(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return bundle.mechanism


def write_fitted_bundle(law: Law, out: str | os.PathLike[str]) -> Bundle:
    """``dpscaling fit --out``: a freshly fitted law as a bundle, with the σ table it points to (replicates
    and a calibration are added by ``dpscaling law bundle``)."""
    import tempfile

    pointer = law.sigma_table
    table = pointer["path"] if pointer and Path(pointer["path"]).is_file() else None
    with tempfile.TemporaryDirectory() as scratch:
        law.save(Path(scratch) / LAW)
        return write_bundle(out, Path(scratch) / LAW, sigma_table=table)


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
