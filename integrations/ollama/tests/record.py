"""Record the cassettes the tests replay: the Ollama client driven through each scenario.

    python integrations/ollama/tests/record.py                       # against a loopback server
    python integrations/ollama/tests/record.py --real [--host URL] [NAME ...]   # a real server

By default the client talks to a server on 127.0.0.1 that answers in Ollama's wire format
(JSON bodies, NDJSON streams ending in a ``done`` chunk with prompt_eval_count / eval_count,
tool calls with object arguments and no call id, error bodies ``{"error": ...}`` with 400,
404, 429 and 500). With ``--real`` the same scenarios run against a running Ollama (default
http://127.0.0.1:11434, model llama3.2 pulled; error scenarios are skipped). The cassettes
name http://127.0.0.1:11434; authorization headers (proxies) are scrubbed.
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
CANONICAL = "http://127.0.0.1:11434"
MODEL = "llama3.2"
CREATED = "2025-12-01T12:00:00.000000Z"
PROBE_ARGS = {"target": "alpha-7", "count": 2}


def chat(
    text: str, calls: list[tuple[str, dict[str, Any]]] = (), done: bool = True
) -> dict[str, Any]:  # type: ignore[assignment]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"function": {"name": n, "arguments": a}} for n, a in calls]
    out: dict[str, Any] = {"model": MODEL, "created_at": CREATED, "message": message, "done": done}
    if done:
        out.update(
            done_reason="stop",
            total_duration=812000000,
            load_duration=21000000,
            prompt_eval_count=26,
            prompt_eval_duration=130000000,
            eval_count=10,
            eval_duration=640000000,
        )
    return out


def generate(text: str) -> dict[str, Any]:
    out = chat(text)
    out.pop("message")
    out["response"] = text
    return out


class Reply:
    def __init__(self, body: Any = None, status: int = 200, lines: Any = None) -> None:
        self.body, self.status, self.lines = body, status, lines


class Loopback:
    def __init__(self) -> None:
        self.queue: list[Reply] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                reply = owner.queue.pop(0) if owner.queue else Reply({"error": "no reply"}, 500)
                self.send_response(reply.status)
                if reply.lines is None:
                    data = json.dumps(reply.body).encode()
                    self.send_header("content-type", "application/json; charset=utf-8")
                else:
                    data = "".join(json.dumps(line) + "\n" for line in reply.lines).encode()
                    self.send_header("content-type", "application/x-ndjson")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


ASK = [{"role": "user", "content": "Say hello."}]


def _chat(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [Reply(chat("Hello!"))]
    client.chat(model=MODEL, messages=ASK, options={"temperature": 0})


def _probe(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [Reply(chat("", [("contract_probe", PROBE_ARGS)])), Reply(chat("Probed."))]
    msgs: list[Any] = [{"role": "user", "content": "Probe alpha-7 twice."}]
    first = client.chat(model=MODEL, messages=msgs)
    msgs.append(first.message)
    msgs.append({"role": "tool", "tool_name": "contract_probe", "content": "probed"})
    client.chat(model=MODEL, messages=msgs)


def _bash(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(chat("", [("Bash", {"command": "rm -rf /"}), ("Bash", {"command": "ls"})]))
        ]
    tool = {
        "type": "function",
        "function": {
            "name": "Bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
    msgs = [{"role": "user", "content": "Clean the disk, then list the folder."}]
    client.chat(model=MODEL, messages=msgs, tools=[tool])


def _stream(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(
                lines=[
                    chat("Hel", done=False),
                    chat("lo", done=False),
                    chat("!", done=False),
                    chat(""),
                ]
            )
        ]
    for _ in client.chat(model=MODEL, messages=ASK, stream=True):
        pass


def _stream_tool(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(lines=[chat("", [("read_file", {"path": "notes.txt"})], done=False), chat("")])
        ]
    for _ in client.chat(model=MODEL, messages=ASK, stream=True):
        pass


def _generate(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [Reply(generate("Generated."))]
    client.generate(model=MODEL, prompt="Say hello.", system="Be brief.")


def _errors(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply({"error": 'model "llama9" not found, try pulling it first'}, 404),
            Reply({"error": "invalid options: temperature"}, 400),
            Reply({"error": "server busy, please try again later"}, 429),
            Reply({"error": "llama runner process has terminated"}, 500),
        ]
    for kwargs in (
        {"model": "llama9"},
        {"model": MODEL, "options": {"temperature": "hot"}},
        {"model": MODEL},
        {"model": MODEL},
    ):
        try:
            client.chat(messages=ASK, **kwargs)
        except Exception:
            pass


SCENARIOS: dict[str, tuple[Callable[[Any, Loopback | None], None], bool]] = {
    "chat": (_chat, False),
    "probe": (_probe, False),
    "bash": (_bash, False),
    "stream": (_stream, False),
    "stream_tool": (_stream_tool, False),
    "generate": (_generate, False),
    "errors": (_errors, True),
}


def record(names: list[str], real: bool, host: str) -> None:
    import ollama
    import vcr

    CASSETTES.mkdir(exist_ok=True)
    for name in names or list(SCENARIOS):
        scenario, loopback_only = SCENARIOS[name]
        if real and loopback_only:
            print(f"skip {name}: a real server cannot be made to answer this on demand")
            continue
        server = None if real else Loopback()
        base = host if server is None else server.host

        def rewrite(request: Any, base: str = base) -> Any:
            if request.uri.startswith(base):
                request.uri = CANONICAL + request.uri[len(base) :]
                if "host" in request.headers:
                    request.headers["host"] = CANONICAL.split("/")[2]
            return request

        recorder = vcr.VCR(
            filter_headers=["authorization", "cookie"],
            before_record_request=rewrite,
            record_mode="all",
        )
        client = ollama.Client(host=base)
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
    parser.add_argument("--real", action="store_true", help="record against a running Ollama")
    parser.add_argument("--host", default=CANONICAL, help="the real server (with --real)")
    args = parser.parse_args(argv)
    record(args.names, args.real, args.host)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
