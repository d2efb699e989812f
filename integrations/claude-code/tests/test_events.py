"""Every hook event, as real JSON to the installed hook: decisions, exit codes, the trail."""

from __future__ import annotations

import sqlite3

import pytest


def test_allow_warn_ask_block_answers_and_what_ran(claude, project, audit):
    assert claude.start().json() == {}
    counter = project / "ran.txt"

    allowed = claude.tool("Bash", {"command": "echo allowed >> ran.txt"})
    assert (allowed.pre.code, allowed.pre.json()) == (0, {})  # no opinion: Claude Code decides
    assert allowed.ran and allowed.post is not None and allowed.post.json() == {}

    warned = claude.tool(
        "Bash", {"command": "git push origin main 2>/dev/null; echo warned >> ran.txt"}
    )
    out = warned.pre.json()
    assert warned.pre.code == 0 and "permissionDecision" not in out["hookSpecificOutput"]
    assert "pushes-are-flagged" in out["hookSpecificOutput"]["additionalContext"]
    assert "pushes-are-flagged" in out["systemMessage"]
    assert warned.ran

    asked = claude.tool("Bash", {"command": "rm ran.txt"})  # the scripted user declines
    assert asked.pre.code == 0 and asked.pre.permission == "ask"
    assert "deletes-need-approval" in asked.pre.reason
    assert not asked.ran and counter.exists()

    # Harmless if it ever ran (no such device), but the policy must stop it first.
    blocked = claude.tool("Bash", {"command": "mkfs.ext4 ./not-a-device; echo blocked >> ran.txt"})
    assert blocked.pre.code == 0 and blocked.pre.permission == "deny"
    assert "no-destructive-shell" in blocked.pre.reason and "did not run" in blocked.pre.reason
    assert not blocked.ran
    assert counter.read_text().split() == ["allowed", "warned"]

    assert claude.stop().json() == {}
    with sqlite3.connect(project / ".charter" / "audit.db") as conn:
        assert conn.execute("SELECT agent_id, task_id FROM chains").fetchall() == [
            ("claude-code", "sess-1")
        ]
    assert (project / ".charter" / "claude-code" / "sessions" / "sess-1.json").exists()
    assert audit.summary("sess-1") == [
        ("task.start", "claude-code-session", None, None),
        ("step.exec", "Bash", "ok", "allow"),
        ("step.exec", "Bash", "ok", "warn"),
        ("step.exec", "Bash", "blocked", "block"),
        # The ask nobody approved is settled when the turn ends: it never ran.
        ("step.exec", "Bash", "blocked", "block"),
    ]
    assert audit.verify().ok


def test_auto_approve_answers_allow(claude, project):
    claude.args = ["--auto-approve"]
    run = claude.tool("Read", {"file_path": str(project / "README.md")})
    assert run.pre.permission == "allow" and run.ran
    # Denials and asks are never turned into approvals.
    assert claude.tool("Bash", {"command": "mkfs.ext4 ./not-a-device"}).pre.permission == "deny"
    assert claude.tool("Bash", {"command": "rm README.md"}).pre.permission == "ask"


def test_an_approved_ask_records_the_approval_then_the_outcome(claude, project, audit):
    claude.approve = lambda name, tool_input: True
    (project / "old.txt").write_text("x")
    run = claude.tool("Bash", {"command": "rm old.txt"})
    assert run.pre.permission == "ask" and run.ran and not (project / "old.txt").exists()
    gate, step = audit.records("sess-1")[-2:]
    assert gate["kind"] == "step.gate" and gate["output"]["decision"] == "pass"
    assert gate["output"]["by"] == "claude-code-user"
    assert gate["properties"]["gate"]["step_name"] == "Bash"
    assert step["meta"]["charter.outcome"] == "ok"
    assert step["meta"]["charter.eval"]["decision"] == "ask"
    assert step["meta"]["charter.eval"]["approved"] is True
    # The tool_use_id is the step's call id (the action id is Charter's own).
    assert step["properties"]["tool"]["call_id"] == f"toolu_{claude.session_id}_001"
    assert step["properties"]["framework"] == {"name": "claude-code", "session_id": "sess-1"}


def test_user_prompt_is_trusted_and_feeds_provenance(claude, audit):
    assert claude.prompt("please read https://docs.python.org/3/library/json.html").json() == {}
    named = claude.tool("WebFetch", {"url": "https://docs.python.org/3/", "prompt": "summary"})
    assert named.pre.json() == {} and named.ran
    other = claude.tool("WebFetch", {"url": "https://paste.example.net/x", "prompt": "summary"})
    assert other.pre.permission == "ask"
    assert "fetch-hosts-the-user-named" in other.pre.reason
    prompt = audit.records("sess-1")[1]
    assert (prompt["kind"], prompt["verb"], prompt["step_name"]) == (
        "step.message",
        "GET",
        "user_prompt",
    )
    assert prompt["properties"]["message"]["role"] == "user"
    fetch = audit.records("sess-1")[2]
    assert fetch["properties"]["data"]["trust"] == "external"
    assert fetch["properties"]["target"]["host"] == "docs.python.org"


def test_a_prompt_with_a_secret_is_blocked_and_never_stored(claude, project, audit):
    secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    out = claude.prompt(f"use my token {secret} to push")
    assert out.code == 0 and out.json()["decision"] == "block"
    assert "no-secrets-in-prompts-or-commands" in out.json()["reason"]
    assert secret not in out.stdout  # the reason names the shape, never the secret
    assert audit.summary("sess-1")[-1] == ("step.message", "user_prompt", "blocked", "block")
    raw = (project / ".charter" / "audit.db").read_bytes()
    wal = project / ".charter" / "audit.db-wal"
    assert secret.encode() not in raw + (wal.read_bytes() if wal.exists() else b"")


