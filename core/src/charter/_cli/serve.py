"""``charter serve``: run the project's decision server in the foreground until stopped."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["run_serve", "stop_server"]


def _settings_factory(options: dict[str, Any]) -> Any:
    def build() -> Any:
        from charter._runtime.settings import Settings

        return Settings.from_sources(**{k: v for k, v in options.items() if v is not None})

    return build


def run_serve(
    root: str,
    *,
    policy_files: Sequence[str],
    store: str | None,
    agent_id: str | None,
    http: tuple[str, int] | None,
    allow_remote: bool,
    idle_exit: float | None,
    folder: Path | None = None,
) -> int:
    """Serve until SIGTERM / SIGINT / the shutdown op; returns the exit code."""
    from charter._server.server import ServeError, Server
    from charter._server.service import Service

    options: dict[str, Any] = {
        "policy_file": list(policy_files) or None,
        "audit_location": store,
        "agent_id": agent_id,
        "project_root": root,
    }
    if store is None and not os.environ.get("CHARTER_AUDIT_LOCATION", "").strip():
        options["audit_location"] = f"sqlite:///{root}/.charter/audit.db"
    holder: dict[str, Server] = {}

    def shutdown() -> None:
        holder["server"].stop()

    service = Service(_settings_factory(options), project=root, on_shutdown=shutdown)
    server = Server(
        service, folder=folder, http=http, allow_remote=allow_remote, idle_exit=idle_exit
    )
    holder["server"] = server
    try:
        server.start()
    except ServeError as exc:
        print(f"charter serve: {exc}", file=sys.stderr)
        return 1

    def on_signal(signum: int, frame: object) -> None:
        threading.Thread(target=server.stop, name="charter-serve-stop").start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    where = f"charter serve: project {root}, socket {server.socket_path}"
    if server.http_address is not None:
        host, port = server.http_address
        base = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        where += f", HTTP {base} (OpenAPI {base}/v1/openapi.json)"
    print(where, file=sys.stderr, flush=True)
    while not server.wait(0.5):
        pass
    print("charter serve: stopped", file=sys.stderr, flush=True)
    return 0


def stop_server(folder: Path, timeout: float = 10.0) -> tuple[bool, str]:
    """Ask the server owning `folder` to stop and wait for it; (stopped, what happened)."""
    from charter._runtime.project_files import read_secret
    from charter._server.client import Client, ClientError

    sock = folder / "charter.sock"
    if not sock.exists():
        return True, "no server is running for this project"
    try:
        with Client(sock, key=read_secret(folder / "key"), timeout=timeout) as client:
            client.call("shutdown")
    except ClientError as exc:
        return False, f"the server did not stop: {exc}"
    import time

    deadline = time.monotonic() + timeout
    while sock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if sock.exists():
        return False, f"the server was asked to stop but {sock} is still there"
    return True, "stopped"


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6, ``PORT`` alone for 127.0.0.1)."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(
            f"--http {value!r}: give HOST:PORT, e.g. 127.0.0.1:8731 (0: any free port)"
        )
    return host, int(port)


def describe(folder: Path) -> str:
    try:
        info = json.loads((folder / "server.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "not running"
    return f"running (pid {info.get('pid')})"
