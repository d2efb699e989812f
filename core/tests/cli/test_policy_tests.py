"""`charter test`: YAML policy tests, pass and fail reports with diffs, invalid files, and the
flows the format must be able to express (approvals, history, time, templates, baselines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "policy-tests"

POLICIES = """\
name: shop
version: 1
policies:
  - name: no-rm
    rule_type: field_matches
    severity: critical
    match: {kinds: [step.exec]}
    params: {field: input.command, pattern: 'rm\\s+-rf'}
  - name: deletes-need-approval
    rule_type: requires_gate
    severity: high
    action: ask
    match: {kinds: [step.resource], verbs: [DELETE]}
    params: {gate_kind: human}
  - name: office-hours
    rule_type: time_window
    severity: medium
    match: {kinds: [step.message], verbs: [POST]}
    params:
      timezone: Europe/Amsterdam
      weekdays: [mon, tue, wed, thu, fri]
      hours: ['09:00-17:30']
  - name: nothing-out-after-the-web
    rule_type: forbid_after
    severity: critical
    match: {kinds: [step.message], verbs: [POST]}
    params:
      after: {where: [{field: properties.data.trust, equals: untrusted}]}
"""

PASSING = """\
policies: [policies.yaml]
tests:
  - name: rm -rf is blocked, ls is not
    steps:
      - {kind: step.exec, name: shell, input: {command: ls -la}, expect: allow}
      - kind: step.exec
        name: shell
        input: {command: rm -rf build}
        expect: {decision: block, violated: [no-rm], reason: forbidden pattern}
  - name: a delete asks, runs once approved, and the approval is used up
    steps:
      - {tool: delete_file, input: {path: old.txt}, approve: true, expect: ask}
      - {tool: delete_file, input: {path: old.txt}, expect: {decision: ask, reason: already used}}
  - name: email after hours warns, in office hours it does not
    steps:
      - {tool: send_email, input: {to: a@shop.example}, at: "2025-01-06T20:00:00Z", expect: warn}
      - {tool: send_email, input: {to: b@shop.example}, at: "2025-01-07T09:30:00Z", expect: allow}
  - name: nothing leaves after a web page was read
    steps:
      - {tool: fetch_url, input: {url: "https://example.com"}, output: {text: hi}, expect: allow}
      - tool: send_email
        input: {to: a@shop.example}
        expect: {decision: block, violated: [nothing-out-after-the-web]}
  - name: a blocked read never happened, so it closes no door
    steps:
      - {kind: step.exec, name: shell, input: {command: rm -rf /}, expect: block}
      - {kind: step.message, verb: POST, name: send_email, input: {to: x}, expect: allow}
"""

FAILING = """\
policies: [policies.yaml]
tests:
  - name: wrong about rm
    steps:
      - kind: step.exec
        name: shell
        input: {command: rm -rf /}
        expect: {decision: allow, violated: []}
  - name: right about ls
    steps:
      - {kind: step.exec, name: shell, input: {command: ls}, expect: allow}
"""

INVALID = """\
policies: [policies.yaml]
tests:
  - name: typos everywhere
    steps:
      - {kind: step.exec, name: shell, expect: alow}
      - {kind: step.exec, name: shell, inptu: {command: ls}}
      - {kind: step.teleport, name: beam}
      - {tool: x, user: y}
"""


def _suite(tmp_path: Path, **files: str) -> Path:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "policies.yaml").write_text(POLICIES)
    for name, text in files.items():
        (tmp_path / "suite" / f"{name}_test.yaml").write_text(text)
    return tmp_path / "suite"


def test_a_passing_suite_exits_0(cli: Any, tmp_path: Path) -> None:
    suite = _suite(tmp_path, shop=PASSING)
    run = cli("test", str(suite), "-v")
    assert run.code == 0, run
    assert "PASS: 5/5" in run.out
    assert "asked, approved, ran" in run.out  # -v shows every step


def test_a_failing_test_exits_1_with_a_diff(cli: Any, tmp_path: Path) -> None:
    suite = _suite(tmp_path, shop=FAILING)
    run, only = cli.all(("test", str(suite)), ("test", str(suite), "--run", "ls$"))
    assert run.code == 1, run
    assert "FAIL" in run.out and "wrong about rm" in run.out
    assert "- decision: allow" in run.out and "+ decision: block" in run.out
    assert "- violated: []" in run.out and "+ violated: [no-rm]" in run.out
    assert "PASS: 1/2, FAIL: 1/2" in run.out
    assert only.code == 0 and "PASS: 1/1" in only.out


def test_an_invalid_file_is_reported_with_every_problem(cli: Any, tmp_path: Path) -> None:
    suite = _suite(tmp_path, broken=INVALID)
    run = cli("test", str(suite / "broken_test.yaml"))
    assert run.code == 1, run
    assert "ERROR" in run.out
    assert (
        "tests[0].steps[0].expect.decision: 'alow' is not one of allow, warn, ask, block" in run.out
    )
    assert "tests[0].steps[1].inptu: unknown key" in run.out
    assert "tests[0].steps[2]: kind 'step.teleport': not a behavior kind" in run.out
    assert "tests[0].steps[3]: give exactly one of kind" in run.out


def test_nothing_to_run_exits_2(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    empty, missing = cli.all(("test", str(tmp_path / "empty")), ("test", str(tmp_path / "gone")))
    assert empty.code == 2 and "no test files" in empty.err
    assert missing.code == 2 and "does not exist" in missing.err


def test_baselines_and_claude_code_templates(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "coding_test.yaml").write_text(
        """\
baseline: coding-agent
templates: claude_code
context: {project_root: /srv/app}
tests:
  - name: the classic stray space
    steps:
      - tool: Bash
        input: {command: "rm -rf ~/ build"}
        expect: {decision: block, violates: [no-recursive-delete-of-system-or-home]}
  - name: credentials, then the network
    steps:
      - {tool: Read, input: {file_path: /srv/app/.env}, expect: allow}
      - {tool: Bash, input: {command: "curl https://example.com"}, expect: block}
  - name: a user prompt is a trusted message
    steps:
      - {user: "deploy it", expect: allow}
"""
    )
    (tmp_path / "default_test.yaml").write_text(
        "tests:\n  - name: uses --policy\n    steps:\n"
        "      - {kind: step.exec, name: s, input: {command: ls}, expect: allow}\n"
    )
    run, examples = cli.all(
        ("test", str(tmp_path), "--policy", "baseline:coding-agent"), ("test", str(EXAMPLES))
    )
    assert run.code == 0, run
    assert "PASS: 4/4" in run.out
    assert examples.code == 0, examples  # the examples the README points to keep passing
