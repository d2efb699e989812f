"""The hook as a thin client of the project's decision server (see `_serve` for the design).

Imports only ``os`` and the light part of `charter.serve` (`exchange`, `sign`; no json,
socket, hashlib or threading): it runs in every hook process before anything else, and its
whole cost is the user's latency. The answer comes back as a frame of bytes (`frame_result`)
whose proof is checked and whose fields are read without a JSON parser.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "ENV_NAMES",
    "OP",
    "ask_server",
    "frame_result",
    "hook_environ",
    "read_frame",
    "request_line",
    "start_server",
]

OP = "claude.hook"
# The environment the hook reads: the project, the home (anchors, settings), where its own
# programs are found (protected), Charter's own.
ENV_NAMES = ("CLAUDE_PROJECT_DIR", "HOME", "PATH", "PWD")


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


def _event(raw: bytes) -> dict[str, Any] | None:
    import json

    event = json.loads(raw)
    return event if isinstance(event, dict) else None


def _ask(
    argv: list[str], config_kw: Mapping[str, Any], raw: bytes, budget: float
) -> tuple[int, str, str] | None:
    from charter.serve import ClientError, exchange, key_digest, read_key, server_folder, sign

    pinned = config_kw.get("serve")
    if not isinstance(pinned, str):
        return None
    environ = os.environ
    event = None
    given = config_kw.get("project_dir") or environ.get("CLAUDE_PROJECT_DIR")
    if not isinstance(given, str) or not given:
        # Only a hook run outside Claude Code's environment reads the event for its cwd.
        event = _event(raw)
        if event is None:
            return None
        given = event.get("cwd")
        if not isinstance(given, str) or not given:
            given = os.getcwd()
    root = os.path.realpath(os.path.expanduser(given))
    folder = server_folder(root, environ)
    key = read_key(folder)
    if key is None or key_digest(key) != pinned:
        return None  # no key, or not the pinned one: whoever answers there is not trusted
    sock = os.path.join(folder, "charter.sock")
    if not os.path.exists(sock):
        event = event or _event(raw)
        if event is not None and event.get("hook_event_name") == "SessionStart":
            start_server(root, folder)
        return None
    nonce = os.urandom(16).hex()
    try:
        line = exchange(sock, request_line(argv, raw, hook_environ(environ), budget, nonce), budget)
    except ClientError:
        return None
    frame = _proven_frame(line, key, nonce, sign)
    if frame is None:
        return None
    expected = (
        config_kw.get("pin"),
        config_kw.get("enforcement", "enforce"),
        config_kw.get("fail_mode", "closed"),
    )
    return read_frame(frame, expected)


# JSON text escapes for what a request carries as text (the hook's argv and environment):
# without the json module, which imports re and costs a fresh process milliseconds.
_ESCAPES = {i: f"\\u{i:04x}" for i in range(32)} | {ord('"'): '\\"', ord("\\"): "\\\\"}


def _text(value: str) -> str:
    return '"' + value.translate(_ESCAPES) + '"'


def request_line(
    argv: list[str], raw: bytes, env: Mapping[str, str], budget: float, nonce: str
) -> bytes:
    """The ``claude.hook`` request for one hook call, as one protocol line: the event goes
    as the hex of the bytes read (the server parses it; nothing in it can reach the
    envelope) and the answer is asked as a frame (`frame_result`)."""
    params = (
        '{"argv":['
        + ",".join(_text(a) for a in argv)
        + '],"env":{'
        + ",".join(_text(k) + ":" + _text(v) for k, v in env.items())
        + '},"budget":'
        + repr(float(budget))
        + ',"event_hex":"'
        + raw.hex()
        + '","reply":"frame"}'
    )
    envelope = f'{{"v":1,"id":1,"op":"{OP}","nonce":"{nonce}","params":{params}}}\n'
    return envelope.encode("utf-8", "surrogatepass")


_FRAME = b"claude.hook frame 1"


def frame_result(
    exit_code: int, stdout: str, stderr: str, pin: str | None, enforcement: str, fail_mode: str
) -> dict[str, str]:
    """The ``claude.hook`` result a client asked as a frame: ``{"frame": hex}`` of a header
    (a tag, exit code, pin, enforcement, fail mode and the stdout length, one a line) and
    then the stdout and stderr bytes. Its canonical form is ASCII the client reads as it
    is, so a client checks the proof and reads the answer without a JSON parser."""
    out = stdout.encode("utf-8", "surrogatepass")
    err = stderr.encode("utf-8", "surrogatepass")
    head = [
        _FRAME,
        b"%d" % exit_code,
        (pin or "").encode(),
        enforcement.encode(),
        fail_mode.encode(),
    ]
    frame = b"\n".join([*head, b"%d" % len(out)]) + b"\n" + out + err
    return {"frame": frame.hex()}


def _proven_frame(line: bytes, key: str, nonce: str, sign: Any) -> bytes | None:
    """The frame in answer `line` when its proof is the server key's over `nonce`."""
    start = line.find(b'"result":{"frame":"')
    if start < 0:
        return None
    start += len(b'"result":{"frame":"')
    end = line.find(b'"', start)
    at = line.find(b'"proof":"')
    if end < 0 or at < 0:
        return None
    given = line[at + 9 : at + 9 + 64]
    hexed = line[start:end]
    expected = sign(key, nonce, b'{"frame":"' + hexed + b'"}').encode("ascii")
    # Not compare_digest (its module loads OpenSSL): the nonce is fresh for this one call,
    # so how long a wrong proof takes to refuse tells a forger nothing for the next.
    if len(given) != 64 or given != expected:
        return None
    return bytes.fromhex(hexed.decode("ascii"))


def read_frame(frame: bytes, expected: tuple[Any, Any, Any]) -> tuple[int, str, str] | None:
    """(exit code, stdout, stderr) of a proven `frame` (`frame_result`) judged with the
    `expected` (pin, enforcement, fail mode); None for any other frame."""
    parts = frame.split(b"\n", 6)
    if len(parts) != 7 or parts[0] != _FRAME or parts[1] not in (b"0", b"2"):
        return None
    pin, enforcement, fail_mode = (p.decode("utf-8", "surrogatepass") for p in parts[2:5])
    if (pin or None, enforcement, fail_mode) != expected:
        return None
    size = int(parts[5])
    body = parts[6]
    if not 0 <= size <= len(body):
        return None
    out = body[:size].decode("utf-8", "surrogatepass")
    err = body[size:].decode("utf-8", "surrogatepass")
    return int(parts[1]), out, err


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
