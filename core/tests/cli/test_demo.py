"""`charter demo` end to end: it exits 0, its trail verifies, blocked steps never ran, the
secret never reached the store, and a stray environment cannot change what it shows."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import charter
from charter._cli.demo import FAKE_STRIPE_KEY


def _records(store: Path) -> list[dict[str, Any]]:
    opened = charter.open_store(f"sqlite:///{store}")
    try:
        return [r for t in opened.list_tasks() for r in opened.read_task(t.task_id, t.agent_id)]
    finally:
        opened.close()


def test_the_demo_exits_0_and_shows_every_kind_of_decision(demo_run: Any) -> None:
    run = demo_run.run
    assert run.code == 0, run
    for expected in ("ALLOW", "WARN", "ASK", "approved by", "denied by", "BLOCK", "verified"):
        assert expected in run.out, expected
    assert "blocked before it ran: the tool was not called" in run.out
    assert "[REDACTED:stripe_key]" in run.out
    assert "charter tasks" in run.out and "charter verify" in run.out and "charter show" in run.out
    # The last thing it says is how to look at the whole trail.
    assert run.out.rstrip().splitlines()[-1].split()[:3] == ["charter", "report", "--open"]
    assert demo_run.store.is_file()


def test_the_demo_trail_verifies_and_its_blocked_steps_never_ran(demo_run: Any) -> None:
    report = charter.verify(f"sqlite:///{demo_run.store}")
    assert report.ok and report.chains_checked == 2, str(report)
    records = _records(demo_run.store)
    blocked = [r for r in records if r["meta"].get("charter.outcome") == "blocked"]
    commands = {str(r["input"]) for r in blocked}
    assert len(blocked) == 3
    assert any("rm -rf ~/" in c for c in commands)
    assert any("curl" in c for c in commands)
    assert any("evil.example" in c for c in commands)
    for b in blocked:
        assert b["output"] is None
        # no other record carries its action: it was never let through, never completed
        same = [r for r in records if r["action_id"] == b["action_id"]]
        assert same == [b]
        assert b["meta"]["charter.eval"]["decision"] == "block"
    gates = [r for r in records if r["kind"] == "step.gate"]
    assert sorted(g["output"]["decision"] for g in gates) == ["deny", "pass", "pass"]


def test_the_secret_the_agent_read_is_not_in_the_store(demo_run: Any) -> None:
    raw = b"".join(p.read_bytes() for p in demo_run.store.parent.glob("audit.db*"))
    assert FAKE_STRIPE_KEY.encode() not in raw
    with sqlite3.connect(demo_run.store) as db:
        bodies = " ".join(b for (b,) in db.execute("SELECT body FROM steps"))
    assert "STRIPE_SECRET_KEY=[REDACTED:stripe_key]" in bodies


def test_the_demo_ignores_a_stray_environment(cli: Any, tmp_path: Path) -> None:
    # Monitor mode or a broken policy file in the shell would turn the demo's blocks into
    # runs; the demo pins its own settings.
    env = {
        "CHARTER_ENFORCEMENT": "monitor",
        "CHARTER_POLICY_FILE": str(tmp_path / "missing.yaml"),
        "CHARTER_AUDIT_LOCATION": f"sqlite:///{tmp_path}/env.db",
    }
    run = cli("demo", "--store", f"sqlite:///{tmp_path}/demo.db", env=env)
    assert run.code == 0, run
    assert run.out.count("blocked before it ran") == 3
    assert "--store" in run.out  # the suggested commands name the store that was used
    assert not (tmp_path / "env.db").exists()
    assert charter.verify(f"sqlite:///{tmp_path}/demo.db").ok


def test_the_demo_refuses_a_store_it_cannot_read_back(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    stdout, run = cli.all(
        ("demo", "--store", "stdout"), ("demo", "--store", str(tmp_path / "dir.db"))
    )
    assert stdout.code == 2 and "cannot be read back" in stdout.out
    assert run.code == 2 and "directory" in run.out
