"""The hook's side of ``charter serve``: the ``claude.hook`` operation and its thin client.

**Server side.** charter-claude-code adds one operation to the project's decision server
(the ``charter.serve`` entry point): ``claude.hook`` takes the hook's own command line, the
event and the few environment variables the hook reads, and answers exactly what the hook
process would have printed, by running the same `handle_event` with a Gate lent by
`GateCache`. The event comes as JSON (``event``) or as the hex of the bytes the hook read
(``event_hex``), and with ``"reply": "frame"`` the answer is a frame of bytes
(`charter_claude_code._client.frame_result`) that the hook reads without a JSON parser.
The Gate lives as long as the server (policies compiled, store open, the
session's history in memory), so a call costs the judgement and the record, not the
start-up. Everything else is as in a hook process: the session lock, the session state
file, sync durability. The one-shot hooks that run when the server is down (or slow) and
the server therefore interleave safely: before each call the server checks the store's head
of the session's chain against the record it wrote last and restores the session from the
store when another process wrote since (`Gate.resync_task`); a store file replaced or
deleted under it gets a new Gate.

**Client side** (`charter_claude_code._client`, run by ``charter-claude-hook`` installed
with ``--serve``). The governed agent is the adversary, and it runs as the same user as the
hook and the server, so it could try to bind a fake server to the socket path and answer
"allow". The hook therefore trusts an answer only when:

- the socket's peer runs as this user or root (SO_PEERCRED);
- it carries a proof, HMAC-SHA256 under the server key over a nonce the hook drew for this
  call and the whole answer: only a process holding the key can produce it;
- the key is the one a person pinned: ``--serve sha256:<digest of the key>`` is on the hook
  command (``charter claude install --serve``), which the agent cannot change during the
  session; a key replaced on disk no longer matches and the server is not asked;
- the answer says it was judged with this hook's own pin, enforcement and fail mode.

The key lives in ``~/.charter/serve/<project key>/key`` (0600, folder 0700, outside the
project); the always-on self-protection policy refuses writes to it and Bash commands that
name it, and refuses Read, Grep, Glob, LS and NotebookRead there. What no text reading can
stop, a program that builds the path at run time, is the same limit as for the rest of
Charter's files (see `_trust`); against it, run the agent as another user or in a sandbox.

Whatever goes wrong (no server, a bad proof, a timeout, a dropped connection, an error
answer), the hook judges the call in-process as it does without a server, within the same
deadline: a server never turns into an allow that the hook itself would not give.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["OP", "GateCache", "ops"]

from charter_claude_code._client import OP, frame_result, hook_environ


def _store_stamp(location: str) -> tuple[int, int] | None:
    if not location.startswith(("sqlite:///", "jsonl:///")):
        return None
    try:
        st = os.stat(location.split(":///", 1)[1])
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _path_stamp(paths: list[str]) -> tuple[tuple[int, int, int, int] | None, ...]:
    """Each path's (device, inode, mode, ctime) without following a last symlink; None for
    a missing one."""
    out: list[tuple[int, int, int, int] | None] = []
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_dev, st.st_ino, st.st_mode, st.st_ctime_ns))
    return tuple(out)


class GateCache:
    """Long-lived Gates of the decision server, one per hook configuration and project.

    A Gate is rebuilt when its store file is replaced or deleted (its connection would
    otherwise write to a file no other process reads). Gates it replaced are closed with
    the cache. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gates: dict[Any, tuple[Any, Any, Any, tuple[int, int] | None]] = {}
        self._retired: list[Any] = []
        self._protected: dict[Any, tuple[Any, Any]] = {}

    def get(
        self, config: Any, root: str, environ: Mapping[str, str], state_dir: str
    ) -> tuple[Any, Any, Any]:
        from charter_claude_code._handler import open_gate

        key = (config, root, tuple(sorted(hook_environ(environ).items())))
        with self._lock:
            found = self._gates.get(key)
            if found is not None:
                gate, source, settings, stamp = found
                if stamp == _store_stamp(settings.audit_location) and stamp is not None:
                    return gate, source, settings
                self._retired.append(gate)
                del self._gates[key]
            gate, source, settings = open_gate(config, root, environ, state_dir, templates=True)
            self._gates[key] = (gate, source, settings, _store_stamp(settings.audit_location))
            return gate, source, settings

    def protected(
        self, root: str, files: list[str], audit_location: str, environ: Mapping[str, str]
    ) -> Any:
        """`protected_for` of the project `root`, computed once and kept while the paths it
        starts from are the same entries: each one's lstat identity is checked on every
        call (a few system calls instead of resolving every path again), so a folder or
        file replaced by a symlink, or created since, computes it afresh."""
        from charter_claude_code._protect import protected_for

        home = environ.get("HOME") or os.path.expanduser("~")
        key = (root, tuple(files), audit_location, home)
        stamp = _path_stamp(
            [
                root,
                os.path.join(root, ".charter"),
                os.path.join(root, ".claude"),
                os.path.join(home, ".charter"),
                os.path.join(home, ".claude"),
                *files,
            ]
        )
        with self._lock:
            found = self._protected.get(key)
            if found is not None and found[0] == stamp:
                return found[1]
        computed = protected_for(root, files, audit_location, environ)
        with self._lock:
            self._protected[key] = (stamp, computed)
        return computed

    def close(self) -> None:
        with self._lock:
            gates = [g for g, *_ in self._gates.values()] + self._retired
            self._gates.clear()
            self._retired = []
        for gate in gates:
            gate.governor.close(5.0)


