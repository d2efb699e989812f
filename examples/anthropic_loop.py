"""The Anthropic SDK's own tool runner governed by Charter, offline: the SDK talks to an
in-process transport that answers like the Messages API (a tool_use turn, then an answer).

    uv run python examples/anthropic_loop.py

The model asks to read a file and to delete it; the policy blocks deletes, so the runner runs
the read, and the delete comes back to the model as an is_error tool result with the reason.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import anthropic
import charter
import charter_anthropic
from anthropic import _base_client

# The SDK's own HTTP library (httpx2 for anthropic 2.x, httpx before).
http: Any = getattr(_base_client, "httpx2", None) or _base_client.httpx

POLICIES = [
    {
        "name": "no-deletes",
        "description": "This assistant may read files, never delete them.",
        "rule_type": "deny",
        "severity": "critical",
        "match": {"step_names": ["delete_file"]},
    }
]


def fake_api(request: Any) -> Any:
    """Answers like /v1/messages: tool_use blocks first, then text once tools answered."""
    body = json.loads(request.content)
    answered = any(
        isinstance(m["content"], list) and any(b.get("type") == "tool_result" for b in m["content"])
        for m in body["messages"]
    )
    if answered:
        content: list[dict[str, Any]] = [
            {"type": "text", "text": "Read it; the delete was refused."}
        ]
    else:
        content = [
            {"type": "tool_use", "id": f"toolu_{n}", "name": n, "input": {"path": "notes.txt"}}
            for n in ("read_file", "delete_file")
        ]
    return http.Response(
        200,
        json={
            "id": "msg_example",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": "end_turn" if answered else "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 40, "output_tokens": 12},
        },
    )


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="charter-anthropic-example-"))
    (folder / "notes.txt").write_text("buy milk")

    @anthropic.beta_tool
    def read_file(path: str) -> str:
        """Read a file."""
        return (folder / path).read_text()

    @anthropic.beta_tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        (folder / path).unlink()
        return "deleted"

    gov = charter.Governor(
        policies=POLICIES,
        agent_id="anthropic-example",
        audit_location=f"sqlite:///{folder}/audit.db",
    )
    client = anthropic.Anthropic(
        api_key="sk-ant-test-fake-example",
        http_client=http.Client(transport=http.MockTransport(fake_api)),
    )
    governance = charter_anthropic.govern(client, governor=gov)
    runner = client.beta.messages.tool_runner(
        model="claude-sonnet-4-5",
        max_tokens=512,
        messages=[{"role": "user", "content": "Read notes.txt, then delete it."}],
        tools=[read_file, delete_file],
    )
    for message in runner:
        for block in message.content:
            if block.type == "tool_use":
                print(f"model asks: {block.name}({block.input})")
            elif block.type == "text":
                print(f"model: {block.text}")
        answer = runner.generate_tool_call_response()
        for result in (answer or {}).get("content", []):
            print(f"  tool result: {result.get('content')!s:.120}")

    governance.uninstall()
    gov.close(5.0)
    print(f"notes.txt still there: {(folder / 'notes.txt').exists()}")
    print(f"the trail: uv run charter tasks --store sqlite:///{folder}/audit.db")


if __name__ == "__main__":
    main()
