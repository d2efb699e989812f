"""`charter report` benchmark: prints figures, asserts nothing.

    uv run python bench/report.py [RECORDS]

Builds a SQLite store of RECORDS audit records (default 100,000: 200 tasks of 500 records,
four agents, a mix of allowed, warned, blocked, asked and failed steps with realistic inputs
and outputs), then measures:

1. building the report (`collect_report` + `render_report`, what `charter report` does after
   opening the store): seconds, and the size of the HTML file;
2. when /usr/bin/chromium and Playwright are there: opening the file in headless Chromium until
   the overview is drawn, and opening the largest task (its timeline drawn), in seconds.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import charter
from charter._cli.report import ReportFilter, collect_report, render_report

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
AGENTS = ("coder", "assistant", "researcher", "ops-bot")


def _verdict(decision: str, policy: str | None) -> dict[str, Any]:
    violations = []
    if policy:
        violations.append(
            {
                "name": policy,
                "rule_type": "field_matches",
                "severity": "critical" if decision == "block" else "medium",
                "violated": True,
                "ask": decision == "ask",
                "details": "input.command matches forbidden pattern",
            }
        )
    reason = (
        "allowed: no policy was violated"
        if policy is None
        else f"{decision} by policy {policy!r}: input.command matches forbidden pattern"
    )
    return {"decision": decision, "reason": reason, "risk_score": 0, "violations": violations}


def _task(index: int, size: int, start: datetime) -> list[dict[str, Any]]:
    agent = AGENTS[index % len(AGENTS)]
    task_id = f"bench-{index:05d}"
    stamp = start + timedelta(minutes=index)

    def base(n: int, kind: str, name: str) -> dict[str, Any]:
        return {
            "agent_id": agent,
            "task_id": task_id,
            "action_id": f"{index:08x}{n:024x}",
            "kind": kind,
            "verb": None,
            "step_name": name,
            "timestamp": (stamp + timedelta(milliseconds=50 * n))
            .isoformat()
            .replace("+00:00", "Z"),
            "input": None,
            "output": None,
            "properties": {},
            "meta": {},
        }

    records = [base(0, "task.start", "session") | {"action_id": None}]
    for n in range(1, size - 1):
        r = base(n, "step.exec", "Bash")
        r["input"] = {"command": f"pytest -q tests/test_{n % 37}.py --maxfail=1", "cwd": "/srv/app"}
        r["properties"] = {
            "exec": {"command": r["input"]["command"]},
            "framework": {"name": "bench", "node": f"node-{n // 50}"},
        }
        decision, policy = "allow", None
        if n % 97 == 0:
            decision, policy = "block", "no-destructive-shell"
        elif n % 31 == 0:
            decision, policy = "warn", "reads-outside-project"
        r["meta"] = {"charter.eval": _verdict(decision, policy)}
        if decision == "block":
            r["meta"]["charter.outcome"] = "blocked"
        elif n % 53 == 0:
            r["meta"]["charter.outcome"] = "failed"
            r["output"] = {"error": {"type": "TimeoutError", "message": "the command timed out"}}
        else:
            r["meta"]["charter.outcome"] = "ok"
            r["output"] = {"stdout": "." * 40 + f"\n{n % 9} passed in 0.{n % 7}s"}
        records.append(r)
    records.append(base(size - 1, "task.end", "session") | {"action_id": None})
    return records


def build_store(path: Path, total: int) -> None:
    size = 500 if total >= 500 else total
    store = charter.open_store(f"sqlite:///{path}")
    start = datetime(2026, 1, 5, 9, tzinfo=UTC)
    try:
        for index in range(max(1, total // size)):
            store.append(_task(index, size, start))
    finally:
        store.close()


def browser_figures(html: Path) -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("  browser: skipped (playwright is not installed)")
        return
    if not CHROMIUM.exists():
        print(f"  browser: skipped ({CHROMIUM} is not installed)")
        return
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), args=FLAGS, headless=True
        )
        page = context.new_page()
        started = time.perf_counter()
        page.goto(html.as_uri(), timeout=120_000)
        page.wait_for_selector("[data-panel='Tasks per agent']", timeout=120_000)
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        page.evaluate("location.hash = 'task/0'")
        page.wait_for_selector("#timeline .step", timeout=120_000)
        task = time.perf_counter() - started
        started = time.perf_counter()
        page.evaluate("location.hash = 'steps'")
        page.select_option("select[name=decision]", "block")
        page.wait_for_selector("#step-list tr.click", timeout=120_000)
        steps = time.perf_counter() - started
        context.close()
    print(f"  browser: overview drawn {loaded:.2f} s after opening the file")
    print(f"  browser: a 500-record task's timeline drawn in {task:.2f} s")
    print(f"  browser: every step filtered to blocked in {steps:.2f} s")


def main() -> None:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        started = time.perf_counter()
        build_store(path, total)
        print(
            f"report over {total:,} records (store built in {time.perf_counter() - started:.1f} s)"
        )
        store = charter.open_store(f"sqlite:///{path}")
        started = time.perf_counter()
        data = collect_report(store, ReportFilter(), datetime.now(UTC))
        collected = time.perf_counter() - started
        store.close()
        started = time.perf_counter()
        page = render_report(data)
        rendered = time.perf_counter() - started
        html = Path(tmp) / "report.html"
        html.write_text(page, encoding="utf-8")
        size = html.stat().st_size
        print(f"  read, verified and summarised in {collected:.2f} s; rendered in {rendered:.2f} s")
        print(f"  file: {size / 1e6:.1f} MB ({size / total:.0f} bytes per record)")
        browser_figures(html)


if __name__ == "__main__":
    main()
