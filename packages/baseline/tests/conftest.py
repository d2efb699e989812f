"""A task driven through a real PolicyEngine the way the Governor drives one.

`Session` builds each tool call with charter-templates and core's step builder
(`charter.integration.tool_step`, which adds the parsed view of shell commands), as every
integration does through `Gate.tool_step`, judges
it, and records what the Governor would record: an allowed step's outcome, a blocked step as
blocked, and for an asked step nothing, unless the test approves it (a step.gate bound to the
step's name and input, exactly as `Governor.record_approval` writes it).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from charter import Behavior, Decision, EvalContext, EvalResult, PolicyEngine, canonical_digest

# Fails any test in which Charter swallowed an internal error.
from charter.integration import tool_step
from charter.testing import charter_internal_errors  # noqa: F401
from charter_baseline import load_baseline_policies
from charter_templates import resolve

PROJECT = "/srv/shop"
AGENT = "agent-under-test"

_ids = itertools.count(1)


class Session:
    """One task of one agent against a policy set; see the module docstring."""

    @staticmethod
    def violated(result: EvalResult) -> set[str]:
        """The names of the policies `result` says were violated."""
        return {r.name for r in result.violations}

    def __init__(
        self,
        policies: list[Any],
        *,
        integration: str = "generic",
        project_root: str | None = PROJECT,
        trusted_values: tuple[str, ...] = (),
    ) -> None:
        self.integration = integration
        self.engine = PolicyEngine(policies)
        self.task_id = f"t{next(_ids)}"
        self.context = EvalContext(
            agent_id=AGENT,
            task_id=self.task_id,
            project_root=project_root,
            trusted_values=trusted_values,
        )
        self.ran: list[str] = []
        self.engine.record(self._behavior("task.start", None, "task"))

    def _behavior(self, kind: str, verb: str | None, name: str, **fields: Any) -> Behavior:
        return Behavior(
            agent_id=AGENT,
            task_id=self.task_id,
            kind=kind,
            verb=verb,
            step_name=name,
            action_id=f"a{next(_ids)}",
            **fields,
        )

    def judge(self, b: Behavior, output: Any = None) -> EvalResult:
        """Judge `b`; record its outcome (ok with `output`) when allowed or warned, blocked
        when blocked, nothing when asked."""
        result = self.engine.evaluate(b, self.context)
        if result.decision in (Decision.ALLOW, Decision.WARN):
            self.engine.register_intent(b)
            self.engine.record(b.completed(output if output is not None else {"ok": True}))
            self.ran.append(b.step_name)
        elif result.decision is Decision.BLOCK:
            self.engine.record(b.completed(None, outcome="blocked"))
        return result

    def tool(self, name: str, args: dict[str, Any] | None = None, output: Any = None) -> EvalResult:
        """A tool call, mapped to kind, verb and properties by the templates."""
        return self.judge(self._step(self.integration, name, args or {}), output)

    def _step(self, integration: str, name: str, args: dict[str, Any]) -> Behavior:
        kind, verb, properties, _ = resolve(integration, name, args)
        step = tool_step(integration, name, args, kind=kind, verb=verb, properties=properties)
        return self._behavior(kind, verb, name, input=step.input, properties=step.properties)

    def bash(self, command: str, output: Any = None) -> EvalResult:
        """A shell command as Claude Code's Bash tool sends it."""
        return self.judge(self._step("claude_code", "Bash", {"command": command}), output)

    def claude(self, tool: str, args: dict[str, Any], output: Any = None) -> EvalResult:
        """Any Claude Code tool call."""
        return self.judge(self._step("claude_code", tool, args), output)

    def user(self, text: str) -> EvalResult:
        """The user's own request: a trusted step.message GET with role user."""
        b = self._behavior(
            "step.message",
            "GET",
            "user_prompt",
            input={"text": text},
            properties={"message": {"role": "user"}},
        )
        return self.judge(b, {"text": text})

    def model(self, total_tokens: int) -> EvalResult:
        """A model call whose outcome reports `total_tokens` used."""
        b = self._behavior("step.model", None, "llm", input={"messages": ["..."]})
        result = self.engine.evaluate(b, self.context)
        if result.decision in (Decision.ALLOW, Decision.WARN):
            self.engine.register_intent(b)
            done = b.replace(properties={"model": {"usage": {"total_tokens": total_tokens}}})
            self.engine.record(done.completed({"text": "..."}))
        return result

    def approve(self, name: str, args: dict[str, Any], approved: bool = True) -> None:
        """Record a person's answer on the step `name(args)`, as the Governor records it."""
        gate = self._behavior(
            "step.gate",
            None,
            "approval",
            output={"decision": "pass" if approved else "deny", "by": "tester", "why": ""},
            properties={
                "gate": {
                    "kind": "human",
                    "step_name": name,
                    "digest": canonical_digest(args),
                    "policies": [],
                }
            },
        )
        self.engine.record(gate)


@pytest.fixture
def session() -> type[Session]:
    """The Session class, for tests that build their own (other policies, no project root)."""
    return Session


@pytest.fixture
def coding() -> Session:
    return Session(load_baseline_policies("coding-agent"), integration="claude_code")


@pytest.fixture
def tools() -> Session:
    return Session(load_baseline_policies("tool-agent"))
