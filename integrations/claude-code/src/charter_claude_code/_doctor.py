"""`charter claude doctor`: would Claude Code, started here, run governed?

Each check answers one way an install silently stops enforcing: a hook missing for an event
(history then misses steps, or tool calls are not judged at all), a matcher that skips some
tools, ``disableAllHooks``, a timeout the hook cannot answer within, a command that does not
start, policies that do not load, and a store the hook cannot write. The command check runs
the registered command itself (with ``--doctor``), so it sees what Claude Code would see.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charter_claude_code._answers import HOOK_EVENTS
from charter_claude_code._install import (
    GUARD,
    TOOL_EVENTS,
    SettingsError,
    _read,
    charter_hooks,
    settings_path,
)

__all__ = ["DoctorReport", "diagnose", "hook_status"]


def hook_status(config: Any, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The hook's own view (run by ``charter-claude-hook --doctor``): policy load state,
    fail mode, store health and writability. `ok` is True only when it enforces policies
    and can record."""
    from charter_claude_code._handler import open_gate, project_root, state_dir

    env = os.environ if environ is None else environ
    root = project_root({}, config, env)
    gate, source, settings = open_gate(config, root, env, state_dir(root), templates=False)
    try:
        status = gate.governor.status()
        store = dict(status["store"])
        location = settings.audit_location
        writable = False
        if store.get("ok") and location.startswith(("sqlite:///", "jsonl:///")):
            path = location.split(":///", 1)[1]
            folder = os.path.dirname(path) or "."
            writable = os.access(path, os.W_OK) and os.access(folder, os.W_OK)
        store["writable"] = writable
        # Less the always-on self-protection policy, which is not the user's choice.
        count = max(0, sum(status["policies"].values()) - 1)
        state = status["load_state"]
        if state == "enforcing" and count == 0:
            state = "none_configured"
        result = {
            "project_root": root,
            "policies": {
                "state": state,
                "cause": status["cause"],
                "count": count,
                "sources": list(source.described),
                "pinned": source.pinned,
                "changed": source.changed,
            },
            "fail_mode": status["fail_mode"],
            "enforcement": status["enforcement"],
            "payload_mode": status["payload_mode"],
            "agent_id": status["agent_id"],
            "store": store,
        }
        result["ok"] = bool(state == "enforcing" and store.get("ok") and writable)
        from charter_claude_code._bytecode import uncompiled

        left = uncompiled()
        result["bytecode"] = {"uncompiled": len(left), "first": left[0] if left else None}
        return result
    finally:
        gate.governor.close(1.0)


@dataclass
class DoctorReport:
    """Every check as (status, what, detail); status is ok, warn or FAIL."""

    checks: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, status: str, what: str, detail: str = "") -> None:
        self.checks.append((status, what, detail))

    @property
    def ok(self) -> bool:
        """False when Claude Code would run ungoverned (or not at all governed as installed)."""
        return all(status != "FAIL" for status, _, _ in self.checks)

    def lines(self) -> list[str]:
        out = []
        for status, what, detail in self.checks:
            out.append(f"{status:<4} {what}" + (f": {detail}" if detail else ""))
        return out


def _deadline_of(command: str) -> float:
    try:
        words = shlex.split(command.split(" || ", 1)[0])
    except ValueError:
        return 10.0
    for i, word in enumerate(words):
        if word == "--deadline" and i + 1 < len(words):
            try:
                return float(words[i + 1])
            except ValueError:
                break
    return 10.0


def _doctor_command(command: str) -> str:
    base = command[: -len(GUARD)] if command.endswith(GUARD) else command.split(" || ", 1)[0]
    return base + " --doctor"


def diagnose(
    project_dir: str | os.PathLike[str] = ".",
    *,
    settings_files: Sequence[Path] | None = None,
    environ: Mapping[str, str] | None = None,
    run_command: bool = True,
) -> DoctorReport:
    """Check the install that Claude Code started in `project_dir` would use.

    `settings_files` defaults to the user, project and local settings (Claude Code merges
    the hooks of all three). Never raises: every problem becomes a FAIL line.
    """
    report = DoctorReport()
    root = Path(project_dir).resolve()
    files = (
        list(settings_files)
        if settings_files is not None
        else [settings_path(s, root) for s in ("user", "project", "local")]
    )
    found: dict[str, list[tuple[Path, dict[str, Any], dict[str, Any]]]] = {}
    for path in files:
        try:
            raw, data = _read(path)
        except SettingsError as exc:
            report.add("FAIL", f"settings {path}", str(exc))
            continue
        if raw is None:
            continue
        if data.get("disableAllHooks") is True:
            report.add("FAIL", f"settings {path}", "disableAllHooks is true: no hook runs at all")
        for event, pairs in charter_hooks(data).items():
            for group, hook in pairs:
                found.setdefault(event, []).append((path, group, hook))
    for event in HOOK_EVENTS:
        entries = found.get(event, [])
        if not entries:
            report.add(
                "FAIL",
                f"hook {event}",
                "not registered (run: charter claude install)"
                + ("; tool calls are not judged at all" if event == "PreToolUse" else ""),
            )
            continue
        path, group, hook = entries[0]
        if event in TOOL_EVENTS and group.get("matcher") not in (None, "", "*"):
            report.add(
                "FAIL",
                f"hook {event}",
                f"matcher {group.get('matcher')!r} in {path} skips other tools; use '*'",
            )
            continue
        timeout = hook.get("timeout")
        deadline = _deadline_of(str(hook.get("command")))
        if isinstance(timeout, (int, float)) and timeout <= deadline:
            report.add(
                "FAIL",
                f"hook {event}",
                f"timeout {timeout:g} s is not above the hook's --deadline {deadline:g} s: a "
                "slow call would be killed, and a killed hook lets the call through",
            )
            continue
        if len(entries) > 1:
            report.add("warn", f"hook {event}", f"registered {len(entries)} times; each one runs")
        else:
            report.add("ok", f"hook {event}", f"in {path}")
    pre = found.get("PreToolUse")
    if pre and run_command:
        _check_command(report, str(pre[0][2].get("command")), root, environ)
    return report


