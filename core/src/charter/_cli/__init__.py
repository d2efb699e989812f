"""The `charter` command: check, explain and test policies; read, verify and replay audit trails.

Exit codes (the README has the table): 0 success; 1 the command ran and found a problem (an
invalid manifest, a broken chain, a failing policy test, an unhealthy status, replayed
decisions that changed under ``--fail-on-change``, a warning under ``check --strict``); 2 it
could not run (a usage error, as click reports it, or a file or store that is missing or
unreadable). `explain` exits 0 for allow and warn, 3 for block, 4 for ask, and 1 when its
manifest or behavior is invalid. No command uses 2 for anything but "could not run".

Subcommand groups from other distributions (``charter claude`` from charter-claude-code,
``charter baseline`` from charter-baseline) are found through the ``charter.cli`` entry point
group and imported only when used; one that fails to load is skipped with a one-line warning.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from charter._cli._common import short_reason

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from rich.console import Console

    from charter._audit.base import AuditStore

__all__ = ["main"]

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_CANNOT_RUN = 2
EXIT_BLOCK = 3
EXIT_ASK = 4
PLUGIN_GROUP = "charter.cli"
_STORE_HELP = (
    "Audit store: sqlite:///PATH, jsonl:///PATH, postgresql://USER@HOST:PORT/DB, or a "
    ".db/.jsonl path "
    "(default: CHARTER_AUDIT_LOCATION, else sqlite:///.charter/audit.db)."
)


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped output (files, grep, tests) gets long lines instead of rich's 80 columns, so ids
    # and reasons are never folded across lines.
    width = None if stream.isatty() else max(int(os.environ.get("COLUMNS") or 0), 200)
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


def _fail(message: str, code: int = EXIT_CANNOT_RUN) -> NoReturn:
    _console(stderr=True).print(message, markup=False)
    raise SystemExit(code)


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str))


def _print_table(
    title: str | None,
    headers: list[str],
    rows: list[list[str]],
    *,
    numeric: tuple[str, ...] = (),
    styles: list[str] | None = None,
    wrap: tuple[str, ...] = (),
) -> None:
    """A table: rich's boxes on a terminal, plain aligned columns when piped or redirected.

    `styles` gives each row a rich style on a terminal (ignored in plain text); columns in
    `wrap` may fold on a terminal, all others never do.
    """
    from charter._cli._common import plain_table

    if not sys.stdout.isatty():
        if title:
            click.echo(title)
        click.echo(plain_table(headers, rows, numeric))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title) if title else None, title_justify="left")
    for column in headers:
        table.add_column(
            column, no_wrap=column not in wrap, justify="right" if column in numeric else "left"
        )
    for index, row in enumerate(rows):
        style = styles[index] if styles else ""
        table.add_row(*(Text(cell) for cell in row), style=style or None)
    _console().print(table)


# -- plugins ---------------------------------------------------------------------------------


class CharterGroup(click.Group):
    """The top-level group: built-in commands plus lazily loaded ``charter.cli`` plugins.

    A plugin is loaded when it is invoked (or when help lists it). A plugin that cannot be
    imported, is not a click command, or reuses a built-in name is skipped with a one-line
    warning on stderr; the rest of the CLI keeps working.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._entry_points: dict[str, EntryPoint] | None = None
        self._loaded: dict[str, click.Command | None] = {}
        self._warned: set[str] = set()

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            click.echo(f"charter: warning: {message}", err=True)

    def _plugins(self) -> dict[str, EntryPoint]:
        if self._entry_points is None:
            from importlib.metadata import entry_points

            found: dict[str, EntryPoint] = {}
            try:
                eps = list(entry_points(group=PLUGIN_GROUP))
            except Exception as exc:  # broken metadata must not take the CLI down
                self._warn("*", f"cannot list {PLUGIN_GROUP} plugins: {exc}")
                eps = []
            for ep in eps:
                if ep.name in self.commands:
                    self._warn(
                        ep.name,
                        f"plugin {ep.name!r} ({ep.value}) has the name of a built-in command; "
                        "it is ignored",
                    )
                elif ep.name in found and found[ep.name].value != ep.value:
                    self._warn(
                        ep.name,
                        f"plugin {ep.name!r} is registered twice ({found[ep.name].value}, "
                        f"{ep.value}); using the first",
                    )
                else:
                    found.setdefault(ep.name, ep)
            self._entry_points = found
        return self._entry_points

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self._plugins()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        builtin = self.commands.get(cmd_name)
        if builtin is not None:
            return builtin
        ep = self._plugins().get(cmd_name)
        if ep is None:
            return None
        if cmd_name not in self._loaded:
            self._loaded[cmd_name] = self._load(cmd_name, ep)
        return self._loaded[cmd_name]

    def _load(self, name: str, ep: EntryPoint) -> click.Command | None:
        try:
            command = ep.load()
        except Exception as exc:
            detail = " ".join(str(exc).split()) or type(exc).__name__
            self._warn(
                name,
                f"plugin {name!r} ({ep.value}) could not be loaded and is skipped: "
                f"{type(exc).__name__}: {detail}",
            )
            return None
        if not isinstance(command, click.Command):
            self._warn(
                name,
                f"plugin {name!r} ({ep.value}) is a {type(command).__name__}, not a click "
                "command; it is skipped",
            )
            return None
        return command


@click.group(cls=CharterGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="charter", prog_name="charter")
def main() -> None:
    """Charter: govern what AI agents do, before they do it, and prove it afterwards.

    Start with `charter demo`.
    """


# -- shared helpers ----------------------------------------------------------------------------


