"""A raw OpenAI tool loop governed by Charter, offline: the SDK talks to an in-process
transport that answers like the API (a tool-calling turn, then an answer).

    uv run python examples/openai_loop.py

The model asks to read a file and to delete it; the policy blocks deletes, so the governed
executor runs the read, refuses the delete with the reason, and the model reads both.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import charter
import charter_openai
import httpx
import openai

POLICIES = [
    {
        "name": "no-deletes",
        "description": "This assistant may read files, never delete them.",
        "rule_type": "deny",
        "severity": "critical",
        "match": {"step_names": ["delete_file"]},
    },
    {
        "name": "token-budget",
        "rule_type": "budget",
        "severity": "critical",
        "match": {"kinds": ["step.model"]},
        "params": {"field": "properties.model.usage.total_tokens", "limit": 5000},
    },
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    for name in ("read_file", "delete_file")
]


def fake_api(request: httpx.Request) -> httpx.Response:
    """Answers like /v1/chat/completions: tool calls first, then text once tools answered."""
    body = json.loads(request.content)
    answered = any(m.get("role") == "tool" for m in body["messages"])
    if answered:
        message = {"role": "assistant", "content": "I read notes.txt; deleting it was refused."}
        finish = "stop"
    else:
        calls = [
            {"id": f"call_{n}", "type": "function", "function": {"name": n, "arguments": a}}
            for n, a in (
                ("read_file", '{"path": "notes.txt"}'),
                ("delete_file", '{"path": "notes.txt"}'),
            )
        ]
        message, finish = {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-example",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
        },
    )


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="charter-openai-example-"))
    (folder / "notes.txt").write_text("buy milk")
    tools = {
        "read_file": lambda path: (folder / path).read_text(),
        "delete_file": lambda path: (folder / path).unlink(),
    }
    gov = charter.Governor(
        policies=POLICIES, agent_id="openai-example", audit_location=f"sqlite:///{folder}/audit.db"
    )
    client = openai.OpenAI(
        api_key="sk-test-fake-example",
        http_client=httpx.Client(transport=httpx.MockTransport(fake_api)),
    )
    governance = charter_openai.govern(client, governor=gov)

    messages: list[object] = [{"role": "user", "content": "Read notes.txt, then delete it."}]
    while True:
        response = client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=TOOLS
        )
        message = response.choices[0].message
        messages.append(message)
        if not message.tool_calls:
            print(f"model: {message.content}")
            break
        for verdict in governance.verdicts(response):
            print(f"verdict on {verdict.call.name}({verdict.call.args}): {verdict.decision}")
        for result in governance.run_tools(response, tools):
            print(f"  tool result for {result['tool_call_id']}: {result['content']}")
            messages.append(result)

    governance.uninstall()
    gov.close(5.0)
    print(f"notes.txt still there: {(folder / 'notes.txt').exists()}")
    print(f"the trail: uv run charter tasks --store sqlite:///{folder}/audit.db")


if __name__ == "__main__":
    main()
