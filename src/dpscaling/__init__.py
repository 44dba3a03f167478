"""dpscaling: scaling laws of differentially private language-model training.

The Python API (docs/api.md)::

    import dpscaling

    law = dpscaling.load_law("results/default/law/bundle")
    answer = law.query(compute=1e13, epsilon=4, users=1e5)
"""

__version__ = "0.1.0"

# The API's names, imported on first use: `import dpscaling` stays free of pandas and scipy.
_API = {"load_law": "loading", "ScalingLaw": "answers", "Answer": "answers", "Configuration": "answers",
        "Runnable": "answers", "ExtrapolationRefused": "answers", "LawAcrossMechanisms": "mechanisms",
        "MechanismChoice": "mechanisms"}


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(f"dpscaling.law.{_API[name]}"), name)
    raise AttributeError(f"module 'dpscaling' has no attribute {name!r}")


__all__ = sorted(_API)
