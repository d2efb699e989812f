"""Turning an audit location string into a store, and `verify()` for a store or a location.

Accepted forms: `sqlite:///relative/path.db` and `sqlite:////absolute/path.db` (the text
after the third slash is the path, as in SQLAlchemy), `sqlite:///:memory:`,
`jsonl:///relative/path.jsonl` and `jsonl:////absolute/path.jsonl` (same rule),
`postgresql://user@host:port/database` (or `postgres://`; any libpq URL, which needs the
`charter[postgresql]` extra), a plain path ending in .jsonl, .db, .sqlite or .sqlite3, and
`stdout`. `none` is not a store: callers
that support switching auditing off must handle it before calling here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from charter._audit.base import AuditStore, StoreError
from charter._audit.sqlite import SQLiteStore

# The other stores and the checkpoint verifier are imported where they are used: a hook
# process opens one SQLite store and never verifies, and its import time is the user's wait.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    from charter._audit.report import VerifyReport
    from charter._audit.signing import PublicKey
    from charter._audit.vouch import CheckpointSource

__all__ = [
    "ACCEPTED_FORMS",
    "POSTGRES_EXTRA",
    "open_existing_store",
    "open_store",
    "parse_location",
    "verify",
]

ACCEPTED_FORMS = (
    "sqlite:///path/audit.db, jsonl:///path/audit.jsonl, postgresql://user@host:port/db or "
    "stdout (a plain path ending in .db or .jsonl also works)"
)
if TYPE_CHECKING:
    StoreKind = Literal["sqlite", "jsonl", "postgresql", "stdout"]
else:
    StoreKind = str  # a type alias only (typing is not imported at run time)
_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
POSTGRES_EXTRA = "charter[postgresql]"
_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def _refuse(location: str, why: str) -> StoreError:
    return StoreError(f"audit location {location!r} {why}; use {ACCEPTED_FORMS}")


def parse_location(location: str | os.PathLike[str]) -> tuple[StoreKind, str]:
    """(kind, path) for a location string; path is "" for stdout and the whole URL for
    postgresql.

    Raises StoreError, listing the accepted forms, for anything else (including "none").
    """
    text = os.fspath(location)
    if not isinstance(text, str):
        raise StoreError(f"audit location must be text, not {type(text).__name__}")
    if text == "stdout":
        return "stdout", ""
    if text == "none":
        raise _refuse(text, "turns auditing off and is not a store")
    for scheme in ("sqlite", "jsonl"):
        prefix = f"{scheme}:///"
        if text.startswith(prefix):
            path = text[len(prefix) :]
            if not path or path.endswith("/"):
                raise _refuse(text, "names no file")
            return ("sqlite" if scheme == "sqlite" else "jsonl"), path
        if text.startswith(f"{scheme}:"):
            raise _refuse(text, f"needs three slashes after '{scheme}:'")
    if text.lower().startswith(_POSTGRES_SCHEMES):
        if not text.split("://", 1)[1].strip("/"):
            raise _refuse(text, "names no server or database")
        return "postgresql", text
    if "://" in text:
        raise _refuse(text, "has an unknown scheme")
    lowered = text.lower()
    if lowered.endswith(".jsonl"):
        return "jsonl", text
    if lowered.endswith(_SQLITE_SUFFIXES):
        return "sqlite", text
    raise _refuse(text, "is not a known store")


def open_store(location: str | os.PathLike[str], *, durability: str = "sync") -> AuditStore:
    """Open (creating file and parent directories if needed) the store at `location`.

    `durability` is the writer's mode: ``sync`` commits survive power loss (SQLite
    synchronous=FULL); ``buffered`` already accepts losing queued records with the process, so
    its commits survive a crash of the process but may lose the last ones on power loss
    (synchronous=NORMAL in WAL mode; the file is never corrupted either way).

    Raises StoreError for an unknown form, a directory, a path that cannot be created, or
    a file that is not a Charter store.
    """
    kind, path = parse_location(location)
    if kind == "stdout":
        from charter._audit.stdout import StdoutStore

        return StdoutStore()
    if kind == "jsonl":
        from charter._audit.jsonl import JsonlStore

        return JsonlStore(path)
    if kind == "postgresql":
        return _postgres(path, create=True)
    return SQLiteStore(path, synchronous="normal" if durability == "buffered" else "full")


def open_existing_store(location: str | os.PathLike[str]) -> AuditStore:
    """Open the store at `location` for reading without ever creating it.

    Raises StoreError as open_store does, when the file is missing, and for stdout (which
    cannot be read back).
    """
    kind, path = parse_location(location)
    if kind == "stdout":
        raise StoreError(
            "the stdout audit store cannot be read back; verify a sqlite:///, jsonl:/// or "
            "postgresql:// store"
        )
    if kind == "jsonl":
        from charter._audit.jsonl import JsonlStore

        return JsonlStore(path, create=False)
    if kind == "postgresql":
        return _postgres(path, create=False)
    if path == ":memory:":
        raise StoreError("an in-memory SQLite store cannot be reopened; pass the store itself")
    return SQLiteStore(path, create=False)


def _postgres(url: str, *, create: bool) -> AuditStore:
    """A PostgresStore; StoreError naming the extra when psycopg is not installed."""
    try:
        from charter._audit.postgresql import PostgresStore
    except ImportError as exc:
        if exc.name not in ("psycopg", "psycopg_pool") and "psycopg" not in str(exc):
            raise
        raise StoreError(
            f"the postgresql:// audit store needs psycopg 3 and psycopg_pool ({exc}); install "
            f"the extra: pip install '{POSTGRES_EXTRA}'"
        ) from None
    return PostgresStore(url, create=create)


def verify(
    location_or_store: str | os.PathLike[str] | AuditStore,
    task_id: str | None = None,
    *,
    keys: Iterable[str | os.PathLike[str] | PublicKey] = (),
    checkpoints: Iterable[str | os.PathLike[str]] = (),
) -> VerifyReport:
    """Verify the store at a location (a URL, a .db/.jsonl path) or an open store.

    A location is opened without creating anything and closed afterwards; an open store is
    verified in place and left open. With `keys` (public key files or loaded PublicKeys),
    the chains are also checked against every signed checkpoint kept in the store and in
    the `checkpoints` files, whose signatures must verify with one of the keys (see
    ``charter._audit.vouch`` for what that adds). Raises StoreError when the file does not
    exist, is not a Charter store, cannot be read back (stdout), or when `task_id` is given
    but not stored; KeyFileError (a ValueError) for a key file it cannot trust or read;
    ValueError for checkpoint files without keys (their lines are evidence only once their
    signatures are checked) and for a checkpoint file that cannot be read.
    """
    from charter._audit.checkpoint import read_checkpoint_file
    from charter._audit.signing import PublicKey, load_public_key
    from charter._audit.vouch import CheckpointSource

    files = [os.fspath(path) for path in checkpoints]
    loaded = [key if isinstance(key, PublicKey) else load_public_key(key) for key in keys]
    if files and not loaded:
        raise ValueError(
            "checkpoint files need keys=: a checkpoint file is evidence only once its "
            "signatures are checked with the public key"
        )
    sources = []
    for path in files:
        try:
            sources.append(CheckpointSource(path, read_checkpoint_file(path)))
        except OSError as exc:
            raise ValueError(
                f"cannot read checkpoint file {os.path.abspath(path)}: {exc.strerror or exc}"
            ) from None
    if isinstance(location_or_store, (str, os.PathLike)):
        store = open_existing_store(os.fspath(location_or_store))
        try:
            return _verify_open(store, task_id, loaded, sources)
        finally:
            store.close()
    if not isinstance(location_or_store, AuditStore):
        raise StoreError(
            f"cannot verify a {type(location_or_store).__name__}; "
            "pass a store location or an AuditStore"
        )
    return _verify_open(location_or_store, task_id, loaded, sources)


def _verify_open(
    store: AuditStore,
    task_id: str | None,
    keys: list[PublicKey],
    sources: list[CheckpointSource],
) -> VerifyReport:
    report = store.verify(task_id)
    if not keys:
        return report
    from charter._audit.vouch import CheckpointSource, vouch

    kept = [(f"#{n}", value) for n, value in enumerate(store.read_checkpoints(), start=1)]
    inside = CheckpointSource(store.location, kept)
    return vouch(store, report, keys, inside, sources, task_id)
