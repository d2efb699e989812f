"""Getting redacted wire records into the audit store and the exporters.

Two durabilities:

- ``buffered``: records go into a bounded in-memory queue and one daemon thread redacts and
  commits them in batches (everything available, up to 500 per append). The agent never
  waits for I/O. A record waits at most `_LINGER` (200 ms) for others to join its batch; a
  task's end (task.end, task.error, task.idle), a caller waiting for its records (`flush`,
  `close`) or a full batch (500 records, or half the queue when it holds fewer than 1,000)
  ends the wait at once. When the queue is full, a record of high value (a task boundary, a
  blocked step, a step.gate, a step a policy would have blocked or asked about in monitor
  mode) takes the place of the newest queued record of lower value; a task boundary, when
  every queued record is of high value, takes the place of the newest that is no boundary (a
  chain's end declares the records dropped before it: without it they would leave no trace
  once the process is gone); otherwise the new record is dropped. A failing append is
  retried (3 attempts, short backoff); a batch that still fails is retried record by record,
  so one bad record cannot take its neighbours with it; what still fails is dropped.

Every dropped record is counted by cause and leaves a gap: its seq was assigned when the step
was recorded and is never reused, and the next record the writer stores in that chain
declares the hole in ``meta["charter.gap"]`` (``[{"first", "last", "cause", "detail"}]``), so
`verify` reports it with its cause instead of a trail that looks complete. A gap no later
record declares yet (the chain's last records were dropped) is held in `gaps()` for status.
- ``sync``: `write_now` appends in the caller's thread and raises on failure, so the runner
  can refuse the step and roll its history back.

Every failure on this path goes through `report_internal_error`; none reaches the agent in
buffered mode.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

from charter._audit.base import GAP_KEY, AuditStore, StoreError
from charter._audit.chain import prepare_entry
from charter._audit.location import open_store
from charter._model.behavior import CLOSING_KINDS, Behavior
from charter._runtime.internal import report_internal_error
from charter._runtime.wire import wire_form

# Checkpoints (and the signing code under them) load only when a signing key is set, the
# Gap class when someone asks for the gaps held.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol, TypeAlias, runtime_checkable

    from charter._audit.checkpoint import CheckpointExporter
    from charter._audit.report import Gap
    from charter._runtime.checkpoints import Checkpointer
else:
    from charter._model.structural import Protocol, runtime_checkable

__all__ = ["AuditWriter", "Exporter", "StepObserver", "is_high_value"]

BATCH_MAX = 500
_BACKOFF = (0.05, 0.2)
# A batch costs the writer about 0.4 ms of CPU on top of its records' own (measured inside a
# LlamaIndex agent's run: its code, SQLite's and the secret scanner's state run cold between
# batches), so the linger decides what a record costs to write. Writer CPU per record, the
# agent's model answering in 20 ms: 113 us at 50 ms (4.9 records a batch), 55 us at 200 ms
# (14.7); in 100 ms: 273 and 159 us. What buffered durability may lose on a crash grows by as
# much (it already loses the queue); a task end, `flush` and `close` still write at once.
_LINGER = 0.2
_DETAIL_MAX = 300
_HIGH_DECISIONS = frozenset({"block", "ask"})


def _kind(record: Record) -> Any:
    """A queued record's kind: text, or an `ActionKind` (a str enum: it compares and hashes
    as its text)."""
    return record.kind if isinstance(record, Behavior) else record.get("kind")


def _is_boundary(kind: object) -> bool:
    """Whether a record's `kind` is a task boundary (``task.start``, ``task.end``, ...)."""
    return isinstance(kind, str) and kind.startswith("task.")


def is_high_value(record: Record) -> bool:
    """Whether `record` may take a queued lower-value record's place in a full queue."""
    kind = _kind(record)
    if not isinstance(kind, str) or _is_boundary(kind) or kind == "step.gate":
        return True
    meta = record.meta if isinstance(record, Behavior) else record.get("meta")
    if not meta or (type(meta) is not dict and not isinstance(meta, Mapping)):
        return False  # (an empty mapping holds no marker either)
    if meta.get("charter.outcome") == "blocked":
        return True
    verdict = meta.get("charter.eval")
    if type(verdict) is not dict and not isinstance(verdict, Mapping):
        return False
    return verdict.get("decision") in _HIGH_DECISIONS


