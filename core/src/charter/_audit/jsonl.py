"""The JSONL audit store: one canonical JSON record per line, appended under `flock`.

Each append takes an exclusive `fcntl.flock` on the file, first reads only the lines other
processes appended since this object last looked (it keeps the byte offset), so its chain
heads are current, then writes the whole batch with one `write`, `fsync`s once and releases
the lock. Several processes can therefore append to one file safely. (POSIX only; do not
rotate or replace a file while processes are writing it.)

Crash behaviour: a writer killed mid-write leaves a torn last line, a record cut short that
was never acknowledged (append returns only after its fsync). The next writer fences it,
when it opens the store and before its own batch: under the exclusive lock it ends the torn
line and appends one fence line, ``{"charter.fence":{"length":L,"offset":O,"reason":
"torn write"}}``, naming the torn line's byte offset and length. Nothing is ever cut out of
the file, so byte offsets other processes hold stay valid, and the torn bytes are never
counted as a record (no chain links to them). `verify` reports a torn last line, and a
fenced one, as a warning (a truncated, unacknowledged write), never as a break; an
unreadable line that no fence accounts for is a "malformed" break, because nothing else
Charter writes leaves one. Whether an acknowledged record went missing is decided by the
chains themselves (a seq gap with a broken link, a head file beyond the records).

Checkpoints: `add_checkpoints` appends signed checkpoints to the same file, one wire-form
line each (``{"charter.checkpoint": {...}}``), under the same lock; they belong to no chain,
and verify and read_checkpoints pick them out by their key.

Head file: after each batch the store appends one line per touched chain
(agent_id, task_id, seq, hash, closed) to `<file>.heads`, so `verify` can tell a chain whose
tail was cut off ("truncated") from one that simply ended. The head file is written after
the records are durable, so it may lag one batch behind them after a crash but never runs
ahead; verification allows records beyond it. It is a best-effort witness: failing to write
it does not fail the append (health() reports it).
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from charter._audit.base import (
    StoreError,
    check_process,
    check_store_path,
    closed_error,
    prepare_batch,
    seq_error,
)
from charter._audit.chain import (
    ChainHead,
    canonical_json,
    check_seq,
    decode_json,
    is_closing,
    seal,
)
from charter._audit.checkpoint import CHECKPOINT_KEY, checkpoint_rows, is_checkpoint_line
from charter._audit.report import ChainBreak, Gap, TaskSummary, VerifyReport
from charter._audit.verify import RecordedHead, StoredRow, build_report, check_chain, row_from_entry

__all__ = ["FENCE_KEY", "HEADS_SUFFIX", "JsonlStore"]

HEADS_SUFFIX = ".heads"
FENCE_KEY = "charter.fence"
_CHUNK = 1 << 22
_TAIL_CHUNK = 1 << 16


@dataclass(slots=True)
class _ChainState:
    head: ChainHead
    closed: bool


@dataclass(slots=True)
class _Summary:
    steps: int
    first_seq: int
    first_timestamp: str
    last_seq: int
    last_timestamp: str
    last_kind: str
    closed: bool


def _chain_key(record: object) -> tuple[str, str] | None:
    """(agent_id, task_id) of a decoded line, or None when it is not an audit record."""
    if not isinstance(record, dict):
        return None
    agent_id = record.get("agent_id")
    task_id = record.get("task_id")
    if isinstance(agent_id, str) and isinstance(task_id, str) and task_id:
        return agent_id, task_id
    return None


def _decode(line: bytes) -> object:
    try:
        return decode_json(line)
    except ValueError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _lines(fd: int, start: int, size: int) -> Iterator[tuple[int, bytes, bool]]:
    """(line number from 1, content without newline, is_last) for bytes [start, size)."""
    number = 0
    position = start
    carry = b""
    pending: tuple[int, bytes] | None = None
    while position < size:
        chunk = os.pread(fd, min(_CHUNK, size - position), position)
        if not chunk:
            break
        position += len(chunk)
        parts = (carry + chunk).split(b"\n")
        carry = parts.pop()
        for part in parts:
            if pending is not None:
                yield pending[0], pending[1], False
            number += 1
            pending = (number, part)
    if carry:
        if pending is not None:
            yield pending[0], pending[1], False
        number += 1
        pending = (number, carry)
    if pending is not None:
        yield pending[0], pending[1], True


def _last_line(fd: int, size: int) -> tuple[int, bytes]:
    """(byte offset, content) of the file's last line, which does not end with a newline."""
    start = size
    while start > 0:
        step = min(_TAIL_CHUNK, start)
        chunk = os.pread(fd, step, start - step)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            start = start - step + cut + 1
            break
        start -= step
    return start, os.pread(fd, size - start, start)


