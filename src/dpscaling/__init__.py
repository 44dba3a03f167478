"""dpscaling: scaling laws of differentially private language-model training."""

__version__ = "0.1.0"
