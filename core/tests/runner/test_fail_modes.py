"""Policy sources and fail modes: missing, corrupt and refused manifests, the cache, monitor."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from charter import Behavior, Decision, Governor, Runner


def _start(runner: Runner, task_id: str = "t1") -> None:
    runner.record(Behavior(agent_id="default", task_id=task_id, kind="task.start", step_name="t"))


def _bash(command: str, task_id: str = "t1") -> Behavior:
    return Behavior(
        agent_id="default",
        task_id=task_id,
        kind="step.exec",
        step_name="bash",
        input={"command": command},
    )


@pytest.fixture
def fast_reload(monkeypatch: pytest.MonkeyPatch) -> None:
    # The once-per-second stat interval is tested on its own; elsewhere it only costs time.
    monkeypatch.setattr("charter._runtime.sources._CHECK_EVERY", 0.0)


def _rewrite(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    if path.stat().st_mtime_ns == before:  # coarse file-system clocks
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def test_missing_manifest_closed_blocks_actions_but_passes_boundaries(
    tmp_path: Path, make_runner: Callable[..., Runner], read_chain: Callable[..., Any]
) -> None:
    runner = make_runner(policy_file=str(tmp_path / "policies.yaml"))
    status = runner.status()
    assert status["load_state"] == "unavailable"
    assert status["cause"].startswith("file unreadable: ")
    assert status["fail_mode_effect"] == "blocks action steps"
    _start(runner)
    result = runner.evaluate(_bash("ls"))
    assert result.decision is Decision.BLOCK
    assert result.reason.startswith("blocked: no policy set could be loaded (")
    assert "policies.yaml: cannot be read" in result.reason
    assert result.reason.endswith("; fail_mode is closed")
    assert result.recorded_seq == 2
    end = Behavior(agent_id="default", task_id="t1", kind="task.end", step_name="t")
    assert runner.evaluate(end).decision is Decision.ALLOW
    runner.end_task("t1", end)
    kinds = [(r["kind"], r["meta"].get("charter.outcome")) for r in read_chain("t1")]
    assert kinds == [("task.start", None), ("step.exec", "blocked"), ("task.end", None)]


def test_corrupt_manifest_reason_names_the_yaml_error(
    tmp_path: Path, make_runner: Callable[..., Runner]
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text("name: x\nversion: 1\npolicies: [\n  - {name: a\n")
    runner = make_runner(policy_file=str(path))
    assert runner.status()["load_state"] == "unavailable"
    _start(runner)
    reason = runner.evaluate(_bash("ls")).reason
    assert "policies.yaml: invalid YAML at line" in reason
    assert reason.endswith("fail_mode is closed")


def test_fail_open_allows_and_status_says_so(
    tmp_path: Path, make_runner: Callable[..., Runner]
) -> None:
    runner = make_runner(policy_file=str(tmp_path / "missing.yaml"), fail_mode="open")
    status = runner.status()
    assert (status["load_state"], status["fail_mode"]) == ("unavailable", "open")
    assert status["fail_mode_effect"] == "allows every step"
    _start(runner)
    result = runner.evaluate(_bash("rm -rf /"))
    assert result.decision is Decision.ALLOW
    assert result.reason.endswith("fail_mode is open")


def test_refused_reload_keeps_last_good_set_until_fixed(
    tmp_path: Path, make_runner: Callable[..., Runner], manifest_text: str, fast_reload: None
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(manifest_text)
    runner = make_runner(policy_file=str(path))
    assert runner.status()["load_state"] == "enforcing"
    _start(runner)
    _rewrite(path, manifest_text.replace("rule_type: field_matches", "rule_type: field_matchez"))
    assert runner.evaluate(_bash("rm -rf /")).decision is Decision.BLOCK  # last good set
    status = runner.status()
    assert status["load_state"] == "stale"
    assert status["cause"].startswith("set refused: ")
    assert "field_matchez" in status["cause"]
    path.unlink()
    runner.evaluate(_bash("ls"))
    assert runner.status()["cause"].startswith("file unreadable: ")
    fixed = manifest_text.replace('"rm -rf"', '"shutdown"')
    _rewrite(path, fixed)
    assert runner.evaluate(_bash("rm -rf /")).decision is Decision.ALLOW
    assert runner.evaluate(_bash("shutdown now")).decision is Decision.BLOCK
    assert (runner.status()["load_state"], runner.status()["cause"]) == ("enforcing", None)


def test_manifest_changes_are_checked_at_most_once_per_second(
    tmp_path: Path, make_runner: Callable[..., Runner], manifest_text: str
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(manifest_text)
    runner = make_runner(policy_file=str(path))
    _start(runner)
    _rewrite(path, manifest_text.replace('"rm -rf"', '"shutdown"'))
    assert runner.evaluate(_bash("rm -rf /")).decision is Decision.BLOCK  # not yet re-read
    time.sleep(1.1)
    assert runner.evaluate(_bash("rm -rf /")).decision is Decision.ALLOW
    assert runner.status()["counters"]["policy_reloads"] == 1


def test_cache_stands_in_for_unreadable_files_then_expires(
    tmp_path: Path, make_runner: Callable[..., Runner], manifest_text: str
) -> None:
    path = tmp_path / "policies.yaml"
    cache = tmp_path / "cache" / "policies.json"
    path.write_text(manifest_text)
    first = make_runner(policy_file=str(path), policy_cache_path=str(cache))
    assert first.status()["load_state"] == "enforcing"
    saved = json.loads(cache.read_text())
    assert [p["name"] for p in saved["policies"]] == ["no-rm"]
    path.write_text("policies: [")
    second = make_runner(policy_file=str(path), policy_cache_path=str(cache))
    status = second.status()
    assert status["load_state"] == "stale"
    assert status["cause"].startswith("set refused: ")
    assert status["policy_source"] == f"cache {cache}"
    _start(second)
    assert second.evaluate(_bash("rm -rf /")).decision is Decision.BLOCK
    path.unlink()
    third = make_runner(
        policy_file=str(path), policy_cache_path=str(cache), policy_cache_max_age=0.01
    )
    time.sleep(0.05)
    status = third.status()
    assert status["load_state"] == "stale"
    assert status["cause"].startswith("cache expired: ")
    assert "policy_cache_max_age= / CHARTER_POLICY_CACHE_MAX_AGE" in status["cause"]


def test_cache_alone_is_a_source(
    tmp_path: Path, make_runner: Callable[..., Runner], manifest_text: str
) -> None:
    cache = tmp_path / "policies.json"
    missing = make_runner(policy_cache_path=str(cache))
    status = missing.status()
    assert status["load_state"] == "unavailable"
    assert "cannot be used" in status["cause"]
    path = tmp_path / "policies.yaml"
    path.write_text(manifest_text)
    make_runner(policy_file=str(path), policy_cache_path=str(cache))
    alone = make_runner(policy_cache_path=str(cache))
    assert alone.status()["load_state"] == "enforcing"
    _start(alone)
    assert alone.evaluate(_bash("rm -rf /")).decision is Decision.BLOCK


@pytest.mark.parametrize("fail_mode", ["closed", "open"])
def test_an_engine_exception_becomes_the_fail_mode_decision(
    make_runner: Callable[..., Runner], monkeypatch: pytest.MonkeyPatch, fail_mode: str
) -> None:
    runner = make_runner(fail_mode=fail_mode)
    _start(runner)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(runner.engine, "evaluate", broken)
    result = runner.evaluate(_bash("ls"))
    expected = Decision.BLOCK if fail_mode == "closed" else Decision.ALLOW
    assert result.decision is expected
    assert "policy evaluation failed (RuntimeError: boom)" in result.reason
    boundary = Behavior(agent_id="default", task_id="t1", kind="task.end", step_name="t")
    assert runner.evaluate(boundary).decision is Decision.ALLOW
    assert runner.status()["counters"]["evaluation_errors"] == 2


def test_monitor_mode_records_what_would_have_happened(
    make_runner: Callable[..., Runner], read_chain: Callable[..., Any]
) -> None:
    runner = make_runner(enforcement="monitor")
    gov = Governor(runner)
    with gov.task("t1"), gov.step("step.exec", name="bash", input={"command": "rm -rf /"}) as s:
        s.output = {"exit": 0}
    step = read_chain("t1")[1]
    assert step["meta"]["charter.outcome"] == "ok"
    assert step["meta"]["charter.eval"]["decision"] == "block"
    assert step["meta"]["charter.eval"]["enforcement"] == "monitor"
    assert gov.status()["enforcement"] == "monitor"
    assert gov.incidents == 1


def test_a_manifest_may_ask_for_monitor_mode(
    tmp_path: Path, make_runner: Callable[..., Runner], manifest_text: str
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(manifest_text.replace("version: 1", "version: 1\nenforcement: monitor"))
    runner = make_runner(policy_file=str(path))
    assert runner.status()["enforcement"] == "monitor"
    _start(runner)
    assert runner.evaluate(_bash("rm -rf /")).decision is Decision.ALLOW
    pinned = make_runner(policy_file=str(path), enforcement="enforce")
    assert pinned.status()["enforcement"] == "enforce"


@pytest.mark.parametrize("fail_mode", ["closed", "open"])
def test_judging_past_the_deadline_is_the_fail_mode_decision(
    make_runner: Callable[..., Runner], fail_mode: str
) -> None:
    from charter._policy.registry import unregister
    from charter.rules import rule

    judged: list[str] = []

    @rule(name="slow_scan", description="takes its time over every step")
    def slow_scan(view: Any, params: Any, ctx: Any) -> bool:
        judged.append(view.step_name)
        time.sleep(0.2)
        return True

    try:
        runner = make_runner(
            policies=[
                {"name": "slow", "rule_type": "slow_scan", "severity": "low"},
                {"name": "slow-too", "rule_type": "slow_scan", "severity": "low"},
            ],
            evaluation_deadline_seconds=0.05,
            fail_mode=fail_mode,
        )
        _start(runner)
        result = runner.evaluate(_bash("ls"))
        assert judged == ["bash"]  # the second policy was never started
        expected = Decision.BLOCK if fail_mode == "closed" else Decision.ALLOW
        assert result.decision is expected
        assert "longer than evaluation_deadline_seconds=0.05 (1 of 2 policies judged)" in (
            result.reason
        )
        assert result.reason.endswith(f"fail_mode is {fail_mode}")
        relaxed = make_runner(
            policies=[{"name": "slow", "rule_type": "slow_scan", "severity": "low"}],
            evaluation_deadline_seconds=0.05,
        )
        # Its own task: one chain has one writer (the store keeps each record's seq).
        _start(relaxed, "t2")
        # A single policy is never cut short: its verdict is complete when it returns.
        assert relaxed.evaluate(_bash("ls", "t2")).decision is Decision.ALLOW
    finally:
        unregister("slow_scan")
