"""A task's history as the engine holds it, with incremental indexes for history rules.

History rules must not rescan the task on every step (that is how per-step cost grows with the
task). A rule asks for an index by key; the first request builds it by replaying the history
once, and from then on every recorded step updates it exactly once. Because an index is built
from the same steps in the same order, it can never drift from the history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from charter._model.behavior import Behavior

__all__ = ["HistoryIndex", "TaskHistory"]


class HistoryIndex(Protocol):
    """Anything with ``add(step)``: called once per recorded step, in seq order."""

    def add(self, step: Behavior) -> None: ...


IndexT = TypeVar("IndexT", bound=HistoryIndex)


class TaskHistory:
    """The recorded steps and open intents of one task.

    Rules read `steps` (recorded, in seq order, including blocked/failed/abandoned ones: check
    ``step.outcome``), `open_intents` (allowed but not yet recorded) and `index`.
    """

    __slots__ = (
        "_indexes",
        "action_ids",
        "closing",
        "last_seq",
        "open_intents",
        "steps",
        "task_id",
    )

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.steps: list[Behavior] = []
        self.open_intents: dict[str, Behavior] = {}
        self.action_ids: set[str] = set()
        self.last_seq = 0
        self.closing = False
        self._indexes: dict[Any, HistoryIndex] = {}

    def __len__(self) -> int:
        return len(self.steps)

    def index(self, key: Any, factory: Callable[[], IndexT]) -> IndexT:
        """The index stored under `key`, built by `factory` and replayed on first request.

        `key` must identify everything the index depends on (e.g. the rule name and its
        selector), so that two policies with the same parameters share one index.
        """
        idx = self._indexes.get(key)
        if idx is None:
            built = factory()
            for step in self.steps:
                built.add(step)
            self._indexes[key] = built
            return built
        return idx  # type: ignore[return-value]

    def append(self, step: Behavior) -> None:
        self.steps.append(step)
        self.last_seq = step.seq or self.last_seq
        for idx in self._indexes.values():
            idx.add(step)
