"""Limits across tasks and processes (`scope: agent`, `scope: {per: ...}`) through real
Governors on real SQLite files (and a PostgreSQL database for the race): counts hold across
tasks, restarts and eight racing processes, a counter that cannot be reserved blocks the step
with the reason, and bad params are refused with what to write instead."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import charter
import pytest
from charter import BlockedError, Decision, Governor, PolicyLoadError, Runner, Settings
from charter._audit.counters import MemoryCounters
from charter.audit import is_intent_record

SEND = {"kinds": ["step.message"], "verbs": ["POST"]}


def _policy(name: str, rule_type: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "rule_type": rule_type, "severity": "critical", "params": params}


@pytest.fixture
def governor(db: str) -> Iterator[Callable[..., Governor]]:
    made: list[Runner] = []

    def make(policies: list[dict[str, Any]], counters: Any = None, **settings: Any) -> Governor:
        settings.setdefault("audit_location", db)
        settings.setdefault("agent_id", "mailer")
        runner = Runner(Settings.from_sources(policies=policies, **settings), counters=counters)
        made.append(runner)
        return Governor(runner)

    yield make
    for runner in made:
        runner.close(timeout=5)


def _send(g: Governor, to: Any, **extra: Any) -> str:
    """Send one message in the current task: the decision, or the block's reason."""
    try:
        with g.step("step.message", "POST", name="send_email", input={"to": to, **extra}):
            return "allow"
    except BlockedError as exc:
        return exc.reason


def _outcomes(db: str, agent: str = "mailer") -> list[str]:
    store = charter.open_store(db)
    try:
        return [
            (r["meta"] or {}).get("charter.outcome", "ok")
            for t in store.list_tasks(agent)
            for r in store.read_task(t.task_id, agent)
            if r["kind"] == "step.message" and not is_intent_record(r)
        ]
    finally:
        store.close()


def test_an_agent_wide_limit_holds_across_tasks_and_a_restart(
    governor: Callable[..., Governor], db: str
) -> None:
    policies = [_policy("sends", "max_steps", max=3, select=SEND, scope="agent")]
    g = governor(policies)
    with g.task(name="monday"):
        assert [_send(g, "a@example.com") for _ in range(2)] == ["allow", "allow"]
    g.close()
    again = governor(policies)  # a new process would see the same: the count is in the file
    with again.task(name="tuesday"):
        assert _send(again, "b@example.com") == "allow"
        reason = _send(again, "c@example.com")
    assert "4th matching step across the agent (limit 3): 3 counted in the shared store" in reason
    assert _outcomes(db) == ["ok", "ok", "ok", "blocked"]


def test_a_per_recipient_limit_counts_each_recipient_apart(
    governor: Callable[..., Governor],
) -> None:
    policies = [
        _policy("two-per-recipient", "max_steps", max=2, select=SEND, scope={"per": "input.to"})
    ]
    g = governor(policies)
    with g.task(name="newsletter"):
        got = [_send(g, to) for to in ["ann@example.com", "bob@example.com", "ann@example.com"]]
        assert got == ["allow", "allow", "allow"]
        assert "3rd matching step across the agent per input.to" in _send(g, "ann@example.com")
        assert _send(g, "bob@example.com") == "allow"
        # The step must say which counter it takes from: none, or several, is refused.
        assert "has no value there" in _send(g, None)
        assert "has 2 values there" in _send(g, ["ann@example.com", "cy@example.com"])
    with g.task(name="next-week"):
        assert "3rd matching step" in _send(g, "bob@example.com")
        assert _send(g, "cy@example.com") == "allow"


