"""`charter test` files that grant capabilities: a file's grant, a test's own, and a grant
that cannot be used reported with its place, like every other problem of a test file."""

from __future__ import annotations

from pathlib import Path

import pytest
from charter._cli.policytest import TestFileError, load_test_file, run_case

POLICY = """\
name: caps
version: 1
policies:
  - {name: caps, rule_type: capabilities, severity: critical}
"""


def _file(tmp_path: Path, body: str) -> Path:
    (tmp_path / "caps.yaml").write_text(POLICY)
    path = tmp_path / "caps_test.yaml"
    path.write_text("policies: [caps.yaml]\n" + body)
    return path


def test_a_tests_grant_replaces_the_files_and_both_are_judged(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        """\
grant: {tools: {read_inbox: {}}}
tests:
  - name: file grant
    steps:
      - {tool: read_inbox, expect: allow}
      - {tool: send_email, input: {to: a@example.com}, expect: block}
  - name: own grant
    grant: {tools: {send_email: {}}}
    steps:
      - {tool: read_inbox, expect: {decision: block, reason: "it grants send_email"}}
      - {tool: send_email, input: {to: a@example.com}, expect: allow}
  - name: no grant at all would fail closed
    grant: {tools: {}}
    steps:
      - {tool: read_inbox, expect: {decision: block, reason: "it grants nothing"}}
""",
    )
    loaded = load_test_file(path)
    runs = [run_case(loaded.policies, case) for case in loaded.cases]
    assert [r.passed for r in runs] == [True, True, True], [r.steps for r in runs]


def test_an_invalid_grant_is_reported_with_where_it_is(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        """\
grant: {tools: {send_email: {args: {to: {source: web}}}}}
tests:
  - name: t
    grant: {tool: {}}
    steps: [{tool: read_inbox}]
""",
    )
    with pytest.raises(TestFileError) as caught:
        load_test_file(path)
    problems = caught.value.problems
    assert any(
        p.startswith("grant.tools.send_email.args.to.source") and "'web' is not a value source" in p
        for p in problems
    ), problems
    assert any(p.startswith("tests[0].grant.tool") and "unknown key" in p for p in problems)
