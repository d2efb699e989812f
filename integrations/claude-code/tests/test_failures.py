"""Whatever breaks inside Charter, a tool call is denied with a reason, never let through."""

from __future__ import annotations

import fcntl
import json
import shutil
import sqlite3
import subprocess
import sys

import pytest
from charter_claude_code._install import GUARD

READ = {"tool_name": "Read", "tool_input": {"file_path": "/etc/hostname"}, "tool_use_id": "toolu_r"}


def _pre(project, **extra):
    return {
        "hook_event_name": "PreToolUse",
        "session_id": "sess-f",
        "cwd": str(project),
        **READ,
        **extra,
    }


def test_garbage_stdin_is_denied(hook):
    out = hook("PreToolUse", b"\x00not json{")
    assert out.code == 0 and out.permission == "deny" and "not JSON" in out.reason
    # Without --event the hook cannot know the contract: exit 2 blocks a PreToolUse anyway.
    bare = hook("PreToolUse", b"garbage", registered=False)
    assert bare.code == 2 and "could not decide" in bare.stderr
    # Garbage for Stop must not answer exit 2 or "decision": both keep Claude working.
    stop = hook("Stop", b"garbage")
    assert stop.code == 0 and "decision" not in stop.json() and "systemMessage" in stop.json()


def test_unusable_input_is_denied(hook, project):
    assert "session_id" in hook("PreToolUse", {"hook_event_name": "PreToolUse"}).reason
    wrong = hook("PreToolUse", {**_pre(project), "hook_event_name": "PostToolUse"})
    assert wrong.permission == "deny" and "registered for PreToolUse" in wrong.reason
    odd = hook("PreToolUse", _pre(project, tool_input="rm -rf /"))
    assert odd.permission == "deny" and "tool_input" in odd.reason
    flag = hook("PreToolUse", _pre(project), args=["--deadline", "soon"])
    assert flag.code == 0 and flag.permission == "deny" and "--deadline" in flag.reason


def test_a_corrupt_store_denies(hook, project):
    (project / ".charter").mkdir()
    (project / ".charter" / "audit.db").write_bytes(b"this is not a database" * 100)
    out = hook("PreToolUse", _pre(project))
    assert out.code == 0 and out.permission == "deny"
    assert "audit store" in out.reason
    stop = hook("Stop", {**_pre(project), "hook_event_name": "Stop"})
    assert stop.code == 0 and "decision" not in stop.json()


def test_policy_file_deleted_or_broken_mid_session(claude, project, tmp_path, policy):
    mine = tmp_path / "policies.yaml"
    shutil.copy(policy, mine)
    claude.policy = mine
    assert claude.tool("Bash", {"command": "true"}).ran
    mine.unlink()
    gone = claude.tool("Bash", {"command": "echo ran >> after.txt"})
    assert gone.pre.permission == "deny" and not gone.ran
    assert "no policy set could be loaded" in gone.pre.reason and "closed" in gone.pre.reason
    # A file that is back but broken is refused whole: the parse cache must not hide it.
    mine.write_text(policy.read_text() + "\n  - name: broken\n    rule_type: nope\n")
    broken = claude.tool("Bash", {"command": "echo ran >> after.txt"})
    assert broken.pre.permission == "deny" and "nope" in broken.pre.reason
    # The environment cannot open the gate: fail mode comes from the install only.
    claude.env["CHARTER_FAIL_MODE"] = "open"
    still = claude.tool("Bash", {"command": "echo ran >> after.txt"})
    assert still.pre.permission == "deny" and not still.ran
    # fail_mode open, chosen at install, lets steps through, and says so to the user.
    claude.args = ["--fail-mode", "open"]
    opened = claude.tool("Bash", {"command": "echo ran >> after.txt"})
    assert opened.ran and "not enforcing" in opened.pre.json()["systemMessage"]
    assert (project / "after.txt").read_text().split() == ["ran"]


def test_a_damaged_session_state_denies(claude, project):
    claude.tool("Bash", {"command": "true"})
    state = project / ".charter" / "claude-code" / "sessions" / "sess-1.json"
    state.write_text("{half", encoding="utf-8")
    out = claude.tool("Bash", {"command": "true"})
    assert out.pre.permission == "deny" and not out.ran
    assert "session state" in out.pre.reason and "delete it" in out.pre.reason


def test_a_missing_baseline_names_the_install_command(hook, project, without_baseline):
    args = ["--baseline", "coding-agent"]
    out = hook("PreToolUse", _pre(project), policy=None, args=args, env=without_baseline)
    assert out.permission == "deny"
    assert "pip install charter-baseline" in out.reason
    none = hook("PreToolUse", _pre(project), policy=None)
    assert none.permission == "deny" and "no policies are configured" in none.reason


