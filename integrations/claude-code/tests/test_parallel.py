"""Parallel hook processes of one session: one contiguous chain, exact history rules."""

from __future__ import annotations

import json
import subprocess

LIMIT = """name: limit
version: 1
policies:
  - name: five-commands
    rule_type: max_steps
    severity: critical
    match: {kinds: [step.exec]}
    params: {max: 5, select: {kinds: [step.exec]}}
"""


def _spawn(argv, payload, env):
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(payload).encode())
    proc.stdin.close()
    return proc


def _finish(proc):
    # stdin was written and closed at spawn time; answers are a few hundred bytes.
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=180)
    assert proc.returncode == 0, err.decode()
    assert b"swallowed an internal error" not in err, err.decode()
    return json.loads(out)


def test_eight_parallel_calls_keep_the_chain_and_the_count_exact(
    claude, project, tmp_path, hook_env, hook_path, audit
):
    policy = tmp_path / "limit.yaml"
    policy.write_text(LIMIT, encoding="utf-8")
    claude.policy = policy
    claude.start()
    # A generous deadline: this test is about integrity under contention, not latency.
    base = [hook_path, "--policy", str(policy), "--deadline", "100"]

    def payload(event, i, **extra):
        return {
            "hook_event_name": event,
            "session_id": claude.session_id,
            "cwd": str(project),
            "tool_name": "Bash",
            "tool_input": {"command": f"echo {i}"},
            "tool_use_id": f"toolu_par_{i}",
            **extra,
        }

    pre = [
        _spawn([*base, "--event", "PreToolUse"], payload("PreToolUse", i), hook_env)
        for i in range(8)
    ]
    answers = [_finish(p) for p in pre]
    decisions = [a.get("hookSpecificOutput", {}).get("permissionDecision") for a in answers]
    # Each call saw the intents its siblings registered a moment before: exactly five run.
    assert (decisions.count("deny"), decisions.count(None)) == (3, 5), answers
    allowed = [i for i, d in enumerate(decisions) if d is None]
    post = [
        _spawn(
            [*base, "--event", "PostToolUse"],
            payload("PostToolUse", i, tool_response={"stdout": f"{i}\n"}),
            hook_env,
        )
        for i in allowed
    ]
    assert all(_finish(p) == {} for p in post)

    report = audit.verify()
    # 9 outcomes, and the write-ahead intent of each of the 5 calls that ran.
    assert report.ok and report.steps_checked == 14, str(report)
    stored = audit.records(claude.session_id)
    intents = audit.intents(claude.session_id)
    assert len(intents) == 5
    assert sorted(r["seq"] for r in stored + intents) == list(range(1, 15))
    outcomes = sorted(r["meta"].get("charter.outcome") or "start" for r in stored)
    assert outcomes == ["blocked"] * 3 + ["ok"] * 5 + ["start"]
    state = json.loads((project / ".charter/claude-code/sessions/sess-1.json").read_text())
    assert state["intents"] == {} and state["pending"] == {}
