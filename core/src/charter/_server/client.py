"""A small client of the decision server's unix socket (stdlib only: hooks import it).

A client that knows the server's key sends a fresh nonce with every request and accepts an
answer only with a valid proof over it (`charter._runtime.project_files.proof`): a process that
binds the socket path without the key cannot produce one. The peer of the socket must run
as this user (or root), checked with SO_PEERCRED.
"""

from __future__ import annotations

import hmac
import json
import os
import socket
import struct
import time

from charter._runtime.project_files import PROTOCOL, proof, socket_address
from charter._server.wire import ClientError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Client", "ClientError"]


class Client:
    """One connection to the server at `path` (a unix socket), opened on first use.

    `key` (the server's identity key, as text) makes every answer proven; `timeout` bounds
    each call (connect, send, answer) in seconds. Not thread-safe: one client per thread.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, key: str | None = None, timeout: float = 5.0
    ) -> None:
        self.path = os.fspath(path)
        self.key = key
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._next = 0

    def _connect(self, deadline: float) -> socket.socket:
        if self._sock is not None:
            return self._sock
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        address, fd = socket_address(self.path)
        try:
            sock.connect(address)
        except OSError as exc:
            sock.close()
            raise ClientError(
                "unavailable", f"no server at {self.path} ({exc.strerror or exc})"
            ) from None
        finally:
            if fd is not None:
                os.close(fd)
        peercred = getattr(socket, "SO_PEERCRED", None)
        if peercred is not None:
            uid = struct.unpack(
                "3i", sock.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
            )[1]
            if uid not in (os.getuid(), 0):
                sock.close()
                raise ClientError(
                    "impostor", f"the server at {self.path} runs as uid {uid}, not this user"
                )
        self._sock = sock
        return sock

    def call(
        self, op: str, params: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        """The result of `op` with `params`. Raises ClientError (see its codes)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        sock = self._connect(deadline)
        self._next += 1
        request: dict[str, Any] = {
            "v": PROTOCOL,
            "id": self._next,
            "op": op,
            "params": params or {},
        }
        nonce = os.urandom(16).hex() if self.key else None
        if nonce:
            request["nonce"] = nonce
        data = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", "surrogatepass"
        )
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(data + b"\n")
            line = self._read_line(sock, deadline)
        except (OSError, ClientError) as exc:
            self.close()
            if isinstance(exc, ClientError):
                raise
            raise ClientError(
                "unavailable", f"the server at {self.path} did not answer ({exc})"
            ) from None
        try:
            reply = json.loads(line)
        except ValueError:
            self.close()
            raise ClientError("impostor", "the server's answer is not JSON") from None
        if not isinstance(reply, dict) or reply.get("id") != request["id"]:
            self.close()
            raise ClientError("impostor", "the server's answer does not match the request")
        if not reply.get("ok"):
            found = reply.get("error")
            error: dict[str, Any] = found if isinstance(found, dict) else {}
            raise ClientError(
                str(error.get("code") or "internal"),
                str(error.get("message") or "the server refused"),
                error.get("field") if isinstance(error.get("field"), str) else None,
            )
        result = reply.get("result")
        if nonce and self.key is not None:
            given = reply.get("proof")
            expected = proof(self.key, nonce, result)
            if not isinstance(given, str) or not hmac.compare_digest(given, expected):
                self.close()
                raise ClientError(
                    "impostor", f"the server at {self.path} did not prove it holds the key"
                )
        return result

    def _read_line(self, sock: socket.socket, deadline: float) -> bytes:
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClientError(
                    "unavailable", f"the server at {self.path} did not answer in time"
                )
            sock.settimeout(left)
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                raise ClientError(
                    "unavailable", f"the server at {self.path} did not answer in time"
                ) from None
            if not chunk:
                raise ClientError("unavailable", f"the server at {self.path} closed the connection")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def close(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            self._buffer = b""
            try:
                sock.close()
            except OSError:  # pragma: no cover
                pass

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
