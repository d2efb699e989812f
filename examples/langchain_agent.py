"""A LangChain v1 agent governed by Charter, offline (a scripted model, no keys, no network).

    uv run python examples/langchain_agent.py

The agent looks up the weather, tries to delete a file (blocked: the model reads why and
goes on), then sends an email (a policy asks: the run pauses with LangGraph's interrupt, a
"reviewer" approves, the run resumes). The audit trail is written to a temporary SQLite
file, verified, and printed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import charter
from charter_langchain import CharterMiddleware
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

POLICIES = """
name: example-agent
version: 1
policies:
  - name: no-deletes
    description: This agent never deletes anything.
    rule_type: deny
    severity: critical
    match: {kinds: [step.resource], verbs: [DELETE]}
    params: {reason: this agent may not delete files}
  - name: outbound-mail-needs-approval
    rule_type: deny
    severity: high
    action: ask
    match: {kinds: [step.message], verbs: [POST]}
    params: {reason: a person approves every email}
"""


@tool
def get_weather(city: str) -> str:
    """Read the weather for a city."""
    return f"sunny in {city}"


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    raise AssertionError("never runs: the policy blocks it")


@tool
def send_email(to: str, body: str) -> str:
    """Send an email."""
    return f"sent to {to}"


class ScriptedModel(GenericFakeChatModel):
    """LangChain's offline fake chat model, bindable to tools."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def turn(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="charter-example-"))
    (folder / "policies.yaml").write_text(POLICIES)
    audit = f"sqlite:///{folder}/audit.db"

    model = ScriptedModel(
        messages=iter(
            [
                turn("get_weather", "c1", city="Oslo"),
                turn("delete_file", "c2", path="/srv/report.pdf"),
                turn("send_email", "c3", to="ann@example.com", body="It is sunny in Oslo."),
                AIMessage(content="Told Ann about the weather."),
            ]
        )
    )
    charter_mw = CharterMiddleware(
        policy_file=str(folder / "policies.yaml"), agent_id="weather-bot", audit_location=audit
    )
    agent = create_agent(
        model,
        [get_weather, delete_file, send_email],
        middleware=[charter_mw],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "example-1"}}

    paused = agent.invoke(
        {"messages": [{"role": "user", "content": "Tell Ann the weather"}]}, config
    )
    (request,) = paused["__interrupt__"]
    action = request.value["action_requests"][0]
    print(f"approval requested: {action['name']}({action['args']})\n  {action['description']}")
    done = agent.invoke(Command(resume={"decisions": [{"type": "approve", "by": "ann"}]}), config)
    for message in done["messages"]:
        print(f"  {message.type:>5}: {message.content}")

    charter_mw.governor.close()
    store = charter.open_store(audit)
    try:
        for summary in store.list_tasks():
            print(f"\naudit trail of task {summary.task_id!r}:")
            for record in store.read_task(summary.task_id, summary.agent_id):
                outcome = record["meta"].get("charter.outcome", "")
                if record["kind"] == "step.gate":
                    outcome = f"{record['output']['decision']} by {record['output']['by']}"
                verb = record["verb"] or ""
                print(
                    f"  {record['seq']:>2} {record['kind']:<13} {verb:<6} "
                    f"{record['step_name']:<18} {outcome}"
                )
    finally:
        store.close()
    print(f"\n{charter.verify(audit)}")


if __name__ == "__main__":
    main()
