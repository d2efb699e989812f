"""The charter command in scripts and CI: JSON from every command that prints results, JUnit
XML from `charter test`, exit codes that never collide with a usage error, `tasks` filters,
`show` as a tree with failed steps' errors, plain text when piped, and `check`'s warnings."""

from __future__ import annotations

import json
import sqlite3
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from charter import BlockedError, Governor, PolicyWarning

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
README = Path(__file__).resolve().parents[3] / "README.md"
BOXES = set("┏┃━│┡└╇")

FOOTGUNS = """\
name: footguns
version: 1
policies:
  - name: at-most-3-deploys
    rule_type: max_steps
    severity: high
    match: {kinds: [step.exec], step_names: [Bash]}
    params: {max: 3}
  - name: at-most-3-deploys-counted-right
    rule_type: max_steps
    severity: high
    match: {kinds: [step.exec], step_names: [Bash]}
    params: {max: 3, select: {kinds: [step.exec], step_names: [Bash]}}
  - name: exec-deletes
    rule_type: deny
    severity: high
    match: {kinds: [step.exec], verbs: [DELETE]}
  - name: reads-as-exec
    rule_type: deny
    severity: high
    match: {kinds: [step.exec], step_names: [Read]}
  - name: typo
    rule_type: deny
    severity: high
    match: {step_names: [Bsah]}
  - name: declared-tool
    rule_type: allow_only
    severity: high
    match: {step_names: [frobnicate_widget]}
    params: {tools: [frobnicate_widget]}
"""


def test_exit_codes_never_reuse_the_usage_error(
    cli: Any, tmp_path: Path, policy_file: Path
) -> None:
    asks = tmp_path / "asks.yaml"
    asks.write_text(
        "name: asks\nversion: 1\npolicies:\n  - name: deletes-ask\n    rule_type: deny\n"
        "    severity: high\n    action: ask\n"
        "    match: {kinds: [step.resource], verbs: [DELETE]}\n"
    )
    delete = {"kind": "step.resource", "verb": "DELETE", "step_name": "drop", "input": {}}
    rm = {"kind": "step.exec", "step_name": "shell", "input": {"command": "rm -rf /"}}
    ask, block, usage, ask_json = cli.all(
        (("explain", "--policy", str(asks), "-"), {"stdin": json.dumps(delete)}),
        (("explain", "--policy", str(policy_file), "-"), {"stdin": json.dumps(rm)}),
        ("explain", "--no-such-option"),
        (("explain", "--json", "--policy", str(asks), "-"), {"stdin": json.dumps(delete)}),
    )
    assert ask.code == 4 and "ASK" in ask.out.upper(), ask
    assert block.code == 3, block
    assert usage.code == 2 and "No such option" in usage.err
    verdict = json.loads(ask_json.out)
    assert ask_json.code == 4 and verdict["decision"] == "ask" and verdict["exit_code"] == 4
    assert [v["name"] for v in verdict["violations"]] == ["deletes-ask"]
    # The README's table says the same.
    text = README.read_text(encoding="utf-8")
    assert "| 4 | `explain`: the step would ask a person |" in text


def test_verify_and_check_print_json(
    cli: Any, demo_run: Any, demo_copy: Path, tmp_path: Path
) -> None:
    with sqlite3.connect(demo_copy) as db:
        db.execute("UPDATE steps SET body = replace(body, 'pytest -q', 'pytest -x')")
    good, bad = cli.all(
        ("verify", "--json", str(demo_run.store)), ("verify", "--json", str(demo_copy))
    )
    ok = json.loads(good.out)
    assert good.code == 0 and ok["ok"] and ok["chains"] == 2 and ok["records"] == 22
    broken = json.loads(bad.out)
    assert bad.code == 1 and not broken["ok"] and broken["breaks"][0]["reason"] == "edited"
    assert broken["breaks"][0]["agent_id"] == "demo-coder"

    manifest = tmp_path / "footguns.yaml"
    manifest.write_text(FOOTGUNS)
    broken_manifest = tmp_path / "broken.yaml"
    broken_manifest.write_text("name: b\nversion: 1\npolicies: [{name: x, rule_type: nope}]\n")
    checked = cli("check", "--json", str(manifest), str(broken_manifest))
    assert checked.code == 1
    files = {Path(f["source"]).name: f for f in json.loads(checked.out)["files"]}
    assert files["broken.yaml"]["valid"] is False and files["broken.yaml"]["errors"]
    assert files["footguns.yaml"]["valid"] and files["footguns.yaml"]["policies"] == 6
    assert len(files["footguns.yaml"]["warnings"]) == 4


