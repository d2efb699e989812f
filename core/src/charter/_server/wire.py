"""One request line to the decision server and its answer line, with nothing heavy imported.

`Client` (`charter._server.client`) is the client to keep a connection with. `exchange` is
for a process that asks one question and ends, such as a hook: it loads neither `socket`
(enum and selectors come with it) nor `json`, which together cost a fresh process about as
much as its interpreter start. Like `Client` it refuses a peer that runs as another user
(SO_PEERCRED) and bounds the whole exchange by one timeout.
"""

from __future__ import annotations

import os
import sys
import time

from charter._runtime.project_files import socket_address

__all__ = ["ClientError", "exchange"]

# The longest answer line read (an answer is a few KB; a peer streaming more is not one).
MAX_ANSWER = 16 * 1024 * 1024


class ClientError(Exception):
    """The server could not be asked or refused: `code` is ``unavailable`` (no server, a
    timeout, a closed connection), ``impostor`` (the peer is not the server: wrong user,
    no or bad proof) or the server's own error code; `field` names the value at fault."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.field = field


def exchange(path: str, line: bytes, timeout: float) -> bytes:
    """Send `line` (one request, ending in a newline) to the server at the unix socket
    `path` on a new connection and return the first answer line (without its newline),
    all within `timeout` seconds. Raises ClientError: ``unavailable`` (no server, a timeout,
    the connection closed) or ``impostor`` (the peer runs as another user, or sends more
    than an answer)."""
    try:
        # The C type that socket.socket wraps: the same calls, without socket.py's imports.
        import _socket as sockets
    except ImportError:  # pragma: no cover - every CPython has it
        import socket as sockets  # type: ignore[no-redef]
    deadline = time.monotonic() + timeout
    sock = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    try:
        sock.settimeout(max(0.001, timeout))
        address, fd = socket_address(path)
        try:
            sock.connect(address)
        except OSError as exc:
            raise ClientError(
                "unavailable", f"no server at {path} ({exc.strerror or exc})"
            ) from None
        finally:
            if fd is not None:
                os.close(fd)
        peercred = getattr(sockets, "SO_PEERCRED", None)
        if peercred is not None:
            # struct ucred: pid, uid, gid as native 32-bit integers.
            cred = sock.getsockopt(sockets.SOL_SOCKET, peercred, 12)
            uid = int.from_bytes(cred[4:8], sys.byteorder)
            if uid not in (os.getuid(), 0):
                raise ClientError(
                    "impostor", f"the server at {path} runs as uid {uid}, not this user"
                )
        sock.sendall(line)
        buffer = b""
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClientError("unavailable", f"the server at {path} did not answer in time")
            if len(buffer) > MAX_ANSWER:
                raise ClientError("impostor", f"the server at {path} sent more than an answer")
            sock.settimeout(left)
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ClientError("unavailable", f"the server at {path} closed the connection")
            buffer += chunk
    except OSError as exc:  # TimeoutError included
        raise ClientError("unavailable", f"the server at {path} did not answer ({exc})") from None
    finally:
        sock.close()
    return buffer.partition(b"\n")[0]
