"""A real OTLP/HTTP traces receiver on loopback, for tests of what reaches a collector.

It decodes each ``ExportTraceServiceRequest`` with ``opentelemetry-proto`` (installed with
the ``otlp`` extra) into plain dictionaries, answers with the status it is told to, and can
be closed to play a receiver that is down.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OtlpReceiver"]


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return tuple(_value(item) for item in v.array_value.values)
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which)


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


class OtlpReceiver:
    """Listens on 127.0.0.1 (a free port) for ``POST /v1/traces``; use it as a context manager.

    `endpoint` is the base URL to configure (``otlp_endpoint=receiver.endpoint``); `status` is
    the HTTP status it answers with (set 500 to refuse everything); `spans()` lists every span
    received so far as a dict with ``name``, ``kind``, ``trace_id``, ``span_id``,
    ``parent_span_id`` (hex, "" for a root), ``start`` and ``end`` (ns), ``attributes``,
    ``events`` (``[{"name", "attributes"}]``), ``status`` (``{"code", "message"}``),
    ``resource`` and ``scope``. `requests` counts the requests, refused ones included.
    """

    def __init__(self, status: int = 200) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        self._pb = trace_service_pb2
        self.status = status
        self.requests = 0
        self._spans: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                code = receiver._receive(self.path, body, dict(self.headers.items()))
                reply = receiver._pb.ExportTraceServiceResponse().SerializeToString()
                self.send_response(code)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.headers: list[dict[str, str]] = []
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="otlp-receiver", daemon=True
        )
        self._thread.start()
        self._open = True

    @property
    def endpoint(self) -> str:
        """The receiver's base URL (``http://127.0.0.1:PORT``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _receive(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        with self._cond:
            self.requests += 1
            self.headers.append({k.lower(): v for k, v in headers.items()})
            status = self.status
        if path.rstrip("/") != "/v1/traces":
            return 404
        if status != 200:
            return status
        request = self._pb.ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for rs in request.resource_spans:
            resource = _attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for span in ss.spans:
                    found.append(
                        {
                            "name": span.name,
                            "kind": span.kind,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "attributes": _attributes(span.attributes),
                            "events": [
                                {"name": e.name, "attributes": _attributes(e.attributes)}
                                for e in span.events
                            ],
                            "status": {"code": span.status.code, "message": span.status.message},
                            "resource": resource,
                            "scope": ss.scope.name,
                        }
                    )
        with self._cond:
            self._spans.extend(found)
            self._cond.notify_all()
        return 200

    def spans(self) -> list[dict[str, Any]]:
        """Every span received so far, in arrival order."""
        with self._cond:
            return list(self._spans)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """The spans once at least `count` arrived, or those that did within `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._spans) < count and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            return list(self._spans)

    def close(self) -> None:
        """Stop listening (the port then refuses connections). Idempotent."""
        if self._open:
            self._open = False
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> OtlpReceiver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
