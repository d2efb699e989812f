"""The I-JSON payload rule (RFC 7493) and canonical digests.

Payloads are hashed, exported and replayed; a value that would change in a JSON round trip
(NaN, a 2**60 integer, a tuple, bytes) could not be audited faithfully, so it is refused at the
boundary with the path that holds it.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

__all__ = ["MAX_SAFE_INT", "canonical_digest", "checked_copy"]

MAX_SAFE_INT = 2**53 - 1


def checked_copy(value: Any, path: str) -> Any:
    """Return a deep copy of `value` made only of I-JSON types.

    Raises ValueError naming the first offending path, e.g.
    ``input.items[2]: float NaN is not I-JSON``. The copy is defensive: later mutation of the
    caller's object cannot change what was judged or recorded.
    """
    t = type(value)
    if t is str or value is None or t is bool:
        return value
    if t is int:
        if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            return value
        raise ValueError(
            f"{path}: integer {value} is not I-JSON (magnitude above 2**53-1); pass it as a string"
        )
    if t is float:
        if math.isfinite(value):
            return value
        raise ValueError(f"{path}: float {_float_name(value)} is not I-JSON; use null or a string")
    if t is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise ValueError(
                    f"{path}: key {k!r} ({type(k).__name__}) is not I-JSON; keys must be strings"
                )
            out[k] = checked_copy(v, f"{path}.{k}")
        return out
    if t is list:
        return [checked_copy(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise ValueError(
        f"{path}: {t.__name__} is not I-JSON; use dict, list, str, int, float, bool or None "
        "(charter.capture converts any value)"
    )


def _float_name(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def canonical_digest(value: Any) -> str:
    """SHA-256 hex digest of an I-JSON value's canonical form (sorted keys, no spaces).

    Used to bind approvals and loop detection to "the same input"; two values digest equal
    exactly when they are equal as JSON. A lone surrogate (no UTF-8 for it) is hashed as its
    surrogate code unit, so such a value digests too, distinctly.
    """
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
