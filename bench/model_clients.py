"""Raw model-client benchmark: the cost Charter adds to one call. Prints figures, asserts nothing.

    uv run python bench/model_clients.py [--calls 300] [--runs 7] [--provider all]

Each provider's real SDK client talks to an in-process transport that answers at once in
the provider's wire format (no network, no server), so what is measured is the SDK plus
Charter. For each provider: the median time of one non-streaming call ungoverned and
governed (a realistic policy set, a buffered SQLite trail in a temporary folder), and of a
streamed call of 20 chunks, and the added cost per call in microseconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import charter
from _policies import INTEGRATION_POLICIES

SCRATCH = tempfile.mkdtemp(prefix="charter-clients-bench-")


# The set's cap on model calls per task would end a long measurement run; everything else
# in it is judged on every call.
POLICIES = [p for p in INTEGRATION_POLICIES if p["name"] != "model-call-cap"]


def _governor() -> charter.Governor:
    return charter.Governor(
        policies=POLICIES,
        agent_id="bench-clients",
        audit_location=f"sqlite:///{SCRATCH}/audit-{time.monotonic_ns()}.db",
    )


def _sse(events: list[dict[str, Any]], done: bool, named: bool = False) -> bytes:
    out = []
    for e in events:
        name = f"event: {e['type']}\n" if named else ""
        out.append(f"{name}data: {json.dumps(e)}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def openai_case() -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], None]]:
    import charter_openai
    import httpx
    import openai

    completion = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }
    chunk = {
        "id": "c2",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
    }
    body = json.dumps(completion).encode()
    streamed = _sse([chunk] * 20, done=True)

    def handler(request: httpx.Request) -> httpx.Response:
        if b'"stream":true' in request.content:
            return httpx.Response(
                200, content=streamed, headers={"content-type": "text/event-stream"}
            )
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    def make() -> Any:
        return openai.OpenAI(
            api_key="sk-test-fake-bench",
            http_client=httpx.Client(transport=httpx.MockTransport(handler)),
        )

    plain, governed = make(), make()
    governance = charter_openai.govern(governed, governor=_governor())
    msgs = [{"role": "user", "content": "hello"}]

    def call(client: Any) -> Callable[[], Any]:
        return lambda: client.chat.completions.create(model="gpt-4o-mini", messages=msgs)

    def stream(client: Any) -> Callable[[], Any]:
        def run() -> None:
            for _ in client.chat.completions.create(
                model="gpt-4o-mini", messages=msgs, stream=True
            ):
                pass

        return run

    CASES["openai stream"] = (stream(plain), stream(governed))
    return call(plain), call(governed), lambda: governance.governor.close(5.0)


def anthropic_case() -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], None]]:
    import anthropic
    import charter_anthropic
    from anthropic import _base_client

    http: Any = getattr(_base_client, "httpx2", None) or _base_client.httpx
    message = {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }
    start = {**message, "content": [], "stop_reason": None}
    events = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *[{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}]
        * 20,
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 20},
        },
        {"type": "message_stop"},
    ]
    body = json.dumps(message).encode()
    streamed = _sse(events, done=False, named=True)

    def handler(request: Any) -> Any:
        if b'"stream":true' in request.content:
            return http.Response(
                200, content=streamed, headers={"content-type": "text/event-stream"}
            )
        return http.Response(200, content=body, headers={"content-type": "application/json"})

    def make() -> Any:
        return anthropic.Anthropic(
            api_key="sk-ant-test-fake-bench",
            http_client=http.Client(transport=http.MockTransport(handler)),
        )

    plain, governed = make(), make()
    governance = charter_anthropic.govern(governed, governor=_governor())
    msgs = [{"role": "user", "content": "hello"}]

    def call(client: Any) -> Callable[[], Any]:
        return lambda: client.messages.create(
            model="claude-sonnet-4-5", max_tokens=64, messages=msgs
        )

    def stream(client: Any) -> Callable[[], Any]:
        def run() -> None:
            for _ in client.messages.create(
                model="claude-sonnet-4-5", max_tokens=64, messages=msgs, stream=True
            ):
                pass

        return run

    CASES["anthropic stream"] = (stream(plain), stream(governed))
    return call(plain), call(governed), lambda: governance.governor.close(5.0)


def ollama_case() -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], None]]:
    import charter_ollama
    import httpx
    import ollama

    final = {
        "model": "llama3.2",
        "created_at": "2025-12-01T12:00:00Z",
        "message": {"role": "assistant", "content": "hi"},
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 10,
        "eval_count": 2,
    }
    piece = {**final, "done": False, "message": {"role": "assistant", "content": "x"}}
    body = json.dumps(final).encode()
    streamed = "".join(json.dumps(c) + "\n" for c in [*[piece] * 20, final]).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        if b'"stream":true' in request.content:
            return httpx.Response(200, content=streamed)
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    plain = ollama.Client(transport=httpx.MockTransport(handler))
    governed = ollama.Client(transport=httpx.MockTransport(handler))
    governance = charter_ollama.govern(governed, governor=_governor())
    msgs = [{"role": "user", "content": "hello"}]

    def call(client: Any) -> Callable[[], Any]:
        return lambda: client.chat(model="llama3.2", messages=msgs)

    def stream(client: Any) -> Callable[[], Any]:
        def run() -> None:
            for _ in client.chat(model="llama3.2", messages=msgs, stream=True):
                pass

        return run

    CASES["ollama stream"] = (stream(plain), stream(governed))
    return call(plain), call(governed), lambda: governance.governor.close(5.0)


PROVIDERS: dict[
    str, Callable[[], tuple[Callable[[], Any], Callable[[], Any], Callable[[], None]]]
] = {
    "openai": openai_case,
    "anthropic": anthropic_case,
    "ollama": ollama_case,
}
CASES: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}


def _median_us(fn: Callable[[], Any], calls: int, runs: int) -> float:
    fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--provider", default="all", choices=["all", *PROVIDERS])
    args = parser.parse_args()
    closers = []
    for name, build in PROVIDERS.items():
        if args.provider in ("all", name):
            plain, governed, close = build()
            CASES[f"{name} call"] = (plain, governed)
            closers.append(close)
    print(f"{'case':<20} {'ungoverned':>12} {'governed':>12} {'added':>12}")
    for case, (plain, governed) in sorted(CASES.items()):
        base = _median_us(plain, args.calls, args.runs)
        with_charter = _median_us(governed, args.calls, args.runs)
        print(f"{case:<20} {base:>10.1f}us {with_charter:>10.1f}us {with_charter - base:>10.1f}us")
    for close in closers:
        close()
    shutil.rmtree(SCRATCH, ignore_errors=True)


if __name__ == "__main__":
    main()
