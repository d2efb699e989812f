"""The hook as a thin client of the project's decision server (see `_serve` for the design).

Imports only the standard library's light modules and `charter.serve`: it runs in every
hook process before anything else, and its whole cost is the user's latency.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["ENV_NAMES", "OP", "ask_server", "hook_environ", "start_server"]

OP = "claude.hook"
# The environment the hook reads: the project, the home (anchors, settings), Charter's own.
ENV_NAMES = ("CLAUDE_PROJECT_DIR", "HOME", "PWD")


def hook_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """What of `environ` travels with a call to the server."""
    out = {k: environ[k] for k in ENV_NAMES if k in environ}
    out.update({k: v for k, v in environ.items() if k.startswith("CHARTER_")})
    return out


def ask_server(
    argv: list[str],
    config_kw: Mapping[str, Any],
    raw: bytes,
    budget: float,
) -> tuple[int, str, str] | None:
    """The server's answer to this hook call, or None when the hook must judge it itself
    (no server, an impostor, a timeout, an error: see the module docstring). Never raises."""
    try:
        return _ask(argv, config_kw, raw, budget)
    except Exception:
        return None


def _ask(
    argv: list[str], config_kw: Mapping[str, Any], raw: bytes, budget: float
) -> tuple[int, str, str] | None:
    import json

    from charter.serve import Client, ClientError, key_digest, read_key, server_folder

    pinned = config_kw.get("serve")
    event = json.loads(raw)
    if not isinstance(pinned, str) or not isinstance(event, dict):
        return None
    environ = os.environ
    given = config_kw.get("project_dir") or environ.get("CLAUDE_PROJECT_DIR") or event.get("cwd")
    if not isinstance(given, str) or not given:
        given = os.getcwd()
    root = os.path.realpath(os.path.expanduser(given))
    folder = server_folder(root, environ)
    key = read_key(folder)
    if key is None or key_digest(key) != pinned:
        return None  # no key, or not the pinned one: whoever answers there is not trusted
    sock = os.path.join(folder, "charter.sock")
    if not os.path.exists(sock):
        if event.get("hook_event_name") == "SessionStart":
            start_server(root, folder)
        return None
    params = {"argv": argv, "event": event, "env": hook_environ(environ), "budget": budget}
    try:
        with Client(sock, key=key, timeout=budget) as client:
            result = client.call(OP, params)
    except ClientError:
        return None
    if not isinstance(result, dict):
        return None
    code, out, err = result.get("exit_code"), result.get("stdout"), result.get("stderr")
    if code not in (0, 2) or not isinstance(out, str) or not isinstance(err, str):
        return None
    expected = (
        config_kw.get("pin"),
        config_kw.get("enforcement", "enforce"),
        config_kw.get("fail_mode", "closed"),
    )
    if (result.get("pin"), result.get("enforcement"), result.get("fail_mode")) != expected:
        return None
    return int(code), out, err


def start_server(root: str, folder: str, idle_exit: int = 1800) -> bool:
    """Start the project's server detached (it stops itself after `idle_exit` seconds
    without a call); False when the ``charter`` command is not beside this interpreter."""
    import subprocess
    import sys

    program = os.path.join(os.path.dirname(sys.executable), "charter")
    if not os.access(program, os.X_OK):
        return False
    os.makedirs(folder, mode=0o700, exist_ok=True)
    log = os.open(os.path.join(folder, "serve.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        subprocess.Popen(
            [program, "serve", "--project-dir", root, "--idle-exit", str(idle_exit)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return False
    finally:
        os.close(log)
    return True
