"""Which step a node is: the user's per-node table, else the node's metadata, else step.exec.

An entry is a kind (``"step.model"``), a (kind, verb) pair, or a mapping with ``kind``,
``verb`` and ``properties``. Entries are checked when the graph is governed, so a typo in a
kind, a verb the kind does not take, or an entry for a node that does not exist is refused
before anything runs.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import charter

# Node metadata key holding the node's mapping: add_node(..., metadata={"charter": ...}).
METADATA_KEY = "charter"

_STEPS = [k.value for k in charter.ActionKind if k not in charter.TASK_BOUNDARY_KINDS]


@dataclass(frozen=True, slots=True)
class NodeRule:
    """How one node is described: its step kind, verb and extra properties."""

    kind: str = "step.exec"
    verb: str | None = None
    properties: Mapping[str, Any] = field(default_factory=dict)


def parse_rule(value: Any, where: str) -> NodeRule:
    """A NodeRule from one table or metadata entry; ValueError naming `where` and the fix."""
    properties: Any = {}
    if isinstance(value, str):
        kind, verb = value, None
    elif isinstance(value, Mapping):
        unknown = sorted(set(value) - {"kind", "verb", "properties"})
        if unknown:
            raise ValueError(f"{where}: unknown key {unknown[0]!r}; use kind, verb and properties")
        if "kind" not in value:
            raise ValueError(f"{where}: missing kind; write e.g. {{'kind': 'step.resource'}}")
        kind, verb, properties = value["kind"], value.get("verb"), value.get("properties") or {}
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        kind, verb = value
    else:
        raise ValueError(
            f"{where}: {value!r} is not a node mapping; write a kind ('step.model'), a "
            "(kind, verb) pair or {'kind': ..., 'verb': ..., 'properties': {...}}"
        )
    if kind not in _STEPS:
        if kind in {k.value for k in charter.TASK_BOUNDARY_KINDS}:
            raise ValueError(
                f"{where}: {kind} is a task boundary, not a step; charter-langgraph records "
                "task boundaries itself"
            )
        close = difflib.get_close_matches(str(kind), _STEPS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(
            f"{where}: {kind!r} is not a step kind{hint}; use one of " + ", ".join(_STEPS)
        )
    takes = [v.value for v in charter.verbs_for(charter.ActionKind(kind))]
    if verb is None and takes:
        raise ValueError(f"{where}: {kind} needs a verb; use one of " + ", ".join(takes))
    if verb is not None and str(verb).upper() not in takes:
        allowed = "/".join(takes) if takes else "no verb (use None)"
        raise ValueError(f"{where}: {kind} does not take verb {verb!r}; it takes {allowed}")
    if not isinstance(properties, Mapping):
        raise ValueError(f"{where}: properties must be a mapping")
    return NodeRule(kind, str(verb).upper() if verb is not None else None, dict(properties))


def parse_table(table: Mapping[str, Any] | None) -> dict[str, NodeRule]:
    """The user's `nodes=` table, every entry checked."""
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ValueError("nodes= must be a mapping of node name to kind, (kind, verb) or dict")
    return {str(name): parse_rule(value, f"nodes[{name!r}]") for name, value in table.items()}


def check_table_names(table: Mapping[str, NodeRule], names: Iterable[str]) -> None:
    """Refuse table entries for nodes the graph does not have (a typo would go unmapped)."""
    known = list(names)
    for name in table:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"nodes[{name!r}]: the graph has no node {name!r}{hint} (its nodes: "
                + ", ".join(repr(n) for n in known)
                + ")"
            )


def rule_for(
    name: str, table: Mapping[str, NodeRule], metadata: Mapping[str, Any] | None
) -> NodeRule:
    """The table's entry, else the node metadata's ``charter`` entry, else step.exec."""
    if name in table:
        return table[name]
    if metadata and METADATA_KEY in metadata:
        return parse_rule(metadata[METADATA_KEY], f"node {name!r} metadata[{METADATA_KEY!r}]")
    return NodeRule()
