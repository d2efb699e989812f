"""The conformance kit on real LangChain: a v1 agent with the middleware (approvals through
LangGraph's interrupt), and a Runnable with the callback handler (approvals through the
Governor's approver); the middleware and the handler together record each step once."""

from __future__ import annotations

from typing import Any

import charter
import pytest
from charter.testing import (
    CONTRACT_TOOL,
    IntegrationContract,
    PairedIntegrationContract,
    ToolRun,
)
from charter_langchain import CharterCallbackHandler, CharterMiddleware
from langchain.agents import create_agent
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from .conftest import ai, call, scripted


def _probe(run: ToolRun) -> StructuredTool:
    def probe(target: str, count: int) -> str:
        """The contract's probe tool."""
        run.calls.append({"target": target, "count": count})
        return "probed"

    return StructuredTool.from_function(probe, name=CONTRACT_TOOL)


def _tool_refusal(result: dict[str, Any]) -> str | None:
    for m in result.get("messages", []):
        if m.type == "tool" and getattr(m, "status", None) == "error":
            return str(m.content)
    return None


class AgentAdapter:
    """`create_agent` with CharterMiddleware; asks pause and resume with decisions."""

    def _run(self, governor: charter.Governor, args: dict[str, Any], approve: bool, **kw: Any):
        run = ToolRun()
        model = scripted(ai(call(CONTRACT_TOOL, **args)), ai(text="done"))
        agent = create_agent(
            model,
            [_probe(run)],
            middleware=[CharterMiddleware(governor)],
            checkpointer=InMemorySaver(),
        )
        config: dict[str, Any] = {"configurable": {"thread_id": "contract"}, **kw}
        try:
            result = agent.invoke({"messages": [{"role": "user", "content": "probe"}]}, config)
            if result.get("__interrupt__"):
                answer = {"type": "approve" if approve else "reject"}
                result = agent.invoke(Command(resume={"decisions": [answer]}), config)
        except Exception as exc:
            run.error = exc
            return run
        run.refusal = _tool_refusal(result)
        return run

    def run_tool(self, governor: charter.Governor, args: dict[str, Any], approve: bool):
        return self._run(governor, args, approve)

    def run_tool_doubly(self, governor: charter.Governor, args: dict[str, Any]) -> ToolRun:
        return self._run(governor, args, True, callbacks=[CharterCallbackHandler(governor)])


class HandlerAdapter:
    """A tool called from a Runnable with the callback handler in its config."""

    def run_tool(self, governor: charter.Governor, args: dict[str, Any], approve: bool):
        run = ToolRun()
        handler = CharterCallbackHandler(governor)
        try:
            _probe(run).invoke(args, config={"callbacks": [handler]})
        except charter.BlockedError as exc:
            run.refusal = exc.reason
        except Exception as exc:
            run.error = exc
        return run


class TestMiddlewareContract(PairedIntegrationContract):
    @pytest.fixture
    def adapter(self) -> AgentAdapter:
        return AgentAdapter()


class TestHandlerContract(IntegrationContract):
    @pytest.fixture
    def adapter(self) -> HandlerAdapter:
        return HandlerAdapter()
