"""A real PostgreSQL server for tests, started in a temporary folder (requires pytest).

`PostgresServer` runs ``initdb`` and ``pg_ctl`` from the machine's PostgreSQL server binaries
(Debian's ``postgresql`` package: ``/usr/lib/postgresql/<major>/bin``, or the directory named
by ``CHARTER_TEST_PG_BIN``) on a free loopback port, with its unix socket in the same folder.
PostgreSQL refuses to run as root, so when the tests run as root the server runs as the
``postgres`` user (``runuser``), which owns the folder. Every login is trusted: this is a
throwaway server bound to 127.0.0.1, never a deployment.

Fixtures, for a suite's ``conftest.py``::

    from charter.testing.postgresql import postgresql_server, postgresql_url  # noqa: F401

``postgresql_server`` is one server for the whole session; ``postgresql_url`` is a fresh,
empty database on it per test (``postgresql://charter@127.0.0.1:PORT/NAME``). When the
server binaries are missing, the fixtures fail the test with how to install them; they
never skip.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import typing
from pathlib import Path as _Path

import pytest

if typing.TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "ADMIN_USER",
    "PostgresServer",
    "PostgresUnavailable",
    "find_pg_bin",
    "postgresql_server",
    "postgresql_url",
]

#: The superuser every server is initialised with.
ADMIN_USER = "charter"
_ENV_BIN = "CHARTER_TEST_PG_BIN"
_UNPRIVILEGED = "postgres"
_TOOLS = ("initdb", "pg_ctl", "postgres")
_HOW_TO_FIX = (
    "install the PostgreSQL server (Debian/Ubuntu: apt-get install -y postgresql) or set "
    f"{_ENV_BIN} to the directory holding initdb, pg_ctl and postgres"
)


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries are missing or the server would not start."""


def find_pg_bin() -> _Path:
    """The directory holding initdb, pg_ctl and postgres.

    Looks in ``CHARTER_TEST_PG_BIN``, then on PATH, then in the newest
    ``/usr/lib/postgresql/*/bin``. Raises PostgresUnavailable saying how to install them.
    """
    candidates: list[_Path] = []
    configured = os.environ.get(_ENV_BIN, "").strip()
    if configured:
        candidates.append(_Path(configured))
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(_Path(on_path).parent)

    def major(path: str) -> int:
        name = _Path(path).parent.name
        return int(name) if name.isdigit() else 0

    candidates += [
        _Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=major)[::-1]
    ]
    for directory in candidates:
        if all(os.access(directory / tool, os.X_OK) for tool in _TOOLS):
            return directory
    where = f" ({_ENV_BIN}={configured} lacks them)" if configured else ""
    raise PostgresUnavailable(
        f"the PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found{where}; "
        f"{_HOW_TO_FIX}"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster in its own temporary folder, on 127.0.0.1 and a free port.

    `start()` initialises the cluster on first use and starts the server; `stop()` stops it
    (the data stays, so `start()` brings the same databases back, on the same port);
    `remove()` stops it and deletes the folder. `url(database)` is a connection URL for the
    superuser `ADMIN_USER`; `create_database()` makes a fresh database and returns its URL.
    Raises PostgresUnavailable (saying how to fix it) when the binaries are missing or the
    server does not start.
    """

    def __init__(self, *, fsync: bool = False) -> None:
        self.bin = find_pg_bin()
        self.fsync = fsync
        self.port = 0
        self._as: list[str] = []
        uid = 0
        if os.geteuid() == 0:
            # initdb and postgres refuse to run as root.
            try:
                uid = pwd.getpwnam(_UNPRIVILEGED).pw_uid
            except KeyError:
                raise PostgresUnavailable(
                    f"the tests run as root and PostgreSQL refuses root, but there is no "
                    f"{_UNPRIVILEGED!r} user to run it as; {_HOW_TO_FIX} (the package creates "
                    "that user)"
                ) from None
            runuser = shutil.which("runuser")
            if runuser is None:
                raise PostgresUnavailable(
                    "the tests run as root and PostgreSQL refuses root, but runuser (util-linux)"
                    " is missing to run it as another user"
                )
            self._as = [runuser, "-u", _UNPRIVILEGED, "--"]
        # Not under pytest's tmp_path: its parents are private to root.
        self.directory = _Path(tempfile.mkdtemp(prefix="charter-pg-"))
        if uid:
            os.chown(self.directory, uid, -1)
        self.data = self.directory / "data"
        self.log = self.directory / "server.log"
        self._names = itertools.count(1)
        self.running = False

    def url(self, database: str = "postgres", user: str = ADMIN_USER) -> str:
        """postgresql://USER@127.0.0.1:PORT/DATABASE (trusted: no password)."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [*self._as, *args]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, cwd=self.directory
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PostgresUnavailable(f"{' '.join(command)} failed: {exc}") from None
        return done

    def start(self) -> None:
        """Initialise the cluster (first call) and start the server; waits until it accepts."""
        if self.running:
            return
        if not self.data.exists():
            done = self._run(
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                ADMIN_USER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            )
            if done.returncode:
                raise PostgresUnavailable(f"initdb failed: {done.stderr.strip() or done.stdout}")
        if not self.port:
            self.port = _free_port()
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            f"-c fsync={'on' if self.fsync else 'off'} -c max_connections=200"
        )
        for attempt in range(3):
            done = self._run(
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            )
            if done.returncode == 0:
                self.running = True
                return
            if attempt < 2 and "already in use" in self._log_tail():
                # Another program took the free port in between: try a new one.
                self.port = _free_port()
                options = options.replace(options.split()[1], str(self.port), 1)
                continue
            break
        raise PostgresUnavailable(
            f"PostgreSQL did not start (pg_ctl: {done.stderr.strip() or done.stdout.strip()}); "
            f"its log ends with: {self._log_tail()}"
        )

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-5:])
        return "(no log)"

    def stop(self) -> None:
        """Stop the server at once (connections are cut); the data stays for `start()`."""
        if not self.running:
            return
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        self.running = False

    def remove(self) -> None:
        """Stop the server and delete its folder."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def execute(self, sql: str, database: str = "postgres", user: str = ADMIN_USER) -> None:
        """Run SQL statements (separated by semicolons) in autocommit mode."""
        import psycopg

        with psycopg.connect(self.url(database, user), autocommit=True) as conn:
            conn.execute(sql.encode())

    def create_database(self, prefix: str = "t") -> str:
        """A fresh empty database; returns its URL."""
        name = f"{prefix}{os.getpid()}_{next(self._names)}"
        self.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@pytest.fixture(scope="session")
def postgresql_server() -> Iterator[PostgresServer]:
    """One running PostgreSQL server for the session; fails (never skips) without binaries."""
    try:
        server = PostgresServer()
        server.start()
    except PostgresUnavailable as exc:
        pytest.fail(f"a PostgreSQL server is needed for this test: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def postgresql_url(postgresql_server: PostgresServer) -> str:
    """The URL of a fresh, empty database on the session's server."""
    if not postgresql_server.running:
        postgresql_server.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            return postgresql_server.create_database()
        except Exception:  # the server may still be coming back from a test that stopped it
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
