"""When the runner signs chain heads, and where the signed checkpoints go.

A checkpoint is made of every chain head this runner committed since that chain's last
checkpoint, at three moments: when a task's end marker (task.end / task.error / task.idle) is
committed (that chain at once), when `checkpoint_every` records were committed since the
last checkpoint (every chain with new records), and when the runner closes (every chain with
new records). Heads are taken from the records the store returned on append, never read
back from the store, so a store rewritten behind the runner's back is not vouched for.

Each checkpoint goes to the store (`add_checkpoints`) and to every checkpoint exporter (the
`checkpoint_file` and any exporter with `export_checkpoints`). Observability never changes an
outcome: a destination that fails is counted and reported, never raised into the agent; heads
the store could not keep are offered again with the next checkpoint.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from charter._audit.base import AuditStore
from charter._audit.chain import is_closing
from charter._audit.checkpoint import Checkpoint, CheckpointExporter, sign_head
from charter._audit.signing import SigningKey
from charter._runtime.internal import report_internal_error

__all__ = ["Checkpointer"]


def _now() -> datetime:
    return datetime.now(UTC)


class Checkpointer:
    """Signs the heads an AuditWriter commits and sends the checkpoints on; thread-safe.

    Counters: `written` checkpoints the store kept, `failed` checkpoints the store refused
    (or none was open), `export_failed` checkpoints an exporter raised on.
    """

    def __init__(
        self,
        key: SigningKey,
        every: int,
        exporters: Iterable[CheckpointExporter] = (),
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.key = key
        self.every = every
        self._exporters = tuple(exporters)
        self._clock = clock
        self._lock = threading.Lock()
        self._dirty: dict[tuple[str, str], tuple[int, str]] = {}
        self._since = 0
        self.written = 0
        self.failed = 0
        self.export_failed = 0

    @property
    def pending(self) -> int:
        """Chains with records committed since their last checkpoint."""
        with self._lock:
            return len(self._dirty)

    def committed(self, chained: Sequence[Mapping[str, Any]], store: AuditStore | None) -> None:
        """Note the heads of a committed batch; checkpoint what is due. Never raises."""
        try:
            due = self._note(chained)
            if due:
                self._checkpoint(due, store)
        except Exception as exc:  # the recording path must survive anything
            report_internal_error(exc, "checkpoint")

    def flush(self, store: AuditStore | None) -> None:
        """Checkpoint every chain with new records (at close). Never raises."""
        try:
            with self._lock:
                due = dict(self._dirty)
                self._dirty.clear()
                self._since = 0
            if due:
                self._checkpoint(due, store)
        except Exception as exc:
            report_internal_error(exc, "checkpoint")

    def _note(self, chained: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], tuple[int, str]]:
        ended: set[tuple[str, str]] = set()
        with self._lock:
            for record in chained:
                key = (record["agent_id"], record["task_id"])
                seq, digest = record["seq"], record["hash"]
                known = self._dirty.get(key)
                if known is None or seq > known[0]:
                    self._dirty[key] = (seq, digest)
                if is_closing(record):
                    ended.add(key)
            self._since += len(chained)
            if self._since >= self.every:
                due = dict(self._dirty)
                self._dirty.clear()
                self._since = 0
                return due
            return {key: self._dirty.pop(key) for key in ended if key in self._dirty}

    def _checkpoint(
        self, due: dict[tuple[str, str], tuple[int, str]], store: AuditStore | None
    ) -> None:
        when = self._clock()
        made = [
            sign_head(self.key, agent_id, task_id, seq, digest, when)
            for (agent_id, task_id), (seq, digest) in sorted(due.items())
        ]
        self._keep(made, store)
        for exporter in self._exporters:
            try:
                exporter.export_checkpoints(made)
            except Exception as exc:
                with self._lock:
                    self.export_failed += len(made)
                report_internal_error(exc, f"checkpoint exporter {type(exporter).__name__}")

    def _keep(self, made: list[Checkpoint], store: AuditStore | None) -> None:
        try:
            if store is None:
                raise RuntimeError("no audit store is open to keep checkpoints in")
            store.add_checkpoints([c.to_wire() for c in made])
        except Exception as exc:
            with self._lock:
                self.failed += len(made)
                for c in made:  # offer them again with the next checkpoint, unless superseded
                    key = (c.agent_id, c.task_id)
                    if key not in self._dirty:
                        self._dirty[key] = (c.seq, c.hash)
            report_internal_error(exc, "checkpoint.store")
            return
        with self._lock:
            self.written += len(made)
