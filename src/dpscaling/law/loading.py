"""Reading a law to answer with (docs/api.md): ``dpscaling.load_law`` on a law bundle
(:mod:`dpscaling.law.bundle`), the one format that answers, holding its sequence lengths and noise
mechanisms. The one loader of every caller: the command line, the Python API, the explorer,
``private_model`` and ``savings``. A directory in a format from before bundles is refused with the one
command that converts it (:mod:`dpscaling.law.conversion`).
"""

from __future__ import annotations

import os

from dpscaling.core.errors import UserError
from dpscaling.law.answers import ScalingLaw
from dpscaling.law.bundle import is_bundle, read_bundle
from dpscaling.law.conversion import old_format_message
from dpscaling.law.mechanisms import LawAcrossMechanisms
from dpscaling.law.noise import read_accounting_csv
from dpscaling.law.pipeline import existing_file


def load_law(path: str | os.PathLike[str], *, accounting_amplified: str | os.PathLike[str] | None = None,
             accounting_unamplified: str | os.PathLike[str] | None = None,
             mechanism: str | None = None) -> ScalingLaw | LawAcrossMechanisms:
    """The law bundle at ``path`` (``results/<run>/law/bundle``, or ``dpscaling fit --out``'s): a
    :class:`~dpscaling.law.answers.ScalingLaw`, or, for a bundle of several noise mechanisms, a
    :class:`~dpscaling.law.mechanisms.LawAcrossMechanisms` whose ``query`` chooses among them with the
    decision rule (``mechanism``: that mechanism's law only, answering as a choice of one). The authors' accounting CSVs, when given, price
    σ for a law fitted without a σ table (paper Appendix B's tables)."""
    if not is_bundle(path):
        raise UserError(old_format_message(path))
    bundle = read_bundle(path)
    tables = tuple(read_accounting_csv(existing_file(csv, flag)) if csv is not None else None
                   for csv, flag in ((accounting_amplified, "--accounting-amplified"),
                                     (accounting_unamplified, "--accounting-unamplified")))
    given = tables if any(table is not None for table in tables) else None
    if given is not None and bundle.mechanisms:
        raise UserError(f"{path}: the authors' accounting tables price DP-SGD; this bundle holds the laws of "
                        f"{[bundle.mechanism, *bundle.mechanisms]}: drop --accounting-amplified/-unamplified")
    laws = {bundle.mechanism: ScalingLaw(bundle, given),
            **{name: ScalingLaw(other, None) for name, other in bundle.mechanisms.items()}}
    if mechanism is not None:
        if mechanism not in laws:
            raise UserError(f"--mechanism: must be one of {list(laws)} (the mechanisms {path} holds), "
                            f"got {mechanism!r}")
        laws = {mechanism: laws[mechanism]}
    return laws[bundle.mechanism] if not bundle.mechanisms else LawAcrossMechanisms(laws, path)


def load_primary_law(path: str | os.PathLike[str]) -> ScalingLaw:
    """The law of the bundle's own (the run's primary) mechanism: for the callers that answer with one law
    (the explorer, ``savings``, a ``private_model`` budget that names no mechanism)."""
    if not is_bundle(path):
        raise UserError(old_format_message(path))
    return ScalingLaw(read_bundle(path), None)


__all__ = ["load_law", "load_primary_law"]
