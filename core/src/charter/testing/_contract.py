"""The integration conformance kit: one contract suite every integration runs on its real
framework.

An integration's tests subclass `IntegrationContract` and provide one fixture, `adapter`,
returning an object with a `run_tool` method (see `ContractAdapter`): it builds a real agent,
graph or crew of that framework whose scripted model calls one tool once, runs it under the
integration with the Governor it is given, and reports what happened (`ToolRun`). The suite
then checks what a user relies on, from the audit trail itself:

- a blocked step's body never runs, and the block is recorded once, by the gate, with no output;
- an allowed step is recorded once, with its outcome;
- an approved ask gives exactly one step.gate record and one step; a denied ask never runs
  and is recorded as blocked, with the denial as a step.gate when the framework tells Charter
  about it (``sees_denials = False`` on an adapter whose framework never does);
- an internal error in the decision path blocks with a reason under ``fail_mode="closed"``
  and lets the step run ungoverned under ``"open"`` (the one rule of `charter.integration`);
- a store that fails: in buffered durability the step's outcome is unchanged and the fault is
  counted in status; an integration that decides from the store's contents (``store_is_state``
  on its adapter, such as a hook that is a new process per call) refuses the step instead;
- two integrations active on one Governor record each step once, in one task
  (`PairedIntegrationContract`, for integrations that run beside another one);
- every chain verifies afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

from charter._audit.base import is_intent_record
from charter._runtime.approval import Approval, ApprovalRequest
from charter._runtime.governor import Governor

__all__ = [
    "CONTRACT_TOOL",
    "ContractAdapter",
    "IntegrationContract",
    "PairedIntegrationContract",
    "ToolRun",
]

CONTRACT_TOOL = "contract_probe"
"""The tool every contract run calls (adapters give their framework's tool this name)."""

_ARGS = {"target": "alpha-7", "count": 2}

_BLOCK = {
    "name": "contract-block",
    "rule_type": "deny",
    "severity": "critical",
    "match": {"step_names": [CONTRACT_TOOL]},
}
_ASK = {
    "name": "contract-ask",
    "rule_type": "deny",
    "severity": "high",
    "action": "ask",
    "match": {"step_names": [CONTRACT_TOOL]},
}


@dataclass
class ToolRun:
    """What one contract run did: `calls` holds the arguments the tool body received (one
    entry per run of the body), `refusal` the refusal text the agent or caller saw (None
    when none), `error` an exception that escaped the framework's run (None when none)."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    refusal: str | None = None
    error: BaseException | None = None


class ContractAdapter(Protocol):
    """Drives one integration's real framework for the contract suite."""

    def run_tool(self, governor: Governor, args: dict[str, Any], approve: bool) -> ToolRun:
        """Run the framework once: its scripted model calls `CONTRACT_TOOL` with `args` once,
        then finishes. When a policy asks, answer `approve` through the framework's own
        approval path (a framework that uses the Governor's approver needs to do nothing:
        the Governor given here answers `approve`)."""
        ...


class IntegrationContract:
    """Subclass in an integration's tests (``class TestContract(IntegrationContract)``) and
    define the `adapter` fixture."""

    @pytest.fixture
    def adapter(self) -> ContractAdapter:
        raise pytest.UsageError(
            f"{type(self).__name__} must define an `adapter` fixture returning a ContractAdapter"
        )

    @pytest.fixture
    def governed(self, tmp_path: Path) -> Iterator[Callable[..., Governor]]:
        """Builds Governors on a fresh SQLite trail; closes them at teardown."""
        built: list[Governor] = []

        def build(
            policies: list[dict[str, Any]], approve: bool = False, **settings: Any
        ) -> Governor:
            def answer(request: ApprovalRequest) -> Approval:
                return Approval(approve, "contract-reviewer", "approved" if approve else "denied")

            settings.setdefault("audit_location", f"sqlite:///{tmp_path / 'audit.db'}")
            settings.setdefault("audit_durability", "sync")
            gov = Governor(
                policies=policies, agent_id="contract-agent", approver=answer, **settings
            )
            built.append(gov)
            return gov

        yield build
        for gov in built:
            gov.close(5.0)

    # -- reading the trail ----------------------------------------------------------------

    @staticmethod
    def _trail(gov: Governor) -> list[dict[str, Any]]:
        """Every record of `gov`'s agent, after checking that every chain verifies."""
        assert gov.flush(5.0), "the audit trail was not flushed within 5 s"
        store = gov.runner.store
        assert store is not None, "the contract runs need an audit store"
        report = store.verify()
        assert report.ok, f"the audit trail does not verify: {report.first_break}"
        records: list[dict[str, Any]] = []
        for task in store.list_tasks(gov.runner.agent_id):
            records.extend(store.read_task(task.task_id, gov.runner.agent_id))
        return records

    @staticmethod
    def _probes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Steps only: a framework may name a task after its root run (the tool itself). The
        # write-ahead intent of an allowed step (sync durability) is checked on its own.
        return [
            r
            for r in records
            if r.get("step_name") == CONTRACT_TOOL
            and not str(r.get("kind")).startswith("task.")
            and not is_intent_record(r)
        ]

    # -- the contracts --------------------------------------------------------------------

    def test_an_allowed_step_runs_and_is_recorded_once_with_its_outcome(
        self, adapter: ContractAdapter, governed: Callable[..., Governor]
    ) -> None:
        gov = governed([])
        run = adapter.run_tool(gov, dict(_ARGS), True)
        assert run.error is None, f"the run raised {run.error!r}"
        assert run.calls == [_ARGS]
        probes = self._probes(self._trail(gov))
        assert len(probes) == 1, f"expected one record of the tool call, got {len(probes)}"
        assert probes[0]["meta"]["charter.outcome"] == "ok"
        assert probes[0]["input"] == _ARGS
        assert probes[0]["output"] is not None

    def test_an_allowed_steps_intent_is_on_record_before_its_outcome(
        self, adapter: ContractAdapter, governed: Callable[..., Governor]
    ) -> None:
        gov = governed([])  # sync durability: write-ahead
        run = adapter.run_tool(gov, dict(_ARGS), True)
        assert run.error is None, f"the run raised {run.error!r}"
        records = self._trail(gov)
        intents = [r for r in records if is_intent_record(r) and r["step_name"] == CONTRACT_TOOL]
        assert len(intents) == 1, f"expected one intent record, got {len(intents)}"
        (outcome,) = self._probes(records)
        assert intents[0]["action_id"] == outcome["action_id"]
        assert intents[0]["seq"] < outcome["seq"]
        assert intents[0]["output"] is None and intents[0]["input"] == _ARGS

    def test_a_blocked_step_never_runs_and_is_recorded_once_by_the_gate(
        self, adapter: ContractAdapter, governed: Callable[..., Governor]
    ) -> None:
        gov = governed([_BLOCK])
        run = adapter.run_tool(gov, dict(_ARGS), True)
        assert run.calls == [], "the blocked tool ran"
        refusal = run.refusal or (str(run.error) if run.error else "")
        assert "contract-block" in refusal, f"the refusal does not name the policy: {refusal!r}"
        probes = self._probes(self._trail(gov))
        assert len(probes) == 1, f"expected the block recorded once, got {len(probes)} records"
        assert probes[0]["meta"]["charter.outcome"] == "blocked"
        assert probes[0].get("output") is None

    def test_an_approved_ask_gives_one_gate_record_and_one_step(
        self, adapter: ContractAdapter, governed: Callable[..., Governor]
    ) -> None:
        gov = governed([_ASK], approve=True)
        run = adapter.run_tool(gov, dict(_ARGS), True)
        assert run.error is None, f"the run raised {run.error!r}"
        assert run.calls == [_ARGS]
        records = self._trail(gov)
        gates = [r for r in records if r["kind"] == "step.gate"]
        assert len(gates) == 1, f"expected one step.gate, got {len(gates)}"
        assert gates[0]["output"]["decision"] == "pass"
        probes = self._probes(records)
        assert [p["meta"]["charter.outcome"] for p in probes] == ["ok"]
        assert gates[0]["seq"] < probes[0]["seq"]

    def test_a_denied_ask_never_runs_the_step(
        self, adapter: ContractAdapter, governed: Callable[..., Governor]
    ) -> None:
        gov = governed([_ASK], approve=False)
        run = adapter.run_tool(gov, dict(_ARGS), False)
        assert run.calls == [], "the denied tool ran"
        records = self._trail(gov)
        decisions = [r["output"]["decision"] for r in records if r["kind"] == "step.gate"]
        if getattr(adapter, "sees_denials", True):
            assert decisions == ["deny"], f"expected the denial recorded once, got {decisions}"
        else:
            # The framework never tells Charter that a person said no (Claude Code's own
            # permission prompt): no answer is on record, and certainly no approval.
            assert decisions == [], f"no answer was seen, yet gates were recorded: {decisions}"
        probes = self._probes(records)
        assert [p["meta"]["charter.outcome"] for p in probes] == ["blocked"]

    @pytest.mark.allow_internal_errors
    @pytest.mark.parametrize("fail_mode", ["closed", "open"])
    def test_an_internal_error_while_deciding_follows_the_one_rule(
        self,
        adapter: ContractAdapter,
        governed: Callable[..., Governor],
        monkeypatch: pytest.MonkeyPatch,
        fail_mode: str,
    ) -> None:
        gov = governed([], fail_mode=fail_mode)
        build = gov.build_step

        def broken(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("name") == CONTRACT_TOOL or (args and args[0] == CONTRACT_TOOL):
                raise RuntimeError("contract: injected fault")
            return build(*args, **kwargs)

        monkeypatch.setattr(gov, "build_step", broken)
        run = adapter.run_tool(gov, dict(_ARGS), True)
        if fail_mode == "closed":
            assert run.calls == [], "the step ran although Charter could not decide"
            refusal = run.refusal or (str(run.error) if run.error else "")
            assert "could not judge" in refusal and "injected fault" in refusal, refusal
        else:
            assert run.calls == [_ARGS], "fail_mode open: the step runs ungoverned"
        self._trail(gov)  # whatever was recorded still verifies

    @pytest.mark.allow_internal_errors
    def test_a_store_that_fails_has_the_one_documented_outcome(
        self, adapter: ContractAdapter, governed: Callable[..., Governor], tmp_path: Path
    ) -> None:
        (tmp_path / "not-a-folder").write_text("a file where the store's folder should be")
        location = f"sqlite:///{tmp_path / 'not-a-folder' / 'audit.db'}"
        gov = governed([], audit_durability="buffered", audit_location=location)
        run = adapter.run_tool(gov, dict(_ARGS), True)
        store = gov.status()["store"]
        assert store["ok"] is False and "cannot" in store["detail"], store
        if getattr(adapter, "store_is_state", False):
            # The integration decides from what the store holds (a hook that is a new
            # process per call): it cannot decide, so the step is refused and says why.
            assert run.calls == [], "the step ran although its history could not be read"
            refusal = run.refusal or (str(run.error) if run.error else "")
            assert "audit store" in refusal, refusal
        else:
            # Buffered durability: a store fault is counted in status, never changes the
            # step's outcome and never reaches the agent.
            assert run.error is None, f"the store fault reached the agent: {run.error!r}"
            assert run.calls == [_ARGS]


class PairedIntegrationContract(IntegrationContract):
    """The contract plus one more, for an integration that can run beside another on the
    same Governor: the adapter defines ``run_tool_doubly(governor, args) -> ToolRun``, which
    runs the framework with both active (for example a LangGraph graph with the LangChain
    callback handler in its config)."""

    def test_two_integrations_on_one_governor_record_each_step_once_in_one_task(
        self, adapter: Any, governed: Callable[..., Governor]
    ) -> None:
        gov = governed([])
        run = adapter.run_tool_doubly(gov, dict(_ARGS))
        assert run.error is None, f"the run raised {run.error!r}"
        assert run.calls == [_ARGS]
        records = self._trail(gov)
        probes = self._probes(records)
        assert len(probes) == 1, f"expected one record of the tool call, got {len(probes)}"
        starts = {r["task_id"] for r in records if r["kind"] == "task.start"}
        assert len(starts) == 1, f"expected one task, got {sorted(starts)}"
