"""Turn any Python value into I-JSON, for integrations that hand Charter framework objects."""

from __future__ import annotations

import datetime as _dt
import enum
import math
import sys
from collections.abc import Mapping

from charter._model.ijson import MAX_SAFE_INT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["LOST_MARKS", "capture", "capture_noted", "is_lost"]

_TRUNCATED = "…[truncated {n} chars]"
_MAX_DEPTH = "…[max depth]"
_UNCAPTURABLE = "…[uncapturable"
# What a value Charter could not capture becomes: a policy that reads one cannot judge the
# step (the engine blocks it), and the secret scan cannot see inside it.
LOST_MARKS = (_MAX_DEPTH, _UNCAPTURABLE)


def is_lost(value: Any) -> bool:
    """Whether `value` is (or holds, anywhere inside) the mark of a value that could not be
    captured: cut at the depth limit, or uncapturable."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str:
            if v.startswith(LOST_MARKS):
                return True
        elif t is dict:
            stack.extend(v.values())
        elif t is list:
            stack.extend(v)
    return False


def capture(
    value: Any,
    *,
    max_string: int | None = None,
    max_items: int | None = None,
    max_depth: int | None = 32,
) -> Any:
    """Return an I-JSON rendering of `value`; never raises.

    Known types map faithfully (datetimes to ISO text, bytes to the text they decode to as
    UTF-8, invalid bytes kept as lone surrogates, Decimal and over-large ints to exact
    decimal strings, NaN/Infinity to strings, sets to sorted lists, dataclasses, pydantic
    models and objects with ``model_dump``/``dict``/``__dict__`` to objects); anything else
    becomes its ``repr``. Limits cut visibly: a long string ends with ``…[truncated N
    chars]``, a long collection ends with a ``"…[N more items]"`` marker (a ``"…"`` key for
    objects), and nesting deeper than `max_depth` becomes ``"…[max depth]"``. Cycles become
    ``"…[cycle]"``. A value that cannot be converted (its ``repr`` raises, say) becomes
    ``"…[uncapturable <error>]"`` in its place only; the rest is captured (see `is_lost`).
    """
    if type(value) is str and (max_string is None or len(value) <= max_string):
        return value  # most captured values are text: two calls fewer for each
    return capture_noted(value, max_string=max_string, max_items=max_items, max_depth=max_depth)[0]


def capture_noted(
    value: Any,
    *,
    max_string: int | None = None,
    max_items: int | None = None,
    max_depth: int | None = 32,
) -> tuple[Any, dict[str, str]]:
    """`capture`, and a note per converted bytes value: its path (``command``,
    ``args[1]``; ``""`` for `value` itself) and how it was read (``bytes as utf-8``)."""
    if max_depth is not None:
        try:
            return _plain(value, max_string, max_items, max_depth), {}
        except _NotPlain:
            pass
    run = _Capture(max_string, max_items, max_depth, {})
    try:
        return run.run(value, 0, set(), ""), run.notes
    except Exception as exc:  # capture must never fail an agent step
        return _lost(exc), run.notes


class _NotPlain(Exception):
    """`_plain` met something the general capture has to convert, cut or mark."""


def _plain(value: Any, max_string: int | None, max_items: int | None, depth_left: int) -> Any:
    """The capture of a value made only of plain JSON types within the limits (exact dict,
    list, str, int within 2**53-1, finite float, bool, None; nothing to cut, nesting within
    the depth limit, so no cycle either): a plain copy, which is what the general walk gives
    for it at a fraction of the cost. Raises _NotPlain for anything else."""
    t = type(value)
    if t is str:
        if max_string is not None and len(value) > max_string:
            raise _NotPlain
        return value
    if t is int:
        if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            return value
        raise _NotPlain
    if value is None or t is bool:
        return value
    if t is float:
        if math.isfinite(value):
            return value
        raise _NotPlain
    if t is not dict and t is not list:
        raise _NotPlain
    if depth_left <= 0 or (max_items is not None and len(value) > max_items):
        raise _NotPlain
    # Strings, None and booleans, most of any payload, are taken in the loop: a call per
    # value cost more than the rest of the copy.
    depth_left -= 1
    if t is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _NotPlain
            tv = type(v)
            if tv is str:
                if max_string is not None and len(v) > max_string:
                    raise _NotPlain
                out[k] = v
            elif v is None or tv is bool:
                out[k] = v
            else:
                out[k] = _plain(v, max_string, max_items, depth_left)
        return out
    items: list[Any] = []
    for v in value:
        tv = type(v)
        if tv is str:
            if max_string is not None and len(v) > max_string:
                raise _NotPlain
            items.append(v)
        elif v is None or tv is bool:
            items.append(v)
        else:
            items.append(_plain(v, max_string, max_items, depth_left))
    return items


def _lost(exc: BaseException) -> str:
    detail = str(exc).replace("\n", " ")[:80]
    return f"{_UNCAPTURABLE} {type(exc).__name__}{': ' + detail if detail else ''}]"


def _path_text(path: Any) -> str:
    """The text of a path built as nested ``(parent, key or index)`` pairs from ``""``:
    ``args[1]``, ``headers.auth``. Built only when a note needs it (building every child's
    path string as capture descends cost more than the capture)."""
    parts: list[str | int] = []
    while path != "":
        path, last = path
        parts.append(last)
    text = ""
    for part in reversed(parts):
        if type(part) is int:
            text += f"[{part}]"
        else:
            text = f"{text}.{part}" if text else str(part)
    return text


def _int_text(v: int) -> str:
    # str() refuses ints above 4,300 digits; Decimal's own conversion has no such limit.
    try:
        return str(v)
    except ValueError:
        from decimal import Decimal

        return str(Decimal(v))


# Captured as their str(): (module, class). A Decimal, UUID or path can exist only once its module
# was imported, so they are looked up, not imported: a process that never uses one (a hook
# call) does not pay for the modules.
_STRINGIFIED = (("decimal", "Decimal"), ("uuid", "UUID"), ("pathlib", "PurePath"))


def _is_loaded(v: object, classes: tuple[tuple[str, str], ...]) -> bool:
    for module, name in classes:
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(v, getattr(loaded, name)):
            return True
    return False


class _Capture:
    __slots__ = ("max_depth", "max_items", "max_string", "notes")

    def __init__(
        self,
        max_string: int | None,
        max_items: int | None,
        max_depth: int | None,
        notes: dict[str, str],
    ) -> None:
        self.max_string = max_string
        self.max_items = max_items
        self.max_depth = max_depth
        self.notes = notes

    def text(self, s: str) -> str:
        if self.max_string is not None and len(s) > self.max_string:
            return s[: self.max_string] + _TRUNCATED.format(n=len(s) - self.max_string)
        return s

    def run(self, v: Any, depth: int, seen: set[int], path: Any) -> Any:
        try:
            return self.node(v, depth, seen, path)
        except RecursionError:
            raise  # unwinds to `capture_noted`: no frame left to build a mark in
        except Exception as exc:  # only this value is lost, not its siblings
            return _lost(exc)

    def node(self, v: Any, depth: int, seen: set[int], path: Any) -> Any:
        # Plain JSON leaves first, by exact type: most of what an agent hands over.
        t = type(v)
        if t is str:
            return self.text(v)
        if t is int:
            return v if -MAX_SAFE_INT <= v <= MAX_SAFE_INT else _int_text(v)
        if v is None or t is bool:
            return v
        if t is float:
            return v if math.isfinite(v) else repr(v)
        if t is dict or t is list:
            # Plain containers next, by exact type: the generic path below asks the
            # abstract Mapping first, which costs more than the copy for small ones.
            if self.max_depth is not None and depth >= self.max_depth:
                return _MAX_DEPTH
            if id(v) in seen:
                return "…[cycle]"
            seen.add(id(v))
            try:
                if t is dict:
                    return self.mapping(v.items(), len(v), depth, seen, path)
                return self.sequence(list(v), depth, seen, path)
            finally:
                seen.discard(id(v))
        if isinstance(v, str):
            return self.text(str(v))
        if isinstance(v, int) and not isinstance(v, enum.Enum):
            return int(v) if -MAX_SAFE_INT <= v <= MAX_SAFE_INT else _int_text(int(v))
        if isinstance(v, float):
            return float(v) if math.isfinite(v) else repr(float(v))
        if isinstance(v, enum.Enum):
            return self.run(v.value, depth, seen, path)
        if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
            return v.isoformat()
        if isinstance(v, _dt.timedelta):
            return v.total_seconds()
        if isinstance(v, complex) or _is_loaded(v, _STRINGIFIED):
            return str(v)
        if isinstance(v, (bytes, bytearray, memoryview)):
            # Judged as the text a tool would act on: a shell reads b"rm -rf /" as rm -rf /.
            raw = bytes(v)
            if self.max_string is not None and len(raw) > self.max_string:
                cut = raw[: self.max_string].decode("utf-8", "surrogateescape")
                self.notes[_path_text(path)] = "bytes as utf-8"
                return cut + _TRUNCATED.format(n=len(raw) - self.max_string)
            self.notes[_path_text(path)] = "bytes as utf-8"
            return raw.decode("utf-8", "surrogateescape")
        if self.max_depth is not None and depth >= self.max_depth:
            return _MAX_DEPTH
        if id(v) in seen:
            return "…[cycle]"
        seen.add(id(v))
        try:
            return self.container(v, depth, seen, path)
        finally:
            seen.discard(id(v))

    def container(self, v: Any, depth: int, seen: set[int], path: Any) -> Any:
        if isinstance(v, Mapping):
            return self.mapping(v.items(), len(v), depth, seen, path)
        if isinstance(v, (list, tuple, frozenset, set)):
            items = list(v)
            if isinstance(v, (set, frozenset)):
                items.sort(key=repr)
            return self.sequence(items, depth, seen, path)
        # dataclasses.is_dataclass's own test: a value can only be a dataclass instance when
        # the dataclasses module made its class (or it is Frozen), so it is imported then.
        if hasattr(type(v), "__dataclass_fields__") and not isinstance(v, type):
            import dataclasses

            fields = {f.name: getattr(v, f.name, None) for f in dataclasses.fields(v)}
            return self.mapping(fields.items(), len(fields), depth, seen, path)
        for method in ("model_dump", "dict", "to_dict"):
            fn = getattr(v, method, None)
            if callable(fn) and not isinstance(v, type):
                try:
                    dumped = fn()
                except Exception:
                    continue
                if isinstance(dumped, Mapping):
                    return self.run(dict(dumped), depth, seen, path)
        attrs = getattr(v, "__dict__", None)
        if isinstance(attrs, dict) and attrs and not isinstance(v, type):
            public = {k: a for k, a in attrs.items() if not k.startswith("_")}
            return self.mapping(public.items(), len(public), depth, seen, path)
        return self.text(repr(v))

    def mapping(
        self, items: Any, size: int, depth: int, seen: set[int], path: Any
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i, (k, val) in enumerate(items):
            if self.max_items is not None and i >= self.max_items:
                out["…"] = f"…[{size - self.max_items} more items]"
                break
            key = k if isinstance(k, str) else str(self.run(k, depth + 1, seen, path))
            out[key] = self.run(val, depth + 1, seen, (path, key))
        return out

    def sequence(self, items: list[Any], depth: int, seen: set[int], path: Any) -> list[Any]:
        limit = self.max_items
        kept = items if limit is None else items[:limit]
        out = [self.run(x, depth + 1, seen, (path, i)) for i, x in enumerate(kept)]
        if limit is not None and len(items) > limit:
            out.append(f"…[{len(items) - limit} more items]")
        return out