def _fence_bytes(fd: int, size: int) -> bytes:
    """What ends an unterminated last line: a newline, and for a torn record a fence line."""
    offset, line = _last_line(fd, size)
    if _chain_key(_decode(line)) is not None or _whole_checkpoint(line):
        return b"\n"  # a whole record that only lacks its newline: it counts
    fence = {FENCE_KEY: {"offset": offset, "length": len(line), "reason": "torn write"}}
    return b"\n" + canonical_json(fence) + b"\n"


def _whole_checkpoint(line: bytes) -> bool:
    """Whether `line` is a complete checkpoint line (a JSON object under its key)."""
    if not is_checkpoint_line(line):
        return False
    value = _decode(line)
    return isinstance(value, dict) and isinstance(value.get(CHECKPOINT_KEY), dict)


def _fence_of(line: bytes) -> tuple[int, int] | None:
    """(offset, length) named by a fence line, or None when `line` is not one."""
    if not line.startswith(b'{"' + FENCE_KEY.encode() + b'"'):
        return None
    note = _decode(line)
    fence = note.get(FENCE_KEY) if isinstance(note, dict) and len(note) == 1 else None
    if not isinstance(fence, dict):
        return None
    offset, length = fence.get("offset"), fence.get("length")
    if type(offset) is not int or type(length) is not int:
        return None
    return offset, length


