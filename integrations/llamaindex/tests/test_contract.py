"""The conformance kit (charter.testing) on real LlamaIndex agents: a FunctionAgent with
streaming and without, a ReActAgent-free AgentWorkflow, asks answered through LlamaIndex's
own InputRequiredEvent / HumanResponseEvent; paired with governed tools on the same
Governor, each step is recorded once."""

from __future__ import annotations

import asyncio
from typing import Any

import charter
import pytest
from charter.testing import CONTRACT_TOOL, PairedIntegrationContract, ToolRun
from charter_llamaindex import approve, deny, govern, govern_tools
from charter_llamaindex.testing import ScriptedLLM, tool_call
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ToolCallResult
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import InputRequiredEvent


def _probe(run: ToolRun) -> FunctionTool:
    def probe(target: str, count: int) -> str:
        """The contract's probe tool."""
        run.calls.append({"target": target, "count": count})
        return f"probed {target}"

    return FunctionTool.from_defaults(probe, name=CONTRACT_TOOL)


class AgentAdapter:
    def __init__(self, shape: str) -> None:
        self.shape = shape

    def _agent(self, tool: Any, args: dict[str, Any]) -> Any:
        llm = ScriptedLLM([tool_call(CONTRACT_TOOL, args), "done"])
        agent = FunctionAgent(
            name="prober",
            description="probes",
            tools=[tool],
            llm=llm,
            streaming=self.shape == "streaming",
        )
        return AgentWorkflow(agents=[agent]) if self.shape == "workflow" else agent

    async def _drive(self, target: Any, approve_it: bool, run: ToolRun) -> None:
        handler = target.run(user_msg="probe it")
        async for event in handler.stream_events():
            if isinstance(event, InputRequiredEvent):
                answer = approve(event, by="contract") if approve_it else deny(event)
                handler.ctx.send_event(answer)
            elif isinstance(event, ToolCallResult) and event.tool_output.is_error:
                run.refusal = event.tool_output.content
        await handler

    def run_tool(self, governor: charter.Governor, args: dict[str, Any], approve: bool):
        run = ToolRun()
        target = self._agent(_probe(run), args)
        with govern(target, governor=governor):
            try:
                asyncio.run(self._drive(target, approve, run))
            except Exception as exc:
                run.error = exc
        return run

    def run_tool_doubly(self, governor: charter.Governor, args: dict[str, Any]) -> ToolRun:
        run = ToolRun()
        tools = govern_tools([_probe(run)], governor=governor)
        target = self._agent(tools.tools[0], args)
        with govern(target, governor=governor):
            try:
                asyncio.run(self._drive(target, True, run))
            except Exception as exc:
                run.error = exc
        tools.uninstall()
        return run


class TestAgentContract(PairedIntegrationContract):
    @pytest.fixture(params=["streaming", "plain", "workflow"])
    def adapter(self, request: pytest.FixtureRequest) -> AgentAdapter:
        return AgentAdapter(request.param)
