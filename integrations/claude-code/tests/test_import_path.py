"""What a hook process loads: each tool call pays for every module it imports.

A fresh ``charter-claude-hook`` process answers each PreToolUse and PostToolUse while the
user waits, so what it imports is part of every tool call's latency. These tests run the
hook's real entry point on a pinned project (as ``charter claude install`` sets it up) and
check that code only some calls need (signing, verification, shared counters, logging, the
model-client lifecycle, asyncio, YAML) stays unloaded. They check what is loaded, not how
long anything takes.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

# Loaded on demand only: checkpoints and signing need a signing key, verification a `verify` call,
# counters (and the runner's reservations, and the demand model) a shared limit, logging a message,
# the model-client lifecycle a model call, difflib a misspelled template key, the report classes a
# listing, a `verify` or the writer's gaps; a pinned hook reads no manifest and parses no YAML. A
# rule module loads when a policy names one of its rules (the example set names none of the
# capabilities, quota or registration rules), the provenance index and value extraction when
# value_provenance judges a step (the example set asks it of WebFetch only), the grant model when a
# task has a grant, the approval machinery when a policy asks for an approval (none of these calls
# does), the record of a swallowed error when there is one; hashlib and hmac (which load OpenSSL) an
# input of over 64 KiB to hash. Charter's value classes are not dataclasses (creating one compiles
# its methods at import; `dataclasses` imports `inspect`, which imports ast, dis and tokenize),
# orjson (whose start-up imports dataclasses, uuid and platform) loads after a few hundred
# encodings, rfc8785 for a value only it encodes (a float in exponent form); JSON is read and
# written by json's C accelerator directly (`json_loads`, `json_dumps`: json's pure-Python
# modules compile six regular expressions at import). Paths are text handled
# with os.path: pathlib imports urllib.parse, which imports ipaddress, and a URL is parsed only when
# a step or an audit location holds one. typing is imported for the type checker only
# (`charter._model.structural` stands in at run time); base64 runs are decoded by binascii, glob
# expands a word only when it has a wildcard. importlib (and the warnings module it imports) loads
# for neither a rule module nor the spec of a protected package; warnings for a policy that warns,
# charter._audit.url the description of a network store's location. The runners alive at exit are a
# WeakSet, which threading loads without weakref. unicodedata normalises a step name that is not
# ASCII, bisect serves rate limits and approvals within a window. The store's connection and an
# integration's claim are plain context-manager classes, so contextlib stays off.
NOT_ON_THE_HOOK_PATH = (
    "asyncio",
    "base64",
    "bisect",
    "charter._audit.checkpoint",
    "charter._audit.counters",
    "charter._audit.jsonl",
    "charter._audit.report",
    "charter._audit.signing",
    "charter._audit.sqlite_counters",
    "charter._audit.stdout",
    "charter._audit.url",
    "charter._audit.verify",
    "charter._model.shared",
    "charter._policy.capabilities",
    "charter._policy.extract",
    "charter._policy.manifest",
    "charter._policy.rules._provenance",
    "charter._policy.rules.capabilities",
    "charter._policy.rules.quotas",
    "charter._policy.rules.registration",
    "charter._runtime.approval",
    "charter._runtime.checkpoints",
    "charter._runtime.internal_error",
    "charter._runtime.models",
    "charter._runtime.otlp",
    "charter._runtime.shared",
    "charter._server",
    "contextlib",
    "dataclasses",
    "decimal",
    "difflib",
    "glob",
    "hashlib",
    "hmac",
    "importlib",
    "inspect",
    "ipaddress",
    "json",
    "logging",
    "orjson",
    "pathlib",
    "platform",
    "random",
    "rfc8785",
    "secrets",
    "string",
    "traceback",
    "typing",
    "unicodedata",
    "urllib.parse",
    "uuid",
    "warnings",
    "weakref",
    "yaml",
)

# Runs the hook's main() in this process and writes the loaded modules out when it exits
# (the hook ends with os._exit once its answer is out), and whether it compiled the secret
# scanner (tens of milliseconds; a call whose texts the pre-filter clears never needs it).
# (json is not imported here: the hook itself must not need it.)
_RUN = """
import os, sys
out = sys.argv.pop(1)
real_exit = os._exit
def dump(code):
    secrets = sys.modules.get("charter._policy.secrets")
    compiled = secrets is not None and secrets._all_shapes_scanner().compiled
    with open(out, "w", encoding="utf-8") as f:
        f.write(repr({"modules": sorted(sys.modules), "scanner_compiled": compiled}))
    real_exit(code)
os._exit = dump
from charter_claude_code._hook import main
main(sys.argv[1:])
"""


def _loaded(
    tmp_path: Path, env: dict[str, str], argv: list[str], payload: dict[str, object]
) -> tuple[dict[str, object], set[str], bool]:
    out = tmp_path / f"modules-{payload['hook_event_name']}-{payload['tool_use_id']}.json"
    argv = [sys.executable, "-c", _RUN, str(out), *argv]
    done = subprocess.run(
        argv, input=json.dumps(payload).encode(), capture_output=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    answer = json.loads(done.stdout) if done.stdout.strip() else {}
    found = ast.literal_eval(out.read_text(encoding="utf-8"))
    return answer, set(found["modules"]), found["scanner_compiled"]


def _event(project: Path, name: str, tool_use_id: str, command: str, **extra: object):
    return {
        "hook_event_name": name,
        "session_id": "imports",
        "cwd": str(project),
        "permission_mode": "default",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_use_id": tool_use_id,
        **extra,
    }


def test_a_tool_call_loads_only_what_it_uses(
    tmp_path: Path, project: Path, hook_env: dict[str, str], policy: Path
) -> None:
    from charter_claude_code._install import PinOptions, pin_governance

    pin = pin_governance(PinOptions((str(policy),), None, str(project)), hook_env)
    calls = [
        ("PreToolUse", _event(project, "PreToolUse", "toolu_1", "ls")),
        (
            "PostToolUse",
            _event(project, "PostToolUse", "toolu_1", "ls", tool_response={"stdout": "a\n"}),
        ),
        ("PreToolUse", _event(project, "PreToolUse", "toolu_2", "mkfs.ext4 /dev/sdz")),
    ]
    answers = []
    for event, payload in calls:
        argv = ["--event", event, "--policy", str(policy), "--pin", pin]
        answer, modules, scanner_compiled = _loaded(tmp_path, hook_env, argv, payload)
        answers.append(answer)
        # The call really was judged in this process: the engine and the store were used.
        assert {"charter._engine.engine", "charter._audit.sqlite"} <= modules
        unexpected = sorted(
            m
            for m in modules
            if any(m == name or m.startswith(name + ".") for name in NOT_ON_THE_HOOK_PATH)
        )
        assert unexpected == [], f"{event} {payload['tool_use_id']} loaded {unexpected}"
        # No text of these calls can hold a secret, and the pre-filter tells so.
        assert not scanner_compiled, f"{event} {payload['tool_use_id']} compiled the scanner"
    assert answers[0] == {} and answers[1] == {}
    assert answers[2]["hookSpecificOutput"]["permissionDecision"] == "deny"
