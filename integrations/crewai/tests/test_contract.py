"""The integration conformance kit (charter.testing) on a real CrewAI crew, on both of
CrewAI's tool-calling paths (ReAct text and native function calling)."""

from __future__ import annotations

from typing import Any

import charter
import pytest
from charter.testing import CONTRACT_TOOL, IntegrationContract, ToolRun
from charter_crewai import govern
from charter_crewai.testing import ScriptedLLM, final_answer, native_tool_call, react_tool_call
from crewai import Agent, Crew, Task
from crewai.tools import tool


class CrewAIAdapter:
    def __init__(self, native: bool) -> None:
        self.native = native

    def run_tool(self, governor: charter.Governor, args: dict[str, Any], approve: bool) -> ToolRun:
        # CrewAI asks through the Governor's approver, which the kit built to answer `approve`.
        run = ToolRun()

        @tool(CONTRACT_TOOL)
        def probe(target: str, count: int) -> str:
            """Probe a target a number of times."""
            run.calls.append({"target": target, "count": count})
            return f"probed {target}"

        if self.native:
            script: list[Any] = [[native_tool_call(CONTRACT_TOOL, args)], "done"]
        else:
            script = [react_tool_call(CONTRACT_TOOL, args), final_answer("done")]
        llm = ScriptedLLM(model="scripted-model", responses=script, native=self.native)
        agent = Agent(role="prober", goal="probe", backstory="a probe", llm=llm, tools=[probe])
        task = Task(description="probe once", expected_output="a report", agent=agent)
        crew = Crew(agents=[agent], tasks=[task], name="contract-crew")
        with govern(crew, governor=governor):
            try:
                crew.kickoff()
            except Exception as exc:
                run.error = exc
        run.refusal = _refusal(llm)
        return run


def _refusal(llm: ScriptedLLM) -> str | None:
    """The reason Charter gave the agent for a refused tool call, as the agent read it."""
    for call in reversed(llm.calls):
        for message in reversed(call):
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str) and "\nReason: " in content:
                return content.split("\nReason: ", 1)[1].strip()
    return None


class TestCrewAIContract(IntegrationContract):
    @pytest.fixture(params=[False, True], ids=["react", "native"])
    def adapter(self, request: pytest.FixtureRequest) -> CrewAIAdapter:
        return CrewAIAdapter(request.param)
