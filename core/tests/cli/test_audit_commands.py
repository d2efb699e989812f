"""`charter tasks`, `show` and `verify` on real stores: happy paths, a missing store, a store
that is not one, and chains broken by editing and deleting records."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import charter


def test_tasks_lists_the_demo_tasks(cli: Any, demo_run: Any) -> None:
    here = {"cwd": demo_run.directory}
    table, lines = cli.all((("tasks",), here), (("tasks", "--json"), here))
    assert table.code == 0, table
    found = [json.loads(line) for line in lines.out.splitlines()]
    assert {t["agent_id"] for t in found} == {"demo-coder", "demo-assistant"}
    assert all(t["closed"] for t in found)
    for t in found:
        assert t["task_id"] in table.out


def test_tasks_and_show_refuse_a_missing_store(cli: Any, tmp_path: Path) -> None:
    default, given = cli.all(
        ("tasks",), ("show", "abc", "--store", f"sqlite:///{tmp_path}/nope.db")
    )
    assert default.code == 2
    assert "there is no audit store" in default.err and "charter demo" in default.err
    assert given.code == 2 and "nope.db" in given.err


def test_show_finds_a_task_by_prefix_and_shows_decisions(cli: Any, demo_run: Any) -> None:
    store = charter.open_store(f"sqlite:///{demo_run.store}")
    try:
        coder = next(t.task_id for t in store.list_tasks("demo-coder"))
    finally:
        store.close()
    run, as_json = cli.all(
        ("show", coder[:6], "--store", str(demo_run.store)),
        (("show", coder, "--json"), {"cwd": demo_run.directory}),
    )
    assert run.code == 0, run
    assert "no-recursive-delete-of-system-or-home" in run.out
    assert "blocked" in run.out and "warn" in run.out
    assert "allow (approved, seq" in run.out
    assert "[REDACTED" not in run.out or "stripe_key" in run.out
    records = [json.loads(line) for line in as_json.out.splitlines()]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert records[0]["kind"] == "task.start" and records[-1]["kind"] == "task.end"


def test_show_refuses_an_unknown_or_ambiguous_task(cli: Any, demo_run: Any) -> None:
    here = {"cwd": demo_run.directory}
    unknown, ambiguous = cli.all((("show", "zzzz"), here), (("show", ""), here))
    assert unknown.code == 2 and "no task 'zzzz'" in unknown.err
    assert ambiguous.code == 2 and "matches several tasks" in ambiguous.err


def test_verify_accepts_a_path_and_the_default(cli: Any, demo_run: Any) -> None:
    here = {"cwd": demo_run.directory}
    for run in cli.all((("verify",), here), (("verify", str(demo_run.store)), here)):
        assert run.code == 0, run
        assert "verified 2 chains" in run.out


def test_verify_names_the_first_edited_record(cli: Any, demo_copy: Path) -> None:
    with sqlite3.connect(demo_copy) as db:
        task, seq = db.execute(
            "SELECT task_id, seq FROM steps WHERE body LIKE '%pytest -q tests/test_login.py%'"
        ).fetchone()
        db.execute(
            "UPDATE steps SET body = replace(body, 'pytest -q', 'pytest -x') "
            "WHERE task_id = ? AND seq = ?",
            (task, seq),
        )
    run = cli("verify", str(demo_copy))
    assert run.code == 1, run
    assert "BROKEN" in run.out
    assert f"first broken link: task {task} (agent demo-coder) seq {seq}: edited" in run.out


def test_verify_names_a_deleted_record(cli: Any, demo_copy: Path) -> None:
    with sqlite3.connect(demo_copy) as db:
        (task,) = db.execute(
            "SELECT task_id FROM chains WHERE agent_id = 'demo-assistant'"
        ).fetchone()
        db.execute("DELETE FROM steps WHERE task_id = ? AND seq = 4", (task,))
    run = cli("verify", "--store", f"sqlite:///{demo_copy}", "--task", task)
    assert run.code == 1, run
    assert f"task {task} (agent demo-assistant) seq 4: deleted" in run.out


def test_verify_refuses_what_is_not_a_store(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "notes.db").write_text("not sqlite")
    run, missing = cli.all(
        ("verify", str(tmp_path / "notes.db")),
        ("verify", "--store", f"jsonl:///{tmp_path}/none.jsonl"),
    )
    assert run.code == 2 and "notes.db" in run.err
    assert missing.code == 2 and "none.jsonl" in missing.err


def test_verify_reads_a_jsonl_trail_and_catches_a_reordering(cli: Any, tmp_path: Path) -> None:
    location = f"jsonl:///{tmp_path}/audit.jsonl"
    gov = charter.Governor(policies=[], audit_location=location, audit_durability="sync")
    with gov, gov.task(name="jsonl"):
        for i in range(3):
            with gov.step("step.exec", name="shell", input={"command": f"echo {i}"}):
                pass
    assert cli("verify", str(tmp_path / "audit.jsonl")).code == 0
    path = tmp_path / "audit.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    path.write_text("".join(lines))
    run = cli("verify", "--store", location)
    assert run.code == 1, run
    assert "reordered" in run.out


def test_verify_refuses_two_stores(cli: Any) -> None:
    run = cli("verify", "a.db", "--store", "b.db")
    assert run.code == 2 and "not both" in run.err
