"""What the hook's interpreter runs before Charter does is protected like Charter's own code.

A ``.pth`` file in site-packages runs in every Python process at start-up, and a console
script's folder is searched before the standard library: a file the agent wrote there would
run inside the hook and could answer "allow" to everything. Each call here is asked of a real
hook process (PreToolUse only: nothing is executed).
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest
from charter_claude_code._protect import Protected

SITE = sysconfig.get_path("purelib")
# The folder of the console script the tests run (as conftest finds it).
SCRIPTS = str(
    Path(shutil.which("charter-claude-hook", path=str(Path(sys.executable).parent))).parent
)


def ask(claude, name: str, tool_input: dict[str, object]):
    claude.calls += 1
    return claude.event(
        "PreToolUse", tool_name=name, tool_input=tool_input, tool_use_id=f"toolu_{claude.calls}"
    )


@pytest.mark.parametrize(
    "command",
    [
        f"echo 'import os' > {SITE}/zz_charter_probe.pth",
        f"cp /dev/null {SITE}/sitecustomize.py",
        f"mkdir -p {SCRIPTS}/charter_claude_code",
        f"echo 'x = 1' > {SCRIPTS}/json.py",
        f"cp /dev/null {SCRIPTS}/re2.cpython-311-x86_64-linux-gnu.so",
    ],
    ids=["pth-file", "sitecustomize", "package-beside-the-script", "stdlib-name", "extension"],
)
def test_a_file_the_hook_would_import_is_refused(claude, command):
    answer = ask(claude, "Bash", {"command": command})
    assert answer.permission == "deny", answer.json()
    assert "charter-self-protection" in answer.reason


def test_the_bytecode_prefix_is_refused(claude, pycache):
    # With PYTHONPYCACHEPREFIX set, the hook reads every module's bytecode from there, and a
    # .pyc whose header carries its source's mtime and size runs without the source being
    # read: one written there would be the hook's code on its next call.
    import charter_claude_code

    package = Path(charter_claude_code.__file__).resolve().parent
    forged = f"{pycache}{package}/__init__.cpython-311.pyc"
    answer = ask(claude, "Bash", {"command": f"cp /tmp/evil.pyc {forged}"})
    assert answer.permission == "deny", answer.json()
    assert "charter-self-protection" in answer.reason
    answer = ask(claude, "Write", {"file_path": forged, "content": "x"})
    assert answer.permission == "deny", answer.json()
    answer = ask(claude, "Bash", {"command": f"rm -rf {pycache}"})
    assert answer.permission == "deny", answer.json()


def _mapped_libraries() -> list[str]:
    """The shared libraries mapped into this process, which runs the hook's interpreter."""
    with open("/proc/self/maps", encoding="utf-8") as f:
        fields = [line.split(None, 5) for line in f]
    return sorted({os.path.realpath(x[5].strip()) for x in fields if len(x) == 6 and ".so" in x[5]})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="read from /proc/self/maps")
def test_the_native_code_the_interpreter_runs_is_refused(claude):
    # libpython (pyenv builds the interpreter shared, in a folder its user owns) and the C
    # libraries are machine code inside every hook process; ld.so.preload adds a library to
    # every process before any of its code runs.
    libraries = _mapped_libraries()
    libc = next(p for p in libraries if os.path.basename(p).startswith("libc.so"))
    targets = [libc, "/etc/ld.so.preload"]
    targets += [p for p in libraries if os.path.basename(p).startswith("libpython")]
    for target in targets:
        answer = ask(claude, "Bash", {"command": f"cp /tmp/build/out.so {target}"})
        assert answer.permission == "deny", (target, answer.json())
        assert "charter-self-protection" in answer.reason
    answer = ask(claude, "Write", {"file_path": "/etc/ld.so.conf.d/zz.conf", "content": "/tmp"})
    assert answer.permission == "deny", answer.json()


