"""``charter claude install | uninstall | doctor`` (also available as ``charter-claude``).

A click group registered under the ``charter.cli`` entry point group, so the core
``charter`` command can mount it as ``charter claude`` without importing this package
until it is used.
"""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["claude"]


def _scope_options(func: click.decorators.FC) -> click.decorators.FC:
    func = click.option(
        "--settings-file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Use this settings file instead of the one the scope names.",
    )(func)
    func = click.option(
        "--project-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=".",
        show_default=True,
        help="The project whose .claude/ folder is meant.",
    )(func)
    func = click.option(
        "--user", "scope", flag_value="user", help="~/.claude/settings.json (every project)."
    )(func)
    func = click.option(
        "--local",
        "scope",
        flag_value="local",
        help=".claude/settings.local.json (this project, not committed).",
    )(func)
    return click.option(
        "--project",
        "scope",
        flag_value="project",
        default=True,
        help=".claude/settings.json (this project, shared; the default).",
    )(func)


def _target(scope: str, project_dir: Path, settings_file: Path | None) -> Path:
    from charter_claude_code._install import settings_path

    return settings_file if settings_file is not None else settings_path(scope, project_dir)


@click.group(name="claude", context_settings={"help_option_names": ["-h", "--help"]})
def claude() -> None:
    """Govern Claude Code: hooks that judge every tool call before it runs."""


@claude.command()
@_scope_options
@click.option(
    "--policy",
    "policies",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Policy manifest (YAML); repeat for several.",
)
@click.option("--baseline", default=None, help="A baseline policy set, e.g. coding-agent.")
@click.option(
    "--auto-approve",
    is_flag=True,
    help="Answer 'allow' for allowed steps, skipping Claude Code's own permission prompt.",
)
@click.option(
    "--timeout",
    type=click.IntRange(min=3),
    default=30,
    show_default=True,
    help="Hook timeout in seconds; the hook denies on its own after a third of it.",
)
@click.option(
    "--enforcement",
    type=click.Choice(["enforce", "monitor"]),
    default="enforce",
    show_default=True,
    help="monitor: judge and record only (pinned; no manifest or variable can change it).",
)
@click.option(
    "--fail-mode",
    type=click.Choice(["closed", "open"]),
    default="closed",
    show_default=True,
    help="open: run steps ungoverned when Charter cannot decide (pinned like --enforcement).",
)
@click.option(
    "--hook-command",
    default=None,
    help="The program part of the hook command, e.g. "
    "'uv run --project \"$CLAUDE_PROJECT_DIR\" charter-claude-hook'.",
)
@click.option(
    "--serve",
    is_flag=True,
    help="Ask the project's decision server first (charter serve; the SessionStart hook "
    "starts it when it is not running). The server key is created and pinned.",
)
def install(
    scope: str,
    project_dir: Path,
    settings_file: Path | None,
    policies: tuple[Path, ...],
    baseline: str | None,
    auto_approve: bool,
    timeout: int,
    enforcement: str,
    fail_mode: str,
    hook_command: str | None,
    serve: bool,
) -> None:
    """Register Charter's hook for every Claude Code event in a settings file.

    Keeps every other setting and hook, backs the file up first, and is safe to run again
    (to change the policies, for instance). Exits 1 when the policies do not load.
    """
    from charter import PolicyLoadError, load_manifest_policies

    from charter_claude_code._install import SettingsError, install_hooks
    from charter_claude_code._policies import ConfigError, baseline_policies
    from charter_claude_code._trust import TrustError

    if serve and scope == "user" and settings_file is None:
        raise click.UsageError(
            "--serve pins one project's server key: install it in that project's settings "
            "(--project or --local), not --user"
        )
    if not policies and not baseline:
        raise click.UsageError(
            "give --policy FILE (a manifest) or --baseline NAME: without policies the hook "
            "would deny every tool call"
        )
    try:
        names = [p.name for p in load_manifest_policies(list(policies))] if policies else []
        if baseline:
            names += [p.name for p in baseline_policies(baseline)]
    except (PolicyLoadError, ConfigError) as exc:
        click.echo(f"charter claude install: {exc}", err=True)
        raise SystemExit(1) from None
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        click.echo(
            "charter claude install: policy names must be unique across the baseline and "
            f"the files, and these repeat: {', '.join(clashes)}; rename them in your file "
            "(or drop the policies the baseline already has)",
            err=True,
        )
        raise SystemExit(1)
    path = _target(scope, project_dir, settings_file)
    try:
        result = install_hooks(
            path,
            policy_files=[p.resolve() for p in policies],
            baseline=baseline,
            auto_approve=auto_approve,
            timeout=timeout,
            project_dir=project_dir.resolve(),
            enforcement=enforcement,
            fail_mode=fail_mode,
            program=hook_command,
            serve=serve,
        )
    except (SettingsError, TrustError) as exc:
        click.echo(f"charter claude install: {exc}", err=True)
        raise SystemExit(1) from None
    if not result.changed:
        click.echo(f"{path}: Charter's hooks are already installed as asked")
        _compile_bytecode(hook_command)
        return
    click.echo(f"{path}: Charter's hooks installed")
    _compile_bytecode(hook_command)
    if result.backup is not None:
        click.echo(f"  the previous file is kept in {result.backup}")
    click.echo("  restart Claude Code (or review /hooks) so it picks them up;")
    click.echo("  check the install with: charter claude doctor")


