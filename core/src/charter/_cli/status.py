"""`charter status`: the settings a Governor would use here, its policy load state, the store.

The settings are resolved exactly as the runner resolves them (keyword, then ``CHARTER_*``,
then default), and the policy state comes from a real Runner built from them, so what status
says is what an agent started in the same environment would do. Nothing is created: a store
that does not exist yet is reported as such, never opened for writing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from charter._audit.base import AuditStore

__all__ = ["collect_status", "print_status"]

_SOURCES = ("policies", "policy_file", "policy_cache_path")


def _has_policy_source(overrides: dict[str, Any]) -> bool:
    from charter._runtime.settings import Settings

    return any(
        overrides.get(name) is not None or os.environ.get(Settings.env_var(name), "").strip()
        for name in _SOURCES
    )


def _store_state(location: str) -> tuple[AuditStore | None, dict[str, Any]]:
    """(open store or None, what to report about it); never creates a store."""
    from charter._audit.base import StoreError
    from charter._audit.location import open_existing_store, parse_location

    if location == "none":
        return None, {"ok": True, "location": "none", "exists": False, "detail": "auditing is off"}
    try:
        kind, path = parse_location(location)
    except StoreError as exc:
        return None, {"ok": False, "location": location, "exists": False, "detail": str(exc)}
    if kind == "stdout":
        detail = "records are written to standard output and cannot be read back"
        return None, {"ok": True, "location": location, "exists": False, "detail": detail}
    if kind != "postgresql" and path != ":memory:" and not os.path.exists(path):
        detail = "no store yet; it is created when the first step is recorded"
        return None, {"ok": True, "location": location, "exists": False, "detail": detail}
    try:
        store = open_existing_store(location)
    except StoreError as exc:
        return None, {"ok": False, "location": location, "exists": True, "detail": str(exc)}
    return store, {"ok": True, "location": store.location, "exists": True, "detail": ""}


def collect_status(overrides: dict[str, Any], *, verify: bool = False) -> dict[str, Any]:
    """The status report (plain JSON-able values; see `print_status` for what it holds).

    Raises ValueError for a setting that cannot be parsed (the message names it).
    """
    from charter._runtime.runner import Runner
    from charter._runtime.settings import Settings

    configured = _has_policy_source(overrides)
    kwargs: dict[str, Any] = dict(overrides)
    if not configured:
        kwargs["policies"] = []  # so the rest can be shown; reported as not configured below
    settings = Settings.from_sources(**kwargs)
    rows = []
    for name, value, origin in settings.describe():
        if name == "policies" and not configured:
            value, origin = "-", "default"
        rows.append({"name": name, "value": value, "origin": origin, "env": Settings.env_var(name)})
    problems: list[str] = []
    signing, settings = _signing_state(settings, problems)
    store, store_info = _store_state(settings.audit_location)
    policies: dict[str, Any] | None = None
    try:
        if not configured:
            problems.append(
                "no policy source is configured: set CHARTER_POLICY_FILE (YAML manifests), "
                "CHARTER_POLICIES or CHARTER_POLICY_CACHE_PATH, or pass --policy; a Governor "
                "built here without policies= would refuse to start"
            )
        else:
            runner_settings = (
                settings
                if store is not None
                # No store yet: nothing to sign either (the key itself was checked above).
                else settings.replace(audit_location="none", signing_key=None, checkpoint_file=None)
            )
            if settings.otlp_endpoint is not None:
                # Status sends nothing: the exporter is described below, not started.
                runner_settings = runner_settings.replace(otlp_endpoint=None)
            runner = Runner(runner_settings, store=store)
            try:
                s = runner.status()
            finally:
                runner.close(0)
            policies = {
                "state": s["load_state"],
                "cause": s["cause"],
                "source": s["policy_source"],
                "by_enforcement_point": s["policies"],
                "applicable": s["applicable_policies"],
                "enforcement": s["enforcement"],
                "fail_mode": s["fail_mode"],
                "effect": s["fail_mode_effect"],
            }
            if s["load_state"] == "unavailable":
                problems.append(f"no policy set could be loaded: {s['cause']}")
            if store is not None:
                store_info.update(s["store"])
        if store is not None and verify:
            report = store.verify()
            store_info["verify"] = {
                "ok": report.ok,
                "chains": report.chains_checked,
                "records": report.steps_checked,
                "first_break": str(report.first_break) if report.first_break else None,
            }
            if not report.ok:
                problems.append(f"the audit trail is broken: {report.first_break}")
        if store is not None and "detail" in store_info and not store_info["detail"]:
            store_info["detail"] = store.health().get("detail", "")
    finally:
        if store is not None:
            store.close()
    if not store_info["ok"]:
        problems.append(f"the audit store is unusable: {store_info['detail']}")
    otlp = _otlp_state(settings)
    if otlp["endpoint"] and not otlp["installed"]:
        problems.append(f"otlp_endpoint is set but {otlp['detail']}")
    return {
        "healthy": not problems,
        "problems": problems,
        "settings": rows,
        "policy_source_configured": configured,
        "policies": policies,
        "store": store_info,
        "otlp": otlp,
        "signing": signing,
    }


def _otlp_state(settings: Any) -> dict[str, Any]:
    """Where spans would go and whether the OpenTelemetry SDK is there to send them."""
    from charter._runtime.otlp import EXTRA_HINT, traces_url

    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401

        installed, detail = True, ""
    except ImportError:
        installed, detail = False, EXTRA_HINT
    endpoint = settings.otlp_endpoint
    return {
        "endpoint": traces_url(endpoint) if endpoint else None,
        "payloads": settings.otlp_payloads,
        "installed": installed,
        "detail": detail,
    }


def _signing_state(settings: Any, problems: list[str]) -> tuple[dict[str, Any] | None, Any]:
    """(what to report about the signing key, the settings to build the runner from)."""
    from charter._audit.signing import KeyFileError, load_signing_key

    if settings.signing_key is None:
        return None, settings
    try:
        key = load_signing_key(settings.signing_key)
    except KeyFileError as exc:
        problems.append(f"the signing key cannot be used, so an agent here would not start: {exc}")
        info = {"ok": False, "key": settings.signing_key, "detail": str(exc)}
        return info, settings.replace(signing_key=None, checkpoint_file=None)
    info = {
        "ok": True,
        "key": key.path,
        "key_id": key.key_id,
        "checkpoint_file": settings.checkpoint_file,
        "every": settings.checkpoint_every,
    }
    return info, settings


def print_status(report: dict[str, Any], out: Console) -> None:
    """Print `report` as three sections: settings, policies, audit store."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    title = "Settings (keyword > CHARTER_* environment > default)"
    if not out.is_terminal:
        from charter._cli._common import plain_table

        rows = [[r["name"], str(r["value"]), r["origin"], r["env"]] for r in report["settings"]]
        headers = ["setting", "value", "from", "environment variable"]
        out.print(title, markup=False)
        out.print(plain_table(headers, rows), markup=False, highlight=False, soft_wrap=True)
    else:
        table = Table(title=title, title_justify="left")
        for column in ("setting", "value", "from", "environment variable"):
            table.add_column(column, no_wrap=column != "value")
        for row in report["settings"]:
            origin = row["origin"]
            style = "" if origin == "default" else "bold"
            table.add_row(
                Text(row["name"]),
                Text(str(row["value"])),
                Text(origin, style=style),
                Text(row["env"]),
            )
        out.print(table)

    out.print("[bold]Policies[/bold]")
    p = report["policies"]
    if p is None:
        out.print("  [red]not configured[/red]")
    else:
        colour = {"enforcing": "green", "none_configured": "yellow"}.get(p["state"], "red")
        counts = ", ".join(f"{n} {point}" for point, n in p["by_enforcement_point"].items())
        out.print(f"  [{colour}]{p['state']}[/{colour}] from {escape(str(p['source']))} ({counts})")
        if p["cause"]:
            out.print(f"  cause: {p['cause']}", markup=False)
        out.print(
            f"  enforcement: {p['enforcement']}; fail_mode: {p['fail_mode']} ({p['effect']})",
            markup=False,
        )
        applicable = p["applicable"]
        if applicable:
            out.print(
                f"  {len(applicable)} apply to this agent: {', '.join(applicable)}", markup=False
            )

    out.print("[bold]Audit store[/bold]")
    s = report["store"]
    colour = "green" if s["ok"] else "red"
    out.print(f"  [{colour}]{'ok' if s['ok'] else 'unusable'}[/{colour}] {escape(s['location'])}")
    if s.get("detail"):
        out.print(f"  {s['detail']}", markup=False)
    checked = s.get("verify")
    if checked:
        if checked["ok"]:
            out.print(f"  verified: {checked['chains']} chains, {checked['records']} records")
        else:
            out.print(f"  [red]broken[/red]: {escape(str(checked['first_break']))}")
    otlp = report.get("otlp")
    if otlp and otlp["endpoint"]:
        out.print("[bold]OTLP export[/bold]")
        payloads = "with payloads" if otlp["payloads"] else "without payloads"
        out.print(f"  spans to {otlp['endpoint']} ({payloads})", markup=False)
    signing = report.get("signing")
    if signing is not None:
        out.print("[bold]Signed checkpoints[/bold]")
        if signing["ok"]:
            also = f"; also to {signing['checkpoint_file']}" if signing["checkpoint_file"] else ""
            out.print(
                f"  key {signing['key_id']} ({signing['key']}): every {signing['every']} "
                f"records, at each task end and at close{also}",
                markup=False,
            )
        else:
            out.print(f"  [red]unusable[/red] {escape(signing['detail'])}")
    for problem in report["problems"]:
        out.print(f"[red]problem[/red] {escape(problem)}")
