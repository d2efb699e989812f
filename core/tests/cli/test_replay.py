"""`charter replay`: same policies reproduce the recorded decisions; a changed policy set
reports exactly the steps whose decision would change; monitor-mode verdicts compare too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import charter

STRICTER = """\
name: stricter
version: 1
policies:
  - name: no-email-at-all
    description: This agent may not send email.
    rule_type: deny
    severity: critical
    match: {kinds: [step.message], verbs: [POST]}
    params: {reason: email is switched off}
"""


def test_replaying_under_the_same_policies_changes_nothing(cli: Any, demo_run: Any) -> None:
    run = cli(
        "replay",
        "--policy",
        "baseline:tool-agent",
        "--agent",
        "demo-assistant",
        "--fail-on-change",
        cwd=demo_run.directory,
    )
    assert run.code == 0, run
    assert "6 judged step(s)" in run.out
    assert "no decision would change" in run.out


def test_a_stricter_policy_shows_what_it_would_block(
    cli: Any, demo_run: Any, tmp_path: Path
) -> None:
    (tmp_path / "stricter.yaml").write_text(STRICTER)
    stricter = str(tmp_path / "stricter.yaml")
    store = str(demo_run.store)
    run, table = cli.all(
        (
            "replay",
            "--policy",
            stricter,
            "--json",
            "--fail-on-change",
            "--store",
            store,
            "--agent",
            "demo-assistant",
        ),
        (("replay", "--policy", stricter), {"cwd": demo_run.directory}),
    )
    assert run.code == 1, run
    changes = [json.loads(line) for line in run.out.splitlines()]
    # The assistant sent one email; the other was refused by a person (ask, denied).
    assert {(c["step_name"], c["old"], c["new"]) for c in changes} == {
        ("send_email", "allow", "block"),
        ("send_email", "ask", "block"),
    }
    denied = next(c for c in changes if c["old"] == "ask")
    assert denied["answered"] == "denied"
    assert "email is switched off" in denied["new_reason"]
    # without --agent the coding session is judged too: its warning and blocks are gone
    assert table.code == 0 and "5 decision(s) would change: 2 stricter, 3 looser" in table.out


def test_replay_compares_what_monitor_mode_would_have_done(
    cli: Any, tmp_path: Path, policy_file: Path
) -> None:
    location = f"sqlite:///{tmp_path}/monitor.db"
    ran = []
    gov = charter.Governor(
        policy_file=str(policy_file),
        enforcement="monitor",
        audit_location=location,
        audit_durability="sync",
    )
    with (
        gov,
        gov.task(name="monitored") as task,
        gov.step("step.exec", name="shell", input={"command": "rm -rf build"}),
    ):
        ran.append("rm")
    assert ran == ["rm"]  # monitor mode: judged, recorded, not blocked
    shown = cli("show", task.task_id, "--store", location)
    assert "block (monitor)" in shown.out and "no-rm" in shown.out
    same = cli("replay", "--policy", str(policy_file), "--store", location, "--all")
    assert same.code == 0 and "no decision would change" in same.out
    assert "block" in same.out


def test_replay_refuses_bad_policies_unknown_tasks_and_missing_stores(
    cli: Any, demo_run: Any, tmp_path: Path
) -> None:
    (tmp_path / "bad.yaml").write_text(
        "name: x\nversion: 1\npolicies:\n  - name: p\n    rule_type: nope\n    severity: high\n"
    )
    here = {"cwd": demo_run.directory}
    bad, unknown, missing = cli.all(
        (("replay", "--policy", str(tmp_path / "bad.yaml")), here),
        (("replay", "--policy", "baseline:tool-agent", "--task", "zzzz"), here),
        ("replay", "--policy", "baseline:tool-agent", str(tmp_path / "none.db")),
    )
    assert missing.code == 2 and "there is no audit store" in missing.err
    assert bad.code == 2 and "unknown rule_type 'nope'" in bad.err
    assert unknown.code == 2 and "no task zzzz" in unknown.err


SHARED = """\
name: shared
version: 1
policies:
  - name: agent-sends
    rule_type: max_steps
    severity: critical
    match: {kinds: [step.message]}
    params: {max: 2, scope: agent}
"""


def test_replay_judges_shared_limits_on_the_counts_recorded_and_names_them(
    cli: Any, tmp_path: Path
) -> None:
    (tmp_path / "shared.yaml").write_text(SHARED)
    location = f"sqlite:///{tmp_path}/shared.db"
    for day in ("monday", "tuesday"):  # two tasks: the second is judged on the first's sends
        gov = charter.Governor(policy_file=str(tmp_path / "shared.yaml"), audit_location=location)
        with gov, gov.task(name=day):
            for n in range(2):
                try:
                    with gov.step("step.message", "POST", name="send", input={"n": n}):
                        pass
                except charter.BlockedError:
                    pass
    same = cli("replay", "--policy", str(tmp_path / "shared.yaml"), "--store", location, "--all")
    # Alone, tuesday's history holds no send: only the recorded counts reproduce its blocks.
    assert same.code == 0 and "no decision would change" in same.out, same
    assert "4 judged step(s) were judged on counts from outside their task" in same.out
    assert "agent-sends: 2 across the agent" in same.out
    as_json = cli(
        "replay", "--policy", str(tmp_path / "shared.yaml"), "--store", location, "--json", "--all"
    )
    rows = [json.loads(line) for line in as_json.out.splitlines()]
    assert [(r["new"], r["outside"][0]["count"]) for r in rows] == [
        ("allow", 0),
        ("allow", 1),
        ("block", 2),
        ("block", 2),
    ]
    assert rows[0]["outside"][0] == {"policies": ["agent-sends"], "scope": "agent", "count": 0}
