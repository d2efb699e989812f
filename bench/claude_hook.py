"""Latency of one Claude Code PreToolUse decision, as Claude Code pays it: a fresh process.

    uv run python bench/claude_hook.py [--runs 30] [--depth 0,200,1000] [--cold]
                                       [--large-chars 1000000]

Prints p50/p95 wall time of:
- ``python -c pass`` and ``python -c "import charter"`` (the floor this process shares),
- ``charter-claude-hook`` answering PreToolUse (allowed and denied calls) on a session whose
  recorded history is `depth` steps deep, pinned as `charter claude install` writes it (the
  policies and templates come from the verified trusted record, no YAML parsed) and unpinned
  (the manifest and the templates parsed on every call),
- ``charter-claude-hook`` answering PreToolUse with a `large-chars` tool input, after a
  UserPromptSubmit of a `large-chars` prompt (one long token, the provenance index's worst
  case), each a fresh session (0 skips it),
- and the median CPU time of each phase inside the hook (``CHARTER_CLAUDE_TIMINGS=1``
  makes the hook print them on stderr; ``total_cpu`` includes interpreter start-up).

Bytecode: installed packages normally have it. This workspace sets PYTHONDONTWRITEBYTECODE,
which would make every process compile Charter from source, so by default the bench gives
its processes a private PYTHONPYCACHEPREFIX (warmed before measuring); ``--cold`` measures
without bytecode instead. The machine's load average is printed: figures taken on a busy
machine are only comparable with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "examples" / "claude-code" / "policies.yaml"
HOOK = shutil.which("charter-claude-hook", path=str(Path(sys.executable).parent))


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Sample(NamedTuple):
    wall: float
    cpu: float


def _line(label: str, samples: list[Sample]) -> str:
    wall = [s.wall for s in samples]
    p50 = statistics.median(wall) * 1000
    p95 = _pct(wall, 0.95) * 1000
    cpu = statistics.median(s.cpu for s in samples) * 1000
    return (
        f"  {label:<44} wall p50 {p50:7.1f} ms  p95 {p95:7.1f} ms   cpu p50 {cpu:6.1f} ms"
        f"  (n={len(samples)})"
    )


def _time(argv: list[str], env: dict[str, str], data: bytes = b"") -> tuple[Sample, bytes, bytes]:
    """(sample, stdout, stderr). The child's CPU time is kept beside the wall time: on a
    loaded machine it is the steadier estimate of what an idle run would take."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, input=data, capture_output=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sample(wall, cpu), done.stdout, done.stderr


def _event(project: Path, session: str, name: str, tool_use_id: str, command: str, **extra):
    return json.dumps(
        {
            "hook_event_name": name,
            "session_id": session,
            "cwd": str(project),
            "permission_mode": "default",
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "tool_use_id": tool_use_id,
            **extra,
        }
    ).encode()


def _seed(project: Path, session: str, depth: int) -> None:
    """Record `depth` file reads in the session's task directly: an already long session
    (reads, so that the example policy's cap on shell commands does not interfere)."""
    import charter

    runner = charter.Runner(
        policies=[],
        agent_id="claude-code",
        audit_location=f"sqlite:///{project}/.charter/audit.db",
        audit_durability="sync",
    )
    gov = charter.Governor(runner=runner)
    tid = gov.start_task(session, name="claude-code-session")
    for i in range(depth):
        path = f"{project}/src/module_{i % 50}.py"
        h = gov.begin_step(
            "step.resource",
            "GET",
            name="Read",
            input={"file_path": path},
            properties={"target": {"path": path, "resolved_path": path}},
            task_id=tid,
        )
        h.complete({"type": "text", "file": {"filePath": path, "content": "x = 1\n" * 40}})
    runner.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--depth", default="0,200,1000", help="history depths to measure")
    parser.add_argument("--cold", action="store_true", help="no bytecode cache")
    parser.add_argument("--large-chars", type=int, default=1_000_000, help="0 skips it")
    parser.add_argument(
        "--no-snapshots",
        action="store_true",
        help="run the hook without a home folder: no history snapshots, every call restores "
        "the session from the whole trail",
    )
    opts = parser.parse_args()
    if HOOK is None:
        raise SystemExit("charter-claude-hook is not installed (uv sync --all-packages)")
    work = Path(tempfile.mkdtemp(prefix="charter-claude-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHARTER_", "CLAUDE_"))}
    # A home of its own: the hook keeps its snapshot key and snapshots there.
    env["HOME"] = str(work / "home")
    if opts.no_snapshots:
        del env["HOME"]
    if opts.cold:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    py = sys.executable
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{'/'.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"{'no bytecode (cold)' if opts.cold else 'bytecode cached'}"
    )
    for _ in range(3):  # warm the bytecode and the OS file cache
        _time([py, "-c", "import charter, charter_claude_code._handler"], env)
    print("floor:")
    floor = [_time([py, "-c", "pass"], env)[0] for _ in range(opts.runs)]
    print(_line("python -c pass", floor))
    allowed_p50: dict[tuple[int, bool], float] = {}
    print(
        _line(
            "python -c 'import charter'",
            [_time([py, "-c", "import charter"], env)[0] for _ in range(opts.runs)],
        )
    )
    print(
        _line(
            "python -c 'import charter, charter_templates'",
            [
                _time([py, "-c", "import charter, charter_templates"], env)[0]
                for _ in range(opts.runs)
            ],
        )
    )

    for depth in [int(d) for d in opts.depth.split(",") if d.strip()]:
        for cache in (True, False):
            project = work / f"proj-{depth}-{int(cache)}"
            project.mkdir()
            session = "bench"
            _seed(project, session, depth)
            run_env = dict(env, CLAUDE_PROJECT_DIR=str(project), CHARTER_CLAUDE_TIMINGS="1")
            argv = [HOOK, "--event", "PreToolUse", "--policy", str(POLICY)]
            post_argv = [HOOK, "--event", "PostToolUse", "--policy", str(POLICY)]
            if cache:
                from charter_claude_code._install import PinOptions, pin_governance

                pin = pin_governance(PinOptions((str(POLICY),), None, str(project)), run_env)
                argv += ["--pin", pin]
                post_argv += ["--pin", pin]
            _time(argv, run_env, _event(project, session, "PreToolUse", "warm", "ls"))
            allowed: list[Sample] = []
            denied: list[Sample] = []
            phases: dict[str, list[float]] = {}
            for i in range(opts.runs):
                tuid = f"toolu_a{i}"
                took, out, err = _time(
                    argv, run_env, _event(project, session, "PreToolUse", tuid, f"ls {i}")
                )
                if json.loads(out) != {}:
                    raise SystemExit(f"unexpected answer {out!r} {err!r}")
                allowed.append(took)
                for line in err.decode().splitlines():
                    if line.startswith("charter-timings "):
                        for k, v in json.loads(line.split(" ", 1)[1]).items():
                            phases.setdefault(k, []).append(v)
                _time(
                    post_argv,
                    run_env,
                    _event(
                        project,
                        session,
                        "PostToolUse",
                        tuid,
                        f"ls {i}",
                        tool_response={"stdout": "a\nb\n"},
                    ),
                )
                took, out, _ = _time(
                    argv,
                    run_env,
                    _event(project, session, "PreToolUse", f"toolu_d{i}", "mkfs.ext4 /dev/sdz"),
                )
                if b'"deny"' not in out:
                    raise SystemExit(f"expected a deny, got {out!r}")
                denied.append(took)
            allowed_p50[depth, cache] = statistics.median(s.wall for s in allowed)
            label = f"depth {depth}, {'pinned' if cache else 'unpinned (YAML parsed per call)'}"
            print(f"hook PreToolUse, {label}:")
            print(_line("allowed (no opinion) + intent saved", allowed))
            print(_line("denied (block recorded, sync commit)", denied))
            parts = ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in phases.items())
            print(f"    phases of the allowed call, median CPU ms: {parts}")
    _ratios(allowed_p50, statistics.median(s.wall for s in floor))
    if opts.large_chars:
        _large(work, env, opts.runs, opts.large_chars)
    shutil.rmtree(work, ignore_errors=True)


