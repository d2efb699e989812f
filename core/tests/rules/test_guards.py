"""time_window, path_within_root and no_secrets: guards judged on the step alone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from charter import Behavior, EvalContext, PolicyEngine, PolicyLoadError, PolicyResult

CTX = EvalContext(agent_id="agent", task_id="t1", project_root="/srv/app")


def judge(
    rule_type: str, params: dict[str, Any], b: Behavior, ctx: EvalContext = CTX
) -> PolicyResult:
    engine = PolicyEngine(
        [{"name": "p", "rule_type": rule_type, "severity": "critical", "params": params}]
    )
    (result,) = engine.evaluate(b, ctx).results
    assert not result.violated or result.details
    return result


def step(at: datetime | None = None, **kw: Any) -> Behavior:
    if at is not None:
        kw["timestamp"] = at
    return Behavior(agent_id="agent", task_id="t1", kind="step.exec", step_name="tool", **kw)


def refused(rule_type: str, params: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyLoadError, match=message):
        PolicyEngine([{"name": "p", "rule_type": rule_type, "severity": "high", "params": params}])


# -- time_window -------------------------------------------------------------------------------

OFFICE = {
    "timezone": "Europe/Amsterdam",
    "weekdays": ["mon", "tue", "wed", "thu", "fri"],
    "hours": ["09:00-17:30"],
}


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_time_window_inside_office_hours() -> None:
    # 2024-06-03 is a Monday; Amsterdam is UTC+2 in June.
    assert not judge("time_window", OFFICE, step(utc(2024, 6, 3, 7, 0))).violated
    assert not judge("time_window", OFFICE, step(utc(2024, 6, 3, 15, 29, 59, 999999))).violated


def test_time_window_end_is_exclusive_and_start_inclusive() -> None:
    r = judge("time_window", OFFICE, step(utc(2024, 6, 3, 15, 30)))
    assert r.violated
    assert r.details == (
        "Mon 2024-06-03 17:30 Europe/Amsterdam is outside the allowed hours (09:00-17:30)"
    )
    assert judge("time_window", OFFICE, step(utc(2024, 6, 3, 6, 59, 59))).violated


def test_time_window_weekday() -> None:
    r = judge("time_window", OFFICE, step(utc(2024, 6, 1, 10, 0)))  # Saturday
    assert r.violated
    assert r.details == (
        "Sat 2024-06-01 12:00 Europe/Amsterdam is not on an allowed weekday "
        "(mon, tue, wed, thu, fri)"
    )


def test_time_window_follows_daylight_saving_time() -> None:
    # 08:30 UTC is 09:30 in Amsterdam in winter and 10:30 in summer; 07:30 UTC is 08:30 in
    # winter (closed) but 09:30 in summer (open).
    assert judge("time_window", OFFICE, step(utc(2024, 1, 8, 7, 30))).violated
    assert not judge("time_window", OFFICE, step(utc(2024, 7, 8, 7, 30))).violated


def test_time_window_crossing_midnight_and_several_ranges() -> None:
    night = {"timezone": "UTC", "hours": ["22:00-06:00", "12:00-13:00"]}
    for hour, ok in [(23, True), (0, True), (5, True), (6, False), (21, False), (12, True)]:
        r = judge("time_window", night, step(utc(2024, 6, 3, hour, 0)))
        assert r.violated is not ok, hour
    assert (
        "(22:00-06:00, 12:00-13:00)"
        in judge("time_window", night, step(utc(2024, 6, 3, 7))).details
    )


def test_time_window_whole_day_and_weekdays_only() -> None:
    params = {"timezone": "Asia/Tokyo", "weekdays": ["sat", "sun"], "hours": ["00:00-24:00"]}
    # Friday 16:00 UTC is Saturday 01:00 in Tokyo.
    assert not judge("time_window", params, step(utc(2024, 6, 7, 16, 0))).violated
    assert judge("time_window", params, step(utc(2024, 6, 7, 14, 0))).violated
    weekend = {"timezone": "UTC", "weekdays": ["sat", "sun"]}
    assert not judge("time_window", weekend, step(utc(2024, 6, 2, 23, 59))).violated


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"timezone": "Mars/Olympus", "hours": ["09:00-17:00"]}, "IANA time zone"),
        ({"timezone": "UTC"}, "weekdays, hours or both"),
        ({"timezone": "UTC", "hours": ["9:00-17:00"]}, "HH:MM-HH:MM"),
        ({"timezone": "UTC", "hours": ["09:00-24:30"]}, "HH:MM-HH:MM|latest end"),
        ({"timezone": "UTC", "hours": ["09:00-09:00"]}, "empty range"),
        ({"timezone": "UTC", "weekdays": ["monday"]}, "is not one of"),
    ],
)
def test_time_window_refuses_bad_params(params: dict[str, Any], message: str) -> None:
    refused("time_window", params, message)


# -- path_within_root --------------------------------------------------------------------------


def path_result(path: Any, field: str = "input", **kw: Any) -> PolicyResult:
    params = kw.pop("params", {})
    ctx = kw.pop("ctx", CTX)
    b = step(**{field: {"path": path}} if field == "input" else {field: {"target": path}})
    return judge("path_within_root", params, b, ctx)


@pytest.mark.parametrize(
    "path",
    [
        "/srv/app",
        "/srv/app/src/app.py",
        "src/app.py",
        "./src/../README.md",
        "/srv/app//src///x",
        "//srv/app/x",
        "file:///srv/app/x",
    ],
)
def test_paths_inside_the_root(path: str) -> None:
    assert not path_result(path).violated


@pytest.mark.parametrize(
    ("path", "resolved"),
    [
        ("/etc/passwd", "/etc/passwd"),
        ("/srv/app/../etc/passwd", "/srv/etc/passwd"),
        ("../app2/secret", "/srv/app2/secret"),
        ("/srv/app2/x", "/srv/app2/x"),  # a sibling whose name starts with the root's
        ("/srv/appx", "/srv/appx"),
        ("src/../../../../etc", "/etc"),
        ("//etc/passwd", "/etc/passwd"),
        ("file:///etc/passwd", "/etc/passwd"),
    ],
)
def test_paths_outside_the_root(path: str, resolved: str) -> None:
    r = path_result(path)
    assert r.violated
    assert r.details == (
        f"input.path {path!r} resolves to {resolved!r}, outside the project root (/srv/app)"
    )


def test_home_expansion() -> None:
    r = path_result("~/.ssh/id_rsa")
    assert r.violated and "starts with '~' and the policy sets no `home`" in r.details
    assert not path_result("~/src/x", params={"home": "/srv/app"}).violated
    r = path_result("~/.ssh/id_rsa", params={"home": "/home/me"})
    assert r.violated and "'/home/me/.ssh/id_rsa'" in r.details
    r = path_result("~root/x", params={"home": "/srv/app"})
    assert r.violated and "another user's home directory" in r.details


def test_no_project_root_known() -> None:
    ctx = EvalContext(agent_id="agent", task_id="t1")
    r = path_result("src/app.py", ctx=ctx)
    assert r.violated and "is relative and no project root is known" in r.details
    r = path_result("/srv/app/x", ctx=ctx)
    assert r.violated and "no project root is known and the policy lists no roots" in r.details
    assert not path_result("/tmp/scratch/x", ctx=ctx, params={"roots": ["/tmp/scratch"]}).violated
    r = path_result("x", ctx=ctx, params={"roots": ["/tmp/scratch"]})
    assert r.violated and "no project root is known" in r.details


def test_extra_roots_and_their_prefix_trap() -> None:
    params = {"roots": ["/tmp/scratch/"]}
    assert not path_result("/tmp/scratch/a", params=params).violated
    assert not path_result("/srv/app/a", params=params).violated
    r = path_result("/tmp/scratch2/a", params=params)
    assert r.violated and "(/srv/app, /tmp/scratch)" in r.details


def test_resolved_path_outside_while_the_path_looks_inside() -> None:
    b = step(
        input={"path": "src/link"},
        properties={"target": {"path": "src/link", "resolved_path": "/etc/shadow"}},
    )
    r = judge("path_within_root", {}, b)
    assert r.violated
    assert r.details.startswith("properties.target.resolved_path '/etc/shadow' resolves to")


def test_odd_paths_violate() -> None:
    assert "is empty" in path_result("").details
    assert "NUL byte" in path_result("src/\x00x").details
    assert "backslash" in path_result("..\\..\\windows").details
    assert (
        "not absolute"
        in path_result(
            "x", ctx=EvalContext(agent_id="agent", task_id="t1", project_root="proj")
        ).details
    )


def test_paths_in_lists_and_custom_fields() -> None:
    params = {"fields": ["input.files[*]"]}
    b = step(input={"files": ["a.txt", "b/c.txt"]})
    assert not judge("path_within_root", params, b).violated
    b = step(input={"files": ["a.txt", "/etc/hosts"]})
    assert "input.files[*] '/etc/hosts'" in judge("path_within_root", params, b).details


def test_a_step_without_paths_complies() -> None:
    assert not judge("path_within_root", {}, step(input={"command": "ls"})).violated


def test_path_params_are_checked() -> None:
    refused("path_within_root", {"roots": ["relative/dir"]}, "not an absolute path")
    refused("path_within_root", {"home": "~"}, "must be an absolute path")


def test_a_root_of_slash_contains_everything() -> None:
    ctx = EvalContext(agent_id="agent", task_id="t1", project_root="/")
    assert not path_result("/etc/passwd", ctx=ctx).violated


# -- no_secrets --------------------------------------------------------------------------------

# Fake credentials, assembled so that no scanner mistakes this file for a leak.
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2
AWS = "AKIA" + "ABCDEFGHIJKLMNOP"
STRIPE = "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc"


def test_no_secrets_in_plain_input() -> None:
    assert not judge("no_secrets", {}, step(input={"command": "git push origin main"})).violated
    assert not judge("no_secrets", {}, step()).violated


def test_a_secret_deep_in_the_input() -> None:
    b = step(input={"config": {"headers": [{"x": "ok"}, {"auth": f"token {GITHUB}"}]}})
    r = judge("no_secrets", {}, b)
    assert r.violated
    assert r.details == "input.config.headers[1].auth contains a secret shaped like github_token"
    assert GITHUB not in r.details


def test_the_detail_never_contains_the_secret() -> None:
    for secret in (AWS, STRIPE, "pass" + "word = 'hunter2hunter2'"):
        r = judge("no_secrets", {}, step(input={"body": f"here: {secret} end"}))
        assert r.violated and secret not in r.details and "input.body" in r.details


def test_shapes_restrict_the_scan() -> None:
    b = step(input={"body": f"key {AWS}"})
    assert not judge("no_secrets", {"shapes": ["github_token"]}, b).violated
    r = judge("no_secrets", {"shapes": ["aws_access_key_id", "github_token"]}, b)
    assert r.violated and "aws_access_key_id" in r.details


def test_fields_choose_where_to_look() -> None:
    b = step(input={"body": "fine"}, properties={"prompt": f"use {GITHUB}"})
    assert not judge("no_secrets", {}, b).violated
    r = judge("no_secrets", {"fields": ["input", "properties.prompt"]}, b)
    assert r.violated and r.details.startswith("properties.prompt contains")


def test_secrets_split_across_strings_are_not_reported() -> None:
    # Strings are scanned joined for speed; a match that only exists across the join is not
    # a secret in any one string.
    b = step(input={"a": "AKIA", "b": "ABCDEFGHIJKLMNOP"})
    assert not judge("no_secrets", {}, b).violated


def test_unknown_shapes_are_refused() -> None:
    refused("no_secrets", {"shapes": ["github_token", "gihtub_token"]}, "gihtub_token")
