"""Adding Charter's hooks to a Claude Code settings file, and taking exactly them out again.

Install merges one command hook per event into ``hooks`` and leaves every other setting and
hook alone. In the shared project settings every entry is portable: policy files inside the
project are named through ``$CLAUDE_PROJECT_DIR``, and the hook is the project's own
environment (``"$CLAUDE_PROJECT_DIR"/.venv/bin/charter-claude-hook``) when Charter is
installed there, else ``charter-claude-hook`` from each member's PATH (or the command given
as `hook`). Local and user settings name this machine's interpreter by absolute path. For the
events that can refuse (PreToolUse, UserPromptSubmit) the command ends in a shell guard (if
the hook cannot even start, the guard exits 2, a refusal) and the entry sets
``onFailure: "block"`` (Claude Code 2.1.295 and later: a hook that cannot start, times out or
exits oddly blocks instead of letting the action through).

Install also pins the governance it sets up (see `_trust`): ``--pin``, ``--enforcement`` and
``--fail-mode`` on the command line, the verified copy of the policy set, and the trail
anchor. Install backs up an existing Charter-free file first (no backup when there was no
file); uninstall restores those exact bytes when nothing else changed in between, and
removes a file install created, so a round trip is byte for byte.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charter.integration import write_atomically

from charter_claude_code._answers import BLOCKABLE_EVENTS, HOOK_EVENTS

__all__ = [
    "GUARD",
    "InstallResult",
    "PinOptions",
    "SettingsError",
    "backup_path",
    "charter_hooks",
    "hook_command",
    "install_hooks",
    "installed_options",
    "is_charter_command",
    "pin_governance",
    "settings_path",
    "uninstall_hooks",
]

DEFAULT_TIMEOUT = 30
PROJECT_VAR = "$CLAUDE_PROJECT_DIR"
TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
GUARD = (
    " || { echo 'Charter: the Claude Code hook could not run, so this is refused "
    "(run: charter claude doctor)' >&2; exit 2; }"
)
_MARKERS = ("charter-claude-hook", "charter_claude_code")


class SettingsError(Exception):
    """A settings file cannot be merged safely (the message names the file and the problem)."""


def settings_path(scope: str, project_dir: str | os.PathLike[str] = ".") -> Path:
    """The settings file of `scope`: ``project`` (.claude/settings.json, shared),
    ``local`` (.claude/settings.local.json, not committed) or ``user`` (~/.claude)."""
    if scope == "user":
        return Path(os.path.expanduser("~")) / ".claude" / "settings.json"
    base = Path(project_dir).resolve() / ".claude"
    if scope == "local":
        return base / "settings.local.json"
    if scope == "project":
        return base / "settings.json"
    raise ValueError(f"scope {scope!r}: use project, local or user")


def backup_path(path: Path) -> Path:
    """Where install keeps the last Charter-free version of `path` (none: it did not exist)."""
    return path.with_name(path.name + ".charter-backup")


def is_charter_command(command: object) -> bool:
    """True for a hook command that Charter's installer wrote (or one running its hook)."""
    return isinstance(command, str) and any(m in command for m in _MARKERS)


def _console_script() -> str | None:
    import sysconfig

    folder = sysconfig.get_path("scripts")
    if not folder:
        return None
    script = os.path.join(folder, "charter-claude-hook")
    try:
        with open(script, "rb") as handle:
            if handle.read(2) == b"#!":
                return script
    except OSError:
        pass
    return None


def _quoted_path(path: str, root: str | None) -> str:
    """`path` for the shell: through ``$CLAUDE_PROJECT_DIR`` when inside `root`."""
    if root is not None:
        real, base = os.path.realpath(path), os.path.realpath(root)
        if real == base or real.startswith(base + os.sep):
            rel = os.path.relpath(real, base).replace(os.sep, "/")
            return f'"{PROJECT_VAR}"/' + shlex.quote(rel)
    return shlex.quote(os.path.abspath(path))


