"""A config block as a frozen, typed dataclass (:class:`Block`): one field per key of its part of the schema,
nested blocks declared by the class, the mapping it came from given back in the config's key order.

Each block remembers the order (and presence) of its keys as the config gave them, and
:meth:`Block.to_mapping` gives them back in that order: Snakemake compares a job's params by their
``repr``, so a param rebuilt in another key order would rerun every finished job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dpscaling.errors import UserError


@dataclass(frozen=True, kw_only=True)
class Block:
    """A config block: one field per key; nested blocks named in ``NESTED`` (one block), ``NESTED_LISTS``
    (a list of blocks) and ``NESTED_MAPS`` (a mapping of names to blocks)."""

    NAME: ClassVar[str] = ""
    NESTED: ClassVar[Mapping[str, type[Block]]] = {}
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {}
    NESTED_MAPS: ClassVar[Mapping[str, type[Block]]] = {}
    keys: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str | None = None) -> Block:
        where = where or cls.NAME
        names = {f.name for f in dataclasses.fields(cls)} - {"keys"}
        unknown = sorted(set(values) - names)
        if unknown:
            raise UserError(f"config key {where!r}: unknown key(s) {unknown}; accepted keys: {sorted(names)}")
        converted = {}
        for key, value in values.items():
            inner = f"{where}.{key}" if where else key
            if key in cls.NESTED:
                value = cls.NESTED[key].from_mapping(value, inner)
            elif key in cls.NESTED_LISTS:
                value = tuple(cls.NESTED_LISTS[key].from_mapping(v, f"{inner}[{i}]") for i, v in enumerate(value))
            elif key in cls.NESTED_MAPS:
                value = {name: cls.NESTED_MAPS[key].from_mapping(v, f"{inner}.{name}") for name, v in value.items()}
            converted[key] = _frozen(value)
        try:
            return cls(**converted, keys=tuple(values))
        except TypeError as error:  # a key the schema requires is missing: not validated
            raise UserError(f"config key {where!r}: {error} (validate the config against the schema first)") from None

    def to_mapping(self) -> dict[str, Any]:
        """The block as plain data (lists, dicts), its keys in the config's order."""
        return {key: plain(getattr(self, key)) for key in self.keys}


def _frozen(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, Mapping) and not isinstance(value, Block):
        return {k: _frozen(v) for k, v in value.items()}
    return value


def plain(value: Any) -> Any:
    """``value`` with every block, mapping and tuple in it as plain dicts and lists (YAML- and JSON-ready)."""
    if isinstance(value, Block):
        return value.to_mapping()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
