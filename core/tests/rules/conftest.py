"""A small driver for history-rule tests: one task in a real PolicyEngine.

Tests get the `Task` class through the `Task` fixture (test modules are imported with
--import-mode=importlib, so they cannot import a helper module by name).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from charter import Behavior, EvalContext, EvalResult, PolicyEngine, PolicyResult
from charter._model.ijson import canonical_digest

AGENT = "agent"
T0 = datetime(2024, 6, 3, 10, 0, tzinfo=UTC)  # a Monday


def policy(rule_type: str, params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """One policy named `p` (critical unless `severity` is given)."""
    out: dict[str, Any] = {
        "name": extra.pop("name", "p"),
        "rule_type": rule_type,
        "severity": extra.pop("severity", "critical"),
        "params": params,
    }
    out.update(extra)
    return out


class Task:
    """One started task: record steps with outcomes, register intents, judge new steps.

    Timestamps are `T0 + at` seconds; without `at` each new step is one second after the last.
    """

    def __init__(
        self,
        policies: list[dict[str, Any]] | dict[str, Any],
        *,
        project_root: str | None = None,
        trusted_values: tuple[str, ...] = (),
        task_id: str = "t1",
    ) -> None:
        self.engine = PolicyEngine([policies] if isinstance(policies, dict) else policies)
        self.task_id = task_id
        self.ctx = EvalContext(
            agent_id=AGENT,
            task_id=task_id,
            project_root=project_root,
            trusted_values=trusted_values,
        )
        self._ids = itertools.count(1)
        self.clock = 0.0
        self.engine.record(self.step("start", kind="task.start", at=0))

    def step(
        self,
        name: str = "tool",
        kind: str = "step.exec",
        verb: str | None = None,
        *,
        at: float | None = None,
        **kw: Any,
    ) -> Behavior:
        """A new intent (not recorded) with a fresh action_id."""
        self.clock = self.clock + 1 if at is None else at
        kw.setdefault("action_id", f"a{next(self._ids)}")
        return Behavior(
            agent_id=AGENT,
            task_id=self.task_id,
            kind=kind,
            verb=verb,
            step_name=name,
            timestamp=T0 + timedelta(seconds=self.clock),
            **kw,
        )

    def record(
        self,
        name: str = "tool",
        kind: str = "step.exec",
        verb: str | None = None,
        *,
        output: dict[str, Any] | None = None,
        outcome: str = "ok",
        **kw: Any,
    ) -> Behavior:
        """Record a completed step (no evaluation); returns it with its seq."""
        return self.record_step(self.step(name, kind, verb, **kw), output, outcome)

    def record_step(
        self, b: Behavior, output: dict[str, Any] | None = None, outcome: str = "ok"
    ) -> Behavior:
        return self.engine.record(
            b.completed(output if output is not None else {}, outcome=outcome)
        )

    def start(self, b: Behavior) -> Behavior:
        """Register `b` as an allowed intent that is still running."""
        self.engine.register_intent(b)
        return b

    def gate(
        self,
        for_step: Behavior | None = None,
        decision: str = "pass",
        *,
        kind: str = "human",
        step_name: str | None = None,
        digest: str | None = None,
        outcome: str = "ok",
        **kw: Any,
    ) -> Behavior:
        """Record a step.gate approving `for_step` (its name and input digest)."""
        gate: dict[str, Any] = {"kind": kind}
        name = step_name if step_name is not None else (for_step.step_name if for_step else None)
        if name is not None:
            gate["step_name"] = name
        if digest is None and for_step is not None:
            digest = canonical_digest(for_step.input or {})
        if digest is not None:
            gate["digest"] = digest
        return self.record(
            "approval",
            "step.gate",
            properties={"gate": gate},
            output={"decision": decision, "by": "alice", "why": "checked"},
            outcome=outcome,
            **kw,
        )

    def user_says(self, text: str, **kw: Any) -> Behavior:
        return self.record(
            "user_message",
            "step.message",
            "GET",
            input={"text": text},
            properties={"message": {"role": "user"}},
            **kw,
        )

    def evaluate(self, b: Behavior) -> EvalResult:
        return self.engine.evaluate(b, self.ctx)

    def result(self, b: Behavior, name: str = "p") -> PolicyResult:
        """The result of policy `name` on `b` (it must have been evaluated)."""
        found = [r for r in self.evaluate(b).results if r.name == name]
        assert found, f"policy {name!r} did not judge {b.step_name!r}"
        return found[0]

    def violation(self, b: Behavior, name: str = "p") -> str | None:
        """The detail of policy `name` on `b` if violated, else None."""
        r = self.result(b, name)
        if not r.violated:
            return None
        assert r.details, "a violation must say why"
        return r.details


@pytest.fixture(scope="session", name="Task")
def task_class() -> type[Task]:
    return Task


@pytest.fixture(scope="session", name="policy")
def policy_fn() -> Any:
    return policy