def _hook_program(python: str | None, root: str | None) -> str:
    """How the command starts the hook: portable when `root` is given."""
    if python is not None:
        return " ".join(
            shlex.quote(p) for p in (os.path.abspath(python), "-P", "-m", "charter_claude_code")
        )
    script = _console_script()
    if script is None:
        return " ".join(
            shlex.quote(p)
            for p in (os.path.abspath(sys.executable), "-P", "-m", "charter_claude_code")
        )
    if root is None:
        return shlex.quote(script)
    if os.path.realpath(script).startswith(os.path.realpath(root) + os.sep):
        return _quoted_path(script, root)
    return "charter-claude-hook"


def hook_command(
    event: str,
    *,
    policy_files: Sequence[str | os.PathLike[str]] = (),
    baseline: str | None = None,
    auto_approve: bool = False,
    deadline: float = 10.0,
    python: str | None = None,
    pin: str | None = None,
    enforcement: str = "enforce",
    fail_mode: str = "closed",
    project_dir: str | os.PathLike[str] | None = None,
    hook: str | None = None,
    serve: str | None = None,
) -> str:
    """The shell command Claude Code runs for `event`, and the guard for events that can
    refuse. With `project_dir` (shared project settings) the entry is portable: policy
    files and the hook program inside the project go through ``$CLAUDE_PROJECT_DIR``, a
    hook program outside it is named from PATH; `hook` replaces the program (for instance
    ``uv run --project "$CLAUDE_PROJECT_DIR" charter-claude-hook``). Without, absolute
    paths (the interpreter, the console script or ``-P -m charter_claude_code``). `serve`
    is the digest of the project's decision server key (``--serve``)."""
    root = os.fspath(project_dir) if project_dir is not None else None
    parts = [hook or _hook_program(python, root), "--event", event]
    for f in policy_files:
        parts += ["--policy", _quoted_path(os.fspath(f), root)]
    if baseline:
        parts += ["--baseline", shlex.quote(baseline)]
    if auto_approve:
        parts.append("--auto-approve")
    parts += ["--deadline", f"{deadline:g}"]
    if pin:
        parts += ["--pin", pin]
    parts += ["--enforcement", enforcement, "--fail-mode", fail_mode]
    if serve:
        parts += ["--serve", serve]
    command = " ".join(parts)
    return command + GUARD if event in BLOCKABLE_EVENTS else command


def _read(path: Path) -> tuple[bytes | None, dict[str, Any]]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, {}
    except OSError as exc:
        raise SettingsError(f"{path} cannot be read ({exc.strerror or exc})") from None
    if not raw.strip():
        return raw, {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise SettingsError(
            f"{path} is not valid JSON ({exc}); fix it first, Charter will not overwrite it"
        ) from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path} does not hold a JSON object; Charter will not overwrite it")
    return raw, data


def _style(raw: bytes | None) -> tuple[int | str, bool]:
    """(indent, trailing newline) of an existing file, so a rewrite looks like the original."""
    if not raw:
        return 2, True
    text = raw.decode("utf-8", "replace")
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            lead = line[: len(line) - len(stripped)]
            return ("\t" if lead.startswith("\t") else len(lead)), text.endswith("\n")
    return 2, text.endswith("\n")


def _dump(data: dict[str, Any], style: tuple[int | str, bool]) -> bytes:
    indent, newline = style
    text = json.dumps(data, indent=indent, ensure_ascii=False)
    return (text + ("\n" if newline else "")).encode("utf-8")


def _write(path: Path, data: bytes) -> None:
    write_atomically(path, data)


def charter_hooks(data: dict[str, Any]) -> dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]:
    """Charter's hooks in parsed settings: event -> [(matcher group, hook)]."""
    found: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return found
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            continue
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            for hook in group["hooks"]:
                if isinstance(hook, dict) and is_charter_command(hook.get("command")):
                    found.setdefault(event, []).append((group, hook))
    return found


def _covers_all(group: dict[str, Any]) -> bool:
    return group.get("matcher") in (None, "", "*")


@dataclass(frozen=True, slots=True)
class InstallResult:
    """What install did: the settings file, whether it changed, and the backup (if made)."""

    path: Path
    changed: bool
    backup: Path | None


