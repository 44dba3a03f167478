"""The authors' accounting-table CSV format (no header).

Columns: ``Iterations, Sampling Probability, Epsilon, Delta, Noise Multiplier``;
one file for Poisson-amplified DP-SGD, one for unamplified (deterministic
batching), a complete Cartesian grid (see docs/fit.md, "The authors' analysis code", step 7).
Our unamplified file uses k = ⌈qT⌉ participations (module
:mod:`dpscaling.accounting.gaussian`); refused Poisson cells are written as NaN.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dpscaling.accounting.table import STATUS_OK, STATUS_REFUSED, SigmaTable

REFERENCE_COLUMNS = ["Iterations", "Sampling Probability", "Epsilon", "Delta", "Noise Multiplier"]


def _to_reference(frame: pd.DataFrame, sigma: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"Iterations": frame["steps"].astype(np.int64).to_numpy(),
                         "Sampling Probability": frame["sampling_probability"].to_numpy(),
                         "Epsilon": frame["epsilon"].to_numpy(), "Delta": frame["delta"].to_numpy(),
                         "Noise Multiplier": sigma})


def export_reference_csv(table: SigmaTable, amplified_path: str | Path,
                         unamplified_path: str | Path) -> None:
    frame = table.frame
    eps, steps, q = (frame[c].to_numpy(float) for c in ("epsilon", "steps", "sampling_probability"))
    # repr-precision floats so powers of two for q survive a round trip exactly.
    _to_reference(frame, frame["sigma"].to_numpy(float)).to_csv(
        amplified_path, header=False, index=False, float_format="%.17g")
    _to_reference(frame, table.deterministic(eps, steps, q)).to_csv(
        unamplified_path, header=False, index=False, float_format="%.17g")


def read_reference_csv(path: str | Path) -> pd.DataFrame:
    """One headerless file → our long format (columns of :data:`dpscaling.accounting.table.COLUMNS`)."""
    raw = pd.read_csv(path, header=None, names=REFERENCE_COLUMNS)
    sigma = raw["Noise Multiplier"].to_numpy(float)
    return pd.DataFrame({"epsilon": raw["Epsilon"].to_numpy(float),
                         "steps": raw["Iterations"].astype(np.int64).to_numpy(),
                         "sampling_probability": raw["Sampling Probability"].to_numpy(float),
                         "delta": raw["Delta"].to_numpy(float), "sigma": sigma,
                         "status": np.where(np.isfinite(sigma), STATUS_OK, STATUS_REFUSED)})


def import_reference_csv(amplified_path: str | Path) -> SigmaTable:
    """A :class:`SigmaTable` over an amplified (Poisson) reference table.

    The unamplified file is not needed: the deterministic branch is evaluated in
    closed form (use :func:`read_reference_csv` to compare against it).
    """
    return SigmaTable(read_reference_csv(amplified_path))