def test_failures_and_interrupts_are_recorded(claude, audit):
    claude.tool("Bash", {"command": "make"}, fail="Exit code 2: no rule to make target")
    tuid = f"toolu_{claude.session_id}_002"
    pre = claude.event(
        "PreToolUse", tool_name="Bash", tool_input={"command": "sleep 9"}, tool_use_id=tuid
    )
    assert pre.json() == {}
    post = claude.event(
        "PostToolUseFailure",
        tool_name="Bash",
        tool_input={"command": "sleep 9"},
        tool_use_id=tuid,
        error="interrupted by the user",
        is_interrupt=True,
    )
    assert post.code == 0 and post.json() == {}
    failed, interrupted = audit.records("sess-1")[-2:]
    assert failed["meta"]["charter.outcome"] == "failed"
    assert failed["output"]["error"]["message"] == "Exit code 2: no rule to make target"
    assert interrupted["meta"]["charter.outcome"] == "abandoned"


def test_stop_abandons_unreported_calls_but_subagent_stop_does_not(claude, audit):
    tuid = "toolu_parent_task"
    claude.event("PreToolUse", tool_name="Task", tool_input={"prompt": "go"}, tool_use_id=tuid)
    sub = claude.event("SubagentStop", stop_hook_active=False)
    assert (sub.code, sub.json()) == (0, {})
    assert [r["kind"] for r in audit.records("sess-1")] == ["task.start"]
    stop = claude.stop()
    assert (stop.code, stop.json()) == (0, {})  # never "decision": that would keep Claude going
    assert audit.summary("sess-1")[-1] == ("step.self", "Task", "abandoned", "allow")


def test_session_end_closes_the_task_and_a_resumed_session_continues(claude, audit):
    claude.start()
    claude.tool("Bash", {"command": "true"})
    assert claude.end().json() == {}
    assert audit.summary("sess-1")[-1][0] == "task.end"
    assert audit.records("sess-1")[-1]["output"] == {"reason": "exit"}
    claude.start(source="resume")
    claude.tool("Bash", {"command": "true"})
    assert [k for k, *_ in audit.summary("sess-1.2")] == ["task.start", "step.exec"]
    assert audit.verify().ok


def test_an_outcome_without_its_intent_is_still_recorded(claude, audit):
    post = claude.event(
        "PostToolUse",
        tool_name="Read",
        tool_input={"file_path": "/etc/hostname"},
        tool_use_id="toolu_orphan",
        tool_response={"type": "text"},
    )
    assert post.json() == {}
    step = audit.records("sess-1")[-1]
    assert step["step_name"] == "Read" and step["meta"]["charter.outcome"] == "ok"
    assert step["properties"]["claude"]["unmatched"] is True


def test_a_hook_registered_twice_judges_and_records_once(claude, audit):
    # Charter installed in both the user and the project settings: every event comes twice.
    blocked = {"tool_name": "Bash", "tool_input": {"command": "mkfs /dev/x"}, "tool_use_id": "t1"}
    assert [claude.event("PreToolUse", **blocked).permission for _ in "ab"] == ["deny", "deny"]
    allowed = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t2"}
    assert [claude.event("PreToolUse", **allowed).json() for _ in "ab"] == [{}, {}]
    for _ in "ab":
        claude.event("PostToolUse", **allowed, tool_response={"stdout": ""})
    assert [s[2] for s in audit.summary("sess-1")] == [None, "blocked", "ok"]


def test_mcp_tools_map_through_the_generic_rules(claude, audit):
    # the example policy asks before an MCP tool whose name says it deletes; once the user
    # approves, the call runs and is recorded with the generic mapping
    claude.approve = lambda name, tool_input: True
    run = claude.tool("mcp__github__delete_repository", {"repo": "acme/site"})
    assert run.pre.permission == "ask" and "destructive-mcp-tools-ask" in run.pre.reason
    assert run.ran
    step = audit.records("sess-1")[-1]
    assert (step["kind"], step["verb"]) == ("step.resource", "DELETE")
    assert step["properties"]["tool"]["server"] == "github"


def test_a_call_changed_after_judging_is_flagged(claude, audit):
    judged = {"command": "ls"}
    claude.event("PreToolUse", tool_name="Bash", tool_input=judged, tool_use_id="toolu_c")
    post = claude.event(
        "PostToolUse",
        tool_name="Bash",
        tool_input={"command": "ls; cat ~/.ssh/id_rsa"},
        tool_use_id="toolu_c",
        tool_response={"stdout": ""},
    )
    assert "not the one Charter judged" in post.json()["systemMessage"]
    assert "input_changed" in post.json()["hookSpecificOutput"]["additionalContext"]
    step = audit.records("sess-1")[-1]
    assert step["input"] == judged and step["properties"]["claude"]["input_changed"] is True


@pytest.mark.parametrize(
    ("args", "limit", "size"), [([], 32_768, 40_000), (["--max-output-chars", "10"], 10, 50)]
)
def test_long_tool_output_is_cut_once_at_the_output_limit(claude, audit, args, limit, size):
    claude.args = args
    claude.start()
    ran = claude.tool("Bash", {"command": f"head -c {size} /dev/zero | tr '\\0' x"})
    assert ran.ran and ran.output["stdout"] == "x" * size
    (step,) = [r for r in audit.records("sess-1") if r["kind"] == "step.exec"]
    # One cut, with the true count: not a cut of an already cut string.
    assert step["output"]["stdout"] == "x" * limit + f"…[truncated {size - limit} chars]"
