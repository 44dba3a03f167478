"""A config block as a frozen, typed dataclass (:class:`Block`): one field per key of its part of the schema,
nested blocks declared by the class, the mapping it came from given back in the config's key order.

The schema (``dpscaling/config/config.schema.yaml``) is the one declaration of every key: its type, default,
accepted values, description and roles (``x-roles``, :mod:`dpscaling.config.roles`). :func:`from_schema`
builds a block's fields from it, so a block class holds only what is derived from its keys (its methods) and
which block class a nested key is (``NESTED``, ``NESTED_LISTS``, ``NESTED_MAPS``). A new key is one edit of
the schema.

Each block remembers the order (and presence) of its keys as the config gave them, and
:meth:`Block.to_mapping` gives them back in that order: Snakemake compares a job's params by their
``repr``, so a param rebuilt in another key order would rerun every finished job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from dpscaling.config.roles import ROLES
from dpscaling.config.schema import schema
from dpscaling.core.errors import UserError


@dataclass(frozen=True, kw_only=True)
class Block:
    """A config block: one field per key; nested blocks named in ``NESTED`` (one block), ``NESTED_LISTS``
    (a list of blocks) and ``NESTED_MAPS`` (a mapping of names to blocks)."""

    NAME: ClassVar[str] = ""
    SCHEMA_PATH: ClassVar[str] = ""  # where its keys are declared (:func:`from_schema`)
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


# A schema type → the field's annotation (arrays become tuples: blocks are frozen).
_TYPES: dict[str, Any] = {"integer": int, "number": float, "boolean": bool, "string": str,
                          "array": tuple[Any, ...], "object": Mapping[str, Any]}


def schema_node(path: str, root: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """The schema node at ``path``: dotted keys from the top, ``[]`` after a key for its list's items and
    ``*`` for a mapping's values (``"training.repeat_points[]"``, ``"models.custom.*"``); "" is the top."""
    node = schema() if root is None else root
    for part in filter(None, path.split(".")):
        if part == "*":
            node = node["additionalProperties"]
            continue
        node = node["properties"][part.removesuffix("[]")]
        if part.endswith("[]"):
            node = node["items"]
    return node


def _annotation(spec: Mapping[str, Any], nested: Any, optional: bool) -> Any:
    types = spec.get("type", ())
    types = [types] if isinstance(types, str) else list(types)
    if nested is not None:
        annotation = nested
    else:
        known = {_TYPES[kind] for kind in types if kind in _TYPES}
        annotation = known.pop() if len(known) == 1 else Any
    return Optional[annotation] if optional or "null" in types else annotation  # noqa: UP007 (built at run time)


def from_schema(path: str, root: Mapping[str, Any] | None = None) -> Callable[[type], type]:
    """Make the decorated class a frozen :class:`Block` dataclass with one field per key of the schema node at
    ``path`` (:func:`schema_node`; ``root``: another schema than the repository's), in the schema's order:
    each field's roles and position from the key's ``x-roles`` and ``x-position``; a key with neither a
    default nor a place in ``required`` is optional (None when absent), every other one is given by the
    validated config. The class declares no field of its own."""

    def build(cls: type) -> type:
        node = schema_node(path, root)
        own = {name: kind for name, kind in cls.__dict__.get("__annotations__", {}).items()
               if not str(kind).startswith("ClassVar")}
        if own:
            raise TypeError(f"{cls.__name__}: fields {sorted(own)} are declared by the schema at {path!r}, not here")
        nested = {**cls.NESTED, **{key: tuple[block, ...] for key, block in cls.NESTED_LISTS.items()},
                  **{key: Mapping[str, block] for key, block in cls.NESTED_MAPS.items()}}
        required = set(node.get("required", ()))
        annotations = dict(cls.__dict__.get("__annotations__", {}))
        for key, spec in node["properties"].items():
            roles = frozenset(spec.get("x-roles", ()))
            if roles - set(ROLES):
                raise ValueError(f"schema key {path}.{key}: unknown role(s) {sorted(roles - set(ROLES))}; "
                                 f"accepted: {list(ROLES)}")
            optional = "default" not in spec and key not in required
            annotations[key] = _annotation(spec, nested.get(key), optional)
            metadata = {"roles": roles, "position": spec.get("x-position")}
            setattr(cls, key, field(default=None, metadata=metadata) if optional else field(metadata=metadata))
        cls.__annotations__ = annotations
        cls.SCHEMA_PATH = path
        return dataclass(frozen=True, kw_only=True)(cls)

    return build
