"""Fixtures: the installed hook run as a real subprocess, and a small stand-in for Claude Code.

`ClaudeCode` drives a session the way Claude Code does: it sends each hook event as JSON on
stdin to ``charter-claude-hook``, reads the answer with Claude Code's rules (exit 2 blocks,
any other non-zero exit is ignored, ``permissionDecision`` deny/ask/allow), runs the tool
for real only when the answer lets it, and reports the outcome with PostToolUse. Tools touch
real files and counters, so a test can prove that a denied call never ran.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Fails a test in which Charter swallowed an internal error in *this* process; hook processes
# are checked through their stderr by `HookResult` (see `swallowed`).
from charter.testing import charter_internal_errors  # noqa: F401

REPO = Path(__file__).resolve().parents[3]
POLICY = REPO / "examples" / "claude-code" / "policies.yaml"
SWALLOWED = "charter swallowed an internal error"


def hook_executable() -> str:
    found = shutil.which("charter-claude-hook", path=str(Path(sys.executable).parent))
    if found is None:
        raise RuntimeError("charter-claude-hook is not installed next to this interpreter")
    return found


@dataclass
class HookResult:
    """One hook process: exit code, stdout, stderr."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        return json.loads(self.stdout) if self.stdout.strip() else {}

    @property
    def permission(self) -> str | None:
        """PreToolUse: the permissionDecision, or None for no opinion."""
        return self.json().get("hookSpecificOutput", {}).get("permissionDecision")

    @property
    def reason(self) -> str:
        data = self.json()
        return str(
            data.get("hookSpecificOutput", {}).get("permissionDecisionReason")
            or data.get("reason")
            or data.get("systemMessage")
            or self.stderr
        )

    @property
    def swallowed(self) -> bool:
        return SWALLOWED in self.stderr


@pytest.fixture(scope="session")
def pycache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The test environment disables bytecode writing; each hook process would then compile
    # Charter from source. A private prefix keeps the repository untouched.
    return tmp_path_factory.mktemp("pycache")


@pytest.fixture(autouse=True)
def _bytecode_in_pycache(pycache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `charter claude install` compiles the hook's modules where this interpreter reads
    # bytecode: in the private prefix too, not beside the repository's sources.
    monkeypatch.setattr(sys, "pycache_prefix", str(pycache))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / ".aws").mkdir(parents=True)
    (h / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = AKIAZ7QWERTYUIOPASDF\n", encoding="utf-8"
    )
    return h


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = tmp_path / "proj"
    p.mkdir()
    (p / "README.md").write_text("# demo\n", encoding="utf-8")
    return p


@pytest.fixture
def hook_env(project: Path, home: Path, pycache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHARTER_", "CLAUDE_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    env["CLAUDE_PROJECT_DIR"] = str(project)
    env["HOME"] = str(home)
    # As for a user who installed charter-claude-code: its commands are on PATH.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_hook(
    event: str,
    payload: dict[str, Any] | bytes,
    *,
    env: dict[str, str],
    args: list[str] | None = None,
    policy: Path | None = POLICY,
    registered: bool = True,
) -> HookResult:
    """Run the installed hook once, as Claude Code would (stdin JSON, fresh process)."""
    argv = [hook_executable()]
    if registered:
        argv += ["--event", event]
    if policy is not None:
        argv += ["--policy", str(policy)]
    argv += list(args or [])
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    proc = subprocess.run(argv, input=data, capture_output=True, env=env, timeout=120)
    return HookResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


@dataclass
class ToolRun:
    """What happened to one tool call: `ran` tells whether the tool body executed."""

    pre: HookResult
    ran: bool
    post: HookResult | None = None
    output: Any = None


