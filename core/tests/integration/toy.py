"""A toy agent framework and its Charter integration: the README's "Writing an integration".

The framework runs a scripted list of tool calls and lets a hook refuse one. The integration
is translation only: framework event in, `Step` out, through `charter.integration`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from charter.integration import Blocked, Gate, Pending


class ToyAgent:
    """The framework: runs `script` (``[(tool, args), ...]``); `before_tool(name, args)`
    may return a refusal text instead of running the tool."""

    def __init__(self, tools: dict[str, Callable[..., Any]], script: list[tuple[str, dict]]):
        self.tools, self.script = tools, script
        self.before_tool: Callable[[str, dict], str | None] = lambda name, args: None
        self.after_tool: Callable[[str, Any, BaseException | None], None] = lambda *a: None
        self.after_run: Callable[[list[Any]], None] = lambda seen: None

    def run(self, task: str) -> list[Any]:
        seen = []
        for name, args in self.script:
            refusal = self.before_tool(name, args)
            if refusal is not None:
                seen.append(refusal)
                continue
            try:
                seen.append(self.tools[name](**args))
                self.after_tool(name, seen[-1], None)
            except Exception as exc:
                self.after_tool(name, None, exc)
        self.after_run(seen)
        return seen


def govern(agent: ToyAgent, task_id: str, **settings: Any) -> Gate:
    """The whole integration: one task per run, every tool call gated and recorded."""
    gate = Gate("toy", **settings)
    running: dict[str, Any] = {}

    def before_tool(name: str, args: dict) -> str | None:
        if gate.task_state(task_id) == "unknown":
            started = gate.start_task(task_id, name="toy run")
            if isinstance(started, Blocked):
                return started.reason
        decision = gate.decide(gate.tool_step(name, args), task_id)
        if isinstance(decision, Blocked | Pending):  # no pause in this framework
            return decision.reason if isinstance(decision, Blocked) else "needs approval"
        running[name] = decision.handle
        return None

    def after_tool(name: str, output: Any, error: BaseException | None) -> None:
        handle = running.pop(name, None)
        if error is None:
            gate.complete(handle, output)
        else:
            gate.fail(handle, error)

    def after_run(seen: list[Any]) -> None:
        gate.end_task(task_id, output={"results": len(seen)})

    agent.before_tool, agent.after_tool, agent.after_run = before_tool, after_tool, after_run
    return gate