def policy_path(value: str) -> Path:
    """A manifest path from a --policy value: a file, or ``baseline:NAME`` for a shipped
    baseline (needs charter-baseline). Exits 2 when a baseline cannot be found."""
    if not value.startswith("baseline:"):
        return Path(value)
    name = value[len("baseline:") :]
    try:
        import charter_baseline  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        _fail(f"--policy {value}: baselines need charter-baseline: pip install charter-baseline")
    try:
        found: Path = charter_baseline.baseline_path(name)
    except ValueError as exc:
        _fail(f"--policy {value}: {exc}")
    return found


def _policy_paths(values: Iterable[str]) -> list[Path]:
    return [policy_path(v) for v in values]


def default_store_location() -> str:
    """--store default: CHARTER_AUDIT_LOCATION when it names a readable store, else the
    runner's default (the SQLite file under .charter/)."""
    from charter._runtime.settings import Settings

    env = os.environ.get(Settings.env_var("audit_location"), "").strip()
    if env and env.lower() not in ("stdout", "none"):
        return env
    return str(next(f.default for f in dataclasses.fields(Settings) if f.name == "audit_location"))


def store_url(location: str) -> str:
    """`location` in the URL form settings accept (a plain .db/.jsonl path becomes
    sqlite:///PATH or jsonl:///PATH); anything it cannot parse is returned unchanged."""
    from charter._audit.base import StoreError
    from charter._audit.location import parse_location

    try:
        kind, path = parse_location(location)
    except StoreError:
        return location
    if kind in ("stdout", "postgresql"):
        return location
    return f"{kind}:///{path}"


def open_audit_store(location: str | None) -> AuditStore:
    """Open an existing store for reading; exits 2 (naming the location) when it cannot."""
    from charter._audit.base import StoreError
    from charter._audit.location import open_existing_store

    where = location or default_store_location()
    try:
        return open_existing_store(where)
    except StoreError as exc:
        hint = "" if location else "; run `charter demo` to create one, or pass --store"
        _fail(f"charter: {exc}{hint}")


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- manifests -------------------------------------------------------------------------------


