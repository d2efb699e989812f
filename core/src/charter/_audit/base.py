"""The audit store contract: what every store promises (the shapes of its reports, which
only listing and verifying need, are in `charter._audit.report`).

A store keeps one hash chain per (agent_id, task_id). Stores never raise anything but
`StoreError` on purpose; every message is a sentence naming the store and what to do.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from charter._audit.chain import ChainHead, PreparedEntry, decode_ijson, prepare_entry
from charter._model.errors import CharterError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal, Protocol, runtime_checkable

    from charter._audit.report import TaskSummary, VerifyReport

    GapCause = Literal["queue_full", "refused", "closed"]
else:
    from charter._model.structural import Protocol, runtime_checkable

    GapCause = str  # a type alias only (typing is not imported at run time)

__all__ = [
    "GAP_CAUSES",
    "GAP_KEY",
    "INTENT_KEY",
    "SHARED_KEY",
    "AuditStore",
    "GapCause",
    "StoreError",
    "check_process",
    "check_store_path",
    "closed_error",
    "decode_task_records",
    "is_intent_record",
    "prepare_batch",
    "seq_error",
]


class StoreError(CharterError):
    """An audit store refused or failed an operation; nothing was written by the failing call."""


GAP_CAUSES: tuple[GapCause, ...] = ("queue_full", "refused", "closed")

#: Where a record declares the records of its chain that were dropped just before it.
GAP_KEY = "charter.gap"

#: ``meta[INTENT_KEY] is True`` marks a write-ahead intent record: in sync durability an
#: allowed step's intent is committed before the step runs; its outcome follows at a later
#: seq with the same action_id.
INTENT_KEY = "charter.intent"

#: Where a step's record keeps the counts read outside its task (see `charter._runtime.shared`).
SHARED_KEY = "charter.shared"


def is_intent_record(record: Mapping[str, Any]) -> bool:
    """True for a stored write-ahead intent record (not a step's outcome)."""
    meta = record.get("meta")
    return isinstance(meta, Mapping) and meta.get(INTENT_KEY) is True


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

        Each entry lacks prev_hash/hash and may carry the seq its writer assigned (the
        runner does: seq is assigned when a step is recorded and never renumbered, so a
        dropped record leaves a gap); without one the store assigns head.seq + 1. Inside its
        write transaction or lock, per (agent_id, task_id), the store checks the seq is above
        the head, sets prev_hash to the head's hash, computes hash, commits, and only then
        returns. Entries of one chain in one call are chained in order. Raises StoreError
        (nothing written) on failure, on an entry that is not I-JSON, already carries
        prev_hash/hash or has a seq not above its chain's head, and on an append to a chain
        whose end marker is already stored (the message names the task).
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

    def add_checkpoints(self, checkpoints: Sequence[Mapping[str, Any]]) -> None:
        """Keep signed checkpoints (wire forms, see `Checkpoint.to_wire`) beside the chains.

        They are kept as given, in order, atomically (all or nothing), never checked here
        (verify checks their signatures). Raises StoreError (nothing kept) on failure.
        """
        ...

    def read_checkpoints(self) -> list[object]:
        """Every checkpoint kept, in the order kept, decoded but not checked: whatever the
        store holds, so verify can judge it (a stored body that is not JSON is None)."""
        ...

    def health(self) -> dict[str, Any]:
        """{"ok": bool, "location": str, "detail": str}; never raises."""
        ...

    def close(self) -> None:
        """Release files and connections; later calls raise StoreError. Idempotent."""
        ...


def prepare_batch(entries: Sequence[Mapping[str, Any] | PreparedEntry]) -> list[PreparedEntry]:
    """Check and pre-canonicalise a batch for `append`.

    An entry that is already a `PreparedEntry` (Charter's writer prepares the records it
    redacted itself, for a store class that sets ``_takes_prepared``) is taken as it is.
    Raises StoreError naming the first refused entry (by position) and why.
    """
    if isinstance(entries, (Mapping, str, bytes)):
        raise StoreError("append takes a sequence of entries, not a single entry")
    prepared: list[PreparedEntry] = []
    total = len(entries)
    for index, entry in enumerate(entries):
        if isinstance(entry, PreparedEntry):
            prepared.append(entry)
            continue
        try:
            prepared.append(prepare_entry(entry))
        except ValueError as exc:
            raise StoreError(
                f"audit entry {index + 1} of {total} was refused and nothing was written: {exc}"
            ) from None
    return prepared


def decode_task_records(
    bodies: Sequence[tuple[int, str | bytes]], task_id: str, location: str
) -> list[dict[str, Any]]:
    """The records of one task from its stored (seq, body) rows, in the order given.

    Raises StoreError naming the task and the first seq whose body is not a JSON object of
    I-JSON values (and telling to run verify: such a record cannot hash as it was sealed), or
    when there are no rows at all."""
    if not bodies:
        raise StoreError(f"task {task_id!r} is not in {location}")
    records: list[dict[str, Any]] = []
    for seq, body in bodies:
        try:
            record = decode_ijson(body)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            raise StoreError(
                f"record seq {seq} of task {task_id!r} in {location} is malformed; run verify"
            )
        records.append(record)
    return records


def seq_error(reason: str, task_id: str, location: str) -> StoreError:
    """The refusal for an entry whose own seq does not follow its chain's head."""
    return StoreError(
        f"audit store {location} refused task {task_id!r}: {reason}; nothing was written"
    )


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
