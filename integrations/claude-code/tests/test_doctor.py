"""doctor: says when Claude Code would run ungoverned, and exits 1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from charter_claude_code import install_hooks
from charter_claude_code._cli import claude as claude_cli
from click.testing import CliRunner


def _doctor(project, settings, env):
    out = CliRunner().invoke(
        claude_cli,
        ["doctor", "--project-dir", str(project), "--settings-file", str(settings)],
        env=env,
    )
    return out.exit_code, out.output


def test_a_good_install_passes(project, policy, hook_env):
    settings = project / ".claude" / "settings.json"
    install_hooks(settings, policy_files=[policy])
    code, text = _doctor(project, settings, hook_env)
    assert code == 0, text
    assert "ok   hook PreToolUse" in text
    assert "ok   policies: enforcing 14 from" in text
    assert "ok   audit store: sqlite:///" in text
    assert "is governed by Charter" in text


def test_broken_installs_fail(project, policy, tmp_path, hook_env):
    settings = project / ".claude" / "settings.json"
    mine = tmp_path / "p.yaml"
    shutil.copy(policy, mine)
    install_hooks(settings, policy_files=[mine])
    data = json.loads(settings.read_text())
    del data["hooks"]["PostToolUse"]  # outcomes would never reach the trail
    data["hooks"]["PreToolUse"][0]["matcher"] = "Bash"  # other tools would pass unjudged
    data["hooks"]["Stop"][0]["hooks"][0]["timeout"] = 5  # under the hook's own deadline
    settings.write_text(json.dumps(data, indent=2))
    mine.unlink()  # the policies are gone
    code, text = _doctor(project, settings, hook_env)
    assert code == 1
    assert "FAIL hook PostToolUse: not registered" in text
    assert "FAIL hook PreToolUse: matcher 'Bash'" in text
    assert "FAIL hook Stop: timeout 5 s is not above the hook's --deadline 10 s" in text
    assert "would NOT be governed" in text


def test_a_command_that_cannot_run_or_load_fails(project, policy, tmp_path, hook_env):
    settings = project / ".claude" / "settings.json"
    mine = tmp_path / "p.yaml"
    shutil.copy(policy, mine)
    install_hooks(settings, policy_files=[mine])
    mine.write_text("name: x\nversion: 1\npolicies: []\n")
    code, text = _doctor(project, settings, hook_env)
    # Pinned: the emptied file does not govern; the trusted set stays in force, and says so.
    assert code == 0 and "ok   policies: enforcing 14" in text
    assert "warn pins: the policy files changed since they were trusted" in text
    shutil.rmtree(project / ".charter" / "claude-code" / "trusted")
    code, text = _doctor(project, settings, hook_env)
    assert code == 1 and "FAIL policies" in text and "charter claude trust" in text

    install_hooks(settings, policy_files=[policy], python=str(tmp_path / "gone" / "python"))
    code, text = _doctor(project, settings, hook_env)
    assert code == 1 and "is not an executable here" in text


def test_disabled_hooks_fail(project, policy, hook_env):
    settings = project / ".claude" / "settings.json"
    install_hooks(settings, policy_files=[policy])
    data = json.loads(settings.read_text())
    data["disableAllHooks"] = True
    settings.write_text(json.dumps(data))
    code, text = _doctor(project, settings, hook_env)
    assert code == 1 and "disableAllHooks is true" in text


def test_doctor_json_lists_every_check_and_exits_like_the_text(project, policy, hook_env):
    settings = project / ".claude" / "settings.json"
    install_hooks(settings, policy_files=[policy])
    args = ["doctor", "--json", "--project-dir", str(project), "--settings-file", str(settings)]
    good = CliRunner().invoke(claude_cli, args, env=hook_env)
    report = json.loads(good.output)
    assert good.exit_code == 0 and report["ok"] is True
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["hook PreToolUse"]["status"] == "ok"
    data = json.loads(settings.read_text())
    del data["hooks"]["PostToolUse"]
    settings.write_text(json.dumps(data))
    bad = CliRunner().invoke(claude_cli, args, env=hook_env)
    report = json.loads(bad.output)
    assert bad.exit_code == 1 and report["ok"] is False
    failed = [c for c in report["checks"] if c["status"] == "FAIL"]
    assert [c["check"] for c in failed] == ["hook PostToolUse"]
    assert failed[0]["detail"].startswith("not registered")


def test_install_compiles_what_the_hook_could_not_and_doctor_says_so(
    project, policy, hook_env, tmp_path
):
    # The hook's environment forbids writing bytecode and reads it from an empty prefix: as
    # after an install that compiled nothing, in a container that sets the variable.
    env = {**hook_env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(tmp_path / "bc")}
    settings = project / ".claude" / "settings.json"
    install_hooks(settings, policy_files=[policy])
    code, text = _doctor(project, settings, env)
    assert code == 0, text
    assert "warn bytecode:" in text and "every tool call compiles them from source" in text

    charter = shutil.which("charter", path=os.path.dirname(sys.executable))
    done = subprocess.run(
        [
            *(charter, "claude", "install", "--project-dir", str(project)),
            *("--settings-file", str(settings), "--policy", str(policy)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "compiled the bytecode of" in done.stdout
    code, text = _doctor(project, settings, env)
    assert code == 0, text
    assert "bytecode" not in text
