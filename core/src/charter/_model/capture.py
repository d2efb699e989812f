"""Turn any Python value into I-JSON, for integrations that hand Charter framework objects."""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import enum
import math
import uuid
from collections.abc import Mapping
from decimal import Decimal
from pathlib import PurePath
from typing import Any

from charter._model.ijson import MAX_SAFE_INT

__all__ = ["capture"]

_TRUNCATED = "…[truncated {n} chars]"


def capture(
    value: Any,
    *,
    max_string: int | None = None,
    max_items: int | None = None,
    max_depth: int | None = 32,
) -> Any:
    """Return an I-JSON rendering of `value`; never raises.

    Known types map faithfully (datetimes to ISO text, bytes to base64, Decimal and over-large
    ints to strings, NaN/Infinity to strings, sets to sorted lists, dataclasses, pydantic models
    and objects with ``model_dump``/``dict``/``__dict__`` to objects); anything else becomes its
    ``repr``. Limits cut visibly: a long string ends with ``…[truncated N chars]``, a long
    collection ends with a ``"…[N more items]"`` marker (a ``"…"`` key for objects), and nesting
    deeper than `max_depth` becomes ``"…[max depth]"``. Cycles become ``"…[cycle]"``.
    """
    try:
        return _Capture(max_string, max_items, max_depth).run(value, 0, set())
    except Exception as exc:  # capture must never fail an agent step
        return f"…[uncapturable {type(exc).__name__}]"


@dataclasses.dataclass(slots=True)
class _Capture:
    max_string: int | None
    max_items: int | None
    max_depth: int | None

    def text(self, s: str) -> str:
        if self.max_string is not None and len(s) > self.max_string:
            return s[: self.max_string] + _TRUNCATED.format(n=len(s) - self.max_string)
        return s

    def run(self, v: Any, depth: int, seen: set[int]) -> Any:
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, str):
            return self.text(str(v))
        if isinstance(v, int) and not isinstance(v, enum.Enum):
            return int(v) if -MAX_SAFE_INT <= v <= MAX_SAFE_INT else str(int(v))
        if isinstance(v, float):
            return float(v) if math.isfinite(v) else repr(float(v))
        if isinstance(v, enum.Enum):
            return self.run(v.value, depth, seen)
        if isinstance(v, _dt.datetime | _dt.date | _dt.time):
            return v.isoformat()
        if isinstance(v, _dt.timedelta):
            return v.total_seconds()
        if isinstance(v, Decimal | uuid.UUID | PurePath | complex):
            return str(v)
        if isinstance(v, bytes | bytearray | memoryview):
            raw = bytes(v)
            if self.max_string is not None and len(raw) > self.max_string:
                cut = base64.b64encode(raw[: self.max_string]).decode("ascii")
                return cut + _TRUNCATED.format(n=len(raw) - self.max_string)
            return base64.b64encode(raw).decode("ascii")
        if self.max_depth is not None and depth >= self.max_depth:
            return "…[max depth]"
        if id(v) in seen:
            return "…[cycle]"
        seen.add(id(v))
        try:
            return self.container(v, depth, seen)
        finally:
            seen.discard(id(v))

    def container(self, v: Any, depth: int, seen: set[int]) -> Any:
        if isinstance(v, Mapping):
            return self.mapping(v.items(), len(v), depth, seen)
        if isinstance(v, list | tuple | frozenset | set):
            items = list(v)
            if isinstance(v, set | frozenset):
                items.sort(key=repr)
            return self.sequence(items, depth, seen)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            fields = {f.name: getattr(v, f.name, None) for f in dataclasses.fields(v)}
            return self.mapping(fields.items(), len(fields), depth, seen)
        for method in ("model_dump", "dict", "to_dict"):
            fn = getattr(v, method, None)
            if callable(fn) and not isinstance(v, type):
                try:
                    dumped = fn()
                except Exception:
                    continue
                if isinstance(dumped, Mapping):
                    return self.run(dict(dumped), depth, seen)
        attrs = getattr(v, "__dict__", None)
        if isinstance(attrs, dict) and attrs and not isinstance(v, type):
            public = {k: a for k, a in attrs.items() if not k.startswith("_")}
            return self.mapping(public.items(), len(public), depth, seen)
        return self.text(repr(v))

    def mapping(self, items: Any, size: int, depth: int, seen: set[int]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i, (k, val) in enumerate(items):
            if self.max_items is not None and i >= self.max_items:
                out["…"] = f"…[{size - self.max_items} more items]"
                break
            key = k if isinstance(k, str) else str(self.run(k, depth + 1, seen))
            out[key] = self.run(val, depth + 1, seen)
        return out

    def sequence(self, items: list[Any], depth: int, seen: set[int]) -> list[Any]:
        limit = self.max_items
        kept = items if limit is None else items[:limit]
        out = [self.run(x, depth + 1, seen) for x in kept]
        if limit is not None and len(items) > limit:
            out.append(f"…[{len(items) - limit} more items]")
        return out