def _check_command(
    report: DoctorReport, command: str, root: Path, environ: Mapping[str, str] | None
) -> None:
    try:
        words = shlex.split(command.split(" || ", 1)[0])
    except ValueError as exc:
        report.add("FAIL", "hook command", f"cannot be parsed ({exc})")
        return
    env = dict(os.environ if environ is None else environ)
    env["CLAUDE_PROJECT_DIR"] = str(root)
    program = words[0] if words else ""
    for var in ("$CLAUDE_PROJECT_DIR", "${CLAUDE_PROJECT_DIR}"):
        program = program.replace(var, str(root))
    import shutil

    interpreter = program if os.sep in program else shutil.which(program, path=env.get("PATH"))
    if not (interpreter and os.path.isabs(interpreter) and os.access(interpreter, os.X_OK)):
        report.add(
            "FAIL",
            "hook command",
            f"{program!r} is not an executable here (not on PATH?); every member needs "
            "charter-claude-code installed (pip install charter-claude-code), or reinstall "
            "with --hook-command",
        )
        return
    try:
        done = subprocess.run(
            _doctor_command(command),
            shell=True,
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        report.add("FAIL", "hook command", f"does not run ({exc})")
        return
    try:
        status = json.loads(done.stdout)
        if not isinstance(status, dict):
            raise ValueError("not an object")
    except ValueError:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        report.add(
            "FAIL",
            "hook command",
            f"exits {done.returncode} without a status: {' | '.join(tail) or 'no output'}",
        )
        return
    report.add("ok", "hook command", f"runs ({interpreter})")
    if "problem" in status:
        report.add("FAIL", "policies", str(status["problem"]))
        return
    policies = status.get("policies") or {}
    state = policies.get("state")
    sources = ", ".join(policies.get("sources") or []) or "-"
    if state == "enforcing":
        report.add("ok", "policies", f"enforcing {policies.get('count')} from {sources}")
        if not policies.get("pinned"):
            report.add(
                "FAIL",
                "pins",
                "the hook command carries no --pin: an edited policy file would govern "
                "without a person's review; reinstall (charter claude install)",
            )
        elif policies.get("changed"):
            report.add(
                "warn",
                "pins",
                "the policy files changed since they were trusted; the trusted set stays in "
                "force until a person runs: charter claude trust",
            )
    elif state == "none_configured":
        report.add("FAIL", "policies", f"none: {sources} define no policy; nothing is governed")
    else:
        mode = status.get("fail_mode")
        effect = "every tool call is denied" if mode == "closed" else "every tool call runs"
        report.add(
            "FAIL",
            "policies",
            f"{state or 'unavailable'}: {policies.get('cause') or 'no policy set'}; "
            f"fail_mode {mode}: {effect}",
        )
    store = status.get("store") or {}
    if store.get("ok") and store.get("writable"):
        report.add("ok", "audit store", f"{store.get('location')} ({store.get('detail')})")
    else:
        report.add(
            "FAIL",
            "audit store",
            f"{store.get('location')}: "
            + (str(store.get("detail")) if not store.get("ok") else "not writable by this user"),
        )
    if status.get("payload_mode") != "full":
        report.add(
            "warn",
            "payload mode",
            f"{status.get('payload_mode')}: each hook call restores the session from the "
            "stored trail, so rules that read inputs or outputs of earlier steps (no_repeat, "
            "value_provenance, forbid_after on payload fields) see only what is stored",
        )
    bytecode = status.get("bytecode") or {}
    if bytecode.get("uncompiled"):
        report.add(
            "warn",
            "bytecode",
            f"{bytecode['uncompiled']} of the hook's modules have no bytecode and the hook "
            f"cannot write it (PYTHONDONTWRITEBYTECODE, or a folder it cannot write, such as "
            f"that of {bytecode.get('first')}): every tool call compiles them from source, "
            "about four times slower; run charter claude install again as a user who can "
            "write there (it compiles them), or install with uv pip install --compile-bytecode",
        )
    if status.get("enforcement") == "monitor":
        report.add("warn", "enforcement", "monitor: nothing is blocked or asked, only recorded")
