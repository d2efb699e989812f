"""Capture never weakens judgement: a tool argument that is not plain JSON is judged as the
tool receives it, and a field Charter cannot capture blocks the policies that read it.

Through the Governor, LangChain's CharterMiddleware and LangGraph's gate: bytes judged as
the text they decode to, an integer past Python's 4,300-digit str() limit, an object whose
repr raises beside the argument a policy reads, a secret nested past the depth limit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import charter
import charter_langgraph
import pytest
from charter.testing import charter_internal_errors  # noqa: F401  (autouse)
from charter_langchain import CharterMiddleware
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

GH = "ghp_" + "FakeToken0" * 3 + "FakeTo"

POLICIES = [
    {
        "name": "no-rm",
        "rule_type": "field_matches",
        "severity": "critical",
        "match": {"step_names": ["bash"]},
        "params": {"field": "input.command", "pattern": "rm -rf"},
    },
    {
        "name": "no-secrets-out",
        "rule_type": "no_secrets",
        "severity": "critical",
        "match": {"step_names": ["upload"]},
        "params": {"fields": ["input"]},
    },
]


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


def _deep(levels: int, leaf: Any) -> Any:
    for _ in range(levels):
        leaf = {"d": leaf}
    return leaf


# (step name, arguments, a text the stored trail must not hold)
CASES: dict[str, tuple[str, dict[str, Any], str | None]] = {
    "bytes_command": ("bash", {"command": b"rm -rf /tmp/x"}, None),
    "huge_int_beside": ("bash", {"command": "rm -rf /tmp/x", "n": 10**5000}, None),
    "bad_repr_beside": ("bash", {"command": "rm -rf /tmp/x", "obj": BadRepr()}, None),
    "bad_repr_read": ("bash", {"command": BadRepr()}, None),
    "deep_secret": ("upload", {"body": _deep(40, {"token": GH}), "obj": BadRepr()}, GH[4:]),
}


@pytest.fixture
def governor(tmp_path: Path) -> Any:
    made: list[charter.Governor] = []

    def make() -> charter.Governor:
        gov = charter.Governor(
            policies=POLICIES,
            agent_id="capture",
            audit_location=f"sqlite:///{tmp_path / 'audit.db'}",
            audit_durability="sync",
        )
        made.append(gov)
        return gov

    yield make
    for gov in made:
        gov.close()


def _stored(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("audit"))


def _blocked(gov: charter.Governor) -> list[dict[str, Any]]:
    assert gov.flush(5.0)
    store = gov.runner.store
    assert store is not None
    return [
        r
        for t in store.list_tasks("capture")
        for r in store.read_task(t.task_id, "capture")
        if r["meta"].get("charter.outcome") == "blocked"
    ]


@pytest.mark.parametrize("case", list(CASES))
def test_through_the_governor(governor: Callable[[], Any], tmp_path: Path, case: str) -> None:
    name, args, hidden = CASES[case]
    gov = governor()
    ran = []
    with (
        gov.task("job"),
        pytest.raises(charter.BlockedError),
        gov.step("step.exec", name=name, input=args),
    ):
        ran.append(name)
    assert ran == []
    assert len(_blocked(gov)) == 1
    if hidden:
        assert hidden.encode() not in _stored(tmp_path)


def _tools(ran: list[str]) -> list[Any]:
    @tool
    def bash(command: Any, n: Any = None, obj: Any = None) -> str:
        """Run a shell command."""
        ran.append("bash")
        return "done"

    @tool
    def upload(body: Any, obj: Any = None) -> str:
        """Upload a document."""
        ran.append("upload")
        return "done"

    return [bash, upload]


class _Scripted(GenericFakeChatModel):
    """GenericFakeChatModel that create_agent can bind tools to."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> _Scripted:
        return self


@pytest.mark.parametrize("case", list(CASES))
def test_through_the_langchain_middleware(
    governor: Callable[[], Any], tmp_path: Path, case: str
) -> None:
    name, args, hidden = CASES[case]
    gov = governor()
    ran: list[str] = []
    call = {"name": name, "args": args, "id": "c1", "type": "tool_call"}
    model = _Scripted(messages=iter([AIMessage("", tool_calls=[call]), AIMessage("done")]))
    agent = create_agent(model, _tools(ran), middleware=[CharterMiddleware(gov)])
    agent.invoke({"messages": [HumanMessage("go")]})
    assert ran == []
    assert len(_blocked(gov)) == 1
    if hidden:
        assert hidden.encode() not in _stored(tmp_path)


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@pytest.mark.parametrize("case", list(CASES))
def test_through_langgraph(governor: Callable[[], Any], tmp_path: Path, case: str) -> None:
    name, args, hidden = CASES[case]
    gov = governor()
    ran: list[str] = []
    call = {"name": name, "args": args, "id": "c1", "type": "tool_call"}
    model = GenericFakeChatModel(messages=iter([AIMessage("", tool_calls=[call])]))

    def agent(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(_tools(ran)))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    graph = charter_langgraph.govern(builder, governor=gov).compile()
    graph.invoke({"messages": [HumanMessage("go")]})
    assert ran == []
    assert len(_blocked(gov)) == 1
    if hidden:
        assert hidden.encode() not in _stored(tmp_path)
