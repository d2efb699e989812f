"""The audit store contract: what every store promises, and the shapes it reports in.

A store keeps one hash chain per (agent_id, task_id). Stores never raise anything but
`StoreError` on purpose; every message is a sentence naming the store and what to do.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from charter._audit.chain import ChainHead, PreparedEntry, prepare_entry
from charter._model.errors import CharterError

__all__ = [
    "BREAK_REASONS",
    "AuditStore",
    "BreakReason",
    "ChainBreak",
    "StoreError",
    "TaskSummary",
    "VerifyReport",
    "check_process",
    "check_store_path",
    "closed_error",
    "prepare_batch",
]


class StoreError(CharterError):
    """An audit store refused or failed an operation; nothing was written by the failing call."""


BreakReason = Literal["edited", "deleted", "inserted", "reordered", "truncated", "malformed"]

BREAK_REASONS: tuple[BreakReason, ...] = (
    "edited",
    "deleted",
    "inserted",
    "reordered",
    "truncated",
    "malformed",
)


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """One chain as `list_tasks` sees it.

    `steps` is the number of stored records, `closed` is True once the task's end marker
    (task.end / task.error / task.idle) is stored, and `last_kind` is the kind of the record
    with the highest seq.
    """

    agent_id: str
    task_id: str
    steps: int
    first_timestamp: str
    last_timestamp: str
    closed: bool
    last_kind: str


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first place a chain stops being trustworthy.

    `seq` is the sequence number where the break happens (for a deleted or truncated range,
    the first missing seq). A line that cannot be attributed to any chain (JSONL garbage)
    has empty `agent_id`/`task_id` and seq 0; its `detail` names the line.
    """

    agent_id: str
    task_id: str
    seq: int
    reason: BreakReason
    detail: str

    def __str__(self) -> str:
        if not self.task_id and not self.agent_id:
            return f"{self.reason}: {self.detail}"
        return f"task {self.task_id} seq {self.seq} {self.reason}: {self.detail}"


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The outcome of verifying a store (or one task of it).

    `ok` is True exactly when `breaks` is empty. `warnings` lists things worth a look that do
    not make the trail untrustworthy, such as a torn last line left by a crash mid-write.
    """

    ok: bool
    chains_checked: int
    steps_checked: int
    breaks: list[ChainBreak] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def first_break(self) -> ChainBreak | None:
        """The first break found, or None when the store verified."""
        return self.breaks[0] if self.breaks else None

    def __str__(self) -> str:
        if self.ok:
            chains = "chain" if self.chains_checked == 1 else "chains"
            steps = "step" if self.steps_checked == 1 else "steps"
            text = f"ok: {self.chains_checked} {chains}, {self.steps_checked} {steps} verified"
            if self.warnings:
                noun = "warning" if len(self.warnings) == 1 else "warnings"
                text += f" ({len(self.warnings)} {noun}: {self.warnings[0]})"
            return text
        text = f"broken: {self.breaks[0]}"
        if len(self.breaks) > 1:
            others = len(self.breaks) - 1
            text += f" (and {others} more {'break' if others == 1 else 'breaks'})"
        return text


@runtime_checkable
class AuditStore(Protocol):
    """Where chained audit records live.

    Implementations are safe to share between threads of one process (an internal lock
    serialises calls) and between processes writing the same file (each store serialises its
    appends with the file's own locking). Open one store object per process.
    """

    location: str

    def append(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Chain and commit `entries` atomically (all or nothing) and return them chained.

        Each entry lacks seq/prev_hash/hash; the store assigns seq = head.seq + 1 per
        (agent_id, task_id) inside its write transaction or lock, sets prev_hash, computes
        hash, commits, and only then returns. Entries of one chain in one call are chained in
        order. Raises StoreError (nothing written) on failure, on an entry that is not I-JSON or
        already carries seq/prev_hash/hash, and on an append to a chain whose end marker is
        already stored (the message names the task).
        """
        ...

    def head(self, agent_id: str, task_id: str) -> ChainHead:
        """The committed head of one chain; ChainHead() (seq 0, no hash) for an unknown chain."""
        ...

    def list_tasks(self, agent_id: str | None = None) -> list[TaskSummary]:
        """One summary per chain (optionally only `agent_id`'s), in order of first appearance."""
        ...

    def read_task(self, task_id: str, agent_id: str | None = None) -> list[dict[str, Any]]:
        """The stored records of one task in seq order, exactly as they were returned by append.

        Raises StoreError when the task is unknown, or when `agent_id` is None and the task id
        exists under several agents (the message lists them and asks for agent_id).
        """
        ...

    def verify(self, task_id: str | None = None) -> VerifyReport:
        """Check every chain (or every chain of `task_id`); never modifies the store.

        Raises StoreError when `task_id` is given but not stored.
        """
        ...

    def health(self) -> dict[str, Any]:
        """{"ok": bool, "location": str, "detail": str}; never raises."""
        ...

    def close(self) -> None:
        """Release files and connections; later calls raise StoreError. Idempotent."""
        ...


def prepare_batch(entries: Sequence[Mapping[str, Any]]) -> list[PreparedEntry]:
    """Check and pre-canonicalise a batch for `append`.

    Raises StoreError naming the first refused entry (by position) and why.
    """
    if isinstance(entries, Mapping | str | bytes):
        raise StoreError("append takes a sequence of entries, not a single entry")
    prepared: list[PreparedEntry] = []
    total = len(entries)
    for index, entry in enumerate(entries):
        try:
            prepared.append(prepare_entry(entry))
        except ValueError as exc:
            raise StoreError(
                f"audit entry {index + 1} of {total} was refused and nothing was written: {exc}"
            ) from None
    return prepared


def closed_error(task_id: str, agent_id: str, location: str) -> StoreError:
    """The refusal for appending to a chain whose end marker is already stored."""
    who = f" of agent {agent_id!r}" if agent_id else ""
    return StoreError(
        f"task {task_id!r}{who} is closed in {location}: its end marker is stored, so nothing "
        "more can be appended to it; nothing was written"
    )


def check_store_path(path: str, create: bool) -> None:
    """Make sure `path` can hold a store file, creating its parent directories if `create`.

    Raises StoreError naming the path when it is a directory, when it is missing and
    `create` is False, or when its directory cannot be created (for instance because a
    parent is a regular file).
    """
    if os.path.isdir(path):
        raise StoreError(f"audit store {path} is a directory, not a file")
    if os.path.exists(path):
        return
    if not create:
        raise StoreError(f"there is no audit store at {path}")
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create the directory {parent} for audit store {path}: {exc.strerror or exc}"
        ) from None


def check_process(owner_pid: int, location: str) -> None:
    """Refuse use of a store object in a process forked from the one that opened it.

    An inherited SQLite connection or file lock is shared with the parent, which would let
    both processes believe they hold the write lock; the child must open its own store.
    """
    if os.getpid() != owner_pid:
        raise StoreError(
            f"audit store {location} was opened in another process (before a fork); "
            "open a new store in this process"
        )