def _compile_bytecode(hook_command: str | None) -> None:
    """Compile the hook's modules now, so that no tool call waits for it (see `_bytecode`).

    Only for the default hook program, which runs this interpreter; a --hook-command may run
    another (its bytecode is its own installer's affair, and doctor reports it)."""
    if hook_command is not None:
        return
    from charter_claude_code._bytecode import compile_hook_bytecode

    compiled, failed = compile_hook_bytecode()
    if compiled:
        click.echo(f"  compiled the bytecode of {compiled} of the hook's modules")
    if failed:
        where, why = failed[0]
        click.echo(
            f"charter claude install: the bytecode of {len(failed)} of the hook's modules "
            f"cannot be written ({where}: {why}); each tool call will compile them from source "
            "(about four times slower): run this again as a user who can write there",
            err=True,
        )


@claude.command()
@_scope_options
def trust(scope: str, project_dir: Path, settings_file: Path | None) -> None:
    """Trust the policy set as it is now (run by a person, never by the agent).

    Re-pins the installed hook to the current policy files (their digest, a verified copy)
    and re-anchors the audit trail, keeping every other option of the install. Run it after
    reviewing a policy change, or after the hook reported a missing or replaced trail.
    Restart Claude Code (or review /hooks) afterwards so it runs the re-pinned command.
    """
    import os

    from charter_claude_code._install import SettingsError, install_hooks, installed_options
    from charter_claude_code._trust import TrustError, reset_heads

    path = _target(scope, project_dir, settings_file)
    root = str(project_dir.resolve())
    try:
        found = installed_options(path)
        files = [
            f.replace("$CLAUDE_PROJECT_DIR", root).replace("${CLAUDE_PROJECT_DIR}", root)
            for f in found["policy_files"]
        ]
        hook = found["hook"]
        result = install_hooks(
            path,
            policy_files=[os.path.abspath(os.path.join(root, f)) for f in files],
            baseline=found["baseline"],
            auto_approve=found["auto_approve"],
            timeout=int(found["timeout"]),
            deadline=found["deadline"],
            project_dir=root,
            enforcement=found["enforcement"],
            fail_mode=found["fail_mode"],
            program=hook,
            serve=found["serve"],
        )
        reset = reset_heads(root)
    except (SettingsError, TrustError) as exc:
        click.echo(f"charter claude trust: {exc}", err=True)
        raise SystemExit(1) from None
    click.echo(f"{path}: the policy set as it is now is trusted and pinned")
    if reset:
        click.echo(f"  {reset} session(s) continue from the trail as it is now")
    if result.changed:
        click.echo("  restart Claude Code (or review /hooks) so it runs the re-pinned hook")


@claude.command()
@_scope_options
def uninstall(scope: str, project_dir: Path, settings_file: Path | None) -> None:
    """Remove exactly the hooks `install` added (and nothing else)."""
    from charter_claude_code._install import SettingsError, uninstall_hooks

    path = _target(scope, project_dir, settings_file)
    try:
        removed = uninstall_hooks(path)
    except SettingsError as exc:
        click.echo(f"charter claude uninstall: {exc}", err=True)
        raise SystemExit(1) from None
    click.echo(f"{path}: " + ("Charter's hooks removed" if removed else "no Charter hooks found"))


@claude.command()
@click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The project Claude Code would be started in.",
)
@click.option(
    "--settings-file",
    "settings_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Check these settings files instead of the user, project and local ones.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def doctor(project_dir: Path, settings_files: tuple[Path, ...], as_json: bool) -> None:
    """Check that Claude Code started here would be governed; exits 1 when it would not."""
    from charter_claude_code._doctor import diagnose

    report = diagnose(project_dir, settings_files=list(settings_files) or None)
    if as_json:
        import json

        checks = [{"status": s, "check": w, "detail": d} for s, w, d in report.checks]
        click.echo(json.dumps({"ok": report.ok, "checks": checks}, indent=2, sort_keys=True))
        if not report.ok:
            raise SystemExit(1)
        return
    for line in report.lines():
        click.echo(line)
    if report.ok:
        click.echo("Claude Code started here is governed by Charter.")
        return
    click.echo("Claude Code started here would NOT be governed as intended (see FAIL above).")
    raise SystemExit(1)