def test_check_warns_about_policies_that_do_not_do_what_they_seem(cli: Any, tmp_path: Path) -> None:
    manifest = tmp_path / "footguns.yaml"
    manifest.write_text(FOOTGUNS)
    run, strict, shipped = cli.all(
        ("check", str(manifest)),
        ("check", "--strict", str(manifest)),
        ("check", "baseline:coding-agent", "baseline:tool-agent", str(EXAMPLES / "policies.yaml")),
    )
    assert run.code == 0, run
    lines = [ln for ln in run.out.splitlines() if "warning" in ln]
    assert len(lines) == 4, run.out
    counting, verbs, kinds, typo = lines
    assert "'at-most-3-deploys' (max_steps)" in counting and "params.select" in counting
    assert "counts every step of the task" in counting
    assert "'exec-deletes' can never match" in verbs and "DELETE" in verbs
    assert "'reads-as-exec' can never match" in kinds and "step.resource" in kinds
    assert "'typo'" in typo and "'Bsah'" in typo and "no template, tool or manifest" in typo
    assert "counted-right" not in run.out and "declared-tool" not in run.out
    assert strict.code == 1
    # The shipped manifests are free of footguns: no false alarm.
    assert shipped.code == 0 and "warning" not in shipped.out, shipped.out


def test_policy_tests_as_json_and_junit(cli: Any, tmp_path: Path) -> None:
    failing = tmp_path / "fails_test.yaml"
    failing.write_text(
        "baseline: coding-agent\ntests:\n  - name: rm is fine (it is not)\n    steps:\n"
        "      - kind: step.exec\n        name: Bash\n        input: {command: rm -rf /}\n"
        "        expect: allow\n"
    )
    broken = tmp_path / "broken_test.yaml"
    broken.write_text("tests: 3\n")
    junit = tmp_path / "out" / "junit.xml"
    junit.parent.mkdir()
    passing, mixed = cli.all(
        ("test", "--json", str(EXAMPLES / "policy-tests")),
        ("test", "--junit", str(junit), str(tmp_path), str(EXAMPLES / "policy-tests")),
    )
    result = json.loads(passing.out)
    assert passing.code == 0 and result["ok"] and result["failed"] == 0
    assert result["passed"] == sum(len(f["tests"]) for f in result["files"]) > 5
    assert mixed.code == 1 and "FAIL" in mixed.out
    suites = ET.parse(junit).getroot()
    assert suites.tag == "testsuites"
    assert int(suites.get("failures") or 0) == 1 and int(suites.get("errors") or 0) == 1
    by_file = {Path(s.get("name") or "").name: s for s in suites}
    failed = by_file["fails_test.yaml"].find("testcase")
    assert failed is not None and failed.get("name") == "rm is fine (it is not)"
    failure = failed.find("failure")
    assert failure is not None and "decision: want allow, got block" in (failure.text or "")
    load = by_file["broken_test.yaml"].find("testcase/error")
    assert load is not None and "broken_test.yaml" in (load.get("message") or "")
    assert int(by_file["coding-agent_test.yaml"].get("failures") or 0) == 0


def test_rules_settings_and_baselines_print_json(cli: Any) -> None:
    rules, settings, listed, shown = cli.all(
        ("rules", "--json"),
        ("settings", "--json"),
        ("baseline", "list", "--json"),
        ("baseline", "show", "coding-agent", "--json"),
    )
    names = {r["name"] for r in json.loads(rules.out)}
    assert {"max_steps", "field_matches", "requires_gate"} <= names
    by_name = {s["name"]: s for s in json.loads(settings.out)}
    assert by_name["audit_location"]["environment"] == "CHARTER_AUDIT_LOCATION"
    assert {b["name"] for b in json.loads(listed.out)} == {"coding-agent", "tool-agent"}
    baseline = json.loads(shown.out)
    assert baseline["name"] == "coding-agent" and len(baseline["policies"]) >= 10
    assert all("rule_type" in p for p in baseline["policies"])


def test_piped_output_is_plain_aligned_text(cli: Any, demo_run: Any) -> None:
    store = str(demo_run.store)
    runs = cli.all(
        ("tasks", "--store", store),
        ("replay", "--policy", "baseline:tool-agent", "--all", "--store", store),
        ("status", "--policy", "baseline:tool-agent", "--store", store),
        ("rules",),
        ("settings",),
        ("baseline", "list"),
        ("baseline", "show", "tool-agent"),
    )
    for run in runs:
        assert run.code == 0, run
        assert not BOXES & set(run.out), run.out[:400]
    header, *rows = runs[0].out.splitlines()[1:4]
    assert header.split() == [
        "task",
        "agent",
        "records",
        "started",
        "(UTC)",
        "last",
        "(UTC)",
        "state",
    ]
    # Aligned: every row's agent column starts where the header's does.
    assert all(row.index("demo-") == header.index("agent") for row in rows)


