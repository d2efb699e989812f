"""``charter baseline list | show NAME | path NAME``, mounted by ``charter`` through the
``charter.cli`` entry point group."""

from __future__ import annotations

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


@baseline.command(name="list")
def list_() -> None:
    """List the baselines with their description and policy count."""
    from rich.table import Table
    from rich.text import Text

    from charter_baseline import baseline_description, baseline_names, load_baseline_policies

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
def show(name: str) -> None:
    """Show each policy of baseline NAME: what it stops, its rule and severity."""
    from rich.table import Table
    from rich.text import Text

    from charter_baseline import baseline_description, baseline_path, load_baseline_policies

    try:
        path = baseline_path(name)
    except ValueError as exc:
        raise _unknown(exc) from None
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