@contextmanager
def _flocked(fd: int, exclusive: bool, location: str) -> Iterator[None]:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    except OSError as exc:
        raise StoreError(f"cannot lock audit store {location}: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


class JsonlStore:
    """An audit store in one JSONL file plus its `.heads` witness (see the module docstring).

    `create=False` refuses a missing file instead of creating it, and falls back to read-only
    when the file is not writable (verify needs no more). One object may be shared by
    threads; an internal lock serialises its calls. Memory: verify and read_task stream the
    file; verify keeps ~100 bytes per record.
    """

    # append takes entries Charter's writer prepared itself (`prepare_batch`).
    _takes_prepared = True

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        self._path = os.path.abspath(os.fspath(path))
        self._heads_path = self._path + HEADS_SUFFIX
        self.location = f"jsonl:///{self._path}"
        self._lock = threading.Lock()
        self._pid = os.getpid()
        check_store_path(self._path, create)
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        self._readonly = False
        try:
            try:
                fd = os.open(self._path, flags, 0o644)
            except PermissionError:
                if create:
                    raise
                fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
                self._readonly = True
        except OSError as exc:
            raise StoreError(
                f"cannot open audit store {self._path}: {exc.strerror or exc}"
            ) from None
        self._fd: int | None = fd
        self._heads_fd: int | None = None
        self._heads_error: str | None = None
        self._offset = 0
        self._ends_with_newline = True
        self._chains: dict[tuple[str, str], _ChainState] = {}
        if create and not self._readonly:
            try:
                self._fence(fd)
            except BaseException:
                self._fd = None
                os.close(fd)
                raise

    def _fence(self, fd: int) -> None:
        """Fence a torn last line left by a writer that died mid-append (see the module)."""
        with _flocked(fd, True, self.location):
            size = os.fstat(fd).st_size
            if not size or os.pread(fd, 1, size - 1) == b"\n":
                return
            try:
                _write_all(fd, _fence_bytes(fd, size))
                os.fsync(fd)
            except OSError as exc:
                raise StoreError(
                    f"cannot open audit store {self._path}: its torn last line cannot be "
                    f"fenced ({exc.strerror or exc})"
                ) from None

    def _file(self) -> int:
        if self._fd is None:
            raise StoreError(f"audit store {self.location} is closed")
        check_process(self._pid, self.location)
        return self._fd

    def _catch_up(self, fd: int) -> None:
        """Learn the lines appended since the last look; the caller holds the file lock."""
        size = os.fstat(fd).st_size
        if size < self._offset:
            # The file shrank under us (cut or replaced): relearn it from the start.
            self._offset, self._ends_with_newline, self._chains = 0, True, {}
        if size == self._offset:
            return
        for _, line, _ in _lines(fd, self._offset, size):
            self._learn(line)
        # A torn tail was written by a writer that died holding the lock; the next record
        # must start on a fresh line so it is not glued to the torn bytes.
        self._ends_with_newline = os.pread(fd, 1, size - 1) == b"\n"
        self._offset = size

    def _learn(self, line: bytes) -> None:
        record = _decode(line)
        key = _chain_key(record)
        if key is None:
            return
        assert isinstance(record, dict)
        seq = record.get("seq")
        digest = record.get("hash")
        if type(seq) is not int or not isinstance(digest, str):
            return
        state = self._chains.get(key)
        if state is None:
            state = self._chains[key] = _ChainState(ChainHead(), False)
        if seq > state.head.seq:
            state.head = ChainHead(seq, digest)
        state.closed = state.closed or is_closing(record)

    def append(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Chain, write and fsync `entries` under the file lock; see AuditStore.append.

        On a failed write the file is cut back to its previous length, so nothing is left.
        """
        prepared = prepare_batch(entries)
        if not prepared:
            return []
        with self._lock:
            fd = self._file()
            if self._readonly:
                raise StoreError(f"audit store {self.location} was opened read-only")
            with _flocked(fd, True, self.location):
                self._catch_up(fd)
                touched: dict[tuple[str, str], _ChainState] = {}
                lines: list[bytes] = []
                chained: list[dict[str, Any]] = []
                for item in prepared:
                    key = (item.agent_id, item.task_id)
                    state = touched.get(key)
                    if state is None:
                        known = self._chains.get(key)
                        state = _ChainState(known.head, known.closed) if known else None
                        state = touched[key] = state or _ChainState(ChainHead(), False)
                    if state.closed:
                        raise closed_error(item.task_id, item.agent_id, self.location)
                    refused = check_seq(item, state.head)
                    if refused is not None:
                        raise seq_error(refused, item.task_id, self.location)
                    sealed = seal(item, state.head)
                    state.head = ChainHead(sealed.seq, sealed.hash)
                    state.closed = item.closing
                    lines.append(sealed.body)
                    chained.append(sealed.entry)
                data = b"\n".join(lines) + b"\n"
                start = self._offset
                if not self._ends_with_newline:
                    # A writer died mid-append since this object last looked: fence its line.
                    data = _fence_bytes(fd, start) + data
                try:
                    _write_all(fd, data)
                    os.fsync(fd)
                except OSError as exc:
                    with suppress(OSError):
                        os.ftruncate(fd, start)
                    raise StoreError(
                        f"cannot write to audit store {self._path} ({exc.strerror or exc}); "
                        "nothing was written"
                    ) from None
                self._offset = start + len(data)
                self._ends_with_newline = True
                self._chains.update(touched)
                self._witness(touched)
        return chained

    def _witness(self, touched: dict[tuple[str, str], _ChainState]) -> None:
        """Append the new heads to the head file; failure is remembered, not raised."""
        data = b"".join(
            canonical_json(
                {
                    "agent_id": agent_id,
                    "task_id": task_id,
                    "seq": state.head.seq,
                    "hash": state.head.hash,
                    "closed": state.closed,
                }
            )
            + b"\n"
            for (agent_id, task_id), state in touched.items()
        )
        try:
            if self._heads_fd is None:
                flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                self._heads_fd = os.open(self._heads_path, flags, 0o644)
            size = os.fstat(self._heads_fd).st_size
            if size and os.pread(self._heads_fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            _write_all(self._heads_fd, data)
            self._heads_error = None
        except OSError as exc:
            self._heads_error = f"head file {self._heads_path} not updated: {exc.strerror or exc}"

    def add_checkpoints(self, checkpoints: Sequence[Mapping[str, Any]]) -> None:
        """Append signed checkpoints as lines under the file lock, fsync once; see
        AuditStore.add_checkpoints. A failed write is cut back, so nothing is left."""
        lines = [text + b"\n" for *_, text in checkpoint_rows(checkpoints)]
        if not lines:
            return
        with self._lock:
            fd = self._file()
            if self._readonly:
                raise StoreError(f"audit store {self.location} was opened read-only")
            with _flocked(fd, True, self.location):
                self._catch_up(fd)
                data = b"".join(lines)
                start = self._offset
                if not self._ends_with_newline:
                    data = _fence_bytes(fd, start) + data
                try:
                    _write_all(fd, data)
                    os.fsync(fd)
                except OSError as exc:
                    with suppress(OSError):
                        os.ftruncate(fd, start)
                    raise StoreError(
                        f"cannot write checkpoints to audit store {self._path} "
                        f"({exc.strerror or exc}); nothing was kept"
                    ) from None
                self._offset = start + len(data)
                self._ends_with_newline = True

    def chain_hashes(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], dict[int, object]]:
        """seq -> hash of every stored record of the chains `keys`, in one pass over the file
        (what verify with a key compares checkpoints with); chains not stored are left out."""
        wanted = set(keys)
        found: dict[tuple[str, str], dict[int, object]] = {}
        with self._lock:
            fd, size, _ = self._snapshot()
            for _, record in self._records(fd, size):
                key = (record["agent_id"], record["task_id"])
                seq = record.get("seq")
                if key in wanted and type(seq) is int:
                    found.setdefault(key, {}).setdefault(seq, record.get("hash"))
        return found

    def read_checkpoints(self) -> list[object]:
        """Every checkpoint line of the file in order. A line that is not JSON is left out:
        it is no record either, and verify judges it like any unreadable line (a torn write
        the next writer fenced is a warning, any other a break)."""
        with self._lock:
            fd, size, _ = self._snapshot()
            found = (
                _decode(line) for _, line, _ in _lines(fd, 0, size) if is_checkpoint_line(line)
            )
            return [value for value in found if value is not None]

    def head(self, agent_id: str, task_id: str) -> ChainHead:
        """The committed head of (agent_id, task_id) as of now; ChainHead() when unknown."""
        with self._lock:
            fd = self._file()
            with _flocked(fd, False, self.location):
                self._catch_up(fd)
            state = self._chains.get((agent_id, task_id))
        return state.head if state else ChainHead()

    def _snapshot(self) -> tuple[int, int, int]:
        """(fd, file size, head-file size) taken under a shared lock: whole batches only."""
        fd = self._file()
        with _flocked(fd, False, self.location):
            size = os.fstat(fd).st_size
            try:
                heads_size = os.stat(self._heads_path).st_size
            except FileNotFoundError:
                heads_size = -1
        return fd, size, heads_size

    def _records(self, fd: int, size: int) -> Iterator[tuple[int, dict[str, Any]]]:
        for number, line, _ in _lines(fd, 0, size):
            record = _decode(line)
            if _chain_key(record) is not None:
                assert isinstance(record, dict)
                yield number, record

    def list_tasks(self, agent_id: str | None = None) -> list[TaskSummary]:
        """One summary per chain in order of first appearance (unreadable lines skipped)."""
        with self._lock:
            fd, size, _ = self._snapshot()
            found: dict[tuple[str, str], _Summary] = {}
            for _, record in self._records(fd, size):
                key = (record["agent_id"], record["task_id"])
                if agent_id is not None and key[0] != agent_id:
                    continue
                seq = record.get("seq")
                seq = seq if type(seq) is int else 0
                stamp = record.get("timestamp")
                stamp = stamp if isinstance(stamp, str) else ""
                kind = record.get("kind")
                kind = kind if isinstance(kind, str) else ""
                summary = found.get(key)
                if summary is None:
                    found[key] = _Summary(1, seq, stamp, seq, stamp, kind, is_closing(record))
                    continue
                summary.steps += 1
                summary.closed = summary.closed or is_closing(record)
                if seq < summary.first_seq:
                    summary.first_seq, summary.first_timestamp = seq, stamp
                if seq >= summary.last_seq:
                    summary.last_seq, summary.last_timestamp, summary.last_kind = seq, stamp, kind
        return [
            TaskSummary(a, t, s.steps, s.first_timestamp, s.last_timestamp, s.closed, s.last_kind)
            for (a, t), s in found.items()
        ]

    def read_task(self, task_id: str, agent_id: str | None = None) -> list[dict[str, Any]]:
        """The records of one task in seq order; see AuditStore.read_task for the refusals."""
        with self._lock:
            fd, size, _ = self._snapshot()
            by_agent: dict[str, list[dict[str, Any]]] = {}
            for _, record in self._records(fd, size):
                if record["task_id"] == task_id and agent_id in (None, record["agent_id"]):
                    by_agent.setdefault(record["agent_id"], []).append(record)
        if not by_agent:
            raise StoreError(f"task {task_id!r} is not in {self.location}")
        if len(by_agent) > 1:
            names = ", ".join(repr(a) for a in by_agent)
            raise StoreError(
                f"task {task_id!r} exists under several agents ({names}) in {self.location}; "
                "pass agent_id to choose one"
            )
        (records,) = by_agent.values()
        return sorted(records, key=lambda r: r["seq"] if type(r.get("seq")) is int else 0)

    def _recorded_heads(self, size: int) -> dict[tuple[str, str], RecordedHead]:
        """The highest head the head file records per chain, reading its first `size` bytes.

        Raises OSError when the head file cannot be read. Unreadable lines are skipped: the
        file is a witness that may only lag, so losing a line can only hide, never invent.
        """
        recorded: dict[tuple[str, str], RecordedHead] = {}
        fd = os.open(self._heads_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            for _, line, _ in _lines(fd, 0, size):
                note = _decode(line)
                key = _chain_key(note)
                if key is None:
                    continue
                assert isinstance(note, dict)
                seq, digest, closed = note.get("seq"), note.get("hash"), note.get("closed")
                if type(seq) is not int or not isinstance(digest, str) or type(closed) is not bool:
                    continue
                known = recorded.get(key)
                if known is None or seq > known.seq:
                    recorded[key] = RecordedHead(seq, digest, closed, exact=False)
        finally:
            os.close(fd)
        return recorded

    def verify(self, task_id: str | None = None) -> VerifyReport:
        """Verify every chain (or those of `task_id`) in the file as of now.

        Lines that cannot be attributed to a chain are reported whatever `task_id` is.
        Raises StoreError when `task_id` is given and the file has no record of it.
        """
        with self._lock:
            fd, size, heads_size = self._snapshot()
            recorded: dict[tuple[str, str], RecordedHead] = {}
            heads_name = os.path.basename(self._heads_path)
            warnings: list[str] = []
            if heads_size >= 0:
                try:
                    recorded = self._recorded_heads(heads_size)
                except OSError as exc:
                    warnings.append(
                        f"head file {heads_name} cannot be read ({exc.strerror or exc}), so a "
                        "cut-off tail of a chain cannot be detected"
                    )
            elif size > 0:
                warnings.append(
                    f"head file {heads_name} is missing, so a cut-off tail of a chain cannot "
                    "be detected"
                )
            chains: dict[tuple[str, str], list[StoredRow]] = {}
            loose: list[ChainBreak] = []
            name = os.path.basename(self._path)
            offset = 0
            # An unreadable line is judged by the line after it: a fence naming it or not.
            unreadable: tuple[int, int, int] | None = None  # (line number, offset, length)
            for number, line, is_last in _lines(fd, 0, size):
                at, offset = offset, offset + len(line) + 1
                record = _decode(line)
                key = _chain_key(record)
                if unreadable is not None:
                    torn_number, torn_at, torn_length = unreadable
                    unreadable = None
                    if key is None and _fence_of(line) == (torn_at, torn_length):
                        warnings.append(
                            f"line {torn_number} of {name} is a truncated, unacknowledged "
                            "write (a writer died mid-append), fenced by the next writer; no "
                            "record is lost there"
                        )
                        continue
                    detail = f"line {torn_number} of {name} is not a readable audit record"
                    loose.append(ChainBreak("", "", 0, "malformed", detail))
                if key is None and isinstance(record, dict) and len(record) == 1:
                    if isinstance(record.get(CHECKPOINT_KEY), dict):
                        continue  # a checkpoint: judged by a verify with a key
                if key is None:
                    if is_last:
                        warnings.append(
                            f"the last line ({number}) of {name} is a truncated, "
                            "unacknowledged write (a writer died mid-append); the records "
                            "before it verify"
                        )
                    else:
                        unreadable = (number, at, len(line))
                    continue
                if task_id is not None and key[1] != task_id:
                    continue
                assert isinstance(record, dict)
                chains.setdefault(key, []).append(row_from_entry(number, record))
        if task_id is not None:
            recorded = {k: v for k, v in recorded.items() if k[1] == task_id}
        for key in recorded:
            chains.setdefault(key, [])
        if task_id is not None and not chains:
            raise StoreError(f"task {task_id!r} is not in {self.location}")
        gaps: list[Gap] = []
        breaks = [
            found
            for key, rows in chains.items()
            if (found := check_chain(key[0], key[1], rows, recorded.get(key), gaps)) is not None
        ]
        steps = sum(len(rows) for rows in chains.values())
        return build_report(len(chains), steps, breaks + loose, warnings, gaps)

    def health(self) -> dict[str, Any]:
        """{"ok", "location", "detail"}: whether the file is open, writable and its head file
        up to date; never raises."""
        try:
            with self._lock:
                size = os.fstat(self._file()).st_size
                problem = self._heads_error or ("opened read-only" if self._readonly else None)
        except (StoreError, OSError) as exc:
            return {"ok": False, "location": self.location, "detail": str(exc)}
        detail = problem or f"JSONL, {size} bytes"
        return {"ok": problem is None, "location": self.location, "detail": detail}

    def close(self) -> None:
        """Close the files; later calls raise StoreError. Idempotent."""
        with self._lock:
            for fd in (self._fd, self._heads_fd):
                if fd is not None:
                    with suppress(OSError):
                        os.close(fd)
            self._fd = self._heads_fd = None

    def __enter__(self) -> JsonlStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
