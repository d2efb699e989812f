"""The integration contract (charter.testing) on the real hook: every step of a contract run is
a fresh ``charter-claude-hook`` process fed Claude Code's own hook JSON.

The kit hands the adapter a Governor built in this process; the hook builds its own in each
process, so the adapter configures the hook with the same settings (policies written to a
manifest, the same audit location, agent id and fail mode; the hook always records with sync
durability) and the kit reads the hook's records from the same SQLite file.

Approvals: Claude Code asks the user itself (``permissionDecision: "ask"``), so the hook
pauses and never calls the Governor's approver. An approval is learnt when the call runs
anyway (PostToolUse): the hook then records the ``step.gate`` (pass) before the outcome,
which is the approved-ask contract. A refusal is never reported to hooks: Claude Code has no
event for a declined permission prompt, and a declined call looks exactly like one the user
interrupted or a turn that ended. The hook therefore records the unanswered ask as blocked
when the turn ends (Stop) and records no ``step.gate``: no answer was seen, and a made-up
"deny" by a person would misstate the trail (and revoke that person's earlier approvals of
the same input under ``requires_gate``). The adapter says so (``sees_denials = False``) and
the kit's denied-ask contract then checks that the call never ran, is recorded as blocked and
has no answer on record; a test below checks the reason the hook records.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from charter import Governor
from charter.testing import CONTRACT_TOOL, IntegrationContract, ToolRun

from .conftest import SWALLOWED, HookResult, hook_executable

# Runs the real hook after making Governor.build_step fail for the contract tool, the fault
# the kit injects into its own Governor (which cannot reach a hook process). Test-only: the
# hook itself has no such switch.
_FAULTY_HOOK = f"""
import sys
import charter

_build = charter.Governor.build_step

def _broken(self, *args, **kwargs):
    if kwargs.get("name") == {CONTRACT_TOOL!r} or (args and args[0] == {CONTRACT_TOOL!r}):
        raise RuntimeError("contract: injected fault")
    return _build(self, *args, **kwargs)

charter.Governor.build_step = _broken
from charter_claude_code._hook import main
main(sys.argv[1:])
"""


ASK = {
    "name": "contract-ask",
    "rule_type": "deny",
    "severity": "high",
    "action": "ask",
    "match": {"step_names": [CONTRACT_TOOL]},
}


class HookAdapter:
    """Claude Code for one contract run: SessionStart, PreToolUse of `CONTRACT_TOOL`, the
    tool when the answer lets it (approving an ask when told to), PostToolUse, Stop and
    SessionEnd, each a real hook process."""

    # The hook decides from what the store holds (each call restores the session from it):
    # with a store it cannot read, it refuses the call and says why.
    store_is_state = True
    # Claude Code asks the user itself and never tells hooks that the user declined.
    sees_denials = False

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work = work
        self.env = env
        self.runs = 0

    def _configure(self, governor: Governor) -> tuple[list[str], list[str], dict[str, str]]:
        settings = governor.runner.settings  # test code may look; the hook may not
        policies = [
            dict(p) if isinstance(p, Mapping) else p.to_dict() for p in settings.policies or ()
        ]
        manifest = self.work / "contract-policies.yaml"
        doc = {"name": "contract", "version": 1, "policies": policies}
        manifest.write_text(json.dumps(doc), encoding="utf-8")  # JSON is YAML
        args = [
            "--policy",
            str(manifest),
            "--audit",
            settings.audit_location,
            "--agent-id",
            settings.agent_id,
            "--fail-mode",
            settings.fail_mode,
        ]
        env = dict(self.env)
        faulty = "build_step" in vars(governor)  # the kit patched this Governor's build_step
        prefix = [sys.executable, "-c", _FAULTY_HOOK] if faulty else [hook_executable()]
        return prefix, args, env

    def run_tool(self, governor: Governor, args: dict[str, Any], approve: bool) -> ToolRun:
        prefix, hook_args, env = self._configure(governor)
        self.runs += 1
        session = f"contract-{self.runs}"
        tuid = f"toolu_contract_{self.runs:03d}"
        project = env["CLAUDE_PROJECT_DIR"]
        # Under the injected fault, or with a store that cannot be opened, the hook reports
        # the fault (and refuses); otherwise Charter must not swallow anything inside it.
        quiet = prefix[0] != sys.executable and governor.status()["store"]["ok"]

        def send(event: str, **fields: Any) -> HookResult:
            payload = {
                "hook_event_name": event,
                "session_id": session,
                "transcript_path": f"{project}/transcript.jsonl",
                "cwd": project,
                "permission_mode": "default",
                **fields,
            }
            argv = [*prefix, "--event", event, *hook_args]
            done = subprocess.run(
                argv, input=json.dumps(payload).encode(), capture_output=True, env=env, timeout=120
            )
            out = HookResult(done.returncode, done.stdout.decode(), done.stderr.decode())
            assert out.code == 0, out.stderr
            assert not quiet or SWALLOWED not in out.stderr, out.stderr
            return out

        run = ToolRun()
        send("SessionStart", source="startup")
        call = {"tool_name": CONTRACT_TOOL, "tool_input": args, "tool_use_id": tuid}
        pre = send("PreToolUse", **call)
        decision = pre.permission
        if decision == "deny" or (decision == "ask" and not approve):
            run.refusal = pre.reason
        else:
            run.calls.append(dict(args))  # Claude Code runs the tool
            post = send("PostToolUse", **call, tool_response={"probed": True, "args": args})
            assert post.json() == {}, post.stdout
        send("Stop", stop_hook_active=False)
        send("SessionEnd", reason="exit")
        return run


class TestClaudeCodeContract(IntegrationContract):
    @pytest.fixture
    def adapter(self, tmp_path: Path, hook_env: dict[str, str]) -> HookAdapter:
        return HookAdapter(tmp_path, hook_env)

    def test_a_declined_ask_never_runs_and_is_recorded_blocked_without_a_gate(
        self, adapter: HookAdapter, governed: Any
    ) -> None:
        """What the hook guarantees instead of the denied-ask contract."""
        args = {"target": "alpha-7", "count": 2}
        gov = governed([ASK], approve=False)
        run = adapter.run_tool(gov, dict(args), False)
        assert run.calls == [], "the declined tool ran"
        assert run.refusal is not None and "contract-ask" in run.refusal
        records = self._trail(gov)
        assert [r for r in records if r["kind"] == "step.gate"] == []
        probes = self._probes(records)
        assert [p["meta"]["charter.outcome"] for p in probes] == ["blocked"]
        reason = probes[0]["meta"]["charter.eval"]["reason"]
        assert "declined in Claude Code's permission prompt, or interrupted" in reason
