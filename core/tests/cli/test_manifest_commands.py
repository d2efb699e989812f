"""`charter check`, `explain`, `schema`, `rules` and `settings` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import charter

BROKEN = """\
name: broken
version: 1
policies:
  - name: typo
    rule_type: field_matches
    severity: critical
    params: {field: input.command, patern: rm}
  - name: unknown
    rule_type: no_such_rule
    severity: high
"""


def test_check_passes_good_files_and_names_every_error(
    cli: Any, tmp_path: Path, policy_file: Path
) -> None:
    (tmp_path / "broken.yaml").write_text(BROKEN)
    good, bad = cli.all(
        ("check", str(policy_file), "baseline:coding-agent", "baseline:tool-agent"),
        ("check", str(policy_file), str(tmp_path / "broken.yaml"), str(tmp_path / "gone.yaml")),
    )
    assert good.code == 0, good
    assert "cli-test v1, 2 policies" in good.out and "coding-agent v1, 18 policies" in good.out
    assert bad.code == 1, bad
    assert "broken.yaml: policy 'typo' (rule field_matches): params.pattern: required" in bad.out
    assert "params.patern: unknown key" in bad.out
    assert (
        "policy 'unknown' (rule no_such_rule): rule_type: unknown rule_type 'no_such_rule'"
        in bad.out
    )
    assert "gone.yaml: cannot be read" in bad.out


def test_explain_exits_with_the_decision(cli: Any, tmp_path: Path, policy_file: Path) -> None:
    step = {"kind": "step.exec", "step_name": "shell", "input": {"command": "rm -rf /tmp/x"}}
    curl = dict(step, input={"command": "curl https://example.com"})
    args = ("explain", "--policy", str(policy_file), "-")
    blocked, warned, broken = cli.all(
        (args, {"stdin": json.dumps(step)}),
        (args, {"stdin": json.dumps(curl)}),
        (args, {"stdin": "[1, 2]"}),
    )
    assert blocked.code == 3 and "[VIOLATED] no-rm" in blocked.out
    assert warned.code == 0 and "WARN" in warned.out
    assert broken.code == 1 and "not a behavior" in broken.err


def test_schema_rules_and_settings_cover_the_registry(cli: Any) -> None:
    schema_run, rules_run, settings_run = cli.all(
        ("schema",), ("rules", "--markdown"), ("settings", "--markdown")
    )
    schema = json.loads(schema_run.out)
    names = {spec.name for spec in charter.registered_rules()}
    assert set(schema["$defs"]["policy"]["properties"]["rule_type"]["enum"]) == names
    rules = rules_run.out
    assert all(f"| `{name}` |" in rules for name in names)
    settings = settings_run.out
    assert all(
        f"| `{name}` | `{charter.Settings.env_var(name)}` |" in settings
        for name in charter.Settings.names()
    )