def test_a_baseline_governs_when_installed(hook, project, tmp_path):
    outside = {"file_path": str(tmp_path / "elsewhere.txt"), "content": "x"}
    write = hook(
        "PreToolUse",
        _pre(project, tool_name="Write", tool_input=outside),
        policy=None,
        args=["--baseline", "coding-agent"],
    )
    assert write.permission == "deny", write.stdout
    unknown = hook(
        "PreToolUse", _pre(project, tool_use_id="toolu_u"), policy=None, args=["--baseline", "nope"]
    )
    assert unknown.permission == "deny" and "'nope'" in unknown.reason


def test_a_held_session_lock_denies_within_the_deadline(hook, project):
    sessions = project / ".charter" / "claude-code" / "sessions"
    sessions.mkdir(parents=True)
    with open(sessions / "sess-f.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        out = hook("PreToolUse", _pre(project), args=["--deadline", "5"])
    assert out.code == 0 and out.permission == "deny"
    assert "held" in out.reason


def test_the_watchdog_denies_when_the_store_hangs(hook, claude, project):
    claude.session_id = "sess-f"
    claude.start()
    db = sqlite3.connect(project / ".charter" / "audit.db", isolation_level=None, timeout=1)
    db.execute("BEGIN IMMEDIATE")  # another writer holds SQLite's lock (busy timeout: 30 s)
    try:
        blocked = _pre(project, tool_name="Bash", tool_input={"command": "mkfs /dev/x"})
        out = hook("PreToolUse", blocked, args=["--deadline", "2"])
    finally:
        db.execute("ROLLBACK")
        db.close()
    assert out.code == 0 and out.permission == "deny"
    assert "longer than 2 s" in out.reason


def test_the_shell_guard_blocks_when_the_hook_cannot_start(project):
    # What Claude Code runs when the interpreter (or the package) has gone: without the
    # guard the shell's 127 is a non-blocking error and the call would go through.
    for command in (
        "/nonexistent/python -m charter_claude_code",
        f"{sys.executable} -c 'raise SystemExit(1)'",
    ):
        done = subprocess.run(["/bin/sh", "-c", command + GUARD], input=b"{}", capture_output=True)
        assert done.returncode == 2
        assert b"could not run, so this is refused" in done.stderr


@pytest.mark.parametrize("event", ["PostToolUse", "SessionStart", "SessionEnd", "SubagentStop"])
def test_other_events_report_failures_without_blocking(hook, project, event):
    out = hook(event, b"[]")
    assert out.code == 0
    data = json.loads(out.stdout)
    assert "decision" not in data and "Charter hook failed" in data["systemMessage"]


def test_a_deleted_trail_is_noticed(claude, project):
    claude.tool("Read", {"file_path": str(project / "README.md")})
    for leftover in (project / ".charter").glob("audit.db*"):
        leftover.unlink()
    out = claude.tool("Bash", {"command": "echo hi >> x.txt"})
    assert out.pre.permission == "deny" and not out.ran
    assert "deleted or replaced" in out.pre.reason


def test_an_approved_call_whose_outcome_cannot_be_stored_is_reported_never_blocked(
    claude, project, audit
):
    """Charter asked, the person approved in Claude Code's prompt and the call ran; then the
    store refused the write. The call is not reported (or later recorded) as blocked: the
    hook says the outcome could not be recorded, and once the store takes writes again the
    outcome is recorded with the approval it ran under."""
    from charter.testing import refused_writes

    claude.approve = lambda name, tool_input: True
    (project / "old.txt").write_text("x")
    pre = claude.event(
        "PreToolUse",
        tool_name="Bash",
        tool_input={"command": "rm old.txt"},
        tool_use_id="toolu_approved",
    )
    assert pre.permission == "ask"
    (project / "old.txt").unlink()  # the person approved; Claude Code ran it
    with refused_writes(project / ".charter" / "audit.db"):
        post = claude.event(
            "PostToolUse",
            tool_name="Bash",
            tool_input={"command": "rm old.txt"},
            tool_use_id="toolu_approved",
            tool_response={"stdout": "", "stderr": "", "interrupted": False},
        )
    assert post.code == 0
    said = post.json()
    assert "could not record the outcome" in json.dumps(said), said
    assert "blocked" not in json.dumps(said).lower(), said
    claude.stop()  # the store takes writes again: the outcome is recorded first
    steps = [r for r in audit.records("sess-1") if r["step_name"] == "Bash"]
    assert [r["meta"]["charter.outcome"] for r in steps] == ["ok"], steps
    verdict = steps[0]["meta"]["charter.eval"]
    assert verdict["decision"] == "ask" and verdict["approved"] is True
    assert verdict["approved_by"] == "claude-code-user"
    assert "permission prompt" in verdict["approval"]
    assert audit.verify().ok
