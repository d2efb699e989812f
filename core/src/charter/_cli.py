"""The `charter` command: check manifests, explain decisions, read and verify audit trails."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

__all__ = ["main"]


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="charter", prog_name="charter")
def main() -> None:
    """Charter: govern what AI agents do, before they do it, and prove it afterwards."""


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
def check(files: tuple[Path, ...]) -> None:
    """Validate policy manifests; print every error with file, policy, rule and key.

    Exits 1 when any file has an error.
    """
    from charter._manifest import read_manifests

    out = _console()
    failed = 0
    for result in read_manifests(list(files)):
        if result.valid:
            n = len(result.policies)
            mode = " (monitor)" if result.enforcement == "monitor" else ""
            out.print(
                f"[green]ok[/green]   {result.source}: {result.name} v{result.version}, "
                f"{n} polic{'y' if n == 1 else 'ies'}{mode}"
            )
        else:
            failed += 1
            out.print(f"[red]FAIL[/red] {result.source}: {len(result.errors)} error(s)")
            for err in result.errors:
                out.print(f"  - {err}", markup=False)
    if failed:
        raise SystemExit(1)


@main.command()
def schema() -> None:
    """Print the manifest JSON Schema (built from the registered rules), for editors."""
    from charter._schema import manifest_schema

    click.echo(json.dumps(manifest_schema(), indent=2, sort_keys=True))


@main.command()
@click.option(
    "--policy", "policy_files", multiple=True, required=True, type=click.Path(path_type=Path),
    help="Manifest file(s) to judge with.",
)
@click.option("--environment", default=None, help="Environment of the evaluation context.")
@click.option("--project-root", default=None, help="Project root for path rules.")
@click.argument("behavior_file", type=click.Path(path_type=Path))
def explain(
    policy_files: tuple[Path, ...],
    environment: str | None,
    project_root: str | None,
    behavior_file: Path,
) -> None:
    """Show the decision on one step (a behavior as JSON) and why, policy by policy.

    BEHAVIOR_FILE holds one behavior in wire form (kind, verb, step_name, input, properties...);
    `-` reads it from standard input. Exits 0 for allow/warn, 2 for ask, 3 for block.
    """
    from charter._behavior import Behavior
    from charter._context import EvalContext
    from charter._engine import PolicyEngine
    from charter._errors import PolicyLoadError
    from charter._manifest import load_manifest_policies

    err = _console(stderr=True)
    try:
        policies = load_manifest_policies(list(policy_files))
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
    context = EvalContext(
        agent_id=behavior.agent_id,
        task_id=behavior.task_id,
        environment=environment,
        project_root=project_root,
    )
    click.echo(engine.explain(behavior, context))
    decision = engine.evaluate(behavior, context).decision.value
    raise SystemExit({"allow": 0, "warn": 0, "ask": 2, "block": 3}[decision])
