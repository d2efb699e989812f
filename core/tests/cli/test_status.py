"""`charter status`: the settings from the environment, the policy load state, store health."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any


def test_without_a_policy_source_status_says_so_and_exits_1(cli: Any, tmp_path: Path) -> None:
    run = cli("status")
    assert run.code == 1, run
    assert "no policy source is configured" in run.out
    assert "no store yet" in run.out  # nothing was created
    assert not (tmp_path / ".charter").exists()


def test_status_reports_what_the_environment_configures(
    cli: Any, tmp_path: Path, policy_file: Path, demo_copy: Path
) -> None:
    env = {
        "CHARTER_POLICY_FILE": str(policy_file),
        "CHARTER_ENFORCEMENT": "monitor",
        "CHARTER_AUDIT_LOCATION": f"sqlite:///{demo_copy}",
        "CHARTER_AGENT_ID": "billing-bot",
    }
    run = cli("status", "--json", "--verify", env=env)
    assert run.code == 0, run
    report = json.loads(run.out)
    settings = {row["name"]: row for row in report["settings"]}
    assert (
        settings["enforcement"]["value"] == "monitor" and settings["enforcement"]["origin"] == "env"
    )
    assert settings["agent_id"]["value"] == "billing-bot"
    assert report["policies"]["state"] == "enforcing"
    assert report["policies"]["enforcement"] == "monitor"
    assert report["policies"]["applicable"] == ["no-rm", "curl-warns"]
    assert report["store"]["ok"] and report["store"]["verify"]["chains"] == 2


def test_status_exits_1_for_unloadable_policies_and_a_broken_trail(
    cli: Any, tmp_path: Path, demo_copy: Path
) -> None:
    (tmp_path / "bad.yaml").write_text("name: x\nversion: 1\npolicies: [{name: p}]\n")
    with sqlite3.connect(demo_copy) as db:
        db.execute("UPDATE steps SET body = replace(body, 'demo', 'Demo') WHERE seq = 2")
    run = cli(
        "status", "--policy", str(tmp_path / "bad.yaml"), "--store", str(demo_copy), "--verify"
    )
    assert run.code == 1, run
    assert "unavailable" in run.out
    assert "no policy set could be loaded" in run.out
    assert "the audit trail is broken" in run.out


def test_a_monitor_manifest_is_shown_as_monitor(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(
        "name: m\nversion: 1\nenforcement: monitor\npolicies:\n"
        "  - {name: p, rule_type: deny, severity: critical}\n"
    )
    run = cli("status", "--policy", str(tmp_path / "m.yaml"), "--json")
    assert run.code == 0, run
    assert json.loads(run.out)["policies"]["enforcement"] == "monitor"
