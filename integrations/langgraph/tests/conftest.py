"""Fixtures: SQLite audit files under tmp_path, a policy set, the audit trail read back and
verified, and LangChain's offline fake chat model scripted to call tools."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import charter
import pytest
from charter.testing import charter_internal_errors  # noqa: F401  (autouse)
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

AGENT = "graph-bot"

# deny: a delete never runs; ask: a POST to a resource needs a person; both match on the
# behavior the node or tool maps to, never on the framework.
POLICIES: list[dict[str, Any]] = [
    {
        "name": "no-deletes",
        "rule_type": "deny",
        "severity": "critical",
        "match": {"kinds": ["step.resource"], "verbs": ["DELETE"]},
        "params": {"reason": "deletes are not allowed"},
    },
    {
        "name": "posts-need-approval",
        "rule_type": "deny",
        "severity": "high",
        "action": "ask",
        "match": {"kinds": ["step.resource"], "verbs": ["POST"]},
        "params": {"reason": "a person approves every write"},
    },
]


@pytest.fixture
def audit(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path}/audit.db"


@pytest.fixture
def settings(audit: str) -> dict[str, Any]:
    """Governor settings for `govern(...)`: the test policies, a real SQLite audit file."""
    return {"policies": POLICIES, "agent_id": AGENT, "audit_location": audit}


@pytest.fixture
def governors() -> Iterator[list[charter.Governor]]:
    """Governors a test registers here are closed (and flushed) at its end."""
    made: list[charter.Governor] = []
    yield made
    for gov in made:
        gov.close()


Trail = Callable[..., list[dict[str, Any]]]


@pytest.fixture
def trail(audit: str, governors: list[charter.Governor]) -> Trail:
    """The audit trail read back: every record of every task (or of `task_id`), in seq
    order per task, after flushing the given Governors; the store must verify."""

    def read(*govs: charter.Governor, task_id: str | None = None) -> list[dict[str, Any]]:
        for gov in (*govs, *governors):
            gov.flush()
        report = charter.verify(audit.removeprefix("sqlite:///"))
        assert report.ok, str(report)
        store = charter.open_store(audit)
        try:
            tasks = [t.task_id for t in store.list_tasks()] if task_id is None else [task_id]
            return [r for t in tasks for r in store.read_task(t, AGENT)]
        finally:
            store.close()

    return read


def steps(records: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    """(kind, step_name, outcome) of each record, for compact assertions."""
    return [
        (r["kind"], r["step_name"], (r.get("meta") or {}).get("charter.outcome")) for r in records
    ]


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's offline GenericFakeChatModel; `bind_tools` is accepted and ignored (the
    script already says which tools it calls)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self


def tool_call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def scripted(*messages: AIMessage | str) -> ScriptedChatModel:
    return ScriptedChatModel(messages=iter(messages))


@pytest.fixture
def lg() -> SimpleNamespace:
    """Small helpers for the tests (conftest modules are not importable by name)."""
    return SimpleNamespace(steps=steps, scripted=scripted, tool_call=tool_call)
