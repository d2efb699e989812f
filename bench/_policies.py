"""The policy set the integration benchmarks govern with, shared so their figures compare."""

from __future__ import annotations

from typing import Any

INTEGRATION_POLICIES: list[dict[str, Any]] = [
    {
        "name": "no-destructive-shell",
        "rule_type": "field_matches",
        "severity": "critical",
        "match": {"kinds": ["step.exec"]},
        "params": {"field": "input.command", "pattern": r"\brm\s+-rf\s+/"},
    },
    {
        "name": "deletes-need-approval",
        "rule_type": "deny",
        "severity": "high",
        "action": "ask",
        "match": {"kinds": ["step.resource"], "verbs": ["DELETE"]},
    },
    {
        "name": "model-call-cap",
        "rule_type": "max_steps",
        "severity": "critical",
        "match": {"kinds": ["step.model"]},
        "params": {"max": 500, "select": {"kinds": ["step.model"]}},
    },
    {
        "name": "token-budget",
        "rule_type": "budget",
        "severity": "critical",
        "match": {"kinds": ["step.model"]},
        "params": {
            "field": "properties.model.usage.total_tokens",
            "limit": 10_000_000,
            "select": {"kinds": ["step.model"]},
        },
    },
    {
        "name": "known-tools",
        "rule_type": "allow_only",
        "severity": "high",
        "match": {"kinds": ["step.resource", "step.unknown"]},
        "params": {"tools": ["get_*", "lookup_*"]},
    },
]
