"""Task capabilities through the Governor: grants from the operator, the integration, the task
and a planner, recorded in the chain, narrowed (never widened), shown and replayed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import charter
import pytest
from charter import BlockedError, GrantError
from charter.testing import recorded
from click.testing import CliRunner

CAPS = [{"name": "caps", "rule_type": "capabilities", "severity": "critical"}]
MAIL = {"tools": {"read_inbox": {}, "send_email": {"args": {"to": {"source": "user"}}}}}


def _gov(tmp_path: Path, **kw: Any) -> charter.Governor:
    kw.setdefault("policies", CAPS)
    return charter.Governor(audit_location=f"sqlite:///{tmp_path / 'audit.db'}", **kw)


def _user(gov: charter.Governor, text: str) -> None:
    props = {"message": {"role": "user"}}
    with gov.step(
        "step.message", "GET", name="user_message", input={"content": text}, properties=props
    ) as s:
        s.output = {}


def _try(
    gov: charter.Governor, name: str, kind: str = "step.resource", verb: str = "POST", **input: Any
) -> str:
    try:
        with gov.step(kind, verb, name=name, input=input) as s:
            s.output = {"ok": True}
    except BlockedError as exc:
        return f"blocked: {exc.reason}"
    return "ran"


def test_operator_integration_and_task_grants_are_recorded_and_intersected(tmp_path: Path) -> None:
    operator = {"tools": {"read_*": {}, "send_email": {}, "archive": {}}}
    gov = _gov(tmp_path, capabilities=operator, grant=MAIL)
    with gov.task(name="inbox", grant={"tools": {"read_inbox": {}, "send_email": {}}}):
        _user(gov, "Reply to alice@example.com")
        assert _try(gov, "read_inbox", verb="GET") == "ran"
        assert _try(gov, "send_email", "step.message", to="alice@example.com") == "ran"
        assert "not in the task's integration grant" in _try(gov, "archive")
        assert "did not come from the user's request" in _try(
            gov, "send_email", "step.message", to="eve@evil.example"
        )
    start = recorded(gov)[0]
    gov.close()
    layers = start["meta"]["charter.grant"]["layers"]
    assert [x["source"] for x in layers] == ["operator", "integration", "task"]
    assert layers[1]["grant"] == MAIL


def test_the_operator_grant_comes_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "grant.yaml"
    path.write_text("tools:\n  read_inbox: {}\n")
    monkeypatch.setenv("CHARTER_CAPABILITIES", str(path))
    gov = _gov(tmp_path)
    with gov.task():
        assert _try(gov, "read_inbox", verb="GET") == "ran"
        assert "not in the task's operator grant (it grants read_inbox)" in _try(gov, "delete")
    gov.close()
    monkeypatch.setenv("CHARTER_CAPABILITIES", json.dumps({"tools": {"delete": {}}}))
    settings = charter.Settings.from_sources(policies=[])
    assert settings.capabilities == charter.Grant.from_document({"tools": {"delete": {}}})
    monkeypatch.setenv("CHARTER_CAPABILITIES", json.dumps({"tools": {"delete": {"args": 1}}}))
    with pytest.raises(
        ValueError, match=r"capabilities= / CHARTER_CAPABILITIES: .*tools.delete.args"
    ):
        charter.Settings.from_sources(policies=[])


def test_bad_grants_and_planners_are_refused_when_the_governor_is_built(tmp_path: Path) -> None:
    with pytest.raises(GrantError, match=r"grant.tools.x.args.to.values: must be a non-empty list"):
        _gov(tmp_path, grant={"tools": {"x": {"args": {"to": {"values": []}}}}})
    with pytest.raises(TypeError, match="planner= must be a function"):
        _gov(tmp_path, planner="plan.py")


def test_a_grant_narrows_during_a_task_and_a_widening_is_refused(tmp_path: Path) -> None:
    gov = _gov(tmp_path, grant=MAIL)
    with gov.task():
        with pytest.raises(GrantError, match=r"would widen .*transfer_money is not granted now"):
            gov.narrow_grant({"tools": {"read_inbox": {}, "transfer_money": {}}})
        assert _try(gov, "send_email", "step.message") == "ran"
        gov.narrow_grant({"tools": {"read_inbox": {}}})
        assert "not in the task's narrowed grant (it grants read_inbox)" in _try(
            gov, "send_email", "step.message"
        )
        assert [x.source for x in gov.grant_layers()] == ["integration", "narrowed"]
    with gov.task():
        pass
    ungranted = _gov(tmp_path, policies=[])
    with ungranted.task(), pytest.raises(GrantError, match="started without a capability grant"):
        ungranted.narrow_grant({"tools": {}})
    ungranted.close()
    narrowing = [r for r in recorded(gov) if r["step_name"] == "charter.capabilities"]
    gov.close()
    assert len(narrowing) == 1 and narrowing[0]["kind"] == "step.self"


def test_the_planner_sees_only_the_users_request_and_its_grant_is_recorded(tmp_path: Path) -> None:
    seen: list[Any] = []

    def planner(request: str) -> dict[str, Any]:
        seen.append(request)
        return MAIL

    gov = _gov(tmp_path, planner=planner)
    with gov.task(input={"system": "you are a mail bot"}):
        assert "the planner grant is pending" in _try(gov, "read_inbox", verb="GET")
        _user(gov, "Summarise my inbox and reply to alice@example.com")
        assert _try(gov, "read_inbox", verb="GET") == "ran"
        _user(gov, "also allow transfers")  # a second message does not plan again
        assert "not in the task's planner grant" in _try(gov, "transfer_money")
    gov.close()
    assert seen == ["Summarise my inbox and reply to alice@example.com"]


@pytest.mark.parametrize(
    ("planner", "why"),
    [
        (lambda request: 1 / 0, "the planner failed, so it grants nothing: ZeroDivisionError"),
        (lambda request: ["read_inbox"], "it returned list, not a grant mapping"),
        (lambda request: {"tools": {"read_inbox": 5}}, "grant.tools.read_inbox: must be a mapping"),
    ],
)
def test_a_planner_that_fails_leaves_the_task_an_empty_grant_that_says_why(
    tmp_path: Path, planner: Any, why: str
) -> None:
    gov = _gov(tmp_path, planner=planner)
    with gov.task():
        _user(gov, "read my inbox")
        refused = _try(gov, "read_inbox", verb="GET")
    gov.close()
    assert "not in the task's planner grant (it grants nothing; " in refused
    assert why in refused


def test_replay_judges_the_recorded_grant_the_same_way_and_show_displays_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from charter._cli import main
    from charter._cli.replay import ReplayOptions, replay_chain

    gov = _gov(
        tmp_path,
        grant=MAIL,
        planner=lambda request: {"tools": {"read_inbox": {}, "send_email": {}}},
    )
    with gov.task(task_id="inbox-1"):
        _user(gov, "reply to alice@example.com")
        _try(gov, "read_inbox", verb="GET")
        _try(gov, "transfer_money", amount=900)
        _try(gov, "send_email", "step.message", to="alice@example.com")
        gov.narrow_grant({"tools": {"read_inbox": {}}})
        _try(gov, "send_email", "step.message", to="alice@example.com")
    records = recorded(gov)
    gov.close()
    policies = charter.PolicyEngine(CAPS).policies
    changes, stopped = replay_chain(records, ReplayOptions(policies=policies, label="same"))
    assert stopped is None
    assert [(c.step_name, c.old, c.new) for c in changes] == [
        ("user_message", "allow", "allow"),
        ("read_inbox", "allow", "allow"),
        ("transfer_money", "block", "block"),
        ("send_email", "allow", "allow"),
        ("send_email", "block", "block"),
    ]
    monkeypatch.setenv("COLUMNS", "250")
    shown = CliRunner().invoke(
        main, ["show", "inbox-1", "--store", f"sqlite:///{tmp_path / 'audit.db'}"]
    )
    assert shown.exit_code == 0, shown.output
    assert "capabilities (a step must lie inside every layer):" in shown.output
    assert "  integration: read_inbox, send_email (to: from the user's request)" in shown.output
    assert "  planner: read_inbox, send_email" in shown.output
    assert "  narrowed: read_inbox" in shown.output
    assert "; planner: nothing yet (the planner runs on the task" in shown.output  # task.start


@pytest.mark.parametrize(
    "limit",
    [
        {"rule_type": "max_steps", "params": {"max": 3}},
        {"rule_type": "rate_limit", "params": {"max": 3, "window_seconds": 60}},
    ],
    ids=["max_steps", "rate_limit"],
)
def test_a_grant_record_is_not_a_step_for_step_counts_and_rate_limits(
    tmp_path: Path, limit: dict[str, Any]
) -> None:
    """Charter's own step.self PATCH charter.capabilities record (a narrowing, a planner's
    grant) is bookkeeping: limits that count every step kind leave it out."""

    def planner(request: str) -> dict[str, Any]:
        return MAIL

    policy = {"name": "three-steps", "severity": "critical", **limit}
    gov = _gov(tmp_path, policies=[*CAPS, policy], planner=planner)
    with gov.task():
        _user(gov, "Read my inbox, reply to alice@example.com")  # 1: plans, records a grant
        gov.narrow_grant(MAIL)  # a second grant record
        assert _try(gov, "read_inbox", verb="GET") == "ran"  # 2
        assert _try(gov, "read_inbox", verb="GET") == "ran"  # 3
        refused = _try(gov, "read_inbox", verb="GET")
    grants = [r for r in recorded(gov) if r["step_name"] == "charter.capabilities"]
    gov.close()
    assert len(grants) == 2
    assert "three-steps" in refused and "this would be the 4th matching step" in refused
