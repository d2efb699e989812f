"""Charter for Claude Code: hooks that judge every tool call before it runs, and never fail open.

Install with ``charter claude install --policy policies.yaml`` (or the standalone
``charter-claude install``); check with ``charter claude doctor``. Claude Code then runs
``charter-claude-hook`` for every hook event: tool calls are judged before they run (deny,
ask, or no objection), their outcomes are recorded after, and the session's history lives in
the project's audit store so history rules work across the one-process-per-call hooks.

The names below load lazily: the hook process imports only what one call needs.
"""

from __future__ import annotations

# typing is not imported: the served hook's whole process is the user's wait.
_TYPE_CHECKING = False
if _TYPE_CHECKING:
    from typing import Any

    from charter_claude_code._answers import HOOK_EVENTS, HookAnswer
    from charter_claude_code._doctor import DoctorReport, diagnose
    from charter_claude_code._handler import HookConfig, handle_event
    from charter_claude_code._hook import main
    from charter_claude_code._install import (
        hook_command,
        install_hooks,
        settings_path,
        uninstall_hooks,
    )

__all__ = [
    "HOOK_EVENTS",
    "DoctorReport",
    "HookAnswer",
    "HookConfig",
    "diagnose",
    "handle_event",
    "hook_command",
    "install_hooks",
    "main",
    "settings_path",
    "uninstall_hooks",
]

_WHERE = {
    "HOOK_EVENTS": "_answers",
    "HookAnswer": "_answers",
    "DoctorReport": "_doctor",
    "diagnose": "_doctor",
    "HookConfig": "_handler",
    "handle_event": "_handler",
    "main": "_hook",
    "hook_command": "_install",
    "install_hooks": "_install",
    "settings_path": "_install",
    "uninstall_hooks": "_install",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'charter_claude_code' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"charter_claude_code.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
