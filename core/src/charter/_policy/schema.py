"""The manifest JSON Schema, built from the live rule registry (for editors, `charter schema`)."""

from __future__ import annotations

import copy
from typing import Any

from charter._policy import rules as _builtin_rules  # noqa: F401  (the built-ins' loader)
from charter._policy.manifest import MANIFEST_KEYS
from charter._policy.policy import POLICY_KEYS
from charter._policy.registry import registered_rules

__all__ = ["manifest_schema"]


def manifest_schema() -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) for manifests, one branch per registered rule's params."""
    branches = []
    for spec in registered_rules():
        branches.append(
            {
                "if": {"properties": {"rule_type": {"const": spec.name}}},
                "then": {
                    "properties": {
                        "params": _jsonschema(spec.params_schema),
                        "enforcement_point": {"enum": sorted(spec.enforcement_points)},
                    }
                },
            }
        )
    policy_props = copy.deepcopy(POLICY_KEYS)
    policy_props["rule_type"] = {
        "type": "string",
        "enum": [s.name for s in registered_rules()],
        "description": "A registered rule.",
    }
    policy = {
        "type": "object",
        "required": ["name", "rule_type", "severity"],
        "additionalProperties": False,
        "properties": {k: _jsonschema(v) for k, v in policy_props.items()},
        "allOf": branches,
    }
    manifest_props = copy.deepcopy(MANIFEST_KEYS)
    manifest_props["policies"] = {"type": "array", "items": {"$ref": "#/$defs/policy"}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Charter policy manifest",
        "type": "object",
        "required": ["name", "version", "policies"],
        "additionalProperties": False,
        "properties": manifest_props,
        "$defs": {"policy": policy},
    }


def _jsonschema(schema: Any) -> Any:
    """Charter's schema subset is JSON Schema already; only closed objects need stating."""
    if isinstance(schema, list):
        return [_jsonschema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _jsonschema(v) for k, v in schema.items()}
    if out.get("format") == "condition":
        out.pop("format")
        out["$comment"] = "a nested {rule_type, params} condition"
        out["required"] = ["rule_type"]
    elif out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    return out
