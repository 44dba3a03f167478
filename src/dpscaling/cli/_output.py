"""Printing results for humans or, with ``--json``, as one JSON object."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from typing import Any


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if hasattr(value, "item"):  # numpy scalars
        return _jsonable(value.item())
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def emit(result: Mapping[str, Any], as_json: bool) -> None:
    """Print ``result`` as one JSON object, or as aligned ``key: value`` lines."""
    if as_json:
        json.dump(_jsonable(result), sys.stdout)
        sys.stdout.write("\n")
        return
    width = max((len(str(k)) for k in result), default=0)
    for key, value in result.items():
        if isinstance(value, float):
            shown = f"{value:.6g}"
        elif isinstance(value, list) and value and all(isinstance(v, float) for v in value):
            shown = "[" + ", ".join(f"{v:.6g}" for v in value) + "]"  # intervals, ranges
        else:
            shown = value
        print(f"{str(key):<{width}}  {shown}")
