"""Signed checkpoints of chain heads: their wire form, signing them, and checkpoint files.

A checkpoint says "chain (agent_id, task_id) had head `seq` with hash `hash` at `time`",
signed with an Ed25519 key held outside the store. Its wire form is one JSON object:

    {"charter.checkpoint": {"agent_id", "task_id", "seq", "hash", "time", "key_id",
                            "signature"}}

`signature` is the Ed25519 signature (lowercase hex) of the RFC 8785 canonical JSON of that
same object without the `signature` key, so anyone can re-check one with any JCS library and
the public key; `key_id` names the key (see signing). The same line is what stores keep
(SQLite's `checkpoints` table, a line in the JSONL file) and what a checkpoint file holds, one
per line. Nothing here trusts a checkpoint: `Checkpoint.from_wire` only parses; `vouch` checks
signatures.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from charter._audit.base import StoreError
from charter._audit.chain import canonical_json, decode_json
from charter._audit.signing import SigningKey
from charter._model.ijson import MAX_SAFE_INT

__all__ = [
    "CHECKPOINT_KEY",
    "Checkpoint",
    "CheckpointExporter",
    "JsonlCheckpointFile",
    "checkpoint_rows",
    "is_checkpoint_line",
    "read_checkpoint_file",
    "sign_head",
]

#: The one key of a checkpoint's wire form.
CHECKPOINT_KEY = "charter.checkpoint"
_PREFIX = b'{"' + CHECKPOINT_KEY.encode() + b'"'
_HEX = frozenset("0123456789abcdef")
_FIELDS = ("agent_id", "task_id", "seq", "hash", "time", "key_id")


def checkpoint_rows(
    checkpoints: Sequence[Mapping[str, Any]],
) -> list[tuple[str | None, str | None, int | None, bytes]]:
    """What a store keeps of each checkpoint wire form: (agent_id, task_id, seq, its
    canonical JSON), the ids and seq None where the checkpoint does not carry them as a str
    and an int.

    Raises StoreError naming the first checkpoint that is not a ``{CHECKPOINT_KEY: {...}}``
    object or not I-JSON: a store then keeps none of them.
    """
    rows = []
    for index, wire in enumerate(checkpoints):
        body = wire.get(CHECKPOINT_KEY) if isinstance(wire, Mapping) else None
        if not isinstance(body, Mapping):
            raise StoreError(
                f"checkpoint {index + 1} of {len(checkpoints)} is not a {CHECKPOINT_KEY} "
                "object; nothing was kept"
            )
        try:
            text = canonical_json(wire)
        except ValueError as exc:
            raise StoreError(f"checkpoint {index + 1} was refused: {exc}") from None
        agent_id, task_id, seq = body.get("agent_id"), body.get("task_id"), body.get("seq")
        rows.append(
            (
                agent_id if isinstance(agent_id, str) else None,
                task_id if isinstance(task_id, str) else None,
                seq if type(seq) is int else None,
                text,
            )
        )
    return rows


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and _HEX.issuperset(text)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One signed chain head; `signature` is "" for an unsigned one (never valid)."""

    agent_id: str
    task_id: str
    seq: int
    hash: str
    time: str
    key_id: str
    signature: str = ""

    def signed_bytes(self) -> bytes:
        """The bytes the signature covers: the canonical wire form without `signature`."""
        body = {name: getattr(self, name) for name in _FIELDS}
        return canonical_json({CHECKPOINT_KEY: body})

    def to_wire(self) -> dict[str, Any]:
        """The wire form (see the module docstring)."""
        body: dict[str, Any] = {name: getattr(self, name) for name in _FIELDS}
        if self.signature:
            body["signature"] = self.signature
        return {CHECKPOINT_KEY: body}

    def line(self) -> bytes:
        """The wire form as one canonical JSON line, newline included."""
        return canonical_json(self.to_wire()) + b"\n"

    @classmethod
    def from_wire(cls, value: object) -> Checkpoint:
        """Parse a wire form; raises ValueError saying what is missing or ill-typed.

        A missing signature parses (as ""), so the caller can name it unsigned.
        """
        body = value.get(CHECKPOINT_KEY) if isinstance(value, Mapping) else None
        if not isinstance(value, Mapping) or len(value) != 1 or not isinstance(body, Mapping):
            raise ValueError(f"it is not a {CHECKPOINT_KEY} object")
        extra = sorted(set(body) - {*_FIELDS, "signature"})
        if extra:
            raise ValueError(f"it has unknown fields ({', '.join(map(str, extra))})")
        agent_id, task_id, seq = body.get("agent_id"), body.get("task_id"), body.get("seq")
        digest, stamp, key_id = body.get("hash"), body.get("time"), body.get("key_id")
        signature = body.get("signature", "")
        if not isinstance(agent_id, str) or not isinstance(task_id, str) or not task_id:
            raise ValueError("agent_id or task_id is missing")
        if type(seq) is not int or not 1 <= seq <= MAX_SAFE_INT:
            raise ValueError("seq is missing or not a positive integer")
        if not isinstance(digest, str) or not _is_hex(digest, 64):
            raise ValueError("hash is not a SHA-256 in lowercase hex")
        if not isinstance(stamp, str) or not stamp:
            raise ValueError("time is missing")
        if not isinstance(key_id, str) or not _is_hex(key_id, 16):
            raise ValueError("key_id is not 16 lowercase hex digits")
        if not isinstance(signature, str):
            raise ValueError("signature is not a string")
        return cls(agent_id, task_id, seq, digest, stamp, key_id, signature)


