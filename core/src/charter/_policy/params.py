"""Checking a rule's params against its schema, with every error named by its dotted key.

The schema language is a small subset of JSON Schema (so `charter.manifest_schema()` can hand it
to editors unchanged) plus a few ``format`` values Charter checks itself: ``re2`` (a pattern
RE2 can run), ``path`` (a dotted field path), ``glob``, ``timezone`` (an IANA zone name) and
``condition`` (a nested ``{rule_type, params}`` checked against the registry).
"""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["check_params"]

_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}

# For the exact built-in types, the schema type names a value satisfies (what `_TYPES` says,
# without calling it); a subclass (an IntEnum, an OrderedDict) takes the `_TYPES` test itself.
_NAMES_OF: dict[type, frozenset[str]] = {
    str: frozenset({"string"}),
    int: frozenset({"integer", "number"}),
    float: frozenset({"number"}),
    bool: frozenset({"boolean"}),
    list: frozenset({"array"}),
    dict: frozenset({"object"}),
    type(None): frozenset({"null"}),
}
_NONE: frozenset[str] = frozenset()

# Checks a nested ``format: condition`` value: its errors, each under the given dotted key
# (whether there are any must not depend on that key).
if TYPE_CHECKING:
    ConditionChecker = Callable[[Any, str], list[str]]


def check_params(
    value: Any,
    schema: dict[str, Any],
    path: str = "params",
    check_condition: ConditionChecker | None = None,
) -> list[str]:
    """Every way `value` breaks `schema`, each as ``"<dotted key>: <what is wrong>"``.

    Returns an empty list when the value conforms. `check_condition` validates nested
    ``format: condition`` values (the registry supplies it).
    """
    # Almost every value conforms: a walk that only answers yes or no, building no dotted
    # keys, settles those; the full walk below runs only to name what is wrong.
    if _conforms(value, schema, check_condition):
        return []
    errors: list[str] = []
    _check(value, schema, path, errors, check_condition)
    return errors


def _conforms(v: Any, schema: dict[str, Any], check_condition: ConditionChecker | None) -> bool:
    """Whether `_check` would find nothing: the same tests in the same order (so the same
    exceptions escape), stopping at the first failure."""
    expected = schema.get("type")
    if expected is not None:
        if not (type(expected) is str and expected in _NAMES_OF.get(type(v), _NONE)):
            names = [expected] if isinstance(expected, str) else list(expected)
            if not any(_TYPES[n](v) for n in names):
                return False
    if "enum" in schema and v not in schema["enum"]:
        return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "minimum" in schema and v < schema["minimum"]:
            return False
        if "maximum" in schema and v > schema["maximum"]:
            return False
        if "exclusiveMinimum" in schema and v <= schema["exclusiveMinimum"]:
            return False
    elif isinstance(v, str):
        if "minLength" in schema and len(v) < schema["minLength"]:
            return False
        if "maxLength" in schema and len(v) > schema["maxLength"]:
            return False
        fmt = schema.get("format")
        if fmt is not None:
            errors: list[str] = []
            _check_format(v, fmt, "", errors)
            return not errors
    elif isinstance(v, list):
        if "minItems" in schema and len(v) < schema["minItems"]:
            return False
        if "maxItems" in schema and len(v) > schema["maxItems"]:
            return False
        item_schema = schema.get("items")
        if item_schema is not None:
            for item in v:
                if not _conforms(item, item_schema, check_condition):
                    return False
    elif isinstance(v, dict):
        if schema.get("format") == "condition":
            return check_condition is None or not check_condition(v, "")
        props: dict[str, Any] = schema.get("properties", {})
        for key in schema.get("required", ()):
            if key not in v:
                return False
        extra = schema.get("additionalProperties", not props)
        for key, item in v.items():
            if key in props:
                if not _conforms(item, props[key], check_condition):
                    return False
            elif extra is False:
                return False
            elif isinstance(extra, dict):
                if not _conforms(item, extra, check_condition):
                    return False
    return True


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _check(
    v: Any,
    schema: dict[str, Any],
    path: str,
    errors: list[str],
    check_condition: ConditionChecker | None,
) -> None:
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_TYPES[n](v) for n in names):
            errors.append(f"{path}: expected {' or '.join(names)}, got {_type_name(v)} {v!r:.60}")
            return
    if "enum" in schema and v not in schema["enum"]:
        allowed = ", ".join(repr(e) for e in schema["enum"])
        errors.append(f"{path}: {v!r:.60} is not one of {allowed}")
        return
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "minimum" in schema and v < schema["minimum"]:
            errors.append(f"{path}: {v} is below the minimum {schema['minimum']}")
        if "maximum" in schema and v > schema["maximum"]:
            errors.append(f"{path}: {v} is above the maximum {schema['maximum']}")
        if "exclusiveMinimum" in schema and v <= schema["exclusiveMinimum"]:
            errors.append(f"{path}: {v} must be greater than {schema['exclusiveMinimum']}")
    elif isinstance(v, str):
        if "minLength" in schema and len(v) < schema["minLength"]:
            errors.append(f"{path}: must be at least {schema['minLength']} characters")
        if "maxLength" in schema and len(v) > schema["maxLength"]:
            errors.append(f"{path}: must be at most {schema['maxLength']} characters")
        _check_format(v, schema.get("format"), path, errors)
    elif isinstance(v, list):
        if "minItems" in schema and len(v) < schema["minItems"]:
            errors.append(f"{path}: needs at least {schema['minItems']} item(s), got {len(v)}")
        if "maxItems" in schema and len(v) > schema["maxItems"]:
            errors.append(f"{path}: takes at most {schema['maxItems']} item(s), got {len(v)}")
        item_schema = schema.get("items")
        if item_schema is not None:
            for i, item in enumerate(v):
                _check(item, item_schema, f"{path}[{i}]", errors, check_condition)
    elif isinstance(v, dict):
        if schema.get("format") == "condition":
            if check_condition is not None:
                errors.extend(check_condition(v, path))
            return
        _check_object(v, schema, path, errors, check_condition)


def _check_object(
    v: dict[str, Any],
    schema: dict[str, Any],
    path: str,
    errors: list[str],
    check_condition: ConditionChecker | None,
) -> None:
    props: dict[str, Any] = schema.get("properties", {})
    for key in schema.get("required", ()):
        if key not in v:
            errors.append(f"{path}.{key}: required key is missing")
    extra = schema.get("additionalProperties", not props)
    for key, item in v.items():
        if key in props:
            _check(item, props[key], f"{path}.{key}", errors, check_condition)
        elif extra is False:
            known = ", ".join(sorted(props)) or "none"
            errors.append(f"{path}.{key}: unknown key; expected one of: {known}")
        elif isinstance(extra, dict):
            _check(item, extra, f"{path}.{key}", errors, check_condition)


def _check_format(v: str, fmt: str | None, path: str, errors: list[str]) -> None:
    if fmt is None:
        return
    try:
        if fmt == "re2":
            from charter._policy.regex import compile_re2

            compile_re2(v)
        elif fmt == "path":
            from charter._model.paths import parse_path

            parse_path(v)
        elif fmt == "timezone":
            _check_timezone(v)
    except ValueError as exc:
        errors.append(f"{path}: {exc}")


def _check_timezone(name: str) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{name!r} is not an IANA time zone name (e.g. 'Europe/Amsterdam', 'UTC')"
        ) from None