def install_hooks(
    path: Path,
    *,
    policy_files: Sequence[str | os.PathLike[str]] = (),
    baseline: str | None = None,
    auto_approve: bool = False,
    timeout: int = DEFAULT_TIMEOUT,
    deadline: float | None = None,
    python: str | None = None,
    project_dir: str | os.PathLike[str] | None = None,
    portable: bool | None = None,
    enforcement: str = "enforce",
    fail_mode: str = "closed",
    program: str | None = None,
    pin: str | None = None,
    serve: bool = False,
) -> InstallResult:
    """Merge Charter's hooks for every event into the settings file at `path`, pinned.

    `project_dir` is the project governed (default: the folder holding ``.claude/``, else
    the current one); `portable` (default: `path` is that project's shared
    ``.claude/settings.json``) writes entries that work on every member's machine;
    `program` replaces the hook program (see `hook_command`). The
    policy set is pinned (`pin_governance`: verified copy, trail anchor) unless `pin` is
    given. Idempotent: Charter's existing hooks are updated in place, duplicates removed,
    nothing else touched. The deadline defaults to a third of `timeout`, so the hook always
    answers (deny) before Claude Code would kill it. Refuses (SettingsError) a file that is
    not a JSON object or whose ``hooks`` is malformed, TrustError a policy set that does not
    load; ValueError for a timeout under 3 s. `serve` makes the hooks ask the project's
    decision server first (``charter serve``): the server key is created when missing
    (``~/.charter/serve/<project key>/key``) and its digest pinned as ``--serve``.
    """
    if timeout < 3:
        raise ValueError("--timeout must be at least 3 seconds")
    limit = deadline if deadline is not None else round(timeout / 3, 1)
    if project_dir is None:
        project_dir = path.parent.parent if path.parent.name == ".claude" else Path.cwd()
    root = os.path.realpath(project_dir)
    if portable is None:
        portable = os.path.realpath(path) == os.path.join(root, ".claude", "settings.json")
    raw, data = _read(path)
    if pin is None:
        pin = pin_governance(PinOptions(tuple(os.fspath(f) for f in policy_files), baseline, root))
    served = None
    if serve:
        from charter.serve import ensure_key, key_digest, server_folder

        served = key_digest(ensure_key(server_folder(root)))
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsError(f"{path}: 'hooks' is not an object; fix it first")
    had_charter = bool(charter_hooks(data))
    for event in HOOK_EVENTS:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise SettingsError(f"{path}: hooks.{event} is not a list; fix it first")
        desired = {
            "type": "command",
            "command": hook_command(
                event,
                policy_files=policy_files,
                baseline=baseline,
                auto_approve=auto_approve,
                deadline=limit,
                python=python,
                pin=pin,
                enforcement=enforcement,
                fail_mode=fail_mode,
                project_dir=root if portable else None,
                hook=program,
                serve=served,
            ),
            "timeout": timeout,
        }
        if event in BLOCKABLE_EVENTS:
            desired["onFailure"] = "block"
        placed = False
        for group in list(groups):
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            kept = []
            for hook in group["hooks"]:
                if not (isinstance(hook, dict) and is_charter_command(hook.get("command"))):
                    kept.append(hook)
                elif not placed and (event not in TOOL_EVENTS or _covers_all(group)):
                    kept.append(desired)
                    placed = True
            if len(kept) != len(group["hooks"]) or kept != group["hooks"]:
                group["hooks"] = kept
                if not kept:
                    groups.remove(group)
        if not placed:
            added: dict[str, Any] = {"matcher": "*"} if event in TOOL_EVENTS else {}
            added["hooks"] = [desired]
            groups.append(added)
    new = _dump(data, _style(raw))
    if raw == new:
        return InstallResult(path, False, None)
    backup = None
    if not had_charter and raw is not None:
        backup = backup_path(path)
        _write(backup, raw)
    _write(path, new)
    return InstallResult(path, True, backup)


def _strip(data: dict[str, Any]) -> bool:
    """Remove Charter's hooks (and the groups, lists and object they alone filled)."""
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return False
    removed = False
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        for group in list(groups):
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            kept = [
                h
                for h in group["hooks"]
                if not (isinstance(h, dict) and is_charter_command(h.get("command")))
            ]
            if len(kept) != len(group["hooks"]):
                removed = True
                group["hooks"] = kept
                if not kept:
                    groups.remove(group)
                    if not groups:
                        del hooks[event]
    if removed and not hooks:
        del data["hooks"]
    return removed