@main.command()
@click.argument("files", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
def check(files: tuple[str, ...], as_json: bool, strict: bool) -> None:
    """Validate policy manifests; print every error with file, policy, rule and key, and warn
    about policies that load but do not do what they seem to.

    FILES are YAML manifests (or baseline:NAME). Warnings: a counting rule (max_steps,
    rate_limit, budget) whose `match` narrows while `params.select` is missing (it then counts
    every step); a policy that can never match (a verb no matched kind takes, or step names
    that no template maps to the matched kinds); a step-name glob that no template, tool or
    manifest declares. Exits 1 when any file has an error (or, with --strict, a warning).
    """
    from rich.markup import escape

    from charter._cli.lint import policy_warnings
    from charter._policy.manifest import read_manifests

    results = read_manifests(_policy_paths(files))
    declared = [p for r in results if r.valid for p in r.policies]
    warned = {id(r): policy_warnings(r.policies, declared) if r.valid else [] for r in results}
    failed = sum(1 for r in results if not r.valid)
    warnings = sum(len(w) for w in warned.values())
    if as_json:
        _echo_json(
            {
                "ok": not failed and not (strict and warnings),
                "files": [
                    {
                        "source": str(r.source),
                        "valid": r.valid,
                        "name": r.name,
                        "version": r.version,
                        "policies": len(r.policies) if r.valid else 0,
                        "enforcement": r.enforcement,
                        "errors": [str(e) for e in r.errors],
                        "warnings": warned[id(r)],
                    }
                    for r in results
                ],
            }
        )
        if failed or (strict and warnings):
            raise SystemExit(EXIT_FOUND)
        return
    out = _console()
    for result in results:
        if result.valid:
            n = len(result.policies)
            mode = " (monitor)" if result.enforcement == "monitor" else ""
            out.print(
                f"[green]ok[/green]   {escape(str(result.source))}: {escape(str(result.name))} "
                f"v{escape(str(result.version))}, "
                f"{n} polic{'y' if n == 1 else 'ies'}{mode}"
            )
        else:
            failed += 1
            out.print(
                f"[red]FAIL[/red] {escape(str(result.source))}: {len(result.errors)} error(s)"
            )
            for err in result.errors:
                out.print(f"  - {err}", markup=False)
        for warning in warned[id(result)]:
            out.print(f"  [yellow]warning[/yellow] {escape(warning)}")
    if failed or (strict and warnings):
        raise SystemExit(EXIT_FOUND)


@main.command()
def schema() -> None:
    """Print the manifest JSON Schema (built from the registered rules), for editors."""
    from charter._policy.schema import manifest_schema

    click.echo(json.dumps(manifest_schema(), indent=2, sort_keys=True))


def _param_summary(schema: dict[str, Any]) -> str:
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    parts = []
    for key, sub in props.items():
        kind = sub.get("type", "")
        if "enum" in sub:
            kind = " / ".join(str(v) for v in sub["enum"])
        elif isinstance(kind, list):
            kind = " / ".join(kind)
        label = f"`{key}`" + ("" if key in required else "?")
        parts.append(f"{label} {kind}".strip())
    return ", ".join(parts) or "-"


@main.command()
@click.option("--markdown", is_flag=True, help="Print a Markdown table (for the README).")
@click.option("--json", "as_json", is_flag=True, help="Print the rules as JSON.")
def rules(markdown: bool, as_json: bool) -> None:
    """List the registered rules: what each judges and its params (? marks optional ones)."""
    from charter._policy import rules as _builtin_rules  # noqa: F401  (the built-ins' loader)
    from charter._policy.registry import registered_rules

    rows = []
    for spec in registered_rules():
        where = "registration" if "step_execution" not in spec.enforcement_points else "step"
        rows.append((spec.name, where, spec.description, _param_summary(spec.params_schema)))
    if as_json:
        specs = {spec.name: spec for spec in registered_rules()}
        _echo_json(
            [
                {
                    "name": name,
                    "judges": where,
                    "description": text,
                    "params_schema": specs[name].params_schema,
                }
                for name, where, text, _ in rows
            ]
        )
        return
    if markdown:
        click.echo("| rule | judges | what it checks | params |")
        click.echo("| --- | --- | --- | --- |")
        for name, where, text, params in rows:
            click.echo(f"| `{name}` | {where} | {text.replace('|', '/')} | {params} |")
        return
    _print_table(
        None,
        ["rule", "judges", "what it checks", "params"],
        [[r.replace("`", "") for r in row] for row in rows],
        wrap=("what it checks", "params"),
    )


@main.command()
@click.option("--markdown", is_flag=True, help="Print a Markdown table (for the README).")
@click.option("--json", "as_json", is_flag=True, help="Print the settings as JSON.")
def settings(markdown: bool, as_json: bool) -> None:
    """List every setting: keyword, environment variable, default and meaning."""
    from charter._runtime.settings import Settings

    defaults = {f.name: f.default for f in dataclasses.fields(Settings)}
    rows = []
    for name in Settings.names():
        default = defaults.get(name)
        if default is None or default == ():
            shown = "-"
        elif isinstance(default, bool):
            shown = "true" if default else "false"
        else:
            shown = f"{default:g}" if isinstance(default, float) else str(default)
        rows.append((name, Settings.env_var(name), shown, Settings.meaning(name)))
    if as_json:
        _echo_json(
            [
                {
                    "name": name,
                    "environment": env,
                    "default": defaults.get(name),
                    "meaning": meaning,
                }
                for name, env, _, meaning in rows
            ]
        )
        return
    if markdown:
        click.echo("| setting | environment | default | meaning |")
        click.echo("| --- | --- | --- | --- |")
        for name, env, default, meaning in rows:
            click.echo(f"| `{name}` | `{env}` | `{default}` | {meaning} |")
        return
    _print_table(
        None,
        ["setting", "environment", "default", "meaning"],
        [list(r) for r in rows],
        wrap=("meaning",),
    )


@main.command()
@click.option(
    "--policy",
    "policy_files",
    multiple=True,
    required=True,
    help="Manifest file(s) to judge with (or baseline:NAME).",
)
@click.option("--environment", default=None, help="Environment of the evaluation context.")
@click.option("--project-root", default=None, help="Project root for path rules.")
@click.option("--json", "as_json", is_flag=True, help="Print the decision as JSON.")
@click.argument("behavior_file", type=click.Path(path_type=Path))
def explain(
    policy_files: tuple[str, ...],
    environment: str | None,
    project_root: str | None,
    as_json: bool,
    behavior_file: Path,
) -> None:
    """Show the decision on one step (a behavior as JSON) and why, policy by policy.

    BEHAVIOR_FILE holds one behavior in wire form (kind, verb, step_name, input, properties...);
    `-` reads it from standard input. Exits 0 for allow/warn, 3 for block, 4 for ask, 1 when
    the manifest or the behavior is invalid.
    """
    from charter._engine.engine import PolicyEngine
    from charter._model.behavior import Behavior
    from charter._model.context import EvalContext
    from charter._model.errors import PolicyLoadError
    from charter._policy.manifest import load_manifest_policies

    err = _console(stderr=True)
    try:
        policies = load_manifest_policies(_policy_paths(policy_files))
    except PolicyLoadError as exc:
        err.print(str(exc), markup=False)
        raise SystemExit(1) from None
    try:
        raw = sys.stdin.read() if str(behavior_file) == "-" else behavior_file.read_text()
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        data.setdefault("agent_id", "cli")
        data.setdefault("task_id", "explain")
        behavior = Behavior.from_dict(data)
    except (OSError, ValueError, KeyError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        err.print(f"{behavior_file}: not a behavior: {detail}", markup=False)
        raise SystemExit(1) from None
    engine = PolicyEngine(policies)
    root = str(Path(project_root).absolute()) if project_root else None
    context = EvalContext(
        agent_id=behavior.agent_id,
        task_id=behavior.task_id,
        environment=environment,
        project_root=root,
    )
    result = engine.evaluate(behavior, context)
    decision = result.decision.value
    if as_json:
        _echo_json(
            {
                **result.to_dict(),
                "results": [r.to_dict() for r in result.results],
                "exit_code": _EXPLAIN_CODES[decision],
            }
        )
    else:
        click.echo(engine.explain(behavior, context))
    raise SystemExit(_EXPLAIN_CODES[decision])


_EXPLAIN_CODES = {"allow": EXIT_OK, "warn": EXIT_OK, "block": EXIT_BLOCK, "ask": EXIT_ASK}


# -- status ----------------------------------------------------------------------------------


@main.command()
@click.option(
    "--policy",
    "policy_files",
    multiple=True,
    help="Manifest file(s) (or baseline:NAME), as policy_file= would; default from the env.",
)
@click.option("--store", default=None, help=_STORE_HELP)
@click.option(
    "--signing-key",
    default=None,
    help="Key that signs checkpoints, as signing_key= would (default: CHARTER_SIGNING_KEY).",
)
@click.option("--verify", "run_verify", is_flag=True, help="Also verify every chain.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(
    policy_files: tuple[str, ...],
    store: str | None,
    signing_key: str | None,
    run_verify: bool,
    as_json: bool,
) -> None:
    """Settings in effect, policy load state and audit store health.

    Settings come from CHARTER_* environment variables (and --policy / --store), exactly as
    a Governor built in this environment would see them. Exits 1 when policies cannot be
    loaded (a fail-closed agent would block every step), or the store is unhealthy or broken.
    """
    from charter._cli.status import collect_status, print_status

    overrides: dict[str, Any] = {}
    if policy_files:
        overrides["policy_file"] = [str(p) for p in _policy_paths(policy_files)]
    if store:
        overrides["audit_location"] = store_url(store)
    if signing_key:
        overrides["signing_key"] = signing_key
    try:
        report = collect_status(overrides, verify=run_verify)
    except ValueError as exc:
        _fail(f"charter: {exc}")
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True, default=str))
    else:
        print_status(report, _console())
    raise SystemExit(EXIT_OK if report["healthy"] else EXIT_FOUND)