@dataclass
class ClaudeCode:
    """A scripted Claude Code session against real hook processes (see module docstring)."""

    project: Path
    env: dict[str, str]
    session_id: str = "sess-1"
    policy: Path | None = POLICY
    args: list[str] = field(default_factory=list)
    approve: Callable[[str, dict[str, Any]], bool] = lambda name, tool_input: False
    calls: int = 0

    def event(self, name: str, **fields: Any) -> HookResult:
        payload = {
            "hook_event_name": name,
            "session_id": self.session_id,
            "transcript_path": str(self.project / "transcript.jsonl"),
            "cwd": str(self.project),
            "permission_mode": "default",
            **fields,
        }
        result = run_hook(name, payload, env=self.env, args=self.args, policy=self.policy)
        assert not result.swallowed, result.stderr
        return result

    def start(self, source: str = "startup") -> HookResult:
        return self.event("SessionStart", source=source)

    def prompt(self, text: str) -> HookResult:
        return self.event("UserPromptSubmit", prompt=text)

    def tool(self, name: str, tool_input: dict[str, Any], *, fail: str | None = None) -> ToolRun:
        """Ask PreToolUse, run the tool when Claude Code would, then report the outcome."""
        self.calls += 1
        tuid = f"toolu_{self.session_id}_{self.calls:03d}"
        pre = self.event("PreToolUse", tool_name=name, tool_input=tool_input, tool_use_id=tuid)
        if pre.code == 2:
            return ToolRun(pre, ran=False)
        decision = pre.permission if pre.code == 0 else None
        if decision == "deny":
            return ToolRun(pre, ran=False)
        if decision == "ask" and not self.approve(name, tool_input):
            return ToolRun(pre, ran=False)
        if fail is not None:
            post = self.event(
                "PostToolUseFailure",
                tool_name=name,
                tool_input=tool_input,
                tool_use_id=tuid,
                error=fail,
                is_interrupt=False,
            )
            return ToolRun(pre, ran=True, post=post)
        output = self._execute(name, tool_input)
        post = self.event(
            "PostToolUse",
            tool_name=name,
            tool_input=tool_input,
            tool_use_id=tuid,
            tool_response=output,
        )
        return ToolRun(pre, ran=True, post=post, output=output)

    def _execute(self, name: str, tool_input: dict[str, Any]) -> Any:
        if name == "Bash":
            done = subprocess.run(
                ["/bin/sh", "-c", tool_input["command"]],
                cwd=self.project,
                capture_output=True,
                text=True,
                timeout=30,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
            return {"stdout": done.stdout, "stderr": done.stderr, "interrupted": False}
        if name == "Read":
            text = (self.project / tool_input["file_path"]).read_text(encoding="utf-8")
            return {"type": "text", "file": {"filePath": tool_input["file_path"], "content": text}}
        if name == "Write":
            (self.project / tool_input["file_path"]).write_text(
                tool_input["content"], encoding="utf-8"
            )
            return {"type": "create", "filePath": tool_input["file_path"]}
        if name == "WebFetch":
            return {"result": f"(offline) page {tool_input['url']}", "code": 200}
        return {"ok": True}

    def stop(self) -> HookResult:
        return self.event("Stop", stop_hook_active=False)

    def end(self, reason: str = "exit") -> HookResult:
        return self.event("SessionEnd", reason=reason)


@pytest.fixture
def claude(project: Path, hook_env: dict[str, str]) -> ClaudeCode:
    return ClaudeCode(project, hook_env)


@pytest.fixture
def without_baseline(tmp_path: Path, hook_env: dict[str, str]) -> dict[str, str]:
    """`hook_env` in which charter-baseline cannot be imported (as when not installed)."""
    shadow = tmp_path / "shadow" / "charter_baseline"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ImportError(\"No module named 'charter_baseline'\")\n", encoding="utf-8"
    )
    return {**hook_env, "PYTHONPATH": str(shadow.parent)}


@pytest.fixture
def hook_path() -> str:
    return hook_executable()


@pytest.fixture
def policy() -> Path:
    """The example policy file the tests (and users) run with."""
    return POLICY


@pytest.fixture
def hook(hook_env: dict[str, str]) -> Callable[..., HookResult]:
    """Run the hook once: hook(event, payload, args=[...], policy=..., registered=True)."""

    def call(event: str, payload: dict[str, Any] | bytes, **kw: Any) -> HookResult:
        kw.setdefault("env", hook_env)
        return run_hook(event, payload, **kw)

    return call


class Audit:
    """The project's audit store, read the way an auditor would."""

    def __init__(self, project: Path) -> None:
        self.location = f"sqlite:///{project}/.charter/audit.db"

    def records(self, task_id: str) -> list[dict[str, Any]]:
        import charter
        from charter.audit import is_intent_record

        store = charter.open_store(self.location)
        try:
            # Outcomes: the hook's sync durability also stores each allowed call's intent
            # before the call runs (see `intents`).
            return [r for r in store.read_task(task_id, "claude-code") if not is_intent_record(r)]
        finally:
            store.close()

    def intents(self, task_id: str) -> list[dict[str, Any]]:
        """The write-ahead intents of the allowed calls, stored before each call ran."""
        import charter
        from charter.audit import is_intent_record

        store = charter.open_store(self.location)
        try:
            return [r for r in store.read_task(task_id, "claude-code") if is_intent_record(r)]
        finally:
            store.close()

    def summary(self, task_id: str) -> list[tuple[str, str, str | None, str | None]]:
        """(kind, step_name, outcome, decision) per record."""
        out = []
        for r in self.records(task_id):
            verdict = r["meta"].get("charter.eval") or {}
            out.append(
                (
                    r["kind"],
                    r["step_name"],
                    r["meta"].get("charter.outcome"),
                    verdict.get("decision"),
                )
            )
        return out

    def verify(self) -> Any:
        import charter

        return charter.verify(self.location)


@pytest.fixture
def audit(project: Path) -> Audit:
    return Audit(project)
