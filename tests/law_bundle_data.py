"""A synthetic run and its law bundle, for the tests of answers and of the Python API's documentation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from dpscaling.law import LawSettings, fit_law
from dpscaling.law.bundle import Bundle, write_bundle
from dpscaling.law.runnable import custom_param_count
from dpscaling.law.synthetic import DeterministicGaussianSigma, seeded_results

SHAPES = {"Synthetic0": (1, 2, 64), "Synthetic1": (2, 4, 128), "Synthetic2": (4, 4, 168)}


def write_run(root: Path, epsilon_octaves: tuple[int, int] = (-1, 6)) -> Path:
    """A run laid out as the workflow writes it: accounting/sigma_table.parquet (the closed-form σ of fixed
    batches in its Poisson column: the wiring is tested, not the accountant), law/fit, law/bootstrap (4
    replicates), law/physical_batch/correction.json and validate/calibration.json (q = 0.05 nats, the
    horizon set included: extrapolation validated to 2×, the calibrated region from T = 500). The table's ε are
    the powers of two of ``epsilon_octaves`` (a range's ends)."""
    from dpscaling.accounting.table import COLUMNS, STATUS_OK, save_table
    from dpscaling.law.bootstrap import replicate_grids, write_replicates
    from dpscaling.law.calibration import Calibration, write_calibration
    from dpscaling.law.physical_batch import PhysicalBatchCorrection

    e, t, q = (a.ravel() for a in np.meshgrid(2.0 ** np.arange(*epsilon_octaves), np.geomspace(10, 2e5, 16),
                                              2.0 ** np.arange(-18, 1), indexing="ij"))
    (root / "accounting").mkdir(parents=True)
    save_table(pd.DataFrame({"epsilon": e, "steps": t, "sampling_probability": q, "delta": 1e-8,
                             "sigma": DeterministicGaussianSigma()(e, t, q), "status": STATUS_OK})[list(COLUMNS)],
               root / "accounting" / "sigma_table.parquet")
    results = seeded_results(steps=2000, log_every=50, learning_rates=(2.0**-7,))
    settings = LawSettings.create(False, warmup_steps=100)
    fit_law(results, settings, seq_len=128, physical_batch=32, sigma_table=root / "accounting" / "sigma_table.parquet",
            sampling="min").save(root / "law" / "fit")
    write_replicates(replicate_grids(results, settings, range(4), seq_len=128, physical_batch=32),
                     root / "law" / "bootstrap" / "replicates.parquet")
    (root / "law" / "physical_batch").mkdir()
    (root / "law" / "physical_batch" / "correction.json").write_text(
        json.dumps(PhysicalBatchCorrection(0.1, 32, 10, 0.01).to_json()))
    (root / "validate").mkdir()
    write_calibration({"paper": Calibration("paper", False, 0.05, ("horizon (fit T <= 1000, predict the rest)",
                                                                  "noise sigma-bar 2^-10"), 2 / 3, 0.9, 0.5,
                                            iterations_from=500.0)}, root / "validate" / "calibration.json")
    return root


def shapes_provenance() -> dict:
    """What the workflow records of a run like this one: vocabulary, microbatch, corpus and model shapes."""
    return {"vocab_size": 1024, "microbatch_size": 8, "tokenizer": "train", "corpus": {"source": "synthetic"},
            "models": {name: {"family": "bert", "layers": layers, "heads": heads, "hidden": hidden,
                              "param_count": custom_param_count("bert", layers, heads, hidden, 1024, 128)}
                       for name, (layers, heads, hidden) in SHAPES.items()}}


def write_run_bundle(run: Path, out: Path) -> Bundle:
    """The run's bundle at ``out``, as `snakemake bundle` writes it."""
    law = run / "law"
    return write_bundle(out, law / "fit", provenance=shapes_provenance(),
                        sigma_table=run / "accounting" / "sigma_table.parquet", bootstrap=law / "bootstrap",
                        calibration=run / "validate" / "calibration.json",
                        correction=law / "physical_batch" / "correction.json")


def write_two_length_bundle(run: Path, out: Path) -> Bundle:
    """The run's bundle with a second length: the same synthetic curves fitted at S = 256 beside the run's
    S = 128 (no replicates at 256): a law across two lengths, for the wiring of length and privacy unit."""
    from dpscaling.law.sequence_length import write_lengths

    results = seeded_results(steps=2000, log_every=50, learning_rates=(2.0**-7,))
    settings = LawSettings.create(False, warmup_steps=100)
    longer = run / "law" / "fit-256"
    fit_law(results, settings, seq_len=256, physical_batch=32, sigma_table=run / "accounting" / "sigma_table.parquet",
            sampling="min").save(longer)
    write_lengths(run / "law" / "lengths", {128: run / "law" / "fit", 256: longer})
    law = run / "law"
    return write_bundle(out, law / "fit", provenance=shapes_provenance(),
                        sigma_table=run / "accounting" / "sigma_table.parquet", bootstrap=law / "bootstrap",
                        calibration=run / "validate" / "calibration.json", lengths=law / "lengths")


def write_mechanism_run(root: Path, bandmf_gain: float = 0.15, bandmf_half_width: float = 0.5) -> Path:
    """A run of two mechanisms laid out as the workflow writes it: the run of :func:`write_run` (DP-SGD, q =
    0.05 nats) and a BandMF law with b = 4 under ``law/mechanisms/mech=bandmf-b4/`` (the same curves,
    ``bandmf_gain`` nats lower, its own σ table of 4 bands at ``accounting/mech=bandmf-b4/`` and its own,
    wider, calibration ``validate/mech=bandmf-b4/calibration.json``), and the run's bundle of both,
    ``law/bundle`` (as rule law_bundle writes it, without recorded shapes or a physical-batch correction).
    The point predictions favour BandMF; its calibrated upper ends favour DP-SGD when the half-width is wider
    by more than the gain."""
    from dpscaling.accounting.table import COLUMNS, STATUS_OK, save_table
    from dpscaling.accounting.table_spec import TableSpec
    from dpscaling.law.bootstrap import replicate_grids, write_replicates
    from dpscaling.law.calibration import Calibration, write_calibration
    write_run(root)
    e, t, q = (a.ravel() for a in np.meshgrid(2.0 ** np.arange(-1, 6), np.geomspace(10, 2e5, 16),
                                              2.0 ** np.arange(-18, 1), indexing="ij"))
    table = root / "accounting" / "mech=bandmf-b4" / "sigma_table.parquet"
    table.parent.mkdir(parents=True)
    # The closed form at amplified BandMF's coordinates (⌈T/4⌉ participations of 4q): the wiring, not the accountant.
    sigma = np.where(4 * q <= 1, DeterministicGaussianSigma()(e, np.ceil(t / 4), np.minimum(4 * q, 1.0)), np.nan)
    save_table(pd.DataFrame({"epsilon": e, "steps": t, "sampling_probability": q, "delta": 1e-8, "sigma": sigma,
                             "status": STATUS_OK})[list(COLUMNS)], table, TableSpec(bands=4))
    results = seeded_results(steps=2000, log_every=50, learning_rates=(2.0**-7,))
    results = results.assign(**{"Cross Entropy": results["Cross Entropy"] - bandmf_gain})
    settings = LawSettings.create(False, warmup_steps=100)
    law = root / "law" / "mechanisms" / "mech=bandmf-b4"
    fit_law(results, settings, seq_len=128, physical_batch=32, sigma_table=table, sampling="min",
            mechanism="bandmf-b4").save(law / "fit")
    write_replicates(replicate_grids(results, settings, range(4), seq_len=128, physical_batch=32),
                     law / "bootstrap" / "replicates.parquet")
    calibration = root / "validate" / "mech=bandmf-b4" / "calibration.json"
    calibration.parent.mkdir(parents=True)
    write_calibration({"paper": Calibration("paper", False, bandmf_half_width,
                                            ("horizon (fit T <= 1000, predict the rest)", "noise sigma-bar 2^-10"),
                                            2 / 3, 0.9, 0.5, iterations_from=500.0)}, calibration)
    write_bundle(root / "law" / "bundle", root / "law" / "fit", sigma_table=root / "accounting" / "sigma_table.parquet",
                 bootstrap=root / "law" / "bootstrap", calibration=root / "validate" / "calibration.json",
                 mechanisms={"bandmf-b4": {"law": law / "fit", "sigma_table": table, "bootstrap": law / "bootstrap",
                                           "calibration": calibration}})
    return root


def bundled(law: Path, out: Path, **files) -> Path:
    """The law directory ``law`` of a format before bundles (a workflow's law/fit, a law across lengths)
    converted into a bundle at ``out``, with the files given (``dpscaling law bundle``)."""
    from dpscaling.law.conversion import convert_to_bundle

    convert_to_bundle(law, out, **files)
    return out
