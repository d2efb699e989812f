"""Latency through `charter serve`: a decision round trip, and a whole hook process.

    uv run python bench/serve.py [--runs 200] [--hook-runs 30]

Prints p50/p95 of:
- ``hello`` and ``step`` (an allowed ``step.exec``, then its ``record``) from a client
  connected to the project's unix socket: the protocol's round trip, with and without the
  proof a keyed client asks for (target: step p50 <= 1 ms);
- ``charter-claude-hook`` answering PreToolUse in a fresh process (each call followed by its
  PostToolUse, untimed, as in a session), installed with ``--serve``
  and the server running (target p50 <= 25 ms), beside the same hook with no server running
  (it judges in-process) and ``python -c pass``, the floor every process pays; also the
  CPU time of each process, which a loaded machine stretches less than wall time.

Everything runs in a temporary project and home; the server is a real ``charter serve``
subprocess. The machine's load average is printed: figures from a busy machine are only
comparable with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from charter.serve import Client, ClientError, read_key, server_folder

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "examples" / "claude-code" / "policies.yaml"
BIN = Path(sys.executable).parent


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _line(label: str, samples: list[float]) -> str:
    p50 = statistics.median(samples) * 1000
    return f"  {label:<58} p50 {p50:8.3f} ms   p95 {_pct(samples, 0.95) * 1000:8.3f} ms"


def _wait_up(folder: Path, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit(f"charter serve exited: {proc.stderr.read().decode()}")
        try:
            Client(folder / "charter.sock", key=read_key(folder), timeout=5).call("hello")
            return
        except ClientError:
            time.sleep(0.05)
    raise SystemExit("charter serve did not come up")


def _protocol(folder: Path, runs: int) -> None:
    for keyed in (False, True):
        client = Client(folder / "charter.sock", key=read_key(folder) if keyed else None)
        tid = client.call("start_task", {"name": "bench"})["task_id"]
        hello: list[float] = []
        step: list[float] = []
        record: list[float] = []
        for i in range(runs + 20):
            t0 = time.perf_counter()
            client.call("hello")
            t1 = time.perf_counter()
            got = client.call(
                "step",
                {
                    "task_id": tid,
                    "kind": "step.exec",
                    "name": "sh",
                    "input": {"command": f"ls {i}"},
                },
            )
            t2 = time.perf_counter()
            client.call("record", {"action_id": got["action_id"], "outcome": "ok", "output": {}})
            t3 = time.perf_counter()
            if i >= 20:  # warm-up
                hello.append(t1 - t0)
                step.append(t2 - t1)
                record.append(t3 - t2)
        client.call("end_task", {"task_id": tid})
        client.close()
        how = "keyed client (proof checked)" if keyed else "plain client"
        print(f"protocol round trips, {how}, {runs} runs:")
        print(_line("hello", hello))
        print(_line("step (allowed step.exec, judged, intent registered)", step))
        print(_line("record (its outcome, buffered store)", record))


def _hook_args(project: Path, env: dict[str, str]) -> list[str]:
    subprocess.run(
        [
            str(BIN / "charter"),
            "claude",
            "install",
            "--policy",
            str(POLICY),
            "--serve",
            "--project-dir",
            str(project),
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    command = settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    words = shlex.split(command.split(" || ")[0])
    return [str(BIN / "charter-claude-hook"), *words[words.index("--event") :]]


# CPU seconds (user + system) of each timed process, by label: a loaded machine stretches
# wall time, while a process's own CPU time stays close to what an idle run takes.
CPU: dict[str, list[float]] = {}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str], payload: bytes, env: dict[str, str], label: str = "") -> float:
    c0 = _children_cpu()
    t0 = time.perf_counter()
    done = subprocess.run(argv, input=payload, env=env, capture_output=True)
    elapsed = time.perf_counter() - t0
    if label:
        CPU.setdefault(label, []).append(_children_cpu() - c0)
    if done.returncode != 0 or b"deny" in done.stdout:
        raise SystemExit(f"the hook refused: {done.stdout!r} {done.stderr!r}")
    return elapsed


def _call(argv: list[str], env: dict[str, str], project: Path, i: int, label: str = "") -> float:
    """One tool call as Claude Code makes it: PreToolUse (timed), then its PostToolUse."""
    event = {
        "session_id": "bench",
        "cwd": str(project),
        "permission_mode": "default",
        "tool_name": "Bash",
        "tool_input": {"command": f"ls {i}"},
        "tool_use_id": f"toolu_{i}",
    }
    pre = json.dumps({"hook_event_name": "PreToolUse", **event}).encode()
    elapsed = _run(argv, pre, env, label)
    post = {"hook_event_name": "PostToolUse", **event, "tool_response": {"stdout": ""}}
    post_argv = [*argv]
    post_argv[post_argv.index("--event") + 1] = "PostToolUse"
    _run(post_argv, json.dumps(post).encode(), env)
    return elapsed


def _hooks(
    project: Path, env: dict[str, str], folder: Path, runs: int, server: subprocess.Popen[bytes]
) -> None:
    argv = _hook_args(project, env)

    floor = [_run([sys.executable, "-c", "pass"], b"", env, "floor") for _ in range(runs)]
    _call(argv, env, project, -1)  # the server builds its gate on the first call
    status = Client(folder / "charter.sock", key=read_key(folder))
    before = status.call("status")["requests"]
    served = [_call(argv, env, project, i, "served") for i in range(runs)]
    answered = (status.call("status")["requests"] - before - 1) // 2
    status.close()
    server.send_signal(signal.SIGTERM)
    server.wait(60)
    alone = [_call(argv, env, project, 10_000 + i, "alone") for i in range(runs)]
    print(f"Claude Code PreToolUse, one fresh process each, {runs} runs:")
    print(_line("python -c pass (the floor)", floor))
    print(_line("charter-claude-hook, server running", served))
    print(_line("charter-claude-hook, no server (judged in-process)", alone))
    print(f"  (the server answered {answered} of the {runs} served hook calls)")
    print("  CPU of the process itself (the server's work is not in it):")
    for label, name in (
        ("floor", "python -c pass"),
        ("served", "charter-claude-hook, server running"),
        ("alone", "charter-claude-hook, no server"),
    ):
        print(f"    {name:<56} p50 {statistics.median(CPU[label]) * 1000:8.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--hook-runs", type=int, default=30)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="charter-serve-bench-") as tmp:
        base = Path(tmp)
        project, home = base / "proj", base / "home"
        project.mkdir()
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CHARTER_", "CLAUDE_"))}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update(
            HOME=str(home),
            CLAUDE_PROJECT_DIR=str(project),
            PYTHONPYCACHEPREFIX=str(base / "pycache"),
        )
        folder = Path(server_folder(project, env))
        generic = project / "generic.yaml"
        generic.write_text(
            "name: bench\nversion: 1\npolicies:\n  - name: no-rm\n    rule_type: field_matches\n"
            "    severity: critical\n    match: {kinds: [step.exec]}\n"
            "    params: {field: input.command, pattern: 'rm -rf'}\n",
            encoding="utf-8",
        )
        server = subprocess.Popen(
            [
                str(BIN / "charter"),
                "serve",
                "--project-dir",
                str(project),
                "--policy",
                str(generic),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            _wait_up(folder, server)
            _protocol(folder, args.runs)
            _hooks(project, env, folder, args.hook_runs, server)
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
                server.wait(60)


if __name__ == "__main__":
    main()