def test_tasks_filters(cli: Any, demo_run: Any) -> None:
    store = str(demo_run.store)

    def agents(*args: str) -> list[str]:
        run = cli("tasks", "--store", store, "--json", *args)
        assert run.code == 0, run
        return [json.loads(line)["agent_id"] for line in run.out.splitlines()]

    assert agents() == ["demo-coder", "demo-assistant"]
    assert agents("--agent", "demo-coder") == ["demo-coder"]
    assert agents("--state", "closed") == ["demo-coder", "demo-assistant"]
    assert agents("--state", "open") == []
    assert agents("--decision", "warn") == ["demo-coder"]
    assert agents("--decision", "block") == ["demo-coder", "demo-assistant"]
    assert agents("--decision", "failed") == []
    assert agents("--since", "1d") == ["demo-coder", "demo-assistant"]
    assert agents("--since", "2999-01-01") == []
    assert agents("--until", "2000-01-01T00:00Z") == []
    bad = cli("tasks", "--store", store, "--until", "soon")
    assert bad.code == 2 and "--until 'soon'" in bad.err
    none = cli("tasks", "--store", store, "--state", "open")
    assert none.code == 0 and "no tasks" in none.out and "match" in none.out


@pytest.fixture
def nested_store(tmp_path: Path) -> Path:
    path = tmp_path / "nested.db"
    warnings.simplefilter("ignore", PolicyWarning)
    gov = Governor(
        policies=[
            {
                "name": "no-rm",
                "rule_type": "field_matches",
                "severity": "critical",
                "match": {"kinds": ["step.exec"]},
                "params": {"field": "input.command", "pattern": "rm -rf"},
            }
        ],
        audit_location=f"sqlite:///{path}",
        audit_durability="sync",
    )
    crew = {"name": "crewai", "crew": "research crew", "task": "write the summary"}
    with gov.task("nested", name="research"):
        with gov.step("step.exec", name="search", input={"q": "x"}, properties={"framework": crew}):
            pass
        with (
            pytest.raises(RuntimeError),
            gov.step(
                "step.exec", name="deploy", input={"to": "prod"}, properties={"framework": crew}
            ),
        ):
            raise RuntimeError("the deploy target refused the upload")
        with pytest.raises(BlockedError):
            gov.begin_step("step.exec", name="shell", input={"command": "rm -rf /"})
    gov.close()
    return path


def test_show_nests_steps_and_prints_failed_steps_errors(cli: Any, nested_store: Path) -> None:
    run = cli("show", "nested", "--store", str(nested_store))
    assert run.code == 0, run
    lines = run.out.splitlines()
    crew = next(i for i, ln in enumerate(lines) if "▸ crew: research crew" in ln)
    task = next(i for i, ln in enumerate(lines) if "▸ crew task: write the summary" in ln)
    search = next(i for i, ln in enumerate(lines) if " search " in ln)
    shell = next(i for i, ln in enumerate(lines) if " shell " in ln)
    assert crew < task < search < shell
    step_col = lines[1].index("step")
    # Inside the crew task the step is indented two levels; outside it is not.
    assert lines[search][step_col:].startswith("    search")
    assert lines[shell][step_col:].startswith("shell")
    deploy = next(ln for ln in lines if " deploy " in ln)
    assert (
        "failed" in deploy and "error: RuntimeError: the deploy target refused the upload" in deploy
    )
    assert "blocked by policy 'no-rm'" in lines[shell]


def test_shell_completion_completes_commands_and_choices(cli: Any) -> None:
    script, commands, states = cli.all(
        (("--help",), {"env": {"_CHARTER_COMPLETE": "bash_source"}}),
        (
            (),
            {
                "env": {
                    "_CHARTER_COMPLETE": "bash_complete",
                    "COMP_WORDS": "charter rep",
                    "COMP_CWORD": "1",
                }
            },
        ),
        (
            (),
            {
                "env": {
                    "_CHARTER_COMPLETE": "bash_complete",
                    "COMP_WORDS": "charter tasks --state ",
                    "COMP_CWORD": "3",
                }
            },
        ),
    )
    assert "complete -o nosort -F" in script.out and "_charter_completion" in script.out
    assert {"plain,replay", "plain,report"} <= set(commands.out.split())
    assert set(states.out.split()) == {"plain,open", "plain,closed"}


def test_report_prints_json(cli: Any, demo_run: Any) -> None:
    run = cli("report", "--json", "--store", str(demo_run.store), "-o", "r.html")
    assert run.code == 0, run
    written = json.loads(run.out)
    assert written["tasks"] == 2 and written["records"] == 22 and written["verified"] is True
    assert written["url"].startswith("file://") and written["bytes"] > 10_000
