"""The workflow's config schema (``config.schema.yaml`` beside this module, package data so that an installed
wheel reads it; ``workflow/schemas/config.schema.yaml`` links to it): the one place every key, its type and its
default are declared.

:func:`validate_config` checks a config against it and fills the defaults (one line naming the key on
an error); :func:`default` reads one key's default, so library classes that stand alone
(:class:`dpscaling.train.config.TrainConfig`, the accounting table's spec, the figures' settings,
the audit's settings) take their defaults from here instead of declaring them again.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from dpscaling.core.errors import UserError

SCHEMA = Path(__file__).resolve().with_name("config.schema.yaml")


@functools.cache
def schema() -> dict[str, Any]:
    """The workflow's config schema, parsed once per process."""
    if not SCHEMA.is_file():
        raise UserError(f"the config schema {SCHEMA} is missing: this dpscaling installation is incomplete "
                        "(reinstall it; a wheel ships the schema as package data)")
    return _parsed(SCHEMA)


@functools.cache
def _parsed(path: Path) -> dict[str, Any]:
    import yaml

    # libyaml's loader where PyYAML has it: every job's process reads the schema once, 10x faster
    return yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _frozen(value: Any) -> Any:
    """A default as an immutable value (lists → tuples, mappings → tuples of items are not needed)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def default(key: str) -> Any:
    """The schema's default of a dotted config key (``"training.adam_b1"``), lists as tuples."""
    node = schema()
    for part in key.split("."):
        try:
            node = node["properties"][part]
        except KeyError:
            raise KeyError(f"config key {key!r} is not in the schema") from None
    if "default" not in node:
        raise KeyError(f"config key {key!r} has no default in the schema")
    return _frozen(node["default"])


def validate_config(config: dict[str, Any], path: str | Path = SCHEMA) -> None:
    """Validate ``config`` against the JSON schema at ``path``, filling its defaults, as
    ``snakemake.utils.validate`` does (JSON Schema 2020-12, defaults set where ``properties`` declares
    them), with the schema parsed once per process by libyaml instead of on every call.

    A schema error is raised as a :class:`UserError` of one line that names the config key, what is wrong
    and what is accepted, instead of jsonschema's dump of the whole schema.
    """
    from jsonschema.exceptions import ValidationError

    check_moved_keys(config)
    try:
        _filling_validator(Path(path).resolve()).validate(config)
    except ValidationError as error:
        raise UserError(describe_schema_error(error)) from error


@functools.cache
def _filling_validator(path: Path) -> Any:
    """A 2020-12 validator of the schema at ``path`` that sets each property's default where it is missing
    (the jsonschema FAQ's recipe, which ``snakemake.utils.validate`` uses)."""
    from jsonschema import Draft202012Validator, validators

    check_properties = Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    # a copy: the parsed schema is shared by every config of this process
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from check_properties(validator, properties, instance, schema)

    return validators.extend(Draft202012Validator, {"properties": set_defaults})(_parsed(path))


# Keys that moved: the old place → the new one (a config that still sets the old one is told where it went).
MOVED_KEYS: dict[str, str] = {"finetune.public_sources": "data.public_sources"}


def check_moved_keys(config: dict[str, Any]) -> None:
    """Refuse a key of :data:`MOVED_KEYS` at its old place, naming the new one."""
    for old, new in MOVED_KEYS.items():
        block, key = old.split(".")
        if isinstance(config.get(block), dict) and key in config[block]:
            raise UserError(f"config key '{old}': moved to '{new}' (the public domain serves more than "
                            "fine-tuning); set it there")


def describe_schema_error(error: Any) -> str:
    """``config key 'a.b': <problem>; accepted: <what the schema allows>``."""
    key = ".".join(str(part) for part in error.absolute_path) or "(top level)"
    accepted = ""
    if error.validator == "additionalProperties" and isinstance(error.schema, dict):
        accepted = f"; accepted keys: {sorted(error.schema.get('properties', {}))}"
    elif error.validator == "pattern":  # every pattern in the schema is a name that becomes a path
        accepted = (
            "; it names a directory, so it must be one safe path component: letters, digits, _ and -"
            f" (the pattern {error.validator_value})"
        )
    elif error.validator == "type":
        if "number" in str(error.validator_value) and isinstance(error.instance, str):
            accepted = "; write numbers as 1.0e-3, not 1e-3 (YAML reads that as a string)"
    elif error.validator in ("oneOf", "anyOf"):
        accepted = "; accepted: " + " or ".join(_accepted_form(option) for option in error.validator_value)
    return f"config key {key!r}: {error.message}{accepted}"


def _accepted_form(schema: dict[str, Any]) -> str:
    """One alternative of a ``oneOf`` in words: ``a list of number``, ``a mapping {tuned_doublings: integer}``."""
    kind = schema.get("type")
    if "enum" in schema:
        return f"one of {schema['enum']}"
    if "const" in schema:
        return repr(schema["const"])
    if "pattern" in schema:
        return f"a name matching {schema['pattern']}"
    if kind == "array":
        return f"a list of {_accepted_form(schema.get('items', {}))}"
    if kind == "object" and "properties" in schema:
        fields = ", ".join(f"{name}: {_accepted_form(sub)}" for name, sub in schema["properties"].items())
        return f"a mapping {{{fields}}}"
    bounds = [f"{word} {schema[bound]}" for bound, word in (("minimum", ">="), ("exclusiveMinimum", ">"),
                                                             ("maximum", "<=")) if bound in schema]
    return " ".join([str(kind or "any value"), *bounds])
