"""install / uninstall: merge into settings.json, exactly reversible, and a command that works."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from charter_claude_code import HOOK_EVENTS, install_hooks, uninstall_hooks
from charter_claude_code._cli import claude as claude_cli
from click.testing import CliRunner

BLOCKING = ("PreToolUse", "UserPromptSubmit")

# Formatted the way Claude Code writes it (two-space JSON), with the user's own hooks.
EXISTING = """{
  "permissions": {
    "allow": [
      "Bash(npm run test:*)"
    ],
    "deny": [
      "Read(./.env)"
    ]
  },
  "hooks": {
    "PostToolUse": [
      {
        "matcher": "Edit|Write",
        "hooks": [
          {
            "type": "command",
            "command": "npx prettier --write \\"$CLAUDE_FILE_PATHS\\""
          }
        ]
      }
    ],
    "Notification": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "notify-send 'Claude Code' 'needs you'"
          }
        ]
      }
    ]
  },
  "model": "sonnet"
}"""


def test_install_merges_and_uninstall_restores_byte_for_byte(tmp_path, policy):
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(EXISTING, encoding="utf-8")
    original = path.read_bytes()

    result = install_hooks(path, policy_files=[policy])
    assert result.changed and result.backup is not None
    data = json.loads(path.read_text())
    assert data["permissions"] == json.loads(EXISTING)["permissions"]
    assert data["model"] == "sonnet"
    assert data["hooks"]["Notification"] == json.loads(EXISTING)["hooks"]["Notification"]
    user_post, charter_post = data["hooks"]["PostToolUse"]
    assert user_post == json.loads(EXISTING)["hooks"]["PostToolUse"][0]
    assert charter_post["matcher"] == "*"
    for event in HOOK_EVENTS:
        (hook,) = [h for g in data["hooks"][event] for h in g["hooks"] if "charter" in h["command"]]
        command = hook["command"]
        # Shared project settings: nothing of this machine but what lies outside the project.
        assert command.startswith("charter-claude-hook ") and sys.executable not in command
        assert f"--event {event}" in command and str(policy) in command
        assert "--pin sha256:" in command and "--enforcement enforce --fail-mode closed" in command
        assert hook.get("onFailure") == ("block" if event in BLOCKING else None)
        assert hook["timeout"] == 30 and "--deadline 10" in command
        assert command.endswith("exit 2; }") == (event in ("PreToolUse", "UserPromptSubmit"))

    installed = path.read_bytes()
    assert not install_hooks(path, policy_files=[policy]).changed  # idempotent
    assert path.read_bytes() == installed

    assert uninstall_hooks(path)
    assert path.read_bytes() == original
    assert not (tmp_path / ".claude" / "settings.json.charter-backup").exists()
    assert not uninstall_hooks(path)


def test_uninstall_keeps_changes_made_after_install(tmp_path, policy):
    path = tmp_path / "settings.json"
    path.write_text(EXISTING, encoding="utf-8")
    install_hooks(path, policy_files=[policy])
    data = json.loads(path.read_text())
    data["model"] = "opus"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    assert uninstall_hooks(path)
    after = json.loads(path.read_text())
    expected = json.loads(EXISTING)
    expected["model"] = "opus"
    assert after == expected


def test_a_file_install_created_is_removed_again(tmp_path, policy):
    path = tmp_path / "new" / "settings.json"
    install_hooks(path, policy_files=[policy])
    assert path.exists()
    uninstall_hooks(path)
    assert not path.exists()


def test_reinstall_updates_in_place(tmp_path, policy):
    path = tmp_path / "settings.json"
    install_hooks(path, policy_files=[policy])
    install_hooks(path, policy_files=[policy], auto_approve=True, timeout=45)
    data = json.loads(path.read_text())
    pre = data["hooks"]["PreToolUse"]
    assert len(pre) == 1 and "--auto-approve" in pre[0]["hooks"][0]["command"]
    assert pre[0]["hooks"][0]["timeout"] == 45 and "--deadline 15" in pre[0]["hooks"][0]["command"]


def test_install_refuses_what_it_cannot_merge(tmp_path, policy, monkeypatch):
    path = tmp_path / "settings.json"
    path.write_text("{ not json", encoding="utf-8")
    cli = CliRunner()
    out = cli.invoke(claude_cli, ["install", "--settings-file", str(path), "--policy", str(policy)])
    assert out.exit_code == 1 and "not valid JSON" in out.output
    assert path.read_text() == "{ not json"

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nversion: 1\npolicies:\n  - name: a\n    rule_type: nope\n")
    out = cli.invoke(claude_cli, ["install", "--settings-file", str(path), "--policy", str(bad)])
    assert out.exit_code == 1 and "nope" in out.output

    out = cli.invoke(claude_cli, ["install", "--settings-file", str(path)])
    assert out.exit_code == 2 and "--policy FILE" in out.output

    base = ["install", "--settings-file", str(tmp_path / "s.json"), "--baseline", "coding-agent"]
    out = cli.invoke(claude_cli, [*base, "--policy", str(policy)])
    assert out.exit_code == 1 and "these repeat:" in out.output  # both name their path rules
    monkeypatch.setitem(sys.modules, "charter_baseline", None)  # as if not installed
    out = cli.invoke(claude_cli, base)
    assert out.exit_code == 1 and "pip install charter-baseline" in out.output


def test_the_installed_command_is_what_claude_code_runs(tmp_path, policy, project, hook_env):
    path = project / ".claude" / "settings.json"
    cli = CliRunner()
    out = cli.invoke(
        claude_cli, ["install", "--project", "--project-dir", str(project), "--policy", str(policy)]
    )
    assert out.exit_code == 0, out.output
    assert "installed" in out.output
    data = json.loads(path.read_text())
    command = data["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    event = {
        "hook_event_name": "PreToolUse",
        "session_id": "s-inst",
        "cwd": str(project),
        "tool_name": "Bash",
        "tool_input": {"command": "mkfs.ext4 /dev/sdz"},
        "tool_use_id": "toolu_i",
    }
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        input=json.dumps(event).encode(),
        capture_output=True,
        env=hook_env,
        cwd=tmp_path,
    )
    answer = json.loads(done.stdout)
    assert done.returncode == 0
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"
    out = cli.invoke(claude_cli, ["uninstall", "--project-dir", str(project)])
    assert out.exit_code == 0 and "removed" in out.output
    assert not path.exists()


def test_the_standalone_command_and_the_plugin_entry_point(tmp_path):
    found = {ep.name: ep.value for ep in entry_points(group="charter.cli")}
    assert found.get("claude") == "charter_claude_code._cli:claude"
    script = Path(sys.executable).parent / "charter-claude"
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert all(word in done.stdout for word in ("install", "uninstall", "doctor"))


@pytest.mark.parametrize("scope", ["project", "local", "user"])
def test_scopes_name_the_right_file(scope, tmp_path, monkeypatch):
    from charter_claude_code import settings_path

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = settings_path(scope, tmp_path / "p")
    expected = {
        "project": tmp_path / "p" / ".claude" / "settings.json",
        "local": tmp_path / "p" / ".claude" / "settings.local.json",
        "user": tmp_path / "home" / ".claude" / "settings.json",
    }[scope]
    assert path == (expected if scope == "user" else expected.resolve())
