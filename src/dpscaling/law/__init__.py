"""Scaling-law fitting and querying (paper §3.3 "Semi-parametric Modeling", §3.4 "Using the Fitted Functions").

One module per step: :mod:`collect` (curves → tidy table), :mod:`smoothing`,
:mod:`extrapolation`, :mod:`interpolation`, :mod:`noise` (σ for a query),
:mod:`queries` (constant-compute search, saturating compute), :mod:`parametric`
(L̂1, L̂2), :mod:`artifact` (the saved law). Settings in :mod:`settings`.
"""

from dpscaling.law.artifact import Law, fit_law, read_law
from dpscaling.law.settings import LawSettings, Window

__all__ = ["Law", "LawSettings", "Window", "fit_law", "read_law"]
