"""The OpenAPI 3.1 document of the HTTP face of the decision protocol (``GET /v1/openapi.json``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from charter._runtime.project_files import PROTOCOL

__all__ = ["document"]

_OBJ: dict[str, Any] = {"type": "object"}
_TEXT: dict[str, Any] = {"type": "string", "minLength": 1}

_DECISION: dict[str, Any] = {
    "type": "object",
    "required": ["decision", "reason"],
    "properties": {
        "decision": {"enum": ["allow", "warn", "ask", "block"]},
        "reason": {"type": "string"},
        "action_id": {
            "type": ["string", "null"],
            "description": "allow / warn: settle the step with POST /v1/record",
        },
        "approval_id": {"type": "string", "description": "ask: answer with POST /v1/answer"},
        "digest": {"type": "string", "description": "ask: SHA-256 of the step's canonical input"},
        "ungoverned": {"type": "boolean"},
        "violations": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "policy": {"type": "string"},
                    "rule_type": {"type": "string"},
                    "severity": {"type": "string"},
                    "ask": {"type": "boolean"},
                    "details": {"type": ["string", "null"]},
                },
            },
        },
    },
}

_PARAMS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "hello": ("The server's protocol version, project and operations.", {"type": "object"}, _OBJ),
    "status": ("Request counters and the runner's status.", {"type": "object"}, _OBJ),
    "start_task": (
        "Start a task (task.start is judged and recorded).",
        {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": _TEXT,
                "task_id": _TEXT,
                "input": _OBJ,
                "properties": _OBJ,
            },
        },
        {
            "type": "object",
            "properties": {
                "decision": {"enum": ["allow", "block"]},
                "task_id": {"type": ["string", "null"]},
                "reason": {"type": "string"},
            },
        },
    ),
    "step": (
        "Judge one step before it runs: either kind/verb/name/input/properties, or a tool "
        "call (tool, args) mapped by the templates.",
        {
            "type": "object",
            "required": ["task_id"],
            "properties": {
                "task_id": _TEXT,
                "kind": {"type": "string", "examples": ["step.exec", "step.resource"]},
                "verb": {"enum": ["GET", "POST", "PATCH", "DELETE"]},
                "name": _TEXT,
                "input": _OBJ,
                "properties": _OBJ,
                "call_id": _TEXT,
                "framework": _TEXT,
                "tool": _TEXT,
                "args": _OBJ,
                "template": _TEXT,
            },
        },
        _DECISION,
    ),
    "record": (
        "Record the outcome of an allowed step.",
        {
            "type": "object",
            "required": ["action_id", "outcome"],
            "properties": {
                "action_id": _TEXT,
                "outcome": {"enum": ["ok", "failed", "abandoned"]},
                "output": {},
                "error": {"oneOf": [{"type": "string"}, {"type": "object"}]},
            },
        },
        {"type": "object", "properties": {"recorded": {"type": "boolean"}}},
    ),
    "answer": (
        "Answer an ask; the step is judged again with the answer on record.",
        {
            "type": "object",
            "required": ["approval_id", "approve", "by"],
            "properties": {
                "approval_id": _TEXT,
                "approve": {"type": "boolean"},
                "by": _TEXT,
                "reason": {"type": "string"},
            },
        },
        _DECISION,
    ),
    "end_task": (
        "End a task (open steps are recorded as abandoned).",
        {
            "type": "object",
            "required": ["task_id"],
            "properties": {"task_id": _TEXT, "output": {}, "error": {}},
        },
        {"type": "object", "properties": {"ended": {"type": "boolean"}}},
    ),
    "shutdown": ("Stop the server (the store is flushed).", {"type": "object"}, _OBJ),
}


def document(ops: Sequence[str]) -> dict[str, Any]:
    """The OpenAPI document for a server serving `ops` (extension ops take any object)."""
    error = {
        "type": "object",
        "required": ["v", "ok", "error"],
        "properties": {
            "v": {"const": PROTOCOL},
            "ok": {"const": False},
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "string"},
                    "field": {"type": ["string", "null"]},
                    "message": {"type": "string"},
                },
            },
        },
    }
    paths: dict[str, Any] = {}
    for op in ops:
        summary, params, result = _PARAMS.get(op, (f"Extension operation {op}.", _OBJ, _OBJ))
        paths[f"/v1/{op}"] = {
            "post": {
                "operationId": op.replace(".", "_"),
                "summary": summary,
                "security": [{"bearer": []}],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": params}},
                },
                "responses": {
                    "200": {
                        "description": "done",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["v", "ok", "result"],
                                    "properties": {
                                        "v": {"const": PROTOCOL},
                                        "ok": {"const": True},
                                        "result": result,
                                    },
                                }
                            }
                        },
                    },
                    "400": {
                        "description": "a malformed request (error.field names the value)",
                        "content": {"application/json": {"schema": error}},
                    },
                    "401": {"description": "missing or wrong bearer token"},
                },
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Charter decision server",
            "version": str(PROTOCOL),
            "description": (
                "Judge agent steps before they run and record what they did. The same "
                "operations are served over the project's unix socket as JSON lines."
            ),
        },
        "servers": [{"url": "/"}],
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": paths,
    }
