"""An interactive explorer of a law's answers (docs/explorer.md): one self-contained HTML page where ε, the
data budget and compute move and the compute-optimal answer, its interval, its flags and the trade-offs
follow. :mod:`.sweep` asks the law at every point of a grid (``ScalingLaw.query``, the code of
``dpscaling query``); :mod:`.page` writes the page."""

from dpscaling.report.explorer.page import write_explorer
from dpscaling.report.explorer.sweep import ExplorerGrid, default_grid

__all__ = ["ExplorerGrid", "default_grid", "write_explorer"]
