"""Plugins: subcommand groups from other distributions, through the `charter.cli` entry point
group. A broken plugin costs a one-line warning, never the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

PLUGIN = '''\
import click


@click.command()
def hello() -> None:
    """Say hello from a plugin."""
    click.echo("hello from a plugin")


NOT_A_COMMAND = 42
'''

ENTRY_POINTS = """\
[charter.cli]
hello = charter_fake_plugins:hello
broken = charter_broken_plugin:group
number = charter_fake_plugins:NOT_A_COMMAND
check = charter_fake_plugins:hello
"""


@pytest.fixture
def plugins(tmp_path: Path) -> dict[str, str]:
    """A fake installed distribution (found on PYTHONPATH) registering four plugins."""
    site = tmp_path / "site"
    info = site / "charter_fake_plugins-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: charter-fake-plugins\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    (site / "charter_fake_plugins.py").write_text(PLUGIN)
    (site / "charter_broken_plugin.py").write_text("raise RuntimeError('this plugin is broken')\n")
    return {"PYTHONPATH": str(site)}


def test_help_lists_plugins_and_warns_once_per_bad_one(cli: Any, plugins: dict[str, str]) -> None:
    run = cli("--help", env=plugins)
    assert run.code == 0, run
    for name in ("hello", "baseline", "claude", "check", "demo"):
        assert f"  {name} " in run.out, name
    warnings = run.err.strip().splitlines()
    assert len(warnings) == 3, run.err
    assert any("'broken'" in w and "RuntimeError: this plugin is broken" in w for w in warnings)
    assert any("'number'" in w and "not a click command" in w for w in warnings)
    assert any("'check'" in w and "built-in" in w for w in warnings)
    assert all(w.startswith("charter: warning: ") for w in warnings)


def test_a_plugin_runs_and_a_broken_one_is_just_missing(cli: Any, plugins: dict[str, str]) -> None:
    hello, broken = cli.all((("hello",), {"env": plugins}), (("broken",), {"env": plugins}))
    assert hello.out.strip() == "hello from a plugin"
    assert broken.code == 2
    assert "could not be loaded" in broken.err and "No such command 'broken'" in broken.err


def test_the_baseline_plugin(cli: Any) -> None:
    run, missing = cli.all(("baseline", "show", "tool-agent"), ("baseline", "path", "nope"))
    assert run.code == 0, run
    assert "deletes-need-approval" in run.out and "Asks before any delete" in run.out
    assert missing.code == 2 and "coding-agent, tool-agent" in missing.err
