"""``charter baseline list | show NAME | path NAME``, mounted by ``charter`` through the
``charter.cli`` entry point group."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

__all__ = ["baseline"]


def _console() -> Any:
    from rich.console import Console

    # Piped output keeps long lines instead of rich's 80 columns.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def _unknown(exc: ValueError) -> click.ClickException:
    # Exit 2, as every charter command does when it cannot run on what it was given.
    error = click.ClickException(str(exc))
    error.exit_code = 2
    return error


@click.group(name="baseline", context_settings={"help_option_names": ["-h", "--help"]})
def baseline() -> None:
    """The shipped baseline policy sets (coding-agent, tool-agent)."""


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def _plain(rows: list[list[str]]) -> str:
    """Aligned columns without box drawing, for output that is not a terminal."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


@baseline.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print the baselines as JSON.")
def list_(as_json: bool) -> None:
    """List the baselines with their description and policy count."""
    from rich.table import Table
    from rich.text import Text

    from charter_baseline import baseline_description, baseline_names, load_baseline_policies

    if as_json:
        _echo_json(
            [
                {
                    "name": name,
                    "policies": len(load_baseline_policies(name)),
                    "description": baseline_description(name),
                }
                for name in baseline_names()
            ]
        )
        return
    if not sys.stdout.isatty():
        rows = [["baseline", "policies", "description"]]
        for name in baseline_names():
            rows.append([name, str(len(load_baseline_policies(name))), baseline_description(name)])
        click.echo(_plain(rows))
        return

    table = Table(show_lines=False)
    table.add_column("baseline", no_wrap=True)
    table.add_column("policies", justify="right")
    table.add_column("description")
    for name in baseline_names():
        table.add_row(
            Text(name),
            Text(str(len(load_baseline_policies(name)))),
            Text(baseline_description(name)),
        )
    _console().print(table)


@baseline.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the baseline's policies as JSON.")
def show(name: str, as_json: bool) -> None:
    """Show each policy of baseline NAME: what it stops, its rule and severity."""
    from rich.table import Table
    from rich.text import Text

    from charter_baseline import baseline_description, baseline_path, load_baseline_policies

    try:
        path = baseline_path(name)
    except ValueError as exc:
        raise _unknown(exc) from None
    if as_json:
        _echo_json(
            {
                "name": name,
                "path": str(path),
                "description": baseline_description(name),
                "policies": [p.to_dict() for p in load_baseline_policies(name)],
            }
        )
        return
    if not sys.stdout.isatty():
        click.echo(f"{name}  {path}")
        click.echo(baseline_description(name))
        rows = [["policy", "severity", "rule", "what it stops and why"]]
        for p in load_baseline_policies(name):
            severity = p.severity.value + (", asks" if p.action == "ask" else "")
            rows.append([p.name, severity, p.rule_type, " ".join((p.description or "").split())])
        click.echo(_plain(rows))
        return
    out = _console()
    out.print(Text(f"{name}  {path}", style="bold"))
    out.print(Text(baseline_description(name)))
    table = Table(show_lines=True)
    table.add_column("policy", no_wrap=True)
    table.add_column("severity")
    table.add_column("rule")
    table.add_column("what it stops and why")
    for p in load_baseline_policies(name):
        severity = p.severity.value + (", asks" if p.action == "ask" else "")
        table.add_row(Text(p.name), Text(severity), Text(p.rule_type), Text(p.description or ""))
    out.print(table)


@baseline.command()
@click.argument("name")
def path(name: str) -> None:
    """Print the manifest file of baseline NAME (for --policy, or to copy and adapt)."""
    from charter_baseline import baseline_path

    try:
        click.echo(str(baseline_path(name)))
    except ValueError as exc:
        raise _unknown(exc) from None
