"""A local Ollama tool loop governed by Charter, offline: the client talks to an in-process
transport that answers like an Ollama server (a tool call, then an answer).

    uv run python examples/ollama_loop.py

The model asks to run a shell command; the policy blocks destructive ones, so the governed
executor refuses it with the reason and the model reads the refusal.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import charter
import charter_ollama
import httpx
import ollama

POLICIES = [
    {
        "name": "no-destructive-shell",
        "rule_type": "field_matches",
        "severity": "critical",
        "match": {"kinds": ["step.exec"]},
        "params": {"field": "input.command", "pattern": r"\brm\s+-rf\s+/"},
    }
]


def fake_server(request: httpx.Request) -> httpx.Response:
    """Answers like /api/chat: a tool call first, then text once the tool answered."""
    body = json.loads(request.content)
    answered = any(m.get("role") == "tool" for m in body["messages"])
    message: dict[str, object] = {"role": "assistant", "content": ""}
    if answered:
        message["content"] = "I will not run that."
    else:
        message["tool_calls"] = [
            {"function": {"name": "shell", "arguments": {"command": "rm -rf /"}}}
        ]
    return httpx.Response(
        200,
        json={
            "model": body["model"],
            "created_at": "2025-12-01T12:00:00Z",
            "message": message,
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 30,
            "eval_count": 8,
        },
    )


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="charter-ollama-example-"))
    gov = charter.Governor(
        policies=POLICIES, agent_id="ollama-example", audit_location=f"sqlite:///{folder}/audit.db"
    )
    client = ollama.Client(transport=httpx.MockTransport(fake_server))
    governance = charter_ollama.govern(client, governor=gov)

    ran: list[str] = []
    tools = {"shell": lambda command: ran.append(command) or "done"}
    messages: list[object] = [{"role": "user", "content": "Clean up the disk."}]
    while True:
        response = client.chat(model="llama3.2", messages=messages)
        messages.append(response.message)
        if not response.message.tool_calls:
            print(f"model: {response.message.content}")
            break
        for verdict in governance.verdicts(response):
            print(f"verdict on {verdict.call.name}({verdict.call.args}): {verdict.decision}")
        for result in governance.run_tools(response, tools):
            print(f"  tool result: {result['content']}")
            messages.append(result)

    governance.uninstall()
    gov.close(5.0)
    print(f"commands run: {ran}")
    print(f"the trail: uv run charter tasks --store sqlite:///{folder}/audit.db")


if __name__ == "__main__":
    main()
