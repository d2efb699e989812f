"""Shared pieces of the field rules: the `field` param and what to do when it is absent."""

from __future__ import annotations

from charter._model.paths import FieldPath, parse_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FIELD_SCHEMA: dict[str, Any] = {
    "type": "string",
    "format": "path",
    "description": "Dotted path into the step, e.g. input.command or properties.target.url.",
}


def if_missing_schema(default: str) -> dict[str, Any]:
    return {
        "type": "string",
        "enum": ["comply", "violate"],
        "description": f"What a step without the field gets (default {default}).",
    }


def field_of(params: dict[str, Any]) -> FieldPath:
    return parse_path(params["field"])