# -- the audit trail -------------------------------------------------------------------------


def _resolve_task(store: AuditStore, task: str, agent: str | None) -> tuple[str, str]:
    """(agent_id, task_id) for an exact task id or a unique prefix of one; exits 2 otherwise."""
    summaries = store.list_tasks(agent)
    exact = [s for s in summaries if s.task_id == task]
    found = exact or [s for s in summaries if s.task_id.startswith(task)]
    if not found:
        _fail(f"charter: no task {task!r} in {store.location}; `charter tasks` lists them")
    if len(found) > 1:
        names = ", ".join(f"{s.task_id} ({s.agent_id})" for s in found[:6])
        _fail(f"charter: {task!r} matches several tasks: {names}; give more of the id or --agent")
    return found[0].agent_id, found[0].task_id


_SINCE_HELP = (
    "ISO date or time (2025-01-31, 2025-01-31T09:00Z; UTC unless a zone is given) or a "
    "duration before now (30m, 24h, 7d, 2w)."
)


def _when(option: str, value: str | None) -> Any:
    from datetime import UTC, datetime

    from charter._cli.report import parse_since

    if not value:
        return None
    try:
        return parse_since(value, datetime.now(UTC))
    except ValueError as exc:
        _fail(f"charter: {str(exc).replace('--since', option)}")


def _task_decisions(records: list[dict[str, Any]]) -> set[str]:
    """The decisions a task's steps got: allow, warn, block, ask (a person was asked), failed."""
    found: set[str] = set()
    for r in records:
        verdict = (r.get("meta") or {}).get("charter.eval")
        if isinstance(verdict, dict) and verdict.get("decision"):
            found.add(str(verdict["decision"]))
        if r.get("kind") == "step.gate":
            found.add("ask")
        if (r.get("meta") or {}).get("charter.outcome") == "failed":
            found.add("failed")
    return found