def sign_head(
    key: SigningKey, agent_id: str, task_id: str, seq: int, digest: str, when: datetime
) -> Checkpoint:
    """A checkpoint of one head, signed with `key`, stamped `when` (UTC, microseconds, Z)."""
    stamp = when.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    unsigned = Checkpoint(agent_id, task_id, seq, digest, stamp, key.key_id)
    return Checkpoint(
        agent_id, task_id, seq, digest, stamp, key.key_id, key.sign(unsigned.signed_bytes())
    )


def is_checkpoint_line(line: bytes) -> bool:
    """Whether a JSONL line is meant as a checkpoint (it may still fail to parse)."""
    return line.startswith(_PREFIX)


@runtime_checkable
class CheckpointExporter(Protocol):
    """Receives every signed checkpoint the runner makes, after it was offered to the store.

    Called from the audit writer's thread (buffered) or the recording thread (sync). It may
    raise: the failure is counted (``status()["checkpoints"]["export_failed"]``) and logged,
    never raised into the agent. An object passed in ``exporters=`` that has this method gets
    checkpoints as well as (with ``export``) records.
    """

    def export_checkpoints(self, checkpoints: Sequence[Checkpoint]) -> None:
        """Send `checkpoints` somewhere the governed agent cannot rewrite; may raise."""
        ...


class JsonlCheckpointFile:
    """A checkpoint exporter appending one wire-form line per checkpoint to a file.

    Each batch is written with one `write` under an exclusive `flock` and fsynced, so several
    processes can share the file. The file is evidence only as far as the governed agent
    cannot rewrite it: put it on another account's append-only path or another machine.
    Raises OSError from `export_checkpoints` (the runner counts it).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self._lock = threading.Lock()
        self._fd: int | None = None

    def export_checkpoints(self, checkpoints: Sequence[Checkpoint]) -> None:
        """Append `checkpoints`, fsync, release; raises OSError when the file cannot be."""
        if not checkpoints:
            return
        data = b"".join(c.line() for c in checkpoints)
        with self._lock:
            if self._fd is None:
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                self._fd = os.open(self.path, flags, 0o644)
            fd = self._fd
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                size = os.fstat(fd).st_size
                if size:
                    # A writer that died mid-line left it unterminated: start on a fresh line.
                    with open(self.path, "rb") as reader:
                        reader.seek(size - 1)
                        if reader.read(1) != b"\n":
                            data = b"\n" + data
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the file. Idempotent; a later export reopens it."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def read_checkpoint_file(path: str | os.PathLike[str]) -> list[tuple[str, object]]:
    """(where, decoded line) for every non-empty line of a checkpoint file, in order.

    `where` reads ``line N of FILE``; a line that is not JSON comes back as None. Raises
    OSError when the file cannot be read.
    """
    where = os.path.abspath(os.fspath(path))
    with open(where, "rb") as handle:
        data = handle.read()
    found: list[tuple[str, object]] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            value: object = decode_json(line)
        except ValueError:
            value = None
        found.append((f"line {number} of {where}", value))
    return found