def test_only_steps_that_happened_keep_their_unit(
    governor: Callable[..., Governor], read_chain: Callable[..., Any]
) -> None:
    policies = [
        _policy("sends", "max_steps", max=3, select=SEND, scope="agent"),
        _policy("attempts", "rate_limit", max=3, window_seconds=3600, select=SEND, scope="agent"),
        _policy("no-spam", "field_matches", field="input.subject", pattern="WIN"),
    ]
    g = governor(policies)
    with g.task(name="job") as task:
        assert "blocked by policy 'no-spam'" in _send(g, "a@example.com", subject="WIN")
        with pytest.raises(OSError), g.step("step.message", "POST", name="send", input={"to": 1}):
            raise OSError("smtp down")  # failed: tried (rate limit), did not happen (max_steps)
        assert _send(g, "a@example.com") == "allow"
        assert _send(g, "b@example.com") == "allow"  # 2 sent: the blocked one never counted
        reason = _send(g, "c@example.com")
        assert "'attempts'" in reason and "4th matching step within 3600 seconds" in reason
    # The blocked step's record keeps the counts it was judged on.
    last = read_chain(task.task_id, "mailer")[-2]
    counts = {c["policies"][0]: c["before"] for c in last["meta"]["charter.shared"]["counts"]}
    assert counts == {"sends": 2, "attempts": 3}


def test_an_agent_budget_counts_what_outcomes_carry_within_its_window(
    governor: Callable[..., Governor],
) -> None:
    tokens = "properties.model.usage.total_tokens"
    policies = [
        {
            **_policy("daily-tokens", "budget", field=tokens, limit=1000, scope="agent",
                      window_seconds=86400),
            "match": {"kinds": ["step.model"]},
        },
        _policy("refunds", "budget", field="input.amount", limit=500, scope="agent",
                select={"step_names": ["refund"]}),
    ]  # fmt: skip
    g = governor(policies)
    with g.task(name="support"):
        for _ in range(2):
            with g.step("step.model", name="chat", input={"messages": []}) as s:
                s.complete({"text": "hi"}, properties={"model": {"usage": {"total_tokens": 600}}})
        chat = g.step("step.model", name="chat", input={"messages": []})
        with pytest.raises(BlockedError, match=r"would total 1200 within 86400 seconds"), chat:
            pass
        with g.step("step.resource", "POST", name="refund", input={"amount": 450}):
            pass
        refund = g.step("step.resource", "POST", name="refund", input={"amount": 100})
        with pytest.raises(BlockedError, match=r"input.amount would total 550 across the"), refund:
            pass


@pytest.mark.allow_internal_errors
def test_counters_that_cannot_be_reserved_block_the_step_with_the_reason(
    governor: Callable[..., Governor], db: str
) -> None:
    counters = MemoryCounters("memory://counters")
    counters.failing = "disk I/O error"
    policies = [_policy("sends", "max_steps", max=100, select=SEND, scope="agent")]
    g = governor(policies, counters=counters, fail_mode="open", enforcement="monitor")
    with g.task(name="job"):
        reason = _send(g, "a@example.com")
        # Other steps are judged as usual.
        with g.step("step.exec", name="bash", input={"command": "ls"}) as s:
            assert s.result.decision is Decision.ALLOW
    assert reason.startswith("blocked: the shared limit counters in memory://counters could not")
    assert "disk I/O error" in reason and "'sends' count across the agent" in reason
    assert _outcomes(db) == ["blocked"]
    assert g.runner.status()["counters"]["shared_refused"] == 1
    counters.failing = None
    with g.task(name="later"):
        assert _send(g, "a@example.com") == "allow"


def test_a_store_without_shared_counters_blocks_with_how_to_fix_it(
    governor: Callable[..., Governor], tmp_path: Path
) -> None:
    policies = [_policy("sends", "max_steps", max=100, select=SEND, scope="agent")]
    g = governor(policies, audit_location=f"jsonl:///{tmp_path}/audit.jsonl")
    with g.task(name="job"):
        reason = _send(g, "a@example.com")
    assert "keeps no shared counters" in reason and "use a sqlite:/// store" in reason


