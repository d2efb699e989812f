"""How the middleware tells the callback handler "this step is mine": one record per step.

While the middleware runs a model or tool call it has gated, it sets a claim in a context
variable. LangChain runs callbacks in the caller's context (or a copy of it, on executor
threads), so the handler sees the claim on that call's start event, takes it, and neither
gates nor records that run. A claim is taken once: nested runs inside a claimed tool (a
chain, another model) are not claimed and stay governed by the handler.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Claim", "claimed", "current_claim"]


@dataclass(slots=True)
class Claim:
    """One gated call: `kind` is "model" or "tool"; a tool claim names its call id and tool.

    `governor` and `task_id` let a handler that shares the middleware's Governor put the
    steps it does record (nested ones) into the middleware's task.
    """

    kind: str
    call_id: str | None
    name: str | None
    governor: Any
    task_id: str
    _taken: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, kind: str, call_id: str | None, name: str | None = None) -> bool:
        """True (once) when this claim covers a `kind` run with `call_id` (or, from a
        langchain-core that does not pass tool call ids to callbacks, with `name`)."""
        if kind != self.kind:
            return False
        if kind == "tool":
            same = call_id == self.call_id if call_id is not None else name == self.name
            if not same:
                return False
        with self._lock:
            if self._taken:
                return False
            self._taken = True
            return True


_current: contextvars.ContextVar[Claim | None] = contextvars.ContextVar(
    "charter_langchain.claim", default=None
)


def current_claim() -> Claim | None:
    return _current.get()


@contextmanager
def claimed(claim: Claim) -> Iterator[Claim]:
    token = _current.set(claim)
    try:
        yield claim
    finally:
        try:
            _current.reset(token)
        except ValueError:  # reset from another context (a generator finalised elsewhere)
            _current.set(None)
