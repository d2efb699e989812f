"""Charter's exception hierarchy.

Every refusal is a sentence a person can act on: it names what was wrong and how to fix it.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "AgentBindingError",
    "AuditError",
    "BlockedError",
    "CharterError",
    "PolicyLoadError",
    "PolicyWarning",
    "TaskClosedError",
]


class CharterError(Exception):
    """Base class of every error Charter raises on purpose."""


class PolicyLoadError(CharterError, ValueError):
    """A policy set was refused whole; `problems` lists every error found, one sentence each."""

    def __init__(self, problems: list[str], source: str = "policy set") -> None:
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"{source} refused ({count} {noun}); nothing was loaded:\n{lines}")


class TaskClosedError(CharterError):
    """A write reached a task that has already ended (or whose id was used by an ended task)."""


class AgentBindingError(CharterError):
    """An engine or runner bound to one agent was used for another."""


class BlockedError(CharterError, PermissionError):
    """The step was blocked by policy and did not run.

    Derives from PermissionError so that retry machinery which retries plain exceptions (such
    as LangGraph's default retry policy) never retries a block. `reason` is one line meant for
    the user or the model; `result` is the full evaluation (a `charter.EvalResult`, typed
    loosely here because the errors sit below the engine; None when Charter could not
    evaluate at all); `step_name` and `kind` name the step when known. Survives pickling
    (frameworks move exceptions across threads and processes).
    """

    def __init__(
        self, reason: str, result: Any = None, step_name: str = "", kind: str = ""
    ) -> None:
        self.reason = reason
        self.result = result
        self.step_name = step_name
        self.kind = kind
        # Every field is in args, so the default pickling rebuilds the same error.
        super().__init__(reason, result, step_name, kind)

    def __str__(self) -> str:
        return self.reason


class AuditError(CharterError):
    """A step could not be recorded durably (``audit_durability="sync"`` only).

    Nothing of the failing record was written and the task's history did not advance, so the
    call can be retried once the store is fixed. In buffered mode store failures are counted
    in status instead and never raised.
    """


class PolicyWarning(UserWarning):
    """A step ran although a policy warned about it (a high, medium or low violation).

    Emitted once per policy per Governor; every occurrence is also counted and logged.
    """
