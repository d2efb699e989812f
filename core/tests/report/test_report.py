"""`charter report` as a user runs it: the file it writes, what it holds, and that no record
can inject markup or script into it (the page itself is exercised in a real browser in
test_report_browser.py)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from charter import Governor, Runner, StoreError
from charter._audit.sqlite import SQLiteStore
from charter._cli.report import step_tree

Built = Any  # the conftest's Built: store, html, run

_BLOCK = re.compile(r'<script type="application/json" id="([\w-]+)">(.*?)</script>', re.S)


def blocks(html: str) -> dict[str, Any]:
    return {name: json.loads(body) for name, body in _BLOCK.findall(html)}


def test_the_demo_report_is_one_file_that_needs_no_network(demo_report: Built) -> None:
    assert demo_report.run.code == 0, demo_report.run
    assert "wrote report.html (2 tasks, 22 records, every chain verified)" in demo_report.run.out
    assert "open it: file://" in demo_report.run.out
    html = demo_report.html.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    # Inline only: no script, style sheet, image or frame is loaded from anywhere.
    assert re.search(r"<(script|img|iframe|link)[^>]*\b(src|href)=", html) is None
    assert "default-src 'none'" in html
    data = blocks(html)
    summary = data["charter-summary"]
    assert {t["agent"] for t in summary["tasks"]} == {"demo-coder", "demo-assistant"}
    assert all(t["verified"] for t in summary["tasks"]) and summary["verification"]["ok"]
    assert [a["decision"] for a in summary["approvals"]] == ["pass", "pass", "deny"]
    assert all(a["by"] == "demo-approver (scripted)" for a in summary["approvals"])
    fired = {p["name"]: p["count"] for p in summary["policies"]}
    assert fired["no-recursive-delete-of-system-or-home"] == 1
    # Stored as stored: the secret the agent read is masked, never shown in the report.
    assert "[REDACTED:stripe_key]" in html and "sk_live_" not in html
    assert len(data) == 1 + len(summary["tasks"])


def test_no_record_text_becomes_markup(hostile_report: Built, hostile: list[str]) -> None:
    assert hostile_report.run.code == 0, hostile_report.run
    html = hostile_report.html.read_text(encoding="utf-8")
    for text in hostile:
        assert text not in html
    assert "</script><script>" not in html and "<img" not in html
    data = blocks(html)
    # Exactly the page's own script plus one JSON block per task and the summary.
    assert html.count("<script") == 1 + len(data)
    # ...and every hostile string comes back intact from the embedded JSON.
    embedded = json.dumps(data, ensure_ascii=False)
    for text in hostile:
        assert json.dumps(text, ensure_ascii=False)[1:-1] in embedded


def test_a_failed_step_keeps_its_error_and_a_blocked_step_its_reason(
    hostile_report: Built, hostile: list[str]
) -> None:
    records = blocks(hostile_report.html.read_text(encoding="utf-8"))["charter-task-0"]["records"]
    failed = [r for r in records if r["outcome"] == "failed"]
    assert [r["step_name"] for r in failed] == ["deploy"]
    assert failed[0]["error"] == "RuntimeError: deploy failed: " + hostile[1]
    blocked = [r for r in records if r["decision"] == "block"]
    assert len(blocked) == 1 and blocked[0]["output"] is None
    assert blocked[0]["policies"] == ["no-rm"] and "no-rm" in blocked[0]["reason"]


def test_steps_nest_under_their_runs_crew_tasks_and_nodes(
    hostile_report: Built, hostile: list[str]
) -> None:
    task = blocks(hostile_report.html.read_text(encoding="utf-8"))["charter-task-0"]
    records, tree = task["records"], task["tree"]
    assert tree == step_tree(records)

    def groups(items: list[Any], path: tuple[str, ...] = ()) -> dict[int, tuple[str, ...]]:
        found: dict[int, tuple[str, ...]] = {}
        for item in items:
            if isinstance(item, int):
                found[item] = path
            else:
                found.update(groups(item["items"], (*path, f"{item['kind']}: {item['label']}")))
        return found

    where = groups(tree)
    assert sorted(where) == list(range(len(records)))
    by_name = {
        (records[i]["step_name"], records[i]["input"]["command"][:4]): p
        for i, p in where.items()
        if records[i]["step_name"] == "bash"
    }
    assert by_name[("bash", "echo")] == ("node: " + hostile[3],)
    assert by_name[("bash", "curl")] == (
        "run: run-agent",
        "crew: research crew",
        "crew task: write the summary",
    )
    assert by_name[("bash", "rm -")] == ()


def test_step_tree_follows_parent_runs_and_sub_agents() -> None:
    def rec(name: str, **fw: Any) -> dict[str, Any]:
        return {"step_name": name, "kind": "step.exec", "properties": {"framework": fw}}

    records = [
        rec("agent", run_id="a"),
        rec("llm", run_id="m", parent_run_id="a"),
        rec("search", run_id="t", parent_run_id="m"),
        rec("Task", session_id="s"),
        rec("Bash", session_id="s", agent_id="sub-1", agent_type="Explore"),
        rec("Read", session_id="s", agent_id="sub-1", agent_type="Explore"),
        rec("Write", session_id="s"),
    ]
    assert step_tree(records) == [
        0,
        {
            "kind": "run",
            "label": "agent",
            "items": [
                1,
                {"kind": "run", "label": "llm", "items": [2]},
            ],
        },
        3,
        {"kind": "sub-agent", "label": "Explore", "items": [4, 5]},
        6,
    ]


def test_filters_choose_the_tasks(demo_report: Built, tmp_path: Path, charter: Any) -> None:
    store = str(demo_report.store)
    summary = blocks(demo_report.html.read_text(encoding="utf-8"))["charter-summary"]
    coder = next(t["task"] for t in summary["tasks"] if t["agent"] == "demo-coder")

    def tasks_in(*args: str) -> list[str]:
        run = charter("report", "--store", store, "-o", "r.html", *args, cwd=tmp_path)
        assert run.code == 0, run
        html = (tmp_path / "r.html").read_text(encoding="utf-8")
        return [t["agent"] for t in blocks(html)["charter-summary"]["tasks"]]

    assert tasks_in("--agent", "demo-assistant") == ["demo-assistant"]
    assert tasks_in("--task", coder[:6]) == ["demo-coder"]
    assert tasks_in("--since", "2d") == ["demo-coder", "demo-assistant"]
    assert tasks_in("--since", "2999-01-01") == []


def test_bad_arguments_are_refused_with_what_to_do(
    demo_report: Built, tmp_path: Path, charter: Any
) -> None:
    store = str(demo_report.store)
    since = charter("report", "--store", store, "--since", "yesterday", cwd=tmp_path)
    assert since.code == 2 and "neither an ISO date/time" in since.err and "24h" in since.err
    task = charter("report", "--store", store, "--task", "nope", cwd=tmp_path)
    assert task.code == 2 and "no task 'nope'" in task.err and "charter tasks" in task.err
    missing = charter("report", "--store", str(tmp_path / "none.db"), cwd=tmp_path)
    assert missing.code == 2 and "none.db" in missing.err
    assert not (tmp_path / "charter-report.html").exists()


def test_a_tampered_chain_is_shown_broken(demo_report: Built, tmp_path: Path, charter: Any) -> None:
    copy = tmp_path / "copy.db"
    shutil.copy(demo_report.store, copy)
    with sqlite3.connect(copy) as db:
        db.execute(
            "UPDATE steps SET body = replace(body, 'pytest -q', 'pytest -x') "
            "WHERE body LIKE '%pytest -q%'"
        )
    run = charter("report", "--store", str(copy), "-o", "t.html", cwd=tmp_path)
    assert run.code == 0 and "a chain is BROKEN" in run.out, run
    summary = blocks((tmp_path / "t.html").read_text(encoding="utf-8"))["charter-summary"]
    assert not summary["verification"]["ok"]
    broken = [t for t in summary["tasks"] if not t["verified"]]
    assert [t["agent"] for t in broken] == ["demo-coder"] and "edited" in broken[0]["break"]


class _RefusingStore(SQLiteStore):
    """A real SQLite store that refuses every batch holding a step named `refused`."""

    def append(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        if any(e.get("step_name") == "refused" for e in entries):
            raise StoreError("audit store test refused the record: disk quota exceeded")
        return super().append(entries)


@pytest.mark.allow_internal_errors
def test_a_dropped_record_is_shown_as_a_gap_with_its_cause(tmp_path: Path, charter: Any) -> None:
    gov = Governor(Runner(policies=[], store=_RefusingStore(tmp_path / "gaps.db")))
    with gov.task("t"):
        gov.begin_step("step.exec", name="ls", input={}).complete()
        assert gov.flush(10)
        gov.begin_step("step.exec", name="refused", input={}).complete()
        assert gov.flush(10)
        gov.begin_step("step.exec", name="pwd", input={}).complete()
    gov.close()
    run = charter("report", "--store", str(tmp_path / "gaps.db"), "-o", "g.html", cwd=tmp_path)
    assert run.code == 0 and "every chain verified" in run.out, run
    summary = blocks((tmp_path / "g.html").read_text(encoding="utf-8"))["charter-summary"]
    assert [(g["first"], g["last"], g["cause"]) for g in summary["gaps"]] == [(3, 3, "refused")]
    assert "disk quota exceeded" in summary["gaps"][0]["detail"]
    assert summary["tasks"][0]["gaps"] == 1 and summary["tasks"][0]["verified"]
