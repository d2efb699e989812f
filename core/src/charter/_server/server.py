"""The listeners of ``charter serve``: a unix socket (always) and HTTP on loopback (optional).

The unix socket is the project's (`charter._runtime.project_files`): mode 0600 in a 0700 folder, and
a peer of another user is refused (SO_PEERCRED) even where permissions would let it in. One
server per project: the server holds ``serve.lock`` for its lifetime, so a second one
refuses to start naming the first's pid, and a socket file left by a server that died is
removed before binding. Each connection is served by a thread of its own, one JSON line in,
one JSON line out, in order.

HTTP (``http.server``, one thread per request) serves ``POST /v1/<op>`` with the params as
body and ``Authorization: Bearer <token>`` (compared in constant time), and
``GET /v1/openapi.json`` without a token. It binds loopback addresses only, unless the
caller forces another.

`Server.stop` (SIGTERM, SIGINT, the ``shutdown`` op, or idle time running out) stops
accepting, closes the service (flushing the store) and removes the socket and its files.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from charter._runtime.atomic import write_atomically
from charter._runtime.project_files import ensure_secret, serve_dir, socket_address
from charter._server.protocol import (
    MAX_LINE,
    ProtocolError,
    answer_error,
    answer_ok,
    parse_request,
)
from charter._server.service import Service

__all__ = ["ServeError", "Server", "check_loopback"]

logger = logging.getLogger("charter")


class ServeError(Exception):
    """The server cannot start (the message says why and what to do)."""


def check_loopback(host: str) -> None:
    """Refuse (ServeError) an HTTP bind address that is not loopback."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ServeError(
            f"--http {host}: the decision server binds loopback addresses only (127.0.0.1, "
            "::1); pass --allow-remote to bind another (anyone who reaches it and holds the "
            "token can judge and record steps)"
        )


def _peer_uid(conn: socket.socket) -> int | None:
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:  # pragma: no cover - not Linux: the 0700 folder is the boundary
        return None
    data = conn.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
    return int(struct.unpack("3i", data)[1])


