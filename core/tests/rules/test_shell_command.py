"""`shell_command`: a command line judged by what it runs, through a real PolicyEngine."""

from __future__ import annotations

import json
from typing import Any

import pytest
from charter import Behavior, EvalContext, PolicyEngine
from charter._policy.manifest import parse_manifest
from charter._policy.rules.shell import classify


def judge(params: dict[str, Any], command: str, root: str | None = "/srv/shop") -> str | None:
    """The violation detail of one shell_command policy on `command`, or None."""
    engine = PolicyEngine(
        [{"name": "p", "rule_type": "shell_command", "severity": "critical", "params": params}]
    )
    b = Behavior(
        agent_id="a", task_id="t", kind="step.exec", step_name="Bash", action_id="x",
        input={"command": command},
    )  # fmt: skip
    result = engine.evaluate(b, EvalContext(agent_id="a", task_id="t", project_root=root))
    return result.violations[0].details if result.violations else None


@pytest.mark.parametrize(
    ("target", "cwd", "expected"),
    [
        ("/", None, "system"),
        ("/usr", None, "system"),
        ("/*", None, "system"),
        ("~", None, "home"),
        ("~/", None, "home"),
        ("/home/alice", None, "home"),
        ("/Users/alice/", None, "home"),
        (".", None, "project"),
        ("..", None, "system"),  # /srv, a top-level directory, is the worse class
        ("..", "src", "project"),
        ("/srv/shop", None, "project"),
        ("/srv", None, "system"),
        ("*", None, "project"),
        ("build", None, None),
        ("build/*", None, None),
        ("/srv/shop/dist", None, None),
        ("./**", None, None),
        ("/**", None, "system"),
        ("~/**", None, "home"),
        ("usr", "/", "system"),
        (".", "~", "home"),
        ("Documents/..", "~", "home"),
        ("../sibling", None, "outside"),
        ("/srv/other/build", None, "outside"),
        ("~/projects/old", None, "outside"),
        ("$X", None, "unknown"),
        ("build", "?", "unknown"),
    ],
)
def test_targets_fall_in_classes(target: str, cwd: str | None, expected: str | None) -> None:
    assert classify(target, cwd, "/srv/shop", None) == expected


def test_home_resolves_tilde_when_given() -> None:
    assert classify("~/shop/build", None, "/home/dev/shop", "/home/dev") is None
    assert classify("~", None, "/home/dev/shop", "/home/dev") == "home"
    assert classify("~/other", None, "/home/dev/shop", "/home/dev") == "outside"


def test_without_a_project_root_relative_targets_below_the_start_are_inside() -> None:
    assert classify("build", None, None, None) is None
    assert classify(".", None, None, None) == "project"
    assert classify("../x", None, None, None) == "project"


def test_deletes_name_the_command_and_the_class() -> None:
    detail = judge({"deletes": ["system", "home"]}, "cd / && sudo r''m -rf usr")
    assert detail is not None and detail.startswith("rm -r of 'usr' reaches the file system root")
    assert (
        judge({"deletes": ["system", "home"]}, "rm -rf build && git commit -m 'rm -rf /'") is None
    )
    assert "unknown" not in (judge({"deletes": ["unknown"]}, "rm -rf build") or "")
    assert judge({"deletes": ["unknown"]}, 'rm -rf "$T"') is not None


def test_flags_network_and_credential_reads() -> None:
    assert "could not be parsed" in (judge({"flags": ["unparseable"]}, "echo 'x") or "")
    assert judge({"flags": ["unparseable"]}, "echo x") is None
    assert "network (curl)" in (judge({"network": True}, "ls && curl https://x.example") or "")
    assert judge({"network": True}, "git status") is None
    detail = judge({"credential_reads": True}, "cat $HOME/.a''ws/cred*")
    assert detail == "the command reads a credential path ('~/.aws/cred*')"


def test_disk_permissions_force_push_and_programs() -> None:
    assert judge({"disk": True}, "sudo mkfs.ext4 /dev/sdb1") is not None
    assert judge({"disk": True}, "dd if=/dev/zero of=./disk.img") is None
    assert judge({"permissions": ["system"]}, "chmod -R 777 /") is not None
    assert judge({"permissions": ["system"]}, "chmod -R 755 build") is None
    protected = {"force_push": ["main", "release/*"]}
    assert judge(protected, "git push --force origin main") is not None
    assert judge(protected, "git push origin +HEAD:release/2.1") is not None
    assert judge(protected, "git push --force origin feature/main-menu") is None
    assert judge(protected, "git push origin main") is None
    assert judge({"force_push": ["*"]}, "git push -f") is not None
    pushes = {"programs": [{"names": ["git"], "arg_pattern": "^push$"}]}
    assert (
        judge(pushes, "/usr/bin/git push")
        == "the command runs git with an argument matching '^push$'"
    )
    assert judge(pushes, "git commit -m 'push it'") is None


def test_the_commands_of_input_and_properties_are_both_judged() -> None:
    engine = PolicyEngine(
        [{"name": "p", "rule_type": "shell_command", "severity": "critical",
          "params": {"deletes": ["system"]}}]
    )  # fmt: skip
    b = Behavior(
        agent_id="a", task_id="t", kind="step.exec", step_name="run", action_id="x",
        input={"cmd": "x"}, properties={"exec": {"command": "rm -rf /"}},
    )  # fmt: skip
    assert engine.evaluate(b, EvalContext(agent_id="a", task_id="t")).violations


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({}, "give at least one of"),
        ({"flags": ["nope"]}, "nope"),
        ({"deletes": ["everywhere"]}, "everywhere"),
        ({"home": "relative"}, "absolute"),
        ({"programs": [{"names": ["git"], "arg_pattern": "(?=x)"}]}, "RE2"),
    ],
)
def test_bad_params_are_refused_when_the_manifest_loads(params: dict[str, Any], why: str) -> None:
    manifest = {
        "name": "m",
        "version": 1,
        "policies": [
            {"name": "p", "rule_type": "shell_command", "severity": "high", "params": params}
        ],
    }
    result = parse_manifest(json.dumps(manifest))
    assert not result.valid
    assert why in " ".join(result.error_lines())