def _ratios(allowed: dict[tuple[int, bool], float], floor: float) -> None:
    """The figures the targets are stated in, from this run: the allowed call's p50 over
    ``python -c pass`` (the same load), and the deepest history over the shallowest (target:
    depth 1,000 within 1.2x of depth 10)."""
    print("ratios (allowed call, wall p50):")
    for (depth, cache), p50 in allowed.items():
        kind = "pinned" if cache else "unpinned"
        print(f"  depth {depth}, {kind}: {p50 / floor:5.2f}x python -c pass")
    depths = sorted({d for d, _ in allowed})
    if len(depths) > 1:
        for cache in (True, False):
            low, high = allowed.get((depths[0], cache)), allowed.get((depths[-1], cache))
            if low and high:
                kind = "pinned" if cache else "unpinned"
                print(f"  depth {depths[-1]} / depth {depths[0]}, {kind}: {high / low:5.2f}x")


def _large(work: Path, env: dict[str, str], runs: int, chars: int) -> None:
    project = work / "proj-large"
    project.mkdir()
    run_env = dict(env, CLAUDE_PROJECT_DIR=str(project))
    token = "x" * (chars - 40) + "@example"  # no dot: the e-mail pattern's worst case
    prompts: list[Sample] = []
    pres: list[Sample] = []
    fetches: list[Sample] = []
    for i in range(runs):
        session = f"large-{i}"
        prompt = {
            "hook_event_name": "UserPromptSubmit",
            "session_id": session,
            "cwd": str(project),
            "prompt": f"send it to bob@example.com {token}",
        }
        argv = [HOOK, "--event", "UserPromptSubmit", "--policy", str(POLICY)]
        took, out, err = _time(argv, run_env, json.dumps(prompt).encode())
        prompts.append(took)
        argv = [HOOK, "--event", "PreToolUse", "--policy", str(POLICY)]
        command = f"echo {'y' * (chars - 20)} > out.txt"
        took, out, err = _time(argv, run_env, _event(project, session, "PreToolUse", "t", command))
        if b"permissionDecision" not in out and json.loads(out or b"null") != {}:
            raise SystemExit(f"unexpected answer {out!r} {err!r}")
        pres.append(took)
        fetch = {
            "hook_event_name": "PreToolUse",
            "session_id": session,
            "cwd": str(project),
            "permission_mode": "default",
            "tool_name": "WebFetch",
            "tool_input": {"url": "https://example.com/", "prompt": "summarise"},
            "tool_use_id": "f",
        }
        took, out, err = _time(argv, run_env, json.dumps(fetch).encode())
        if json.loads(out or b"null") != {}:  # the user named the host: no opinion
            raise SystemExit(f"unexpected answer {out!r} {err!r}")
        fetches.append(took)
    print(f"hook on {chars:,}-character inputs, fresh session each:")
    print(_line(f"UserPromptSubmit, {chars:,}-character prompt", prompts))
    print(_line(f"PreToolUse, {chars:,}-character command after it", pres))
    print(_line("PreToolUse WebFetch after it (provenance index)", fetches))


if __name__ == "__main__":
    main()