def test_a_step_asked_about_takes_its_unit_when_it_is_approved(
    governor: Callable[..., Governor],
) -> None:
    policies = [
        _policy("sends", "max_steps", max=1, select=SEND, scope="agent"),
        {**_policy("ask", "deny", reason="a person checks mail"), "action": "ask",
         "severity": "high", "match": SEND},
    ]  # fmt: skip
    asked: list[str] = []

    def approver(request: charter.ApprovalRequest) -> charter.Approval:
        asked.append(request.behavior.step_name)
        return charter.Approval(approved=True, by="ops")

    g = governor(policies)
    g.approver = approver
    with g.task(name="job"):
        assert _send(g, "a@example.com") == "allow"
        assert "2nd matching step across the agent (limit 1)" in _send(g, "b@example.com")
    assert asked == ["send_email"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max": 1, "scope": "agnet"}, "scope 'agnet' is not one of 'task', 'agent' or {per:"),
        ({"max": 1, "scope": {"per": "input..to"}}, "params.scope.per"),
        ({"max": 1, "scope": {"by": "input.to"}}, "params.scope.per: required key is missing"),
        ({"max": 1, "scope": 3}, "params.scope: expected string or object"),
    ],
)
def test_bad_scopes_are_refused_naming_what_to_write(params: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyLoadError) as info:
        charter.PolicyEngine([_policy("p", "max_steps", **params)])
    assert message in str(info.value)


def test_a_shared_limit_cannot_hide_inside_a_compound_rule() -> None:
    nested = {"rule_type": "max_steps", "params": {"max": 1, "scope": "agent"}}
    with pytest.raises(PolicyLoadError, match="cannot be nested in all_of, any_of or not"):
        charter.PolicyEngine([_policy("p", "not", condition=nested)])


def test_a_budget_window_needs_a_scope_beyond_the_task() -> None:
    with pytest.raises(PolicyLoadError, match="window_seconds needs scope agent"):
        charter.PolicyEngine([_policy("p", "budget", field="input.n", limit=1, window_seconds=60)])


# -- eight processes, one file, real Governors ---------------------------------------------------

# argv: location limit attempts. One Governor, one task, `attempts` sends; prints how many ran.
RACE = """
import sys
from charter import BlockedError, Governor

location, limit, attempts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
g = Governor(
    policies=[{"name": "sends", "rule_type": "max_steps", "severity": "critical",
               "params": {"max": limit, "scope": "agent",
                          "select": {"kinds": ["step.message"]}}}],
    audit_location=location, agent_id="mailer",
)
ran = 0
with g.task(name="race"):
    for n in range(attempts):
        try:
            with g.step("step.message", "POST", name="send", input={"n": n}):
                ran += 1
        except BlockedError:
            pass
g.close()
print(ran)
"""


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_eight_processes_share_one_agent_limit_and_exactly_the_limit_runs(
    tmp_path: Path, db: str, kind: str, request: pytest.FixtureRequest
) -> None:
    location = str(request.getfixturevalue("postgresql_url")) if kind == "postgresql" else db
    charter.open_store(location).close()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, location, "20", "6"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    ran = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        ran.append(int(out))
    assert sum(ran) == 20  # 48 attempts
    outcomes = _outcomes(location)
    assert outcomes.count("ok") == 20 and outcomes.count("blocked") == 28
    assert charter.verify(location).ok


def test_counts_a_step_carries_in_its_own_meta_never_reach_its_record(
    governor: Callable[..., Governor], read_chain: Callable[..., Any]
) -> None:
    """Only the runner writes the counts a step was judged with (a forged count could release
    other steps' units when the record is read back): counts the caller put in the step's
    own meta are left out of its outcome record."""
    g = governor([_policy("sends", "max_steps", max=2, select=SEND)])
    forged = {"counts": [{"policies": ["sends"], "before": 0}], "note": "forged"}
    with g.task(name="job") as task:
        b = g.build_step("step.message", "POST", name="send_email", input={"to": "a@x.example"})
        b = b.replace(meta={"charter.shared": forged})
        result = g.runner.evaluate(b)
        assert result.decision is Decision.ALLOW
        charter.StepHandle(g, b, result).complete({"sent": True})
    (record,) = [r for r in read_chain(task.task_id, "mailer") if r["kind"] == "step.message"]
    assert record["meta"]["charter.outcome"] == "ok"
    assert "charter.shared" not in record["meta"]
