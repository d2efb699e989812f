"""Every command that takes --store works with a postgresql:// store (a real server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg


def test_every_store_command_reads_a_postgresql_store(
    cli: Any, postgresql_url: str, tmp_path: Path
) -> None:
    demo = cli("demo", "--store", postgresql_url)
    assert demo.code == 0, demo
    listed = cli("tasks", "--store", postgresql_url, "--json")
    assert listed.code == 0, listed
    tasks = [json.loads(line) for line in listed.out.splitlines()]
    coder = next(t["task_id"] for t in tasks if t["agent_id"] == "demo-coder")
    report_file = tmp_path / "report.html"
    replay_args = ("replay", "--policy", "baseline:tool-agent", "--agent", "demo-assistant")
    show, verify, replay, status, report = cli.all(
        ("show", coder[:8], "--store", postgresql_url),
        ("verify", "--store", postgresql_url),
        (*replay_args, "--store", postgresql_url, "--fail-on-change"),
        ("status", "--store", postgresql_url, "--verify", "--json"),
        ("report", "--store", postgresql_url, "-o", str(report_file)),
    )
    assert show.code == 0, show
    assert "no-recursive-delete-of-system-or-home" in show.out and "blocked" in show.out
    assert verify.code == 0 and "verified 2 chains" in verify.out, verify
    assert replay.code == 0 and "no decision would change" in replay.out, replay
    assert report.code == 0, report
    assert coder in report_file.read_text()
    state = json.loads(status.out)
    assert state["store"]["exists"] is True, status
    assert state["store"]["verify"]["ok"] is True
    assert "PostgreSQL" in state["store"]["detail"]

    # A record changed behind the store's back is found by verify, named by task and seq.
    with psycopg.connect(postgresql_url, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE charter_records DISABLE TRIGGER USER; "
            "UPDATE charter_records SET body = replace(body, 'demo', 'DEMO') "
            f"WHERE task_id = '{coder}' AND seq = 2; "
            "ALTER TABLE charter_records ENABLE TRIGGER USER".encode()
        )
    broken = cli("verify", "--store", postgresql_url)
    assert broken.code == 1, broken
    assert coder in broken.out and "seq 2" in broken.out


def test_a_postgresql_store_that_cannot_be_reached_is_named(cli: Any) -> None:
    url = "postgresql://charter@127.0.0.1:9/audit?connect_timeout=2"
    for command in ("tasks", "verify"):
        run = cli(command, "--store", url)
        assert run.code == 2, run
        assert "cannot connect to audit store postgresql://charter@127.0.0.1:9/audit" in run.err
