"""Settings: keyword beats environment beats default; every refusal names both spellings."""

from __future__ import annotations

from pathlib import Path

import pytest
from charter import Policy, Runner, Settings


def test_keyword_beats_environment_beats_default() -> None:
    env = {"CHARTER_FAIL_MODE": "open", "CHARTER_QUEUE_SIZE": "7", "CHARTER_POLICIES": "[]"}
    s = Settings.from_sources(env=env, fail_mode="closed")
    assert s.fail_mode == "closed" and s.origin("fail_mode") == "keyword"
    assert s.queue_size == 7 and s.origin("queue_size") == "env"
    assert s.policies == () and s.origin("policies") == "env"
    assert s.max_clock_skew_seconds == 300 and s.origin("max_clock_skew_seconds") == "default"
    assert s.audit_location == "sqlite:///.charter/audit.db"
    assert (s.audit_durability, s.payload_mode, s.enforcement) == ("buffered", "full", "enforce")
    assert (s.exit_flush_seconds, s.task_idle_seconds, s.sweep_interval_seconds) == (5, 3600, 60)
    assert s.queue_size == 7 and Settings.from_sources(env={}, policies=[]).queue_size == 10_000


def test_environment_is_read_from_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHARTER_POLICY_FILE", "a.yaml, b.yaml")
    monkeypatch.setenv("CHARTER_DECLARED_TOOLS", "search,  fetch")
    monkeypatch.setenv("CHARTER_ENVIRONMENT", "")
    s = Settings.from_sources()
    assert s.policy_file == ("a.yaml", "b.yaml")
    assert s.declared_tools == ("search", "fetch")
    assert s.environment is None  # an empty variable counts as unset


def test_lists_paths_and_policy_objects_are_accepted_as_keywords(tmp_path: Path) -> None:
    policy = Policy.from_dict({"name": "p", "rule_type": "deny", "severity": "low"})
    s = Settings.from_sources(
        env={}, policies=[policy], policy_file=[tmp_path / "x.yaml"], trusted_values=["a@b.c"]
    )
    assert s.policies == (policy,)
    assert s.policy_file == (str(tmp_path / "x.yaml"),)
    assert s.trusted_values == ("a@b.c",)


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("fail_mode", "ajar", "closed or open"),
        ("enforcement", "maybe", "enforce or monitor"),
        ("audit_durability", "eventually", "buffered or sync"),
        ("payload_mode", "zip", "full, metadata_only or sha256"),
        (
            "audit_location",
            "ftp://x",
            "sqlite:///PATH, jsonl:///PATH, postgresql://USER@HOST:PORT/DB, stdout or none",
        ),
        ("max_clock_skew_seconds", "-1", "a number of seconds above 0"),
        ("queue_size", "0", "a whole number of at least 1"),
        ("exit_flush_seconds", "soon", "a number of seconds at least 0"),
        ("task_idle_seconds", "nan", "a number of seconds above 0"),
        ("agent_id", "has space", "letters, digits"),
        ("policies", "{not json", "a list of policy mappings"),
        ("policy_file", " , ", "one or more YAML manifest paths"),
    ],
)
def test_refusals_name_both_spellings_and_what_is_accepted(
    name: str, value: str, accepted: str
) -> None:
    env_name = "CHARTER_" + name.upper()
    for kwargs, env in (({name: value}, {}), ({}, {env_name: value})):
        if name != "policies":
            kwargs.setdefault("policies", [])
        with pytest.raises(ValueError) as info:
            Settings.from_sources(env=env, **kwargs)
        message = str(info.value)
        assert f"{name}= / {env_name}" in message
        assert accepted in message


def test_unknown_keyword_is_refused_with_a_suggestion() -> None:
    with pytest.raises(ValueError, match=r"unknown setting fail_mod=; did you mean fail_mode="):
        Settings.from_sources(env={}, policies=[], fail_mod="open")


def test_no_policy_source_is_refused_naming_what_to_set() -> None:
    with pytest.raises(ValueError) as info:
        Settings.from_sources(env={})
    message = str(info.value)
    for spelling in (
        "policies= / CHARTER_POLICIES",
        "policy_file= / CHARTER_POLICY_FILE",
        "policy_cache_path= / CHARTER_POLICY_CACHE_PATH",
    ):
        assert spelling in message
    with pytest.raises(ValueError, match="no policy source"):
        Runner(audit_location="none")


def test_empty_inline_policies_are_a_source_that_answered_with_nothing() -> None:
    runner = Runner(Settings.from_sources(env={}, policies=[], audit_location="none"))
    try:
        status = runner.status()
        assert status["load_state"] == "none_configured"
        assert status["policies"] == {"step_execution": 0, "agent_registration": 0}
    finally:
        runner.close()


def test_describe_lists_every_setting_with_its_origin() -> None:
    s = Settings.from_sources(env={"CHARTER_AGENT_ID": "bot-1"}, policies=[], fail_mode="open")
    rows = {name: (value, origin) for name, value, origin in s.describe()}
    assert set(rows) == set(Settings.names())
    assert rows["fail_mode"] == ("open", "keyword")
    assert rows["agent_id"] == ("bot-1", "env")
    assert rows["policies"] == ("0 inline policies", "keyword")
    assert rows["queue_size"] == ("10000", "default")
    assert Settings.env_var("queue_size") == "CHARTER_QUEUE_SIZE"
