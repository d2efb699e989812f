"""Record the cassettes the tests replay: the Anthropic SDK driven through each scenario.

    python integrations/anthropic/tests/record.py            # against a loopback server
    ANTHROPIC_API_KEY=sk-ant-... python integrations/anthropic/tests/record.py --real [NAME ...]

By default the SDK talks to a server on 127.0.0.1 that answers in Anthropic's wire format
(Message JSON, server-sent events from message_start to message_stop, tool_use blocks, usage,
429 / 500 / 400 error bodies; shapes as in the SDK's own types). With ``--real`` the same
scenarios run against the real API (loopback-only scenarios are skipped). The cassettes name
https://api.anthropic.com; x-api-key, authorization and cookie headers are scrubbed.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
CASSETTES = HERE / "cassettes"
REAL_BASE = "https://api.anthropic.com"
SCRUBBED = ["x-api-key", "authorization", "cookie", "set-cookie", "anthropic-organization-id"]
MODEL = "claude-sonnet-4-5"
PROBE_ARGS = {"target": "alpha-7", "count": 2}


def message(
    text: str | None, tool_uses: list[tuple[str, str, dict[str, Any]]] = ()
) -> dict[str, Any]:  # type: ignore[assignment]
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    for tid, name, args in tool_uses:
        content.append({"type": "tool_use", "id": tid, "name": name, "input": args})
    return {
        "id": "msg_test_0001",
        "type": "message",
        "role": "assistant",
        "model": f"{MODEL}-20250929",
        "content": content,
        "stop_reason": "tool_use" if tool_uses else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 25,
            "output_tokens": 9,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def stream_events(
    words: list[str], tool: tuple[str, str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    start = {**message(None), "content": [], "stop_reason": None}
    start["usage"] = {**start["usage"], "output_tokens": 1}
    events = [{"type": "message_start", "message": start}]
    events.append(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    )
    events += [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}}
        for w in words
    ]
    events.append({"type": "content_block_stop", "index": 0})
    if tool is not None:
        tid, name, args = tool
        text = json.dumps(args)
        events.append(
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": tid, "name": name, "input": {}},
            }
        )
        for part in (text[: len(text) // 2], text[len(text) // 2 :]):
            events.append(
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "input_json_delta", "partial_json": part},
                }
            )
        events.append({"type": "content_block_stop", "index": 1})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 7},
        }
    )
    events.append({"type": "message_stop"})
    return events


def error(kind: str, text: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": text}}


class Reply:
    def __init__(
        self, body: Any = None, status: int = 200, events: Any = None, headers: Any = None
    ) -> None:
        self.body, self.status, self.events, self.headers = body, status, events, headers or {}


class Loopback:
    def __init__(self) -> None:
        self.queue: list[Reply] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                reply = owner.queue.pop(0) if owner.queue else Reply(error("api_error", "x"), 500)
                self.send_response(reply.status)
                self.send_header("request-id", "req_test_0001")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if reply.events is None:
                    data = json.dumps(reply.body).encode()
                    self.send_header("content-type", "application/json")
                else:
                    data = "".join(
                        f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in reply.events
                    ).encode()
                    self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


ASK = [{"role": "user", "content": "Say hello."}]
PROBE_TOOL = {
    "name": "contract_probe",
    "description": "Probe a target.",
    "input_schema": {
        "type": "object",
        "properties": {"target": {"type": "string"}, "count": {"type": "integer"}},
    },
}


def _text(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [Reply(message("Hello!"))]
    client.messages.create(model=MODEL, max_tokens=64, system="Be brief.", messages=ASK)


def _probe(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(message(None, [("toolu_probe_1", "contract_probe", PROBE_ARGS)])),
            Reply(message("Probed.")),
        ]
    msgs: list[Any] = [{"role": "user", "content": "Probe alpha-7 twice."}]
    first = client.messages.create(model=MODEL, max_tokens=64, messages=msgs, tools=[PROBE_TOOL])
    msgs.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
    msgs.append(
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_probe_1", "content": "probed"}
            ],
        }
    )
    client.messages.create(model=MODEL, max_tokens=64, messages=msgs, tools=[PROBE_TOOL])


BASH_TOOL = {
    "name": "Bash",
    "description": "Run a shell command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


def _bash(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(
                message(
                    None,
                    [
                        ("toolu_bash_1", "Bash", {"command": "rm -rf /"}),
                        ("toolu_bash_2", "Bash", {"command": "ls"}),
                    ],
                )
            )
        ]
    msgs = [{"role": "user", "content": "Clean the disk, then list the folder."}]
    client.messages.create(model=MODEL, max_tokens=64, messages=msgs, tools=[BASH_TOOL])


def _stream(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [Reply(events=stream_events(["Hel", "lo!"]))]
    for _ in client.messages.create(model=MODEL, max_tokens=64, messages=ASK, stream=True):
        pass


def _stream_tool(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(
                events=stream_events(
                    ["Reading."], ("toolu_read_1", "read_file", {"path": "notes.txt"})
                )
            )
        ]
    for _ in client.messages.create(model=MODEL, max_tokens=64, messages=ASK, stream=True):
        pass


def _error_500(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(error("api_error", "Internal server error"), 500, headers={"retry-after-ms": "1"})
        ] * 3
    try:
        client.with_options(max_retries=2).messages.create(model=MODEL, max_tokens=64, messages=ASK)
    except Exception:
        pass


def _error_429(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(error("rate_limit_error", "Rate limited"), 429, headers={"retry-after-ms": "1"}),
            Reply(message("After the retry.")),
        ]
    client.messages.create(model=MODEL, max_tokens=64, messages=ASK)


def _error_400(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [Reply(error("invalid_request_error", "max_tokens: must be positive"), 400)]
    try:
        client.messages.create(model=MODEL, max_tokens=0, messages=ASK)
    except Exception:
        pass


def _runner(client: Any, server: Loopback | None) -> None:
    import anthropic

    if server:
        server.queue = [
            Reply(message(None, [("toolu_probe_2", "contract_probe", PROBE_ARGS)])),
            Reply(message("Probed by the runner.")),
        ]

    @anthropic.beta_tool
    def contract_probe(target: str, count: int) -> str:
        """Probe a target."""
        return "probed"

    runner = client.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": "Probe alpha-7 twice."}],
        tools=[contract_probe],
        thread=False,
    )
    runner.until_done()


SCENARIOS: dict[str, tuple[Callable[[Any, Loopback | None], None], bool]] = {
    "text": (_text, False),
    "probe": (_probe, False),
    "runner": (_runner, False),
    "bash": (_bash, False),
    "stream": (_stream, False),
    "stream_tool": (_stream_tool, False),
    "retry_429": (_error_429, True),
    "error_500": (_error_500, True),
    "error_400": (_error_400, False),
}


def record(names: list[str], real: bool) -> None:
    import anthropic
    import vcr

    CASSETTES.mkdir(exist_ok=True)
    for name in names or list(SCENARIOS):
        scenario, loopback_only = SCENARIOS[name]
        if real and loopback_only:
            print(f"skip {name}: the real API cannot be made to answer this on demand")
            continue
        server = None if real else Loopback()
        base = REAL_BASE if server is None else server.base_url

        def rewrite(request: Any, base: str = base) -> Any:
            if request.uri.startswith(base):
                request.uri = REAL_BASE + request.uri[len(base) :]
                if "host" in request.headers:
                    request.headers["host"] = "api.anthropic.com"
            return request

        recorder = vcr.VCR(
            filter_headers=SCRUBBED, before_record_request=rewrite, record_mode="all"
        )
        key = None if server is None else "sk-ant-test-fake-recording-key"
        client = anthropic.Anthropic(api_key=key, base_url=base, max_retries=2)
        try:
            with recorder.use_cassette(str(CASSETTES / f"{name}.yaml")):
                scenario(client, server)
        finally:
            if server is not None:
                server.close()
        print(f"recorded {name}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"scenarios (default all): {', '.join(SCENARIOS)}")
    parser.add_argument("--real", action="store_true", help="record against the real API")
    args = parser.parse_args(argv)
    record(args.names, args.real)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
