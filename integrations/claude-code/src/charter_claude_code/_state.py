"""Per-session state that the audit store does not hold, and the lock that serialises hooks.

Every hook call is a new process. The audit store (SQLite, under ``<project>/.charter/``)
holds the session's recorded history; this module holds the rest: which audit task the
session writes to, the intents a PreToolUse allowed whose outcome has not arrived yet, the
steps waiting for a human in Claude Code's permission dialog, and outcomes that could not be
recorded yet. The store is the authority: anything here that the store already settled is
dropped when the next call loads it.

Why a lock per session: Claude Code runs the hooks of parallel tool calls in parallel. The
store keeps the chain itself contiguous (it numbers records inside BEGIN IMMEDIATE), but a
history rule judged in one process must also see the steps its siblings allowed a moment
ago, and the state file is read-modify-write. One exclusive `flock` per session around
restore, judge, record and save makes each hook call see exactly what an in-process agent
would. The lock dies with its process, so a killed hook never leaves it held.
"""

from __future__ import annotations

import os
import time

from charter.integration import json_dumps, json_loads, sha256_hex, write_atomically

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["LockTimeout", "SessionLock", "SessionState", "StateError", "session_key"]

_FORMAT = 1


class StateError(Exception):
    """The session's state file exists but cannot be used."""


class LockTimeout(Exception):
    """Another hook of the same session held the lock for longer than this call could wait."""


def session_key(session_id: str) -> str:
    """A file-name-safe key for `session_id` (kept readable when it already is)."""
    if 1 <= len(session_id) <= 100 and all(c.isalnum() or c in "-_." for c in session_id):
        if not session_id.startswith("."):
            return session_id
    return "s-" + sha256_hex(session_id.encode("utf-8", "surrogatepass"))[:32]


class SessionLock:
    """An exclusive advisory lock on one file; `acquire` waits up to a deadline."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fd: int | None = None

    def acquire(self, timeout: float) -> None:
        """Take the lock or raise LockTimeout after `timeout` seconds."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        pause = 0.002
        try:
            while not _try_lock(fd):
                if time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"another Charter hook of this session held {self.path} for more than "
                        f"{timeout:g} s"
                    )
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Release the lock (closing the file releases it too). Idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                _unlock(fd)
            finally:
                os.close(fd)


try:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)

except ImportError:  # Windows
    import msvcrt

    _ms: Any = msvcrt  # type checkers on POSIX know no msvcrt.locking

    def _try_lock(fd: int) -> bool:
        try:
            _ms.locking(fd, _ms.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        _ms.locking(fd, _ms.LK_UNLCK, 1)


class SessionState:
    """What one session needs between hook processes besides its recorded history.

    `intents`: tool_use_id -> the intent a PreToolUse allowed (wire form, with its verdict).
    `asks`: tool_use_id -> {"step": wire form, "verdict": the ask verdict} awaiting the human.
    `pending`: tool_use_id -> an outcome whose recording failed, retried by the next call
    (``{"how": ok|failed|abandoned, "output"?, "error"?}``; the intent stays in `intents`).
    `ungoverned`: tool_use_id -> why a call runs without being judged (fail_mode open and
    Charter could not decide): nothing is recorded for it.
    `digests`: tool_use_id -> the digest of the input it was judged with: a PreToolUse
    repeating the id reuses the decision only for the same input, and a PostToolUse whose
    input differs is recorded with input_changed.
    Nothing here holds a secret: inputs and outputs are kept with secrets masked
    (`charter.integration.Gate.redacted`), the way the store keeps them.
    `head`: the highest seq of the task this session has seen stored; a store holding less
    was deleted or replaced, and the session's history with it.
    """

    __slots__ = (
        "_loaded",
        "asks",
        "digests",
        "generation",
        "head",
        "intents",
        "path",
        "pending",
        "session_id",
        "task_id",
        "ungoverned",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        session_id: str,
        task_id: str | None = None,
        generation: int = 0,
        head: int = 0,
        intents: dict[str, dict[str, Any]] | None = None,
        asks: dict[str, dict[str, Any]] | None = None,
        pending: dict[str, dict[str, Any]] | None = None,
        ungoverned: dict[str, dict[str, Any]] | None = None,
        digests: dict[str, str] | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.session_id = session_id
        self.task_id = task_id
        self.generation = generation
        self.head = head
        self.intents: dict[str, dict[str, Any]] = {} if intents is None else intents
        self.asks: dict[str, dict[str, Any]] = {} if asks is None else asks
        self.pending: dict[str, dict[str, Any]] = {} if pending is None else pending
        self.ungoverned: dict[str, dict[str, Any]] = {} if ungoverned is None else ungoverned
        self.digests: dict[str, str] = {} if digests is None else digests
        self._loaded = ""

    def __repr__(self) -> str:
        return (
            f"SessionState(path={self.path!r}, session_id={self.session_id!r}, "
            f"task_id={self.task_id!r}, head={self.head!r})"
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str], session_id: str) -> SessionState:
        """The state at `path`, or a fresh one when there is no file.

        Raises StateError for a file that cannot be read or is not this format.
        """
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return cls(path, session_id)
        except (OSError, UnicodeDecodeError) as exc:
            raise StateError(f"the session state {path} cannot be read ({exc})") from None
        try:
            data = json_loads(text)
            if not isinstance(data, dict) or data.get("format") != _FORMAT:
                raise ValueError("not a Charter session state")
            state = cls(
                path,
                session_id,
                task_id=_optional_text(data.get("task_id")),
                generation=int(data.get("generation", 0)),
                head=int(data.get("head", 0)),
                intents=_table(data.get("intents")),
                asks=_table(data.get("asks")),
                pending=_table(data.get("pending")),
                ungoverned=_table(data.get("ungoverned")),
                digests=_texts(data.get("digests")),
            )
        except (ValueError, TypeError) as exc:
            raise StateError(
                f"the session state {path} is damaged ({exc}); delete it to continue (steps "
                "still running in this session will then be recorded without their intent)"
            ) from None
        state._loaded = text
        return state

    def to_json(self) -> str:
        return json_dumps(
            {
                "format": _FORMAT,
                "session_id": self.session_id,
                "task_id": self.task_id,
                "generation": self.generation,
                "head": self.head,
                "intents": self.intents,
                "asks": self.asks,
                "pending": self.pending,
                "ungoverned": self.ungoverned,
                "digests": self.digests,
            },
            ensure_ascii=False,
            sort_keys=True,
        )

    def save(self) -> None:
        """Write the state atomically (temporary file, then rename); skipped when unchanged."""
        text = self.to_json()
        if text == self._loaded:
            return
        write_atomically(self.path, text.encode("utf-8"))
        self._loaded = text


def _optional_text(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("task_id must be text")
    return value


def _table(value: object) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) for k, v in value.items()
    ):
        raise TypeError("expected an object of objects")
    return value


def _texts(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise TypeError("expected an object of strings")
    return value