@main.command()
@click.option("--store", default=None, help=_STORE_HELP)
@click.option("--agent", default=None, help="Only this agent's tasks.")
@click.option(
    "--state",
    type=click.Choice(["open", "closed"]),
    default=None,
    help="Only open or closed tasks.",
)
@click.option(
    "--decision",
    "decisions",
    type=click.Choice(["allow", "warn", "ask", "block", "failed"]),
    multiple=True,
    help="Only tasks with a step that got this decision (ask: a person was asked; failed: a "
    "step failed). Repeatable: any of them.",
)
@click.option(
    "--since", default=None, help="Only tasks active at or after this time: " + _SINCE_HELP
)
@click.option(
    "--until", default=None, help="Only tasks started at or before this time: " + _SINCE_HELP
)
@click.option("--limit", default=50, show_default=True, help="Show the last N tasks (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print the tasks as JSON lines.")
def tasks(
    store: str | None,
    agent: str | None,
    state: str | None,
    decisions: tuple[str, ...],
    since: str | None,
    until: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List the tasks in an audit store, oldest first."""
    from charter._audit.base import StoreError
    from charter._cli.report import _stamp

    since_at, until_at = _when("--since", since), _when("--until", until)
    opened = open_audit_store(store)
    try:
        summaries = opened.list_tasks(agent)
        if state:
            summaries = [s for s in summaries if s.closed == (state == "closed")]
        if since_at is not None:
            summaries = [
                s for s in summaries if (t := _stamp(s.last_timestamp)) is None or t >= since_at
            ]
        if until_at is not None:
            summaries = [
                s for s in summaries if (t := _stamp(s.first_timestamp)) is None or t <= until_at
            ]
        if decisions:
            wanted = set(decisions)
            summaries = [
                s
                for s in summaries
                if _task_decisions(opened.read_task(s.task_id, s.agent_id)) & wanted
            ]
    except StoreError as exc:
        _fail(f"charter: {exc}")
    finally:
        opened.close()
    shown = summaries[-limit:] if limit > 0 else summaries
    if as_json:
        for s in shown:
            click.echo(json.dumps(dataclasses.asdict(s), sort_keys=True))
        return
    if not summaries:
        click.echo(
            f"no tasks in {opened.location}"
            + (" match" if (state or decisions or since or until) else "")
        )
        return
    _print_table(
        opened.location,
        ["task", "agent", "records", "started (UTC)", "last (UTC)", "state"],
        [
            [
                s.task_id,
                s.agent_id,
                str(s.steps),
                _time(s.first_timestamp),
                _time(s.last_timestamp),
                "closed" if s.closed else f"open ({s.last_kind})",
            ]
            for s in shown
        ],
        numeric=("records",),
    )
    if len(shown) < len(summaries):
        click.echo(f"showing the last {len(shown)} of {len(summaries)} tasks; --limit 0 shows all")
    click.echo("charter show TASK shows one task (any unique prefix of its id)")


def _time(stamp: str) -> str:
    return stamp.replace("T", " ").rstrip("Z")[:23] if stamp else "-"


def _decision_of(record: dict[str, Any]) -> tuple[str, str]:
    """(decision, reason) recorded with a step; ("", "") for steps judged by nobody."""
    verdict = (record.get("meta") or {}).get("charter.eval")
    if not isinstance(verdict, dict):
        return "", ""
    decision = str(verdict.get("decision", ""))
    if verdict.get("approved"):
        decision += " (approved)"
    if verdict.get("enforcement") == "monitor":
        decision += " (monitor)"
    return decision, str(verdict.get("reason") or "")


def _describe(record: dict[str, Any]) -> str:
    """The step as one line: its name and the gist of its input (or the gate's answer)."""
    name = str(record.get("step_name"))
    if record.get("kind") == "step.gate":
        out = record.get("output") or {}
        gate = (record.get("properties") or {}).get("gate") or {}
        return (
            f"{name}: {out.get('decision', '?')} by {out.get('by', '?')} for "
            f"{gate.get('step_name', '?')}" + (f" ({out['why']})" if out.get("why") else "")
        )
    data = record.get("input")
    if isinstance(data, dict) and data:
        if len(data) == 1:
            return f"{name} {_short(next(iter(data.values())))}"
        return f"{name} {_short(data)}"
    return name


@main.command()
@click.argument("task")
@click.option("--store", default=None, help=_STORE_HELP)
@click.option("--agent", default=None, help="The agent, when several share the task id.")
@click.option("--json", "as_json", is_flag=True, help="Print the stored records as JSON lines.")
def show(task: str, store: str | None, agent: str | None, as_json: bool) -> None:
    """Show one task's steps: what was asked, the decision and why, and how it ended.

    TASK is a task id or any unique prefix of one.
    """
    from charter._audit.base import StoreError

    opened = open_audit_store(store)
    try:
        agent_id, task_id = _resolve_task(opened, task, agent)
        records = opened.read_task(task_id, agent_id)
    except StoreError as exc:
        _fail(f"charter: {exc}")
    finally:
        opened.close()
    if as_json:
        for r in records:
            click.echo(json.dumps(r, sort_keys=True, ensure_ascii=False))
        return
    from charter._audit.base import is_intent_record
    from charter._cli.report import step_tree

    # A write-ahead intent (sync durability) is shown only while its outcome is missing.
    settled = {r.get("action_id") for r in records if not is_intent_record(r)}
    records = [r for r in records if not (is_intent_record(r) and r.get("action_id") in settled)]
    answers = {
        str(gate.get("action_id")): (str((r.get("output") or {}).get("decision")), r.get("seq"))
        for r in records
        if r.get("kind") == "step.gate"
        for gate in [(r.get("properties") or {}).get("gate") or {}]
        if gate.get("action_id")
    }
    colours = {"block": "red", "ask": "yellow", "warn": "yellow", "allow": "green"}
    rows: list[list[str]] = []
    styles: list[str] = []

    def walk(items: list[Any], depth: int) -> None:
        for item in items:
            if isinstance(item, dict):
                rows.append(
                    ["", "", "", "  " * depth + f"▸ {item['kind']}: {item['label']}", "", "", ""]
                )
                styles.append("bold")
                walk(item["items"], depth + 1)
                continue
            r = records[item]
            decision, reason = _decision_of(r)
            answer = answers.get(str(r.get("action_id")))
            if answer is not None and decision:
                how = "approved" if answer[0] == "pass" else "denied"
                decision = f"{decision.split(' ')[0]} ({how}, seq {answer[1]})"
            outcome = str((r.get("meta") or {}).get("charter.outcome") or "")
            if is_intent_record(r):
                outcome = "intent"  # written ahead (sync durability); its outcome follows
            elif not outcome and str(r.get("kind", "")).startswith("step."):
                outcome = "ok"
            error = _error_of(r)
            if r.get("kind") == "task.error":
                outcome = "failed"
            why = "" if decision.startswith("allow") else short_reason(reason)
            granted = _grant_of(r)
            if granted:
                why = granted + (f"; {why}" if why else "")
            if error:
                why = f"error: {error}" + (f"; {why}" if why else "")
            kind = str(r.get("kind")) + (f" {r['verb']}" if r.get("verb") else "")
            rows.append(
                [
                    str(r.get("seq")),
                    _time(str(r.get("timestamp", "")))[11:],
                    kind,
                    "  " * depth + _describe(r),
                    decision,
                    outcome,
                    why,
                ]
            )
            styles.append("red" if error else colours.get(decision.split(" ")[0], ""))

    walk(step_tree(records), 0)
    _print_table(
        f"task {task_id} · agent {agent_id} · {opened.location}",
        ["seq", "time (UTC)", "kind", "step", "decision", "outcome", "why"],
        rows,
        numeric=("seq",),
        styles=styles,
        wrap=("step", "why"),
    )
    layers = _grant_layers(records)
    if layers:
        click.echo("capabilities (a step must lie inside every layer):")
        for layer in layers:
            click.echo(f"  {layer.describe()}")


def _grant_of(record: dict[str, Any]) -> str:
    """The grant layers a record carries, as one line ("" for a record without one)."""
    from charter._policy.capabilities import GRANT_META, layers_from_meta

    meta = record.get("meta") or {}
    if GRANT_META not in meta:
        return ""
    described = "; ".join(x.describe() for x in layers_from_meta(meta[GRANT_META]))
    return f"grant {described}"


def _grant_layers(records: list[dict[str, Any]]) -> tuple[Any, ...]:
    """The capability grant in force at the end of the task, as the rule reads it."""
    from charter._model.behavior import Behavior
    from charter._policy.capabilities import GRANT_META
    from charter._policy.rules.capabilities import GrantIndex

    index = GrantIndex()
    for r in records:
        if GRANT_META in (r.get("meta") or {}):
            try:
                index.add(Behavior.from_dict(r))
            except ValueError:
                continue
    return index.layers


def _error_of(record: dict[str, Any]) -> str:
    """A failed step's (or task's) error as recorded: ``output.error`` {type, message}."""
    out = record.get("output")
    err = out.get("error") if isinstance(out, dict) else None
    if isinstance(err, dict):
        return ": ".join(str(err[k]) for k in ("type", "message") if err.get(k))
    return str(err) if err else ""


@main.command()
@click.argument("file", required=False)
@click.option("--store", default=None, help=_STORE_HELP)
@click.option("--task", default=None, help="Verify only this task's chains.")
@click.option(
    "--key",
    "keys",
    multiple=True,
    help="Public key (.pub) that signed the checkpoints; also check the chains against every "
    "signed checkpoint (repeatable, for keys that were rotated).",
)
@click.option(
    "--checkpoint",
    "checkpoint_files",
    multiple=True,
    help="Checkpoint file kept outside the store (needs --key; repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def verify(
    file: str | None,
    store: str | None,
    task: str | None,
    keys: tuple[str, ...],
    checkpoint_files: tuple[str, ...],
    as_json: bool,
) -> None:
    """Verify the hash chains of an audit store: every edit, deletion, insertion or
    reordering of a record breaks them.

    FILE (or --store) names the store. With --key, the chains are also checked against the
    signed checkpoints in the store and in each --checkpoint file, which catches a rewritten
    tail, a truncation, a deleted task and a replaced store. Exits 1 naming the first broken
    link or bad checkpoint; 2 when a key or checkpoint file cannot be used.
    """
    from rich.markup import escape

    from charter._audit.base import StoreError
    from charter._audit.location import verify as verify_store
    from charter._audit.signing import KeyFileError, load_public_key

    if file and store:
        _fail("charter: give the store as FILE or as --store, not both")
    if checkpoint_files and not keys:
        _fail(
            "charter: --checkpoint needs --key: a checkpoint file is evidence only once its "
            "signatures are checked with the public key"
        )
    try:
        loaded = [load_public_key(path) for path in keys]
    except KeyFileError as exc:
        _fail(f"charter: --key: {exc}")
    opened = open_audit_store(file or store)
    try:
        report = verify_store(opened, task, keys=loaded, checkpoints=checkpoint_files)
    except (StoreError, ValueError) as exc:
        _fail(f"charter: {exc}")
    finally:
        opened.close()
    if as_json:
        _echo_json(
            {
                "ok": report.ok,
                "location": opened.location,
                "chains": report.chains_checked,
                "records": report.steps_checked,
                "checkpoints": report.checkpoints,
                "keys": list(report.key_ids),
                "breaks": [dataclasses.asdict(b) for b in report.breaks],
                "gaps": [g.to_dict() for g in report.gaps],
                "warnings": list(report.warnings),
            }
        )
        if not report.ok:
            raise SystemExit(EXIT_FOUND)
        return
    out = _console()
    # Long details (paths, hashes) stay on one line each, as the README promises for pipes.
    for warning in report.warnings:
        out.print(f"[yellow]warning[/yellow] {escape(warning)}", soft_wrap=True)
    signed = ""
    if report.key_ids:
        noun = "checkpoint" if report.checkpoints == 1 else "checkpoints"
        signed = f" against {report.checkpoints} signed {noun} (key {', '.join(report.key_ids)})"
    if report.ok:
        chains = "chain" if report.chains_checked == 1 else "chains"
        out.print(
            f"[green]verified[/green] {report.chains_checked} {chains}, "
            f"{report.steps_checked} records in {escape(opened.location)}{escape(signed)}",
            soft_wrap=True,
        )
        return
    first = report.breaks[0]
    out.print(
        f"[red]BROKEN[/red] {escape(opened.location)}: first broken link: "
        + escape(_break_text(first)),
        soft_wrap=True,
    )
    for more in report.breaks[1:]:
        out.print("  also: " + _break_text(more), markup=False, soft_wrap=True)
    out.print(
        f"{report.chains_checked} chains, {report.steps_checked} records checked{signed}",
        markup=False,
        soft_wrap=True,
    )
    raise SystemExit(EXIT_FOUND)


@main.group()
def keys() -> None:
    """Ed25519 keys that sign checkpoints of the audit trail's chain heads."""


@keys.command(name="create")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print the key files and id as JSON.")
def keys_create(path: str, as_json: bool) -> None:
    """Create a signing key at PATH (mode 0600) and its public key at PATH.pub.

    Never overwrites a file. Keep PATH where the governed agent cannot read it; give
    PATH.pub to whoever verifies (charter verify --key PATH.pub).
    """
    from charter._audit.signing import KeyFileError, create_key_pair

    try:
        pair = create_key_pair(path)
    except KeyFileError as exc:
        _fail(f"charter: {exc}")
    if as_json:
        _echo_json(dataclasses.asdict(pair))
        return
    click.echo(f"signing key  {pair.private_path}  (mode 0600: keep it from the agent)")
    click.echo(f"public key   {pair.public_path}  (for charter verify --key)")
    click.echo(f"key id       {pair.key_id}")
    click.echo(f"fingerprint  {pair.fingerprint}  (SHA-256 of the public key)")
    click.echo(f"use it with  CHARTER_SIGNING_KEY={pair.private_path}")


@keys.command(name="show")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print the key id as JSON.")
def keys_show(path: str, as_json: bool) -> None:
    """Print the id and fingerprint of a public key (or of a signing key, checked the way
    a runner checks it)."""
    from charter._audit.signing import KeyFileError, load_public_key, load_signing_key

    try:
        with open(path, "rb") as handle:
            private = b"PRIVATE KEY" in handle.read(16_384)
    except OSError as exc:
        _fail(f"charter: cannot read {path}: {exc.strerror or exc}")
    try:
        key = load_signing_key(path) if private else load_public_key(path)
    except KeyFileError as exc:
        _fail(f"charter: {exc}")
    kind = "signing key" if private else "public key"
    if as_json:
        _echo_json(
            {"kind": kind, "path": key.path, "key_id": key.key_id, "fingerprint": key.fingerprint}
        )
        return
    click.echo(f"{kind}  {key.path}")
    click.echo(f"key id       {key.key_id}")
    click.echo(f"fingerprint  {key.fingerprint}")


def _break_text(b: Any) -> str:
    if not b.task_id and not b.agent_id:
        return f"{b.reason}: {b.detail}"
    return f"task {b.task_id} (agent {b.agent_id}) seq {b.seq}: {b.reason}: {b.detail}"


@main.command()
@click.option("--store", default=None, help=_STORE_HELP)
@click.option("--agent", default=None, help="Only this agent's tasks.")
@click.option("--task", default=None, help="Only this task (an id or a unique prefix).")
@click.option(
    "--since",
    default=None,
    help="Only tasks with a record at or after this time: ISO (2025-01-31, 2025-01-31T09:00Z, "
    "UTC unless a zone is given) or a duration before now (30m, 24h, 7d, 2w).",
)
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("charter-report.html"),
    show_default=True,
    help="Where to write the report.",
)
@click.option("--open", "open_it", is_flag=True, help="Open the report in a web browser.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def report(
    store: str | None,
    agent: str | None,
    task: str | None,
    since: str | None,
    output: Path,
    open_it: bool,
    as_json: bool,
) -> None:
    """Write the audit trail as one self-contained HTML file to look at in a browser.

    The page needs no network: an overview (tasks per agent, decisions over time, the policies
    that fired most, approvals, the verification of every chain, gaps), a page per task with
    its steps as a nested timeline, each step's decision, reason, policy, approver, input and
    output as stored, and filters and search.
    """
    from datetime import UTC, datetime

    from charter._audit.base import StoreError
    from charter._cli.report import ReportFilter, collect_report, parse_since, render_report

    now = datetime.now(UTC)
    try:
        since_at = parse_since(since, now) if since else None
    except ValueError as exc:
        _fail(f"charter: {exc}")
    opened = open_audit_store(store)
    try:
        data = collect_report(opened, ReportFilter(agent, task, since_at), now)
    except (StoreError, LookupError) as exc:
        _fail(f"charter: {exc.args[0] if isinstance(exc, LookupError) else exc}")
    finally:
        opened.close()
    try:
        output.write_text(render_report(data), encoding="utf-8")
    except OSError as exc:
        _fail(f"charter: cannot write the report to {output}: {exc.strerror or exc}")
    summary = data["summary"]
    tasks_n, records_n = len(summary["tasks"]), len(summary["steps"])
    chains = "every chain verified" if summary["verification"]["ok"] else "a chain is BROKEN"
    url = output.absolute().as_uri()
    if as_json:
        _echo_json(
            {
                "output": str(output),
                "url": url,
                "bytes": output.stat().st_size,
                "tasks": tasks_n,
                "records": records_n,
                "verified": summary["verification"]["ok"],
            }
        )
    else:
        click.echo(f"wrote {output} ({tasks_n} tasks, {records_n} records, {chains})")
    if open_it:
        import webbrowser

        if not webbrowser.open(url):
            click.echo(f"no browser found; open {url}", err=as_json)
    elif not as_json:
        click.echo(f"open it: {url}")


# -- replay, test, demo ----------------------------------------------------------------------


@main.command()
@click.option(
    "--policy",
    "policy_files",
    multiple=True,
    required=True,
    help="The policy set to re-judge with: manifest file(s) or baseline:NAME.",
)
@click.argument("file", required=False)
@click.option("--store", default=None, help=_STORE_HELP)
@click.option("--task", "task_ids", multiple=True, help="Only this task (repeatable).")
@click.option("--agent", default=None, help="Only this agent's tasks.")
@click.option(
    "--environment",
    envvar="CHARTER_ENVIRONMENT",
    default=None,
    help="Environment of the evaluation context [env CHARTER_ENVIRONMENT].",
)
@click.option(
    "--project-root",
    envvar="CHARTER_PROJECT_ROOT",
    default=None,
    help="Project root for path rules [env CHARTER_PROJECT_ROOT].",
)
@click.option(
    "--trusted-value",
    "trusted_values",
    multiple=True,
    help="An operator-trusted value for provenance rules (repeatable).",
)
@click.option("--all", "show_all", is_flag=True, help="List every re-judged step, changed or not.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line per changed step.")
@click.option("--fail-on-change", is_flag=True, help="Exit 1 when any decision would change.")
def replay(
    policy_files: tuple[str, ...],
    file: str | None,
    store: str | None,
    task_ids: tuple[str, ...],
    agent: str | None,
    environment: str | None,
    project_root: str | None,
    trusted_values: tuple[str, ...],
    show_all: bool,
    as_json: bool,
    fail_on_change: bool,
) -> None:
    """Re-judge recorded tasks under another policy set; print the steps whose decision
    would change, with the old and new decision and the new reason.

    Each task is replayed in order with a fresh engine, against its history as it really
    happened (a step that is now blocked still ran then). Try a policy change on last week's
    traffic before shipping it.
    """
    from charter._cli.replay import ReplayOptions, run_replay
    from charter._model.errors import PolicyLoadError
    from charter._policy.manifest import load_manifest_policies

    if file and store:
        _fail("charter: give the store as FILE or as --store, not both")
    try:
        policies = load_manifest_policies(_policy_paths(policy_files))
    except PolicyLoadError as exc:
        _fail(str(exc))
    env_trusted = os.environ.get("CHARTER_TRUSTED_VALUES", "")
    trusted = tuple(trusted_values) or tuple(v.strip() for v in env_trusted.split(",") if v.strip())
    options = ReplayOptions(
        policies=policies,
        label=", ".join(policy_files),
        task_ids=task_ids,
        agent=agent,
        environment=environment,
        project_root=str(Path(project_root).absolute()) if project_root else None,
        trusted_values=trusted,
        show_all=show_all,
        as_json=as_json,
    )
    opened = open_audit_store(file or store)
    try:
        changed = run_replay(opened, options, _console(), _console(stderr=True))
    finally:
        opened.close()
    if changed and fail_on_change:
        raise SystemExit(EXIT_FOUND)


@main.command(name="test")
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--policy",
    "policy_files",
    multiple=True,
    help="Manifest(s) or baseline:NAME for test files that name no policies of their own.",
)
@click.option("--run", "pattern", default=None, help="Only tests whose name matches this regex.")
@click.option("-v", "--verbose", is_flag=True, help="Print every step's decision.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--junit",
    "junit",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also write the results as JUnit XML to this file (for CI).",
)
def test_command(
    paths: tuple[str, ...],
    policy_files: tuple[str, ...],
    pattern: str | None,
    verbose: bool,
    as_json: bool,
    junit: Path | None,
) -> None:
    """Run policy tests: YAML files (*_test.yaml) holding step sequences with the decision
    each step must get.

    PATHS are test files or directories searched recursively. Prints a pass/fail report with
    the difference for every failing step; exits 1 when any test fails or a file is invalid,
    2 when no test file is found.
    """
    import io

    from rich.console import Console

    from charter._cli.policytest import TestResults, find_test_files, junit_xml, run_test_files

    files = find_test_files([Path(p) for p in paths])
    if isinstance(files, str):
        _fail(f"charter: {files}")
    defaults = [str(p) for p in _policy_paths(policy_files)]
    results = TestResults()
    out = Console(file=io.StringIO()) if as_json else _console()
    ok = run_test_files(files, defaults, pattern, verbose, out, results=results)
    if junit is not None:
        try:
            junit.write_bytes(junit_xml(results))
        except OSError as exc:
            _fail(f"charter: cannot write {junit}: {exc.strerror or exc}")
    if as_json:
        _echo_json({"ok": ok, **results.to_dict()})
    raise SystemExit(EXIT_OK if ok else EXIT_FOUND)


