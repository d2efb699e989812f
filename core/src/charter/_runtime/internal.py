"""The one place where Charter swallows its own errors, on the observability path only.

A store, exporter or redaction failure must never reach the agent (the step already ran, or
will run regardless), but it must never vanish either: each one is logged (the first of each
kind with its traceback, later ones at DEBUG) and counted here. `charter.testing` reads the
record so that a test suite fails loudly where production would only log. Errors on the
decision path are never swallowed into an allow; they become a block (see the runner).
"""

from __future__ import annotations

import sys
import threading
from collections import deque

TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging

    from charter._runtime.internal_error import InternalError

__all__ = [
    "charter_logger",
    "internal_error_count",
    "log_debug",
    "recent_internal_errors",
    "report_internal_error",
]


def charter_logger() -> logging.Logger:
    """The ``charter`` logger. `logging` (with `traceback` and `string`) loads on the first
    message: a hook process that logs nothing must not pay for it on every tool call."""
    import logging

    return logging.getLogger("charter")


def log_debug(message: str, *args: object) -> None:
    """Log `message` % `args` at DEBUG on the ``charter`` logger.

    Until something imports `logging` nothing can have enabled DEBUG (the root logger starts
    at WARNING and has no handler), so the message is dropped without importing it.
    """
    if "logging" in sys.modules:
        charter_logger().debug(message, *args)


_KEEP = 1000


_lock = threading.Lock()
_recent: deque[InternalError] = deque(maxlen=_KEEP)
_count = 0
_logged_kinds: set[tuple[str, str]] = set()


def report_internal_error(exc: BaseException, where: str) -> None:
    """Log and count an error Charter swallowed at `where` (e.g. "audit.append"); never raises.

    The first error of each (where, type) is logged at ERROR with its traceback, later ones
    at DEBUG, so a broken store cannot flood the log.
    """
    global _count
    try:
        kind = (where, type(exc).__name__)
        import traceback

        from charter._runtime.internal_error import InternalError

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        with _lock:
            _count += 1
            _recent.append(InternalError(_count, where, kind[1], str(exc), text))
            first = kind not in _logged_kinds
            _logged_kinds.add(kind)
        if first:
            charter_logger().error(
                "charter swallowed an internal error in %s (logged once per kind, counted in "
                "status): %s: %s",
                where,
                kind[1],
                exc,
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        else:
            log_debug("charter swallowed an internal error in %s: %s: %s", where, kind[1], exc)
    except Exception:  # the error reporter itself must never become the failure
        pass


def internal_error_count() -> int:
    """How many internal errors were swallowed in this process so far."""
    return _count


def recent_internal_errors(since: int = 0) -> list[InternalError]:
    """The retained swallowed errors whose serial is above `since` (the last 1000 are kept)."""
    with _lock:
        return [e for e in _recent if e.serial > since]
