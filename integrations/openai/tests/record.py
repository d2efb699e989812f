"""Record the cassettes the tests replay: the OpenAI SDK driven through each scenario.

    python integrations/openai/tests/record.py            # against a loopback server
    OPENAI_API_KEY=sk-... python integrations/openai/tests/record.py --real [NAME ...]

By default the SDK talks to a server on 127.0.0.1 that answers in OpenAI's wire format (JSON
bodies, server-sent events ending in ``[DONE]``, tool calls, usage blocks, 429 / 500 / 400
errors; shapes as in the SDK's own types). With ``--real`` the same scenarios run against the
real API (scenarios marked loopback-only, such as a forced 500, are skipped there). Either way
the cassettes name https://api.openai.com, and authorization, organisation, project and
cookie headers are scrubbed before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
CASSETTES = HERE / "cassettes"
REAL_BASE = "https://api.openai.com/v1"
SCRUBBED = ["authorization", "openai-organization", "openai-project", "cookie", "set-cookie"]
MODEL = "gpt-4o-mini"
CREATED = 1733011200

# -- OpenAI's wire shapes ---------------------------------------------------------------


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def completion(
    text: str | None = None,
    tool_calls: list[tuple[str, str, dict[str, Any]]] = (),  # type: ignore[assignment]
    usage: tuple[int, int] = (20, 8),
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for cid, n, a in tool_calls
        ]
    return {
        "id": "chatcmpl-test-0001",
        "object": "chat.completion",
        "created": CREATED,
        "model": f"{MODEL}-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": _usage(*usage),
        "service_tier": "default",
        "system_fingerprint": "fp_test",
    }


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test-0002",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": f"{MODEL}-2024-07-18",
        "system_fingerprint": "fp_test",
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
        "usage": usage,
    }


def chat_stream(
    words: list[str],
    tool_calls: list[tuple[str, str, dict[str, Any]]] = (),  # type: ignore[assignment]
) -> list[dict[str, Any]]:
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"content": w}) for w in words]
    for i, (cid, name, args) in enumerate(tool_calls):
        text = json.dumps(args)
        half = len(text) // 2
        chunks.append(
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": cid,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        for part in (text[:half], text[half:]):
            chunks.append(_chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    chunks.append(_chunk({}, "tool_calls" if tool_calls else "stop"))
    chunks.append(_chunk({}, usage=_usage(12, len(words) or 5)))
    return chunks


def response(
    text: str | None = None,
    calls: list[tuple[str, str, dict[str, Any]]] = (),  # type: ignore[assignment]
    usage: tuple[int, int] = (18, 6),
) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if text is not None:
        output.append(
            {
                "id": "msg_test_0001",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    for cid, name, args in calls:
        output.append(
            {
                "id": f"fc_{cid}",
                "type": "function_call",
                "status": "completed",
                "call_id": cid,
                "name": name,
                "arguments": json.dumps(args),
            }
        )
    return {
        "id": "resp_test_0001",
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "model": f"{MODEL}-2024-07-18",
        "output": output,
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "usage": {
            "input_tokens": usage[0],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage[0] + usage[1],
        },
    }


def response_stream(words: list[str]) -> list[dict[str, Any]]:
    final = response("".join(words))
    start = {**final, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": 0, "response": start},
    ]
    for i, w in enumerate(words):
        events.append(
            {
                "type": "response.output_text.delta",
                "sequence_number": i + 1,
                "item_id": "msg_test_0001",
                "output_index": 0,
                "content_index": 0,
                "delta": w,
                "logprobs": [],
            }
        )
    events.append(
        {"type": "response.completed", "sequence_number": len(words) + 1, "response": final}
    )
    return events


def error(status: int, message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# -- the loopback server ----------------------------------------------------------------


class Reply:
    """One canned answer: a JSON body, or SSE events when `events` is given."""

    def __init__(
        self,
        body: Any = None,
        status: int = 200,
        events: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
        named_events: bool = False,
    ) -> None:
        self.body, self.status, self.events = body, status, events
        self.headers = headers or {}
        self.named_events = named_events


class Loopback:
    def __init__(self) -> None:
        self.queue: list[Reply] = []
        self.seen: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                owner.seen.append(json.loads(self.rfile.read(size) or b"{}"))
                reply = owner.queue.pop(0) if owner.queue else Reply(error(500, "x", "server"))
                self.send_response(reply.status)
                self.send_header("x-request-id", f"req_test_{len(owner.seen):04d}")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if reply.events is None:
                    data = json.dumps(reply.body).encode()
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                parts = []
                for e in reply.events:
                    name = f"event: {e['type']}\n" if reply.named_events else ""
                    parts.append(f"{name}data: {json.dumps(e)}\n\n")
                if not reply.named_events:
                    parts.append("data: [DONE]\n\n")
                data = "".join(parts).encode()
                self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> Loopback:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- scenarios: the same calls the tests make -------------------------------------------

PROBE_ARGS = {"target": "alpha-7", "count": 2}
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "contract_probe",
        "description": "Probe a target.",
        "parameters": {
            "type": "object",
            "properties": {"target": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["target", "count"],
        },
    },
}
FILE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ')}.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
    for name in ("read_file", "delete_file")
]
ASK = [{"role": "user", "content": "Say hello."}]


def _chat_text(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [Reply(completion("Hello!"))]
    client.chat.completions.create(model=MODEL, messages=ASK, temperature=0)


def _chat_probe(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(completion(None, [("call_probe_1", "contract_probe", PROBE_ARGS)])),
            Reply(completion("Probed.")),
        ]
    msgs: list[Any] = [{"role": "user", "content": "Probe alpha-7 twice."}]
    first = client.chat.completions.create(model=MODEL, messages=msgs, tools=[PROBE_TOOL])
    msgs.append(first.choices[0].message.model_dump(exclude_none=True))
    for call in first.choices[0].message.tool_calls or ():
        msgs.append({"role": "tool", "tool_call_id": call.id, "content": "probed"})
    client.chat.completions.create(model=MODEL, messages=msgs, tools=[PROBE_TOOL])


def _chat_files(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(
                completion(
                    None,
                    [
                        ("call_read_1", "read_file", {"path": "notes.txt"}),
                        ("call_del_1", "delete_file", {"path": "notes.txt"}),
                    ],
                )
            )
        ]
    msgs = [{"role": "user", "content": "Read notes.txt, then delete it."}]
    client.chat.completions.create(model=MODEL, messages=msgs, tools=FILE_TOOLS)


BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "Bash",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def _chat_bash(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(
                completion(
                    None,
                    [
                        ("call_bash_1", "Bash", {"command": "rm -rf /"}),
                        ("call_bash_2", "Bash", {"command": "ls"}),
                    ],
                )
            )
        ]
    msgs = [{"role": "user", "content": "Clean the disk, then list the folder."}]
    client.chat.completions.create(model=MODEL, messages=msgs, tools=[BASH_TOOL])


def _chat_stream(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [Reply(events=chat_stream(["Hel", "lo", "!"]))]
    stream = client.chat.completions.create(
        model=MODEL, messages=ASK, stream=True, stream_options={"include_usage": True}
    )
    for _ in stream:
        pass


def _chat_stream_tools(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(events=chat_stream([], [("call_read_2", "read_file", {"path": "notes.txt"})]))
        ]
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Read notes.txt."}],
        tools=FILE_TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    for _ in stream:
        pass


def _responses_text(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [Reply(response("Hello from Responses."))]
    client.responses.create(model=MODEL, input="Say hello.", instructions="Be brief.")


def _responses_tools(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [Reply(response(None, [("call_del_2", "delete_file", {"path": "a.txt"})]))]
    tools = [{"type": "function", **t["function"]} for t in FILE_TOOLS]
    client.responses.create(model=MODEL, input="Delete a.txt.", tools=tools)


def _responses_stream(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [Reply(events=response_stream(["Str", "eamed."]), named_events=True)]
    for _ in client.responses.create(model=MODEL, input="Say hello.", stream=True):
        pass


def _retry_429(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(
                error(429, "Rate limit reached", "requests", "rate_limit_exceeded"),
                429,
                headers={"retry-after-ms": "1"},
            ),
            Reply(completion("After the retry.")),
        ]
    client.chat.completions.create(model=MODEL, messages=ASK)


def _error_500(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(error(500, "The server had an error", "server_error"), 500, headers=h)
            for h in ({"retry-after-ms": "1"},) * 3
        ]
    try:
        client.with_options(max_retries=2).chat.completions.create(model=MODEL, messages=ASK)
    except Exception:
        pass


def _error_400(client: Any, server: Loopback | None) -> None:
    if server:
        server.queue = [
            Reply(error(400, "Invalid value for 'temperature'", "invalid_request_error", None), 400)
        ]
    try:
        client.chat.completions.create(model=MODEL, messages=ASK, temperature=9)
    except Exception:
        pass


SCENARIOS: dict[str, tuple[Callable[[Any, Loopback | None], None], bool]] = {
    # name: (scenario, loopback only)
    "chat_text": (_chat_text, False),
    "chat_probe": (_chat_probe, False),
    "chat_files": (_chat_files, False),
    "chat_bash": (_chat_bash, False),
    "chat_stream": (_chat_stream, False),
    "chat_stream_tools": (_chat_stream_tools, False),
    "responses_text": (_responses_text, False),
    "responses_tools": (_responses_tools, False),
    "responses_stream": (_responses_stream, False),
    "retry_429": (_retry_429, True),
    "error_500": (_error_500, True),
    "error_400": (_error_400, False),
}


def _canonical(base: str) -> Callable[[Any], Any]:
    def rewrite(request: Any) -> Any:
        if request.uri.startswith(base):
            request.uri = REAL_BASE + request.uri[len(base) :]
            if "host" in request.headers:
                request.headers["host"] = REAL_BASE.split("/")[2]
        return request

    return rewrite


def record(names: list[str], real: bool) -> None:
    import openai
    import vcr

    CASSETTES.mkdir(exist_ok=True)
    for name in names or list(SCENARIOS):
        scenario, loopback_only = SCENARIOS[name]
        if real and loopback_only:
            print(f"skip {name}: the real API cannot be made to answer this on demand")
            continue
        server = None if real else Loopback().__enter__()
        base = REAL_BASE if server is None else server.base_url
        recorder = vcr.VCR(
            filter_headers=SCRUBBED,
            before_record_request=_canonical(base),
            decode_compressed_response=True,
            record_mode="all",
        )
        key = None if server is None else "sk-test-fake-recording-key"
        client = openai.OpenAI(api_key=key, base_url=base, max_retries=2)
        path = CASSETTES / f"{name}.yaml"
        try:
            with recorder.use_cassette(str(path)):
                scenario(client, server)
        finally:
            if server is not None:
                server.__exit__()
        time.sleep(0)
        print(f"recorded {path.relative_to(HERE.parent.parent.parent)}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"scenarios (default all): {', '.join(SCENARIOS)}")
    parser.add_argument("--real", action="store_true", help="record against the real API")
    args = parser.parse_args(argv)
    record(args.names, args.real)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