def _normal(value: Any) -> Any:
    """`value` with empty objects and lists dropped, for comparing settings by meaning."""
    if isinstance(value, dict):
        out = {k: _normal(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in ({}, [])}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def uninstall_hooks(path: Path) -> bool:
    """Remove exactly Charter's hooks from `path`; returns whether anything was removed.

    When the rest of the file means what it meant before install, the backed-up bytes are
    put back (a file install created is deleted); otherwise the file is rewritten in its
    own style without Charter's entries. Refuses (SettingsError) an unreadable file.
    """
    raw, data = _read(path)
    if raw is None or not _strip(data):
        return False
    backup = backup_path(path)
    try:
        before: bytes | None = backup.read_bytes()
    except OSError:
        before = None
    if before is not None:
        try:
            earlier = json.loads(before) if before.strip() else {}
        except ValueError:
            earlier = None
        if isinstance(earlier, dict) and _normal(earlier) == _normal(data):
            if before:
                _write(path, before)
            else:
                path.unlink()
            backup.unlink()
            return True
    elif not _normal(data):
        path.unlink()  # install created it (no backup) and nothing else was added since
        return True
    _write(path, _dump(data, _style(raw)))
    return True


@dataclass(frozen=True, slots=True)
class PinOptions:
    """What a pin covers: the policy files, the baseline, and the project they govern."""

    policy_files: tuple[str, ...]
    baseline: str | None
    root: str
    audit_location: str | None = None
    agent_id: str | None = None


def pin_governance(options: PinOptions, environ: Any = None) -> str:
    """Trust the policy set as it is now: keep its verified copy under the project's
    ``.charter/claude-code/trusted/`` and the trail anchor in its store; returns the pin.
    Raises TrustError for a policy set that does not load."""
    from charter_claude_code._handler import HookConfig, open_gate, state_dir
    from charter_claude_code._trust import build_record, source_names, write_anchor, write_record

    env = os.environ if environ is None else environ
    root = options.root
    files = [f if os.path.isabs(f) else os.path.join(root, f) for f in options.policy_files]
    names = source_names(files, root)
    record = build_record(files, names, options.baseline, env.get("CHARTER_TEMPLATE_LOCATION"))
    pin = write_record(state_dir(root), record)
    config = HookConfig(
        policy_files=tuple(files),
        baseline=options.baseline,
        audit_location=options.audit_location,
        agent_id=options.agent_id,
        pin=pin,
    )
    gate, _, _ = open_gate(config, root, env, state_dir(root), templates=False)
    try:
        write_anchor(gate, pin, root, env)
    finally:
        gate.governor.close(1.0)
    return pin


def installed_options(path: Path) -> dict[str, Any]:
    """The options of Charter's installed PreToolUse hook in `path` (for `trust`):
    policy_files, baseline, auto_approve, deadline, enforcement, fail_mode, timeout, hook,
    serve (whether the hooks ask the decision server).
    Raises SettingsError when there is no Charter hook to read."""
    _, data = _read(path)
    pre = charter_hooks(data).get("PreToolUse")
    if not pre:
        raise SettingsError(f"{path} holds no Charter hook; install first (charter claude install)")
    entry = pre[0][1]
    command = str(entry.get("command"))
    if command.endswith(GUARD):
        command = command[: -len(GUARD)]
    words = shlex.split(command)
    at = words.index("--event") if "--event" in words else len(words)
    found: dict[str, Any] = {
        "policy_files": [],
        "baseline": None,
        "auto_approve": False,
        "deadline": None,
        "enforcement": "enforce",
        "fail_mode": "closed",
        "timeout": entry.get("timeout", DEFAULT_TIMEOUT),
        "hook": command.split(" --event ", 1)[0],
        "serve": False,
    }
    rest = iter(words[at:])
    for word in rest:
        if word == "--policy":
            found["policy_files"].append(next(rest, ""))
        elif word in ("--baseline", "--enforcement", "--deadline", "--fail-mode"):
            found[word[2:].replace("-", "_")] = next(rest, None)
        elif word == "--auto-approve":
            found["auto_approve"] = True
        elif word == "--serve":
            found["serve"] = True
            next(rest, None)
    if found["deadline"] is not None:
        found["deadline"] = float(found["deadline"])
    return found
