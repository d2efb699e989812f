"""The public surface is exactly __all__, and importing it stays cheap."""

from __future__ import annotations

import subprocess
import sys

import charter_claude_code


def test_all_names_resolve_and_nothing_else_is_public():
    assert sorted(charter_claude_code.__all__) == sorted(set(charter_claude_code.__all__))
    for name in charter_claude_code.__all__:
        assert getattr(charter_claude_code, name) is not None
    assert dir(charter_claude_code) == sorted(charter_claude_code.__all__)


def test_the_hook_handles_every_event_install_registers():
    assert charter_claude_code.HOOK_EVENTS == (
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "UserPromptSubmit",
        "SessionStart",
        "SessionEnd",
        "Stop",
        "SubagentStop",
    )


def test_importing_the_package_imports_no_charter():
    code = (
        "import sys, charter_claude_code; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('charter', 'charter_templates', 'yaml', 'click')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "[]"
