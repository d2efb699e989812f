"""orjson, for a process that lives long enough to gain from it.

Importing orjson costs a fresh process about 8 ms: its initialisation imports `dataclasses`
(and with it `inspect`), `uuid`, `platform` and `json`. A process that lives for one decision
(a hook call, whose lifetime is the user's wait) encodes a few tens of records, which the
standard library's C encoder and decoder handle in microseconds each; an agent, a server or a
store being verified encodes thousands, where orjson is several times faster per record.

So `dumps_sorted` and `loads` stand in for orjson's while the process is young: each refuses
(TypeError, ValueError) the way orjson refuses a value or text it cannot handle, and every
caller already answers that refusal by taking the standard library's path, whose output is
the same (property tested in the callers' tests). After `YOUNG` calls, or at once when
something else has imported orjson, both are rebound to orjson's own functions. Call them as
attributes of this module (``fastjson.dumps_sorted(...)``) so that the rebinding is seen.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["YOUNG", "dumps_sorted", "loads"]

#: Calls a process makes before it is taken to be long-lived (a hook call makes tens).
YOUNG = 256
_calls = [0]


class _Young(ValueError, TypeError):
    """The stand-ins' refusal: the caller takes the standard library's path."""


def _grow() -> None:
    _calls[0] += 1
    if _calls[0] > YOUNG or "orjson" in sys.modules:
        _load()


def _load() -> None:
    global dumps_sorted, loads
    import functools

    import orjson

    dumps_sorted = functools.partial(orjson.dumps, option=orjson.OPT_SORT_KEYS)
    loads = orjson.loads


def _young_dumps_sorted(value: Any) -> bytes:
    _grow()
    raise _Young("orjson is not loaded in this process yet")


def _young_loads(data: bytes | str) -> Any:
    _grow()
    raise _Young("orjson is not loaded in this process yet")


#: orjson.dumps(value, option=OPT_SORT_KEYS); raises TypeError where orjson would (and while
#: the process is young).
dumps_sorted: Callable[[Any], bytes] = _young_dumps_sorted
#: orjson.loads(data); raises ValueError where orjson would (and while the process is young).
loads: Callable[[bytes | str], Any] = _young_loads