def ops(service: Any) -> dict[str, Any]:
    """The operations charter-claude-code adds to ``charter serve`` (entry point)."""
    cache = GateCache()
    service.on_close(cache.close)

    def hook(params: dict[str, Any]) -> dict[str, Any]:
        import time

        from charter_claude_code._handler import HookConfig, handle_event, project_root
        from charter_claude_code._hook import parse_args

        argv = params.get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError("params.argv must be the hook's command line, a list of text")
        event = params.get("event")
        hexed = params.get("event_hex")
        if hexed is not None and event is None:
            # The bytes the hook read, as it read them (its client does not parse JSON).
            if not isinstance(hexed, str):
                raise ValueError("params.event_hex must be the hex of the hook's input")
            try:
                event = json.loads(bytes.fromhex(hexed))
            except ValueError as exc:
                raise ValueError(f"params.event_hex is not the hex of JSON ({exc})") from None
        if not isinstance(event, dict):
            raise ValueError("params.event must be the hook's input, a JSON object")
        reply = params.get("reply")
        if reply not in (None, "frame"):
            raise ValueError('params.reply must be "frame" or absent')
        env = params.get("env") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError("params.env must be an object of text values")
        budget = params.get("budget")
        args = parse_args(argv)
        if args.doctor:
            raise ValueError("params.argv: --doctor is answered by the hook itself")
        config = HookConfig(**args.config_kw)  # type: ignore[arg-type]
        root = project_root(event, config, env)
        if root != service.project:
            raise ValueError(
                f"this server decides for project {service.project}, not {root}; start "
                "one in that project (charter serve --project-dir ...)"
            )
        started = None
        if isinstance(budget, (int, float)) and 0 < budget < config.deadline:
            # The client waits `budget` seconds, then judges in-process: answer before that.
            started = time.monotonic() - (config.deadline - float(budget))
        answer = handle_event(
            event, config, registered_as=args.event, environ=env, started=started, gates=cache
        )
        if reply == "frame":
            return frame_result(
                answer.exit_code,
                answer.stdout,
                answer.stderr,
                config.pin,
                config.enforcement,
                config.fail_mode,
            )
        return {
            "exit_code": answer.exit_code,
            "stdout": answer.stdout,
            "stderr": answer.stderr,
            "pin": config.pin,
            "enforcement": config.enforcement,
            "fail_mode": config.fail_mode,
        }

    return {OP: hook}
