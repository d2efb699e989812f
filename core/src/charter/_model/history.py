"""A task's history as the engine holds it, with incremental indexes for history rules.

History rules must not rescan the task on every step (that is how per-step cost grows with the
task). A rule asks for an index by key; the first request builds it by replaying the history
once, and from then on every recorded step updates it exactly once. Because an index is built
from the same steps in the same order, it can never drift from the history.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from charter._model.behavior import Behavior

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol, TypeVar
else:
    from charter._model.structural import Protocol

__all__ = ["HistoryIndex", "TaskHistory"]


class HistoryIndex(Protocol):
    """Anything with ``add(step)``: called once per recorded step, in seq order.

    An index may also offer ``export_state()`` (its state as plain JSON: lists, strings,
    numbers, null) and ``load_state(state)`` (take back what `export_state` gave, raising
    ValueError or TypeError on anything else), so a history can be saved and restored
    without replaying its steps (`TaskHistory.export_indexes`, `TaskHistory.restored`).
    """

    def add(self, step: Behavior) -> None: ...


if TYPE_CHECKING:
    IndexT = TypeVar("IndexT", bound=HistoryIndex)


# A saved index state that misses more steps than this is dropped at the next export rather
# than carrying the steps it misses (the index is then rebuilt from the steps when needed).
MAX_CARRIED = 16

if TYPE_CHECKING:
    Saved = tuple[str, Any, int]  # (the index's type name, its state, how many steps it covers)


class TaskHistory:
    """The recorded steps and open intents of one task.

    Rules read `steps` (recorded, in seq order, including blocked/failed/abandoned ones: check
    ``step.outcome``), `open_intents` (allowed but not yet recorded) and `index`.

    A history restored from saved index states (`restored`) holds the steps those states cover
    behind a loader: they are fetched the first time `steps` is read or an index is asked for
    whose state was not saved, and never otherwise. The loader is the caller's (the runtime
    reads its store there); the history itself does no I/O.
    """

    __slots__ = (
        "_carried",
        "_count",
        "_earlier",
        "_indexes",
        "_saved",
        "_steps",
        "action_ids",
        "closing",
        "last_seq",
        "open_intents",
        "task_id",
    )

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self._steps: list[Behavior] = []
        self.open_intents: dict[str, Behavior] = {}
        self.action_ids: set[str] = set()
        self.last_seq = 0
        self.closing = False
        self._indexes: dict[Any, HistoryIndex] = {}
        # Saved index states by key; each covers the first steps up to its count.
        self._saved: dict[str, Saved] = {}
        # While the first `_count` steps are not loaded: their loader, and the last of them
        # as the saved history carried them (what the saved states that cover fewer miss).
        # `_steps` then holds only the steps recorded since.
        self._earlier: Callable[[], list[Behavior]] | None = None
        self._count = 0
        self._carried: list[Behavior] = []

    @classmethod
    def restored(
        cls,
        task_id: str,
        indexes: Mapping[str, Saved],
        steps: int,
        carried: list[Behavior],
        earlier: Callable[[], list[Behavior]],
    ) -> TaskHistory:
        """A history of `steps` recorded steps whose index states are `indexes` (what
        `export_indexes` gave), whose last steps are `carried` (at least those the states
        miss: `steps_after`) and whose steps `earlier` returns when first needed. The caller
        sets `last_seq`, `action_ids` and `closing` as they were. `earlier` must return
        exactly those steps, in seq order; one that returns another number of steps makes
        `steps` raise (ValueError). Refuses (ValueError) a state that misses a step that is
        not carried."""
        low = steps - len(carried)
        if low < 0 or any(not low <= covers <= steps for _, _, covers in indexes.values()):
            raise ValueError("a saved index state misses steps that were not carried")
        history = cls(task_id)
        history._saved = dict(indexes)
        history._earlier = earlier
        history._count = steps
        history._carried = list(carried)
        return history

    @property
    def steps(self) -> list[Behavior]:
        if self._earlier is not None:
            self._load()
        return self._steps

    @steps.setter
    def steps(self, value: list[Behavior]) -> None:
        self._steps = value
        self._earlier = None
        self._count = 0
        self._carried = []
        self._saved = {}

    @property
    def steps_loaded(self) -> bool:
        """Whether the steps are in memory (False for a restored history not read yet)."""
        return self._earlier is None

    def _load(self) -> None:
        earlier = self._earlier
        assert earlier is not None
        loaded = list(earlier())
        if len(loaded) != self._count:
            raise ValueError(
                f"task {self.task_id!r}: {len(loaded)} earlier steps were loaded, "
                f"{self._count} were expected"
            )
        self._steps = loaded + self._steps
        self._earlier = None
        self._count = 0
        self._carried = []

    def __len__(self) -> int:
        return self._count + len(self._steps)

    def steps_after(self, n: int) -> list[Behavior]:
        """The recorded steps after the first `n`, loaded only when the carried steps of a
        restored history do not reach back that far."""
        if self._earlier is not None:
            low = self._count - len(self._carried)
            if n >= low:
                return self._carried[n - low :] + self._steps
        return self.steps[n:]

    def step_at(self, seq: int) -> Behavior | None:
        """The recorded step with `seq`, or None; the steps are loaded only when it is not
        among those in memory."""
        for group in (self._steps, self._carried) if self._earlier is not None else ():
            for step in reversed(group):
                if step.seq == seq:
                    return step
        for step in reversed(self.steps):
            if step.seq == seq:
                return step
        return None

    def index(self, key: Any, factory: Callable[[], IndexT]) -> IndexT:
        """The index stored under `key`, built by `factory` and replayed on first request.

        `key` must identify everything the index depends on (e.g. the rule name and its
        selector), so that two policies with the same parameters share one index. A saved
        state under `key` (see `restored`) is loaded instead of replaying the steps it covers
        when it is of the index's type and loads; otherwise the steps are replayed.
        """
        idx = self._indexes.get(key)
        if idx is not None:
            return idx  # type: ignore[return-value]
        built = factory()
        saved = self._saved.get(key) if type(key) is str else None
        if saved is not None and self._load_saved(built, saved):
            for step in self.steps_after(saved[2]):
                built.add(step)
        else:
            built = factory()
            for step in self.steps:
                built.add(step)
        self._indexes[key] = built
        return built

    @staticmethod
    def _load_saved(built: HistoryIndex, saved: Saved) -> bool:
        kind, state, _ = saved
        load = getattr(built, "load_state", None)
        if type(built).__name__ != kind or load is None:
            return False
        try:
            load(state)
        except (ValueError, TypeError, KeyError):
            return False
        return True

    def export_indexes(self) -> dict[str, Saved]:
        """The state of every index that can export one and is stored under a string key:
        with its type name and the number of steps it covers (all of them), what `restored`
        takes. Saved states not asked for since a restore are carried over as they are
        while they miss at most `MAX_CARRIED` steps (give `restored` those steps too)."""
        total = len(self)
        out = {
            key: saved
            for key, saved in self._saved.items()
            if key not in self._indexes and total - saved[2] <= MAX_CARRIED
        }
        for key, idx in self._indexes.items():
            export = getattr(idx, "export_state", None)
            if type(key) is str and export is not None:
                out[key] = (type(idx).__name__, export(), total)
        return out

    def split(self, n: int) -> tuple[TaskHistory, list[Behavior]]:
        """A new history of the first `n` steps (no open intents, ids, seq or indexes: the
        caller sets them) and the steps after them. The new history stays behind the loader
        when `n` does not cut into the steps the loader covers, so that undoing a step never
        loads the earlier ones."""
        out = TaskHistory(self.task_id)
        out._saved = {k: v for k, v in self._saved.items() if v[2] <= n}
        if self._earlier is not None and n >= self._count:
            out._earlier = self._earlier
            out._count = self._count
            out._carried = self._carried
            cut = n - self._count
            out._steps = self._steps[:cut]
            return out, self._steps[cut:]
        steps = self.steps
        out._steps = steps[:n]
        return out, steps[n:]

    def append(self, step: Behavior) -> None:
        self._steps.append(step)
        self.last_seq = step.seq or self.last_seq
        for idx in self._indexes.values():
            idx.add(step)
