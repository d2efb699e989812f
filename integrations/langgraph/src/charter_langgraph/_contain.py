"""Containment of errors on the recording path (outcomes, task ends): logged and counted.

A step that already ran must never fail because its outcome could not be written. The core
keeps its swallowed-error counter private, so this package keeps its own, which the package's
tests check after every test (see tests/conftest.py).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

logger = logging.getLogger("charter.langgraph")

_lock = threading.Lock()
_count = 0
_logged: set[tuple[str, str]] = set()


@dataclass(frozen=True, slots=True)
class ContainedError:
    """One error this package swallowed: a serial number, where, its type and message."""

    serial: int
    where: str
    type: str
    message: str


_recent: deque[ContainedError] = deque(maxlen=200)


def contain(exc: BaseException, where: str) -> None:
    """Log (the first of each kind with its traceback) and count `exc`; never raises."""
    global _count
    try:
        kind = (where, type(exc).__name__)
        with _lock:
            _count += 1
            _recent.append(ContainedError(_count, where, kind[1], str(exc)))
            first = kind not in _logged
            _logged.add(kind)
        if first:
            logger.error(
                "charter-langgraph could not record %s (the graph goes on; logged once per "
                "kind): %s: %s",
                where,
                kind[1],
                exc,
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        else:
            logger.debug("charter-langgraph could not record %s: %s: %s", where, kind[1], exc)
    except Exception:  # the reporter must never become the failure
        pass


def contained_count() -> int:
    """How many recording errors this package swallowed in this process."""
    return _count


def contained_since(serial: int) -> list[ContainedError]:
    """The retained swallowed errors whose serial is above `serial`."""
    with _lock:
        return [e for e in _recent if e.serial > serial]
