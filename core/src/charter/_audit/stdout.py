"""The stdout audit store: one canonical JSON line per record on standard output.

Chain heads live only in this object's memory, so records are chained per process run and
cannot be read back or verified from here (pipe stdout to a file and verify that as JSONL).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from charter._audit.base import StoreError, closed_error, prepare_batch
from charter._audit.chain import ChainHead, canonical_json, seal
from charter._audit.report import TaskSummary, VerifyReport

__all__ = ["StdoutStore"]

_UNREADABLE = (
    "the stdout audit store cannot be read back: its records went to standard output; "
    "use a sqlite:/// or jsonl:/// store to list, read or verify them"
)


class StdoutStore:
    """Writes each chained record as one line to `stream` (sys.stdout at write time).

    One object may be shared by threads; an internal lock keeps batches whole and in order.
    """

    # append takes entries Charter's writer prepared itself (`prepare_batch`).
    _takes_prepared = True

    location = "stdout"

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._chains: dict[tuple[str, str], tuple[ChainHead, bool]] = {}
        self._closed = False

    def append(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Chain `entries`, write them as one block and flush; see AuditStore.append.

        Raises StoreError when the stream cannot be written; the heads then do not advance
        (a stream that failed half-way may still have received part of the block).
        """
        prepared = prepare_batch(entries)
        if not prepared:
            return []
        with self._lock:
            if self._closed:
                raise StoreError("audit store stdout is closed")
            heads: dict[tuple[str, str], tuple[ChainHead, bool]] = {}
            lines: list[bytes] = []
            chained: list[dict[str, Any]] = []
            for item in prepared:
                key = (item.agent_id, item.task_id)
                head, closed = heads.get(key) or self._chains.get(key) or (ChainHead(), False)
                if closed:
                    raise closed_error(item.task_id, item.agent_id, self.location)
                sealed = seal(item, head)
                heads[key] = (ChainHead(sealed.seq, sealed.hash), item.closing)
                lines.append(sealed.body + b"\n")
                chained.append(sealed.entry)
            self._write(b"".join(lines))
            self._chains.update(heads)
        return chained

    def _write(self, data: bytes) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        try:
            binary = getattr(stream, "buffer", None)
            if binary is not None:
                # Write the UTF-8 bytes themselves so the lines stay canonical whatever the
                # stream's text encoding; flush the text layer first to keep ordering.
                stream.flush()
                binary.write(data)
                binary.flush()
            else:
                stream.write(data.decode("utf-8"))
                stream.flush()
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot write audit records to standard output: {exc}") from None

    def add_checkpoints(self, checkpoints: Sequence[Mapping[str, Any]]) -> None:
        """Write each checkpoint as one wire-form line, so a captured stream verified as
        JSONL with a key sees them; raises StoreError when the stream cannot be written."""
        try:
            data = b"".join(canonical_json(c) + b"\n" for c in checkpoints)
        except ValueError as exc:
            raise StoreError(f"a checkpoint was refused: {exc}") from None
        with self._lock:
            if self._closed:
                raise StoreError("audit store stdout is closed")
            if data:
                self._write(data)

    def read_checkpoints(self) -> list[object]:
        """Always raises StoreError: stdout cannot be read back."""
        raise StoreError(_UNREADABLE)

    def head(self, agent_id: str, task_id: str) -> ChainHead:
        """The head this object has written for the chain; ChainHead() when none."""
        with self._lock:
            found = self._chains.get((agent_id, task_id))
        return found[0] if found else ChainHead()

    def list_tasks(self, agent_id: str | None = None) -> list[TaskSummary]:
        """Always raises StoreError: stdout cannot be read back."""
        raise StoreError(_UNREADABLE)

    def read_task(self, task_id: str, agent_id: str | None = None) -> list[dict[str, Any]]:
        """Always raises StoreError: stdout cannot be read back."""
        raise StoreError(_UNREADABLE)

    def verify(self, task_id: str | None = None) -> VerifyReport:
        """Always raises StoreError: stdout cannot be read back."""
        raise StoreError(_UNREADABLE)

    def health(self) -> dict[str, Any]:
        """{"ok", "location", "detail"}; ok unless closed. Never raises."""
        if self._closed:
            return {"ok": False, "location": self.location, "detail": "closed"}
        return {"ok": True, "location": self.location, "detail": "writes to standard output"}

    def close(self) -> None:
        """Stop accepting records (the stream itself is left open). Idempotent."""
        with self._lock:
            self._closed = True
