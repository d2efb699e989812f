"""The ``charter-claude-hook`` process: one event on stdin, one answer, never a crash.

Claude Code treats a hook that crashes, exits with an unexpected code or times out as a
non-blocking error, which lets the tool call through. So this process catches everything
and answers in the event's contract (see `_answers`), and a watchdog thread answers on its
own (deny, for PreToolUse) if the call has not finished within ``--deadline`` seconds, well
before Claude Code's hook timeout would kill it. Imports are kept lazy: the whole process
lifetime is the user's latency on every tool call.

Command line (written by ``charter claude install``)::

    charter-claude-hook --event PreToolUse --policy /abs/policies.yaml [--baseline NAME]
        [--auto-approve] [--deadline 10] [--project-dir DIR] [--audit LOCATION]
        [--agent-id ID] [--max-output-chars N] [--pin sha256:DIGEST]
        [--enforcement enforce|monitor] [--fail-mode closed|open] [--serve sha256:DIGEST]
        [--no-cache] [--doctor]

``--serve`` asks the project's decision server (``charter serve``) first; it names the
digest of the server key the hook trusts (see `_serve`). ``--pin`` is the digest of the
trusted policy set; ``--enforcement`` and ``--fail-mode`` are the only way to choose
monitor mode or fail-open (``CHARTER_ENFORCEMENT`` and ``CHARTER_FAIL_MODE`` are ignored,
and so is a manifest's ``enforcement``).

``--doctor`` prints the policy and store status as JSON instead of handling an event.
With ``CHARTER_CLAUDE_TIMINGS=1`` in the environment the hook adds the CPU milliseconds of
each phase to stderr (``charter-timings {...}``), for ``bench/claude_hook.py``.
"""

from __future__ import annotations

import _thread
import os
import sys

# typing, collections.abc and threading are not imported (the watchdog is a _thread, the
# lower layer threading builds on): a hook answered by the decision server never needs
# them, and this process's lifetime is the user's wait on every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn

__all__ = ["main", "parse_args"]

_USAGE = (
    "usage: charter-claude-hook [--event NAME] [--policy FILE]... [--baseline NAME] "
    "[--auto-approve] [--deadline SECONDS] [--project-dir DIR] [--audit LOCATION] "
    "[--agent-id ID] [--max-output-chars N] [--pin sha256:DIGEST] [--enforcement enforce|monitor] "
    "[--fail-mode closed|open] [--serve sha256:DIGEST] [--no-cache] [--doctor]"
)


class _Args:
    __slots__ = ("config_kw", "doctor", "event")

    def __init__(self) -> None:
        self.event: str | None = None
        self.doctor = False
        self.config_kw: dict[str, object] = {}


def parse_args(argv: Sequence[str]) -> _Args:
    """Parse the hook's command line; raises ValueError (never exits) on a bad argument.

    argparse would exit with status 2 on an error, which Claude Code reads as "block" for
    some events and "keep working" for Stop, so the hook parses its few options itself.
    """
    args = _Args()
    files: list[str] = []
    kw = args.config_kw
    it = iter(argv)
    for arg in it:
        name, eq, inline = arg.partition("=")
        takes_value = name in (
            "--event",
            "--policy",
            "--baseline",
            "--deadline",
            "--project-dir",
            "--audit",
            "--agent-id",
            "--max-output-chars",
            "--pin",
            "--enforcement",
            "--fail-mode",
            "--serve",
        )
        if takes_value:
            value = inline if eq else next(it, None)
            if value is None or value == "":
                raise ValueError(f"{name} needs a value; {_USAGE}")
            if name == "--event":
                args.event = value
            elif name == "--policy":
                files.append(value)
            elif name == "--baseline":
                kw["baseline"] = value
            elif name == "--deadline":
                try:
                    seconds = float(value)
                except ValueError:
                    seconds = -1.0
                if not 0 < seconds < 3600:
                    raise ValueError(f"--deadline {value!r}: give seconds, e.g. --deadline 10")
                kw["deadline"] = seconds
            elif name == "--project-dir":
                kw["project_dir"] = value
            elif name == "--audit":
                kw["audit_location"] = value
            elif name == "--agent-id":
                kw["agent_id"] = value
            elif name == "--pin":
                if not value.startswith("sha256:") or len(value) != 71:
                    raise ValueError(f"--pin {value!r}: reinstall (charter claude install)")
                kw["pin"] = value
            elif name == "--serve":
                if not value.startswith("sha256:") or len(value) != 71:
                    raise ValueError(
                        f"--serve {value!r}: reinstall (charter claude install --serve)"
                    )
                kw["serve"] = value
            elif name == "--enforcement":
                if value not in ("enforce", "monitor"):
                    raise ValueError(f"--enforcement {value!r}: use enforce or monitor")
                kw["enforcement"] = value
            elif name == "--fail-mode":
                if value not in ("closed", "open"):
                    raise ValueError(f"--fail-mode {value!r}: use closed or open")
                kw["fail_mode"] = value
            else:
                if not value.isdigit() or int(value) < 1:
                    raise ValueError(f"--max-output-chars {value!r}: give a positive number")
                kw["max_output_chars"] = int(value)
        elif arg == "--auto-approve" and not eq:
            kw["auto_approve"] = True
        elif arg == "--no-cache" and not eq:
            kw["cache"] = False
        elif arg == "--doctor" and not eq:
            args.doctor = True
        else:
            raise ValueError(f"unknown argument {arg!r}; {_USAGE}")
    if files:
        kw["policy_files"] = tuple(files)
    return args