@runtime_checkable
class Exporter(Protocol):
    """Receives every committed audit record, chained, after the store accepted it.

    `export` is called from the writer thread (buffered) or the recording thread (sync) with
    the records of one commit, in order. It may raise: the failure is counted and logged and
    the records stay in the store.
    """

    def export(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Send `records` somewhere; may raise."""
        ...


@runtime_checkable
class StepObserver(Protocol):
    """An exporter that also wants to know when steps happen (spans need the times and the
    caller's tracing context, which records do not carry).

    The runner calls `observe_step` on the agent's thread: ``start`` when a step (or task
    boundary) is about to be judged, ``decided`` when its decision is made, ``end`` when it is
    recorded, before its record is queued. It must be cheap; an exception is counted and
    logged, never raised into the agent.
    """

    def observe_step(self, b: Behavior, phase: str) -> None:
        """Note that `b` reached `phase` (``start``, ``decided`` or ``end``)."""
        ...


#: What `AuditWriter.submit` queues: a wire record, or a recorded behavior to build one from.
Record: TypeAlias = "dict[str, Any] | Behavior"

#: What ``exporters=`` takes: record exporters, checkpoint exporters (or objects that are
#: both), and plain callables taking a batch of records.
ExporterLike: TypeAlias = (
    "Exporter | CheckpointExporter | Callable[[Sequence[Mapping[str, Any]]], None]"
)


class AuditWriter:
    """The queue, worker thread and store of one runner; see the module docstring.

    Counters (records): `queued` accepted into the queue, `delivered` committed, `failed`
    whose first write attempt failed, `dropped` never written (queue full or every attempt
    failed; `dropped_by_cause` splits it by gap cause), `evicted` dropped from the queue to make
    room for a record of higher value, `export_failed` records an exporter raised on.
    """

    def __init__(
        self,
        location: str,
        *,
        store: AuditStore | None = None,
        exporters: Iterable[ExporterLike] = (),
        durability: str = "buffered",
        queue_size: int = 10_000,
        prepare: Callable[[Sequence[dict[str, Any]]], Sequence[tuple[dict[str, Any], bool]]]
        | None = None,
        checkpointer: Checkpointer | None = None,
    ) -> None:
        self.location = location
        self.enabled = store is not None or location != "none"
        self.durability = durability
        self._store = store
        self._owns_store = store is None
        self._store_error: str | None = None
        self._store_lock = threading.Lock()
        self._exporters = tuple(exporters)
        self._prepare = prepare
        self.checkpointer = checkpointer
        self._wal_checkpoint: Callable[[], object] | None = None  # see _defer_wal_checkpoints
        self._size = queue_size
        # A batch this large ends the linger: BATCH_MAX, or half a small queue, so a queue
        # filling up is written before it overflows instead of dropping records while the
        # writer waits out its linger.
        self._batch_at = max(1, min(BATCH_MAX, queue_size // 2))
        self._queue: deque[tuple[int, Record, bool]] = deque()
        self._low = 0  # queued records of lower value (the ones a full queue may evict)
        self._gaps: dict[tuple[str, str], list[list[Any]]] = {}
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        # A lingering writer waits on this one (same lock): a caller waiting for its records
        # wakes it at once, while submit's per-record notify of `_cond` does not.
        self._hurry = threading.Condition(lock)
        self._ticket = 0
        self._done = 0
        # The ticket of the newest queued task end, and of the newest record taken into a
        # batch: while a task end waits in the queue the writer does not linger.
        self._rush = 0
        self._taken = 0
        self._in_flight = 0
        self._waiters = 0
        self._idle = False  # the writer waits on `_cond` for records (submit must notify)
        self._stopping = False
        self._closed = False
        self.queued = 0
        self.delivered = 0
        self.failed = 0
        self.dropped = 0
        self.dropped_by_cause: dict[str, int] = {}
        self.evicted = 0
        self.export_failed = 0
        self._thread: threading.Thread | None = None
        if self.enabled and self._store is None:
            try:
                self._open()
            except Exception as exc:  # reported now, retried on every write
                self._store_error = str(exc)
                report_internal_error(exc, "audit.open")
        if self.enabled and durability == "buffered":
            self._thread = threading.Thread(
                target=self._run, name="charter-audit-writer", daemon=True
            )
            self._thread.start()

    # -- store --------------------------------------------------------------------------------

    def _open(self) -> AuditStore:
        with self._store_lock:
            if self._store is None:
                store = open_store(self.location, durability=self.durability)
                if self.durability == "buffered":
                    self._defer_wal_checkpoints(store)
                self._store = store
                self._store_error = None
            return self._store

    def _defer_wal_checkpoints(self, store: AuditStore) -> None:
        """Have `store` checkpoint its log when this writer is idle (after a batch that left
        nothing queued) rather than inside a commit someone may be waiting for; a store that
        cannot is left with its own checkpoints."""
        defer = getattr(store, "defer_wal_checkpoints", None)
        checkpoint = getattr(store, "checkpoint_wal_if_due", None)
        if defer is None or checkpoint is None:
            return
        try:
            defer()
        except Exception as exc:
            report_internal_error(exc, "audit.wal_checkpoint")
            return
        self._wal_checkpoint = checkpoint

    def _checkpoint_wal(self) -> None:
        if self._wal_checkpoint is None:
            return
        try:
            self._wal_checkpoint()
        except Exception as exc:  # the store's own checkpoints still bound its log
            report_internal_error(exc, "audit.wal_checkpoint")

    def open_store(self) -> AuditStore | None:
        """The store, opened now if it could not be before; None when auditing is off.
        Raises what opening it raises."""
        if not self.enabled:
            return None
        return self._store or self._open()

    @property
    def target(self) -> str:
        """The store records go to, for messages: the open store's own location (a store
        passed in may be anywhere), else the configured location."""
        location = getattr(self._store, "location", None)
        return location if isinstance(location, str) and location else self.location

    @property
    def store(self) -> AuditStore | None:
        """The open store, or None while it cannot be opened (or auditing is off)."""
        return self._store

    def health(self) -> dict[str, Any]:
        """The store's health; never raises."""
        if not self.enabled:
            return {"ok": True, "location": "none", "detail": "auditing is off"}
        store = self._store
        if store is None:
            return {
                "ok": False,
                "location": self.location,
                "detail": f"cannot be opened: {self._store_error}",
            }
        try:
            return store.health()
        except Exception as exc:
            return {"ok": False, "location": self.location, "detail": str(exc)}

    # -- writing ------------------------------------------------------------------------------

    def submit(self, records: Sequence[Record]) -> int:
        """Queue `records` (buffered); returns the ticket to `wait` for, 0 when none was taken.

        A record is a wire record or a recorded `Behavior` (the writer thread builds its wire
        form, `charter._runtime.wire.wire_form`); the writer thread prepares (redacts) each
        before it is written.

        Never blocks and never raises: records that do not fit are dropped and counted.
        """
        if not self.enabled:
            return 0
        dropped = 0
        ticket = 0
        with self._cond:
            for record in records:
                high = is_high_value(record)
                if self._closed:
                    self._drop(record, "closed")
                    dropped += 1
                    continue
                kind = _kind(record)
                if len(self._queue) >= self._size:
                    if not (high and self._evict(_is_boundary(kind))):
                        self._drop(record, "queue_full")
                        dropped += 1
                        continue
                    dropped += 1
                self._ticket += 1
                ticket = self._ticket
                self._queue.append((ticket, record, high))
                self._low += not high
                self.queued += 1
                # ActionKind is a str enum: a record's kind, text or member, finds its member.
                if high and isinstance(kind, str) and kind in CLOSING_KINDS:
                    self._rush = ticket
            if ticket:
                if self._idle:  # only an idle writer waits for records on `_cond`
                    self._cond.notify()
                if len(self._queue) >= self._batch_at or self._rush > self._taken:
                    self._hurry.notify()
        if dropped:
            why = "the runner is closed" if self._closed else f"the queue is full ({self._size})"
            report_internal_error(
                StoreError(
                    f"{dropped} audit record(s) dropped: {why}; raise queue_size= / "
                    "CHARTER_QUEUE_SIZE or check the store"
                ),
                "audit.queue",
            )
        return ticket

    def _evict(self, boundary: bool) -> bool:
        """Drop the newest queued record of lower value or, for a `boundary` when every
        queued record is of high value, the newest that is no boundary; the condition's lock
        is held. Returns whether one was dropped."""
        low = self._low > 0
        if not low and not boundary:
            return False
        for index in range(len(self._queue) - 1, -1, -1):
            _, record, high = self._queue[index]
            if (not high) if low else not _is_boundary(_kind(record)):
                del self._queue[index]
                self._low -= not high
                self.evicted += 1
                self._drop(record, "queue_full")
                return True
        return False

    def _drop(self, record: Record, cause: str, detail: str = "") -> None:
        """Count a record that will never be stored and hold its gap; lock held."""
        self.dropped += 1
        self.dropped_by_cause[cause] = self.dropped_by_cause.get(cause, 0) + 1
        if isinstance(record, Behavior):
            seq: Any = record.seq
            agent_id: Any = record.agent_id
            task_id: Any = record.task_id
        else:
            seq = record.get("seq")
            agent_id, task_id = record.get("agent_id"), record.get("task_id")
        if type(seq) is not int or not isinstance(agent_id, str) or not isinstance(task_id, str):
            return
        detail = detail[:_DETAIL_MAX]
        ranges = self._gaps.setdefault((agent_id, task_id), [])
        last = ranges[-1] if ranges else None
        if last is not None and last[1] == seq - 1 and last[2] == cause and last[3] == detail:
            last[1] = seq
        else:
            ranges.append([seq, seq, cause, detail])

    def _declared(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`records` with each held gap declared on the first record of its chain after it."""
        with self._cond:
            if not self._gaps:
                return records
            claimed: set[tuple[Any, Any, int]] = set()
            out = []
            for record in records:
                key = (record.get("agent_id"), record.get("task_id"))
                seq = record.get("seq")
                if type(seq) is not int:
                    out.append(record)
                    continue
                found = [
                    {"first": lo, "last": hi, "cause": cause, "detail": detail}
                    for lo, hi, cause, detail in self._gaps.get(key, ())  # type: ignore[arg-type]
                    if hi < seq and (key[0], key[1], lo) not in claimed
                ]
                if found:
                    claimed.update((key[0], key[1], g["first"]) for g in found)
                    record = dict(record)
                    meta = dict(record.get("meta") or {})
                    meta[GAP_KEY] = found
                    record["meta"] = meta
                out.append(record)
            return out

    def _settle_gaps(self, chained: Sequence[Mapping[str, Any]]) -> None:
        """Forget the gaps a committed batch declared (those below its highest seq per chain)."""
        with self._cond:
            if not self._gaps:
                return
            top: dict[tuple[str, str], int] = {}
            for record in chained:
                key = (record["agent_id"], record["task_id"])
                top[key] = max(top.get(key, 0), record["seq"])
            for key, seq in top.items():
                ranges = self._gaps.get(key)
                if ranges:
                    kept = [r for r in ranges if r[1] > seq]
                    if kept:
                        self._gaps[key] = kept
                    else:
                        del self._gaps[key]

    def gaps(self) -> list[Gap]:
        """The gaps held now: dropped records no stored record declares yet."""
        from charter._audit.report import Gap

        with self._cond:
            return [
                Gap(agent_id, task_id, lo, hi, cause, detail)
                for (agent_id, task_id), ranges in self._gaps.items()
                for lo, hi, cause, detail in ranges
            ]

    def write_now(self, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Prepare (redact) and append `records` atomically in this thread (sync durability),
        then export them.

        Returns the chained records. Raises StoreError (or whatever the store raised) when the
        store cannot be opened or refuses: nothing was written in that case.
        """
        if not self.enabled or not records:
            return []
        records, marks = self._prepared(records)
        try:
            store = self._store or self._open()
            chained = store.append(_entries(store, records, records, marks))
        except Exception:
            with self._cond:
                self.failed += len(records)
            raise
        with self._cond:
            self.delivered += len(chained)
        self._export(chained)
        if self.checkpointer is not None:
            self.checkpointer.committed(chained, store)
        return chained

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._idle = True
                    try:
                        self._cond.wait()
                    finally:
                        self._idle = False
                if not self._queue:
                    return
                # Let a batch gather: woken per record, the writer would commit one record per
                # transaction and take the GIL from the agent once per step. A task's end,
                # anyone waiting for records (flush, close) or a full batch ends the linger
                # at once.
                deadline = time.monotonic() + _LINGER
                while (
                    len(self._queue) < self._batch_at
                    and not self._stopping
                    and not self._waiters
                    and self._rush <= self._taken
                ):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._hurry.wait(left)
                count = min(len(self._queue), BATCH_MAX)
                if not count:  # close() dropped what was queued while the writer lingered
                    continue
                batch = [self._queue.popleft() for _ in range(count)]
                self._taken = batch[-1][0]
                self._low -= sum(not high for _, _, high in batch)
                self._in_flight = count
            try:
                self._write_batch([record for _, record, _ in batch])
            except Exception as exc:  # the worker must survive anything
                report_internal_error(exc, "audit.writer")
            with self._cond:
                self._in_flight = 0
                self._done = batch[-1][0]
                self._cond.notify_all()
                # Nothing queued: nobody can be waiting for a commit now (this batch's
                # waiters have theirs), so the store may checkpoint its log.
                idle = not self._queue
            if idle:
                self._checkpoint_wal()

    def _prepared(
        self, records: Sequence[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[bool]]:
        """`records` prepared (redacted), and for each whether preparing checked it (see
        `charter._audit.chain.prepare_entry`)."""
        if self._prepare is None:
            return list(records), [False] * len(records)
        pairs = self._prepare(records)
        return [r for r, _ in pairs], [ok for _, ok in pairs]

    def _write_batch(self, queued: list[Record]) -> None:
        # Wire forms and redaction are made here, off the agent's thread; nothing unprepared
        # is ever written.
        records, marks = self._prepared(
            [wire_form(r) if isinstance(r, Behavior) else r for r in queued]
        )
        last_error = ""
        for attempt in range(len(_BACKOFF) + 1):
            try:
                store = self._store or self._open()
                chained = store.append(_entries(store, self._declared(records), records, marks))
            except Exception as exc:
                last_error = str(exc)
                if attempt == 0:
                    with self._cond:
                        self.failed += len(records)
                report_internal_error(exc, "audit.append")
                if attempt < len(_BACKOFF):
                    time.sleep(_BACKOFF[attempt])
                continue
            self._committed(chained)
            return
        if len(records) == 1:
            with self._cond:
                self._drop(records[0], "refused", last_error)
            return
        for record, mark in zip(records, marks, strict=True):
            try:
                store = self._store or self._open()
                chained = store.append(_entries(store, self._declared([record]), [record], [mark]))
            except Exception as exc:
                report_internal_error(exc, "audit.append")
                with self._cond:
                    self._drop(record, "refused", str(exc))
                continue
            self._committed(chained)

    def _committed(self, chained: list[dict[str, Any]]) -> None:
        self._settle_gaps(chained)
        with self._cond:
            self.delivered += len(chained)
        self._export(chained)
        if self.checkpointer is not None:
            self.checkpointer.committed(chained, self._store)

    def _export(self, chained: list[dict[str, Any]]) -> None:
        for exporter in self._exporters:
            try:
                send = getattr(exporter, "export", None)
                if send is not None:
                    send(chained)
                elif callable(exporter):
                    exporter(chained)
                # else: a checkpoint exporter only (export_checkpoints), fed by the checkpointer
            except Exception as exc:
                with self._cond:
                    self.export_failed += len(chained)
                report_internal_error(exc, f"exporter {type(exporter).__name__}")

    # -- waiting ------------------------------------------------------------------------------

    def wait(self, ticket: int, timeout: float | None) -> bool:
        """Wait until every record up to `ticket` is settled (written or dropped).

        Returns False when `timeout` seconds passed first.
        """
        if ticket <= 0 or self._thread is None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._waiters += 1  # the writer stops lingering while someone waits
            self._hurry.notify()
            try:
                while self._done < ticket:
                    if not self._thread.is_alive():
                        return False
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left if left is not None else 0.5)
            finally:
                self._waiters -= 1
        return True

    def flush(self, timeout: float | None) -> bool:
        """Wait until everything queued so far is settled; False on timeout."""
        with self._cond:
            ticket = self._ticket
        return self.wait(ticket, timeout)

    @property
    def pending(self) -> int:
        """Records queued or being written right now."""
        with self._cond:
            return len(self._queue) + self._in_flight

    def close(self, timeout: float | None) -> bool:
        """Flush within `timeout`, stop the worker and close a store this writer opened.

        Returns False when records were still pending at the deadline (they are counted as
        dropped). Idempotent.
        """
        flushed = self.flush(timeout)
        with self._cond:
            self._closed = True
            self._stopping = True
            self._hurry.notify()
            if not flushed:
                for _, record, _ in self._queue:
                    self._drop(record, "closed")
                self._queue.clear()
                self._low = 0
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0 if flushed else 0.1)
        if self.checkpointer is not None:
            self.checkpointer.flush(self._store)
        if self._owns_store and self._store is not None and flushed:
            try:
                self._store.close()
            except Exception as exc:
                report_internal_error(exc, "audit.close")
        return flushed


def _entries(
    store: AuditStore,
    records: list[dict[str, Any]],
    redacted: list[dict[str, Any]],
    marks: list[bool],
) -> list[Any]:
    """What to hand `store.append`: `records` (the redacted ones, gaps declared), with each
    that redaction checked and gap declaring left as it was prepared for the store here,
    when the store takes that (a built-in store: its class sets ``_takes_prepared``).

    A record the declaring copied is new to the check, so the store checks it itself; so
    does a store of any other class, which gets the plain records.
    """
    if not any(marks) or vars(type(store)).get("_takes_prepared") is not True:
        return records
    try:
        return [
            prepare_entry(record, True) if mark and record is was else record
            for record, was, mark in zip(records, redacted, marks, strict=True)
        ]
    except ValueError:  # refused: let the store's own preparing name it
        return records