def test_the_hook_programs_named_from_path_are_refused(claude):
    # A portable install names the hook `charter-claude-hook` and Claude Code finds it on
    # PATH; a `--hook-command` may start with `uv`. One of those names written into a folder
    # searched earlier (~/bin, ~/.local/bin, a project's node_modules/.bin) is the next hook.
    early = claude.project / "node_modules" / ".bin"
    early.mkdir(parents=True)
    claude.env = {**claude.env, "PATH": os.pathsep.join([str(early), claude.env["PATH"]])}
    for name in ("charter-claude-hook", "charter-claude", "uv"):
        answer = ask(claude, "Write", {"file_path": str(early / name), "content": "#!/bin/sh"})
        assert answer.permission == "deny", (name, answer.json())
        assert "charter-self-protection" in answer.reason
        answer = ask(claude, "Bash", {"command": f"ln -sf /tmp/fake {early}/{name}"})
        assert answer.permission == "deny", (name, answer.json())
        assert "charter-self-protection" in answer.reason
    # Another program in the same folder is no way into the hook.
    answer = ask(claude, "Write", {"file_path": str(early / "my-tool"), "content": "x"})
    assert answer.json() == {}


@pytest.mark.parametrize(
    "command",
    [
        f"mv {SCRIPTS} /tmp/scripts && ln -s /tmp/evil {SCRIPTS}",
        f"rm -rf {SCRIPTS}",
        f"mv {Path(SCRIPTS).parent} /tmp/venv",
        f"cp -rT /tmp/evil {Path(SCRIPTS).parent}",
        "cd sub && rm -rf ..",
        'mv "$CLAUDE_PROJECT_DIR" /tmp/elsewhere',
        "rm -rf ~",
    ],
    ids=[
        "replace-the-scripts-folder",
        "remove-it",
        "move-the-venv",
        "copy-over-the-venv",
        "remove-the-project",
        "move-the-project",
        "remove-home",
    ],
)
def test_a_folder_holding_what_the_hook_runs_is_refused(claude, command):
    # The folder is not protected itself, but moved away and replaced, everything the hook
    # runs from it is the agent's: a protected path is only as safe as the folders above it.
    (claude.project / "sub").mkdir()
    answer = ask(claude, "Bash", {"command": command})
    assert answer.permission == "deny", answer.json()
    assert "charter-self-protection" in answer.reason


@pytest.mark.parametrize(
    "command",
    [
        "mkdir -p build && rm -rf build",
        "touch notes.txt && mv notes.txt sub/ && mv sub/notes.txt .",
        "ls .. && ls ~ && du -sh .",
        f"ls {Path(SCRIPTS).parent} && du -sh {SCRIPTS}",
        "find . -name __pycache__ -exec rm -rf {} +",
    ],
    ids=[
        "a-build-folder",
        "move-into-the-project",
        "look-around",
        "look-at-the-venv",
        "clean-bytecode",
    ],
)
def test_a_project_stays_workable(claude, command):
    # (The example policy asks before a recursive delete: that is its rule, not this one.)
    (claude.project / "sub").mkdir()
    answer = ask(claude, "Bash", {"command": command})
    assert answer.permission != "deny", answer.json()
    assert "charter-self-protection" not in (answer.reason or ""), answer.json()


def test_other_files_beside_the_console_script_stay_writable(claude, tmp_path):
    # Not a module name: nothing imports it, so it is no way into the hook.
    answer = ask(claude, "Bash", {"command": f"cp {tmp_path}/tool {SCRIPTS}/my-tool"})
    assert answer.json() == {}


def test_shadowing_covers_every_form_of_a_module_and_nothing_else(tmp_path):
    folder = str(tmp_path)
    protected = Protected(
        frozenset(), frozenset(), frozenset(), shadowing=((folder + "/", frozenset({"json"})),)
    )
    for entry in (
        "json",
        "json.py",
        "json.pyc",
        "json/__init__.py",
        "json.abi3.so",
        "__pycache__/json.cpython-311.pyc",
    ):
        assert protected.covers(f"{folder}/{entry}"), entry
    for entry in ("jsonl.txt", "my-json", "data/json.py", "json-tool", "__pycache__/x.pyc"):
        assert not protected.covers(f"{folder}/{entry}"), entry
    assert not protected.covers(folder + "x/json.py")  # a sibling folder
