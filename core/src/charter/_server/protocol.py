"""The decision protocol, version 1: envelopes, errors, and the checks that name the field.

One request is a JSON object ``{"v": 1, "id": ..., "op": "...", "params": {...}, "nonce":
"..."}`` (``id`` is echoed, ``nonce`` asks for a `proof`); one answer is ``{"v": 1, "id": ...,
"ok": true, "result": {...}, "proof": "..."}`` or ``{"v": 1, "id": ..., "ok": false, "error":
{"code", "field", "message"}}``. Over the unix socket each is one line of UTF-8 JSON; over
HTTP the params are the body of ``POST /v1/<op>`` and the answer is the response body.
A bad request is answered with an error that names the field and how to fix it; it never
ends the connection, let alone the server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from charter._runtime.project_files import PROTOCOL, proof

__all__ = [
    "MAX_LINE",
    "ProtocolError",
    "answer_error",
    "answer_ok",
    "optional",
    "parse_request",
    "required",
]

# The longest request line the socket reads (a tool input of a few MB fits).
MAX_LINE = 16 * 1024 * 1024


class ProtocolError(Exception):
    """A request that cannot be served: `code` (bad_request, unknown_op, unknown_task,
    unknown_action, unknown_approval, task_ended, wrong_project, unauthorized, internal),
    `field` (the JSON path of the value at fault, or None) and a message saying how to fix it."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.message = message

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "field": self.field, "message": self.message}


def parse_request(raw: bytes | str) -> dict[str, Any]:
    """The request envelope in `raw`, checked; raises ProtocolError naming what is wrong."""
    try:
        request = json.loads(raw)
    except ValueError as exc:
        raise ProtocolError(
            "bad_request", f"the request is not JSON ({exc}); send one JSON object per line"
        ) from None
    if not isinstance(request, dict):
        raise ProtocolError(
            "bad_request",
            f"the request is a JSON {type(request).__name__}, not an object; send "
            '{"v": 1, "op": "...", "params": {...}}',
        )
    version = request.get("v", PROTOCOL)
    if version != PROTOCOL:
        raise ProtocolError(
            "bad_request",
            f"protocol version {version!r} is not served; this server speaks v {PROTOCOL}",
            "v",
        )
    op = request.get("op")
    if not isinstance(op, str) or not op:
        raise ProtocolError("bad_request", 'name the operation, e.g. "op": "step"', "op")
    params = request.get("params", {})
    if not isinstance(params, dict):
        raise ProtocolError("bad_request", "params must be a JSON object", "params")
    nonce = request.get("nonce")
    if nonce is not None and (not isinstance(nonce, str) or not 16 <= len(nonce) <= 128):
        raise ProtocolError("bad_request", "nonce must be text of 16 to 128 characters", "nonce")
    return request


def answer_ok(request: Mapping[str, Any] | None, result: Any, secret: str | None) -> dict[str, Any]:
    """The success envelope for `request`, with a proof when it sent a nonce."""
    out: dict[str, Any] = {"v": PROTOCOL, "ok": True, "result": result}
    if request is not None:
        if "id" in request:
            out["id"] = request["id"]
        nonce = request.get("nonce")
        if isinstance(nonce, str) and secret is not None:
            out["proof"] = proof(secret, nonce, result)
    return out


def answer_error(request: Mapping[str, Any] | None, error: ProtocolError) -> dict[str, Any]:
    out: dict[str, Any] = {"v": PROTOCOL, "ok": False, "error": error.to_dict()}
    if request is not None and "id" in request:
        out["id"] = request["id"]
    return out


def _type_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "text", dict: "a JSON object", list: "a list", bool: "true or false"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def required(params: Mapping[str, Any], name: str, kind: type | tuple[type, ...] = str) -> Any:
    """``params[name]``, which must be present, of `kind`, and not empty text."""
    if name not in params or params[name] is None:
        raise ProtocolError("bad_request", f"params.{name} is required", f"params.{name}")
    return _checked(params, name, kind)


def optional(
    params: Mapping[str, Any], name: str, kind: type | tuple[type, ...] = str, default: Any = None
) -> Any:
    """``params[name]`` when present (and not null), of `kind`; else `default`."""
    if params.get(name) is None:
        return default
    return _checked(params, name, kind)


def _checked(params: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = params[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        raise ProtocolError(
            "bad_request",
            f"params.{name} must be {_type_name(kind)}, not {type(value).__name__}",
            f"params.{name}",
        )
    if isinstance(value, str) and not value:
        raise ProtocolError("bad_request", f"params.{name} is empty", f"params.{name}")
    return value