@main.command()
@click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The project the server decides for (its socket and key are per project).",
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    help="Manifest file(s) (or baseline:NAME) for the protocol's own operations.",
)
@click.option("--store", default=None, help=_STORE_HELP)
@click.option("--agent-id", default=None, help="The agent the protocol's operations judge for.")
@click.option(
    "--http",
    "http",
    default=None,
    help="Also serve HTTP on HOST:PORT (loopback only; bearer token; OpenAPI at /v1/openapi.json).",
)
@click.option(
    "--allow-remote", is_flag=True, help="Allow --http on an address that is not loopback."
)
@click.option(
    "--idle-exit",
    type=click.FloatRange(min=1),
    default=None,
    help="Stop after this many seconds without a request.",
)
@click.option("--stop", "stop", is_flag=True, help="Stop the project's running server and exit.")
@click.option("--print-token", is_flag=True, help="Print the HTTP bearer token and exit.")
def serve(
    project_dir: Path,
    policies: tuple[str, ...],
    store: str | None,
    agent_id: str | None,
    http: str | None,
    allow_remote: bool,
    idle_exit: float | None,
    stop: bool,
    print_token: bool,
) -> None:
    """Run the project's decision server: one Runner for many calls (Claude Code hooks,
    TypeScript and other agents), over a unix socket and optionally HTTP on loopback.

    Stops on SIGTERM or SIGINT (the store is flushed). Exits 1 when another server owns
    the project's socket, 2 on a usage error.
    """
    from charter._cli.serve import parse_http, run_serve, stop_server
    from charter._runtime.project_files import ensure_secret, serve_dir

    root = os.path.realpath(project_dir)
    folder = Path(serve_dir(root))
    if stop:
        done, text = stop_server(folder)
        click.echo(f"charter serve: {text}")
        raise SystemExit(EXIT_OK if done else EXIT_FOUND)
    if print_token:
        click.echo(ensure_secret(folder / "token"))
        raise SystemExit(EXIT_OK)
    address = None
    if http is not None:
        try:
            address = parse_http(http)
        except ValueError as exc:
            _fail(f"charter serve: {exc}")
    files = [str(policy_path(p)) for p in policies]
    raise SystemExit(
        run_serve(
            root,
            policy_files=files,
            store=store_url(store) if store else None,
            agent_id=agent_id,
            http=address,
            allow_remote=allow_remote,
            idle_exit=idle_exit,
        )
    )


@main.command()
@click.option("--store", default=None, help="Where to write the audit trail. " + _STORE_HELP)
@click.option(
    "--signing-key",
    default=None,
    help="Sign the chains' heads with this key (charter keys create), as signing_key= does.",
)
@click.option(
    "--checkpoint-file",
    default=None,
    help="Also append the signed checkpoints to this file (needs --signing-key).",
)
def demo(store: str | None, signing_key: str | None, checkpoint_file: str | None) -> None:
    """Run a scripted agent session against the baseline policies, offline, no key needed.

    Two simulated agents (a coding agent and an email assistant) take steps that Charter
    judges before they run: allowed steps, a warning, approvals answered by a scripted
    approver, a destructive command blocked, a secret redacted from the record, and flow rules
    firing after credentials or untrusted content were read. Nothing is executed: the tools
    are simulated. The audit trail is written, verified, and summarised.
    """
    from charter._cli.demo import run_demo

    if checkpoint_file and not signing_key:
        _fail("charter: --checkpoint-file needs --signing-key: checkpoints are signed")
    location = store_url(store or default_store_location())
    raise SystemExit(
        run_demo(location, store is not None, _console(), signing_key, checkpoint_file)
    )