class Server:
    """One project's decision server. `start` binds (raises ServeError), `wait` blocks
    until `stop`. `folder` overrides the server directory (tests), `http` is (host, port)
    or None, `idle_exit` stops the server after that many seconds without a request."""

    def __init__(
        self,
        service: Service,
        *,
        folder: Path | None = None,
        http: tuple[str, int] | None = None,
        allow_remote: bool = False,
        idle_exit: float | None = None,
    ) -> None:
        self.service = service
        self.folder = folder or Path(serve_dir(service.project))
        self.socket_path = self.folder / "charter.sock"
        self.http_address = http
        self.allow_remote = allow_remote
        self.idle_exit = idle_exit
        self._stopped = threading.Event()
        self._stopping = threading.Lock()
        self._lock_fd: int | None = None
        self._unix: socket.socket | None = None
        self._http: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._last = time.monotonic()
        self.key = ""
        self.token = ""

    # -- starting ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.http_address is not None and not self.allow_remote:
            check_loopback(self.http_address[0])
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.folder, 0o700)
        self._take_lock()
        try:
            self.key = ensure_secret(self.folder / "key")
            self.token = ensure_secret(self.folder / "token")
            self._bind_unix()
            if self.http_address is not None:
                self._bind_http(*self.http_address)
            self._write_info()
        except BaseException:
            self._release()
            raise
        self._spawn(self._accept_loop, "charter-serve-accept")
        if self._http is not None:
            self._spawn(self._http.serve_forever, "charter-serve-http")
        if self.idle_exit:
            self._spawn(self._idle_loop, "charter-serve-idle")

    def _spawn(self, target: Callable[[], Any], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _take_lock(self) -> None:
        import fcntl

        path = self.folder / "serve.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = self.info().get("pid", "?")
            raise ServeError(
                f"another charter serve (pid {owner}) owns {self.socket_path}; stop it "
                "first (charter serve --stop) or use that one"
            ) from None
        self._lock_fd = fd

    def _bind_unix(self) -> None:
        path = str(self.socket_path)
        # We hold the lock, so a socket file here was left by a server that died: stale.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address, fd = socket_address(path)
        old = os.umask(0o177)
        try:
            sock.bind(address)
        except OSError as exc:
            sock.close()
            raise ServeError(f"cannot bind {path} ({exc.strerror or exc})") from None
        finally:
            os.umask(old)
            if fd is not None:
                os.close(fd)
        os.chmod(path, 0o600)
        sock.listen(64)
        self._unix = sock

    def _bind_http(self, host: str, port: int) -> None:
        server = self

        class Handler(_HttpHandler):
            owner = server

        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Http(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        try:
            self._http = Http((host, port), Handler)
        except OSError as exc:
            raise ServeError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
        self.http_address = (host, int(self._http.server_address[1]))

    def _write_info(self) -> None:
        info: dict[str, Any] = {
            "pid": os.getpid(),
            "project": self.service.project,
            "socket": str(self.socket_path),
        }
        if self.http_address is not None:
            info["http"] = f"http://{self.http_address[0]}:{self.http_address[1]}"
        write_atomically(self.folder / "server.json", json.dumps(info).encode("utf-8"))

    def info(self) -> dict[str, Any]:
        """What ``server.json`` says about the running server ({} when nothing)."""
        try:
            data = json.loads((self.folder / "server.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    # -- serving ----------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._unix is not None
        me = os.getuid()
        while not self._stopped.is_set():
            try:
                conn, _ = self._unix.accept()
            except OSError:
                return  # closed by stop()
            uid = _peer_uid(conn)
            if uid is not None and uid not in (me, 0):
                conn.close()
                continue
            threading.Thread(
                target=self._serve_connection, args=(conn,), name="charter-serve-conn", daemon=True
            ).start()

    def _serve_connection(self, conn: socket.socket) -> None:
        with conn:
            reader = conn.makefile("rb")
            while not self._stopped.is_set():
                try:
                    line = reader.readline(MAX_LINE + 1)
                except OSError:
                    return
                if not line:
                    return
                if len(line) > MAX_LINE and not line.endswith(b"\n"):
                    reply = answer_error(
                        None,
                        ProtocolError("bad_request", f"a request line is over {MAX_LINE} bytes"),
                    )
                    with contextlib.suppress(OSError):
                        conn.sendall(_line(reply))
                    return
                if not line.strip():
                    continue
                try:
                    conn.sendall(_line(self.respond(line)))
                except OSError:
                    return

    def respond(self, raw: bytes) -> dict[str, Any]:
        """The answer envelope to one raw request; never raises."""
        self._last = time.monotonic()
        request = None
        try:
            request = parse_request(raw)
            result = self.service.handle(request["op"], request.get("params") or {})
            return answer_ok(request, result, self.key)
        except ProtocolError as exc:
            return answer_error(request, exc)
        except Exception as exc:  # pragma: no cover - Service.handle raises ProtocolError only
            return answer_error(request, ProtocolError("internal", f"{type(exc).__name__}: {exc}"))
        finally:
            self._last = time.monotonic()

    def _idle_loop(self) -> None:
        assert self.idle_exit is not None
        while not self._stopped.wait(min(5.0, self.idle_exit / 4)):
            if time.monotonic() - self._last > self.idle_exit:
                logger.info("charter serve: idle for %g s, stopping", self.idle_exit)
                self.stop()
                return

    # -- stopping ---------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server stopped; returns whether it did within `timeout`."""
        return self._stopped.wait(timeout)

    def stop(self) -> None:
        """Stop accepting, close the service (the store is flushed) and remove the socket."""
        with self._stopping:
            if self._stopped.is_set():
                return
            if self._unix is not None:
                with contextlib.suppress(OSError):
                    self._unix.shutdown(socket.SHUT_RDWR)
                self._unix.close()
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()
            try:
                self.service.close()
            finally:
                self._release()
                self._stopped.set()

    def _release(self) -> None:
        for name in ("charter.sock", "server.json"):
            with contextlib.suppress(OSError):
                os.unlink(self.folder / name)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _line(reply: dict[str, Any]) -> bytes:
    return (
        json.dumps(reply, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", "surrogatepass"
        )
        + b"\n"
    )


class _HttpHandler(BaseHTTPRequestHandler):
    owner: Server
    protocol_version = "HTTP/1.1"
    server_version = "charter-serve"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("charter serve http: " + format, *args)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="charter"')
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: str, message: str, field: str | None = None) -> None:
        self._send(status, answer_error(None, ProtocolError(code, message, field)))

    def do_GET(self) -> None:
        if self.path in ("/v1/openapi.json", "/openapi.json"):
            from charter._server.openapi import document

            self._send(200, document(sorted(self.owner.service.ops)))
            return
        self._error(
            404, "unknown_op", "GET serves /v1/openapi.json only; operations are POST /v1/<op>"
        )

    def do_POST(self) -> None:
        length = self.headers.get("Content-Length")
        try:
            size = int(length or "0")
        except ValueError:
            size = -1
        if size < 0 or size > MAX_LINE:
            self.close_connection = True
            self._error(
                413 if size > MAX_LINE else 400,
                "bad_request",
                "send a JSON body with Content-Length",
            )
            return
        body = self.rfile.read(size)
        given = self.headers.get("Authorization") or ""
        scheme, _, token = given.partition(" ")
        expected = self.owner.token.encode("ascii")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode("utf-8", "replace"), expected
        ):
            self._error(
                401,
                "unauthorized",
                "send Authorization: Bearer <token>; the token is in the server folder "
                "(charter serve --print-token)",
                "Authorization",
            )
            return
        path = self.path.split("?", 1)[0]
        if not path.startswith("/v1/"):
            self._error(404, "unknown_op", "operations are POST /v1/<op>, e.g. /v1/step")
            return
        op = path[len("/v1/") :]
        try:
            params = json.loads(body) if body.strip() else {}
        except ValueError as exc:
            self._error(400, "bad_request", f"the body is not JSON ({exc})", "body")
            return
        envelope = json.dumps({"v": 1, "op": op, "params": params}).encode()
        reply = self.owner.respond(envelope)
        status = 200
        if not reply["ok"]:
            code = reply["error"]["code"]
            status = {"unknown_op": 404, "internal": 500}.get(code, 400)
        self._send(status, reply)