class _Emitter:
    """Writes exactly one answer and ends the process; the watchdog and the main thread race
    for it and the first one wins."""

    def __init__(self, event: str | None) -> None:
        self.event = event
        self._lock = _thread.allocate_lock()
        self._done = False

    def emit(self, code: int, stdout: str, stderr: str) -> NoReturn:
        with self._lock:
            if not self._done:
                self._done = True
                self._write(code, stdout, stderr)
        # The other thread answered first and is ending the process: wait for it forever.
        forever = _thread.allocate_lock()
        forever.acquire()
        forever.acquire()
        raise AssertionError("unreachable")

    def _write(self, code: int, stdout: str, stderr: str) -> NoReturn:
        try:
            if stdout:
                _write_all(1, stdout.encode("utf-8", "replace"))
            if stderr:
                _write_all(2, (stderr.rstrip("\n") + "\n").encode("utf-8", "replace"))
        except BaseException as exc:
            # Imported only here: the answers module costs a fresh process milliseconds.
            fallback, text = 2, b"Charter: the hook could not answer\n"
            try:
                from charter_claude_code._answers import last_resort

                fallback, text = last_resort(self.event, f"the answer could not be written ({exc})")
            finally:
                try:
                    _write_all(2, text)
                finally:
                    os._exit(fallback)
        # os._exit: the answer is out and every record is committed; interpreter teardown
        # would only add latency (and atexit flushes have nothing left to do).
        os._exit(code)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run one hook call: read the event from stdin, answer on stdout, exit.

    Exit status is 0 with a JSON answer in every case Charter can express (including its
    own failures, which deny or block); 2 only when no answer could be written for an event
    that exit 2 refuses, or when the event is unknown.
    """
    import gc
    import time

    # The process lives for one call and ends with os._exit: the default threshold runs
    # about fifty young collections over what the imports allocate, a few ms of the user's
    # wait for nothing. A high threshold, not gc.disable(), so that a huge tool input that
    # makes cycles still has its memory bounded.
    gc.set_threshold(100_000)

    started = time.perf_counter()
    started_mono = time.monotonic()
    raw_args = list(sys.argv[1:] if argv is None else argv)
    event_hint = _event_hint(raw_args)
    emitter = _Emitter(event_hint)
    try:
        args = parse_args(raw_args)
    except ValueError as exc:
        from charter_claude_code._answers import failure

        answer = failure(event_hint, str(exc))
        emitter.emit(answer.exit_code, answer.stdout, answer.stderr)
    if args.doctor:
        # A diagnosis answers no event, so it needs no watchdog: it may take its time.
        code, text = _doctor(args)
        emitter.emit(code, text, "")
    deadline = float(args.config_kw.get("deadline", 10.0))  # type: ignore[arg-type]
    _thread.start_new_thread(
        _watchdog,
        (emitter, deadline, max(0.0, deadline - (time.monotonic() - started_mono))),
    )
    timings: dict[str, float] | None = {} if os.environ.get("CHARTER_CLAUDE_TIMINGS") else None
    try:
        raw = sys.stdin.buffer.read()
        if "serve" in args.config_kw:
            # The project's decision server, when it is up and proves who it is; else (None)
            # this process judges the call itself, inside the same deadline.
            from charter_claude_code._client import ask_server

            left = deadline - (time.monotonic() - started_mono)
            served = ask_server(raw_args, args.config_kw, raw, min(3.0, 0.3 * left))
            if served is not None:
                emitter.emit(*served)

        from charter.integration import json_loads

        from charter_claude_code._handler import HookConfig, handle_event

        try:
            event = json_loads(raw)
        except ValueError as exc:
            from charter_claude_code._answers import failure

            answer = failure(event_hint, f"the hook input is not JSON ({exc})")
        else:
            config = HookConfig(**args.config_kw)  # type: ignore[arg-type]
            answer = handle_event(
                event, config, registered_as=args.event, timings=timings, started=started_mono
            )
    except BaseException as exc:  # including KeyboardInterrupt: the answer still goes out
        from charter_claude_code._answers import failure

        answer = failure(event_hint, f"internal error ({type(exc).__name__}: {exc})")
    stderr = answer.stderr
    if timings is not None:
        from charter_claude_code._answers import json_text

        timings["total_cpu"] = time.process_time() * 1000
        timings["total_wall"] = (time.perf_counter() - started) * 1000
        stderr += "\ncharter-timings " + json_text({k: round(v, 2) for k, v in timings.items()})
    emitter.emit(answer.exit_code, answer.stdout, stderr)


def _event_hint(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--event" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--event="):
            return arg.partition("=")[2]
    return None


def _watchdog(emitter: _Emitter, deadline: float, wait: float) -> None:
    # A lock nobody releases: the wait ends after `wait` seconds (the process usually
    # exits well before, taking this thread with it).
    never = _thread.allocate_lock()
    never.acquire()
    if not never.acquire(timeout=wait):
        _timed_out(emitter, deadline)


def _timed_out(emitter: _Emitter, deadline: float) -> None:
    from charter_claude_code._answers import failure

    answer = failure(
        emitter.event,
        f"the decision took longer than {deadline:g} s (--deadline); the store or the "
        "session lock may be stuck (run: charter claude doctor)",
    )
    emitter.emit(answer.exit_code, answer.stdout, answer.stderr)


def _doctor(args: _Args) -> tuple[int, str]:
    import json

    try:
        from charter_claude_code._doctor import hook_status
        from charter_claude_code._handler import HookConfig

        status = hook_status(HookConfig(**args.config_kw))  # type: ignore[arg-type]
    except BaseException as exc:
        status = {"ok": False, "problem": f"{type(exc).__name__}: {exc}"}
    return (0 if status.get("ok") else 1), json.dumps(status, indent=1, sort_keys=True) + "\n"
