"""One hook call: rebuild the session from the audit store, translate the event, answer.

Translation only: each Claude Code event becomes a `charter.integration.Step` and goes
through a `Gate` (the contract every integration uses); nothing here judges or records on
its own.

- SessionStart opens the audit task of the session (task id from ``session_id``; a session
  resumed after its task was closed continues in ``<session_id>.2``, ``.3``, ...).
- UserPromptSubmit judges and records the prompt as a trusted user message
  (``step.message GET``, ``properties.message.role = user``, ``input.content``), so
  provenance rules can trust what the user typed; a blocked prompt is refused.
- PreToolUse builds the tool step (``Gate.tool_step`` with the ``claude_code`` templates;
  the tool_use_id at ``properties.tool.call_id``, the session at
  ``properties.framework.session_id``) and decides it (``Gate.decide``): Blocked -> deny,
  Pending -> ask (Claude Code asks the user itself; the ask is kept with
  ``Gate.save_pending``), Allowed -> the intent is kept for its outcome (``Gate.intent``).
- PostToolUse / PostToolUseFailure settle that intent (paired by ``tool_use_id``) through
  ``Gate.reopen`` and ``Gate.complete`` / ``fail`` / ``abandon``. A call that Charter asked
  about and that ran anyway was approved in Claude Code's permission prompt: the approval is
  recorded first (``Gate.answer``, a ``step.gate``), then the outcome (``Gate.approved``).
  An outcome with no intent (hooks installed mid-call) is recorded unjudged (``Gate.adopt``).
- Stop settles what the finished turn left open (calls that never reported back were
  rejected or interrupted: abandoned; unanswered asks: ``Gate.expire``, blocked).
  SubagentStop only retries unrecorded outcomes: the parent's calls are still running.
- SessionEnd closes the task (``Gate.end_task``; open intents are recorded as abandoned).

Every call takes the session lock, restores the task (``Gate.resume_task``) and its open
intents (``Gate.reopen``) so history rules judge exactly as they would in one process,
records with sync durability (the next hook process reads what this one wrote), and saves
the side state before the lock is released.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from charter.integration import Answer, Blocked, Gate, Pending, Step, json_dumps, sha256_hex

from charter_claude_code._answers import (
    HOOK_EVENTS,
    HookAnswer,
    blocked_prompt,
    failure,
    notice,
    pre_tool_use,
    silent,
)
from charter_claude_code._policies import ConfigError, PolicySource, policy_source
from charter_claude_code._protect import POLICY_NAME
from charter_claude_code._state import LockTimeout, SessionLock, SessionState, StateError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["FRAMEWORK", "HookConfig", "handle_event", "open_gate", "project_root", "state_dir"]

AGENT_ID = "claude-code"
# properties.framework.name of every step, and the templates tool calls are mapped with.
FRAMEWORK = "claude-code"
TEMPLATE = "claude_code"
TASK_NAME = "claude-code-session"
_TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
_STATE_DIR = "claude-code"
_REASON_MAX = 1000


class HookConfig:
    """How the hook judges: what `charter claude install` writes onto the hook's command line.

    `policy_files` (absolute, or relative to the project) and/or `baseline` name the
    policies; `auto_approve` makes an allowed step answer ``permissionDecision: allow``
    (skipping Claude Code's own permission prompt) instead of no opinion; `deadline` is how
    long a call may take before it denies on its own (keep it well under the hook timeout);
    `project_dir` overrides ``$CLAUDE_PROJECT_DIR`` / the event's cwd; `audit_location` and
    `agent_id` override the defaults (``sqlite:///<project>/.charter/audit.db``,
    ``claude-code``; ``CHARTER_AUDIT_LOCATION`` / ``CHARTER_AGENT_ID`` also work);
    `max_output_chars` sets the core setting of that name (each string of a recorded tool
    response is cut there, so restoring a long session stays fast; default 32,768 or
    ``CHARTER_MAX_OUTPUT_CHARS``); `cache` builds the templates from the verified trusted
    record instead of parsing their YAML. `pin` is the digest of the trusted policy set
    (see `_trust`); `enforcement` and `fail_mode` come only from here (the install), never
    from ``CHARTER_ENFORCEMENT`` / ``CHARTER_FAIL_MODE`` or a manifest. `serve` is the
    digest of the project's decision server key (``--serve sha256:...``): the hook asks
    that server first and trusts only answers proven with that key (see `_serve`). Every
    other setting comes from ``CHARTER_*`` variables.
    """

    # A plain slotted class, immutable and compared by value, not a dataclass: creating
    # one costs every hook process (whose lifetime is the user's wait) about a millisecond.
    __slots__ = _CONFIG_FIELDS = (
        "policy_files",
        "baseline",
        "auto_approve",
        "deadline",
        "project_dir",
        "audit_location",
        "agent_id",
        "max_output_chars",
        "cache",
        "pin",
        "enforcement",
        "fail_mode",
        "serve",
    )
    policy_files: tuple[str, ...]
    baseline: str | None
    auto_approve: bool
    deadline: float
    project_dir: str | None
    audit_location: str | None
    agent_id: str | None
    max_output_chars: int | None
    cache: bool
    pin: str | None
    enforcement: str
    fail_mode: str
    serve: str | None

    def __init__(
        self,
        policy_files: tuple[str, ...] = (),
        baseline: str | None = None,
        auto_approve: bool = False,
        deadline: float = 10.0,
        project_dir: str | None = None,
        audit_location: str | None = None,
        agent_id: str | None = None,
        max_output_chars: int | None = None,
        cache: bool = True,
        pin: str | None = None,
        enforcement: str = "enforce",
        fail_mode: str = "closed",
        serve: str | None = None,
    ) -> None:
        values = locals()
        for name in self._CONFIG_FIELDS:
            object.__setattr__(self, name, values[name])

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"HookConfig is immutable: cannot set {name!r}")

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._CONFIG_FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HookConfig):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._CONFIG_FIELDS)
        return f"HookConfig({inner})"


class _Refusal(Exception):
    """A condition under which this call cannot decide; the message is the reason."""


class _Untrusted(_Refusal):
    """Governance a person must re-establish (``charter claude trust``): action steps are
    denied, and the other events tell the user without refusing them."""


def state_dir(root: str) -> str:
    """Where the hook keeps its per-session state and policy cache for the project `root`."""
    return os.path.join(root, ".charter", _STATE_DIR)


def project_root(event: Mapping[str, Any], config: HookConfig, environ: Mapping[str, str]) -> str:
    """The project this call governs: `config.project_dir`, else ``$CLAUDE_PROJECT_DIR``
    (stable for the whole session, even after the agent changes directory), else the event's
    cwd, else the process's; returned as a real path."""
    raw = config.project_dir or environ.get("CLAUDE_PROJECT_DIR") or event.get("cwd")
    if not isinstance(raw, str) or not raw:
        raw = os.getcwd()
    return os.path.realpath(os.path.expanduser(raw))


def handle_event(
    event: object,
    config: HookConfig | None = None,
    *,
    registered_as: str | None = None,
    environ: Mapping[str, str] | None = None,
    timings: dict[str, float] | None = None,
    started: float | None = None,
    gates: Any = None,
) -> HookAnswer:
    """Judge and record one Claude Code hook event; returns the answer. Never raises.

    `event` is the parsed JSON from stdin; `registered_as` is the event the hook was
    installed for (``--event``), which decides the answer's shape when the input itself is
    unusable. Anything that keeps Charter from deciding becomes `failure` (PreToolUse:
    deny; UserPromptSubmit: block; other events: a message to the user). `started` is the
    `time.monotonic()` at which the process started, from which `config.deadline` counts.
    `gates` (the decision server's `charter_claude_code._serve.GateCache`) lends a
    long-lived Gate instead of building one for this call; its copy of the session is
    checked against the store first, so calls judged elsewhere in between are seen.
    """
    cfg = config or HookConfig()
    env = os.environ if environ is None else environ
    name = registered_as
    if _ungoverned_event(event, registered_as):
        # Notification, PreCompact, PermissionRequest, ...: Charter has no opinion, and a
        # refusal there (exit 2 blocks compaction) would only get in the user's way.
        return silent()
    try:
        name = _event_name(event, registered_as)
        assert isinstance(event, dict)
        deadline_at = (time.monotonic() if started is None else started) + cfg.deadline
        return _Call(event, name, cfg, env, timings, deadline_at, gates).run()
    except Exception as exc:  # the hook's one promise: never a crash, never a silent allow
        from charter_claude_code._trust import TrustError

        if isinstance(exc, (TrustError, _Untrusted)) and name not in (None, "PreToolUse"):
            return notice(name, f"Charter is not governing: {_describe(exc)}")
        return failure(name, _describe(exc))


def _ungoverned_event(event: object, registered_as: str | None) -> bool:
    """True for an event Charter does not govern: registered for one, or naming one."""
    if registered_as is not None:
        return registered_as not in HOOK_EVENTS
    name = event.get("hook_event_name") if isinstance(event, dict) else None
    return isinstance(name, str) and bool(name) and name not in HOOK_EVENTS


def _event_name(event: object, registered_as: str | None) -> str:
    if not isinstance(event, dict):
        raise _Refusal(f"the hook input is not a JSON object (got {type(event).__name__})")
    name = event.get("hook_event_name")
    if not isinstance(name, str):
        raise _Refusal("the hook input has no hook_event_name")
    if name not in HOOK_EVENTS:
        raise _Refusal(
            f"event {name!r} is not one this hook handles ({', '.join(HOOK_EVENTS)}); "
            "check the hook registration (charter claude doctor)"
        )
    if registered_as is not None and registered_as != name:
        raise _Refusal(
            f"the hook was registered for {registered_as} but received {name}; "
            "reinstall it (charter claude install)"
        )
    sid = event.get("session_id")
    if not isinstance(sid, str) or not sid:
        raise _Refusal("the hook input has no session_id")
    return name


def _describe(exc: BaseException) -> str:
    from charter_claude_code._trust import TrustError

    known = (_Refusal, ConfigError, StateError, LockTimeout, ValueError, TrustError)
    text = str(exc).strip() or type(exc).__name__
    charter_error = type(exc).__module__.startswith("charter.") or type(exc).__module__ == "charter"
    if not isinstance(exc, known) and not charter_error:
        text = f"internal error ({type(exc).__name__}: {text})"
    line = " ".join(text.split())
    return line if len(line) <= _REASON_MAX else line[: _REASON_MAX - 1] + "…"


def _key(event: Mapping[str, Any]) -> str:
    """The pairing key of a tool call: its tool_use_id, else a digest of name and input."""
    tuid = event.get("tool_use_id")
    if isinstance(tuid, str) and tuid:
        return tuid
    blob = json_dumps(
        [event.get("tool_name"), event.get("tool_input")], sort_keys=True, default=str
    )
    return "h-" + sha256_hex(blob.encode("utf-8", "surrogatepass"))[:32]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _other_blocks(decision: Blocked) -> str:
    """The policies other than the always-on one that blocked the step, as
    ``policy 'a' (why); policy 'b' (why)``; empty when there are none."""
    from charter import Severity

    if decision.result is None:
        return ""
    return "; ".join(
        f"policy {r.name!r} ({_one_line(r.details or r.description or r.rule_type)})"
        for r in decision.result.results
        if r.violated and r.severity is Severity.CRITICAL and not r.ask and r.name != POLICY_NAME
    )


def _digest(tool_input: Mapping[str, Any]) -> str:
    """The digest a repeated tool_use_id must match to reuse an earlier decision."""
    import charter

    return str(charter.canonical_digest(charter.capture(dict(tool_input))))


class ToolError(Exception):
    """A tool call that Claude Code reported as failed (PostToolUseFailure)."""


class _Call:
    """Everything one hook process does, under the session lock."""

    def __init__(
        self,
        event: dict[str, Any],
        name: str,
        config: HookConfig,
        environ: Mapping[str, str],
        timings: dict[str, float] | None,
        deadline_at: float,
        gates: Any = None,
    ) -> None:
        self.event = event
        self.gates = gates
        self.deadline_at = deadline_at
        self.name = name
        self.config = config
        self.environ = environ
        self.timings = timings
        self.session_id: str = event["session_id"]
        self.root = project_root(event, config, environ)
        cwd = event.get("cwd")
        self.cwd = cwd if isinstance(cwd, str) and cwd else self.root
        self.state_dir = state_dir(self.root)
        self.unrecorded: list[str] = []
        self._mark = time.process_time()

    def _time(self, phase: str) -> None:
        # CPU time, not wall time: on a loaded machine it is what an idle run would take.
        if self.timings is not None:
            now = time.process_time()
            self.timings[phase] = self.timings.get(phase, 0.0) + (now - self._mark) * 1000
            self._mark = now

    # -- the call -------------------------------------------------------------------------------

    def run(self) -> HookAnswer:
        from charter_claude_code._state import session_key

        # Building the gate (imports, policy compilation, opening the store) needs no
        # session state, so it happens before the lock: parallel calls of one session then
        # hold the lock only for restore, judge, record and save.
        self._open_gate()
        try:
            key = session_key(self.session_id)
            lock = SessionLock(os.path.join(self.state_dir, "sessions", f"{key}.lock"))
            # Wait for the lock only as long as leaves time to judge and record before the
            # deadline, so a stuck sibling yields this precise reason, not the watchdog's.
            margin = min(1.0, self.config.deadline * 0.2)
            lock.acquire(max(0.05, self.deadline_at - time.monotonic() - margin))
            self._time("lock")
            try:
                self.state = SessionState.load(
                    os.path.join(self.state_dir, "sessions", f"{key}.json"), self.session_id
                )
                answer = self._dispatch()
                self._note_head()
                if self.gates is None and self.state.task_id:
                    # The next process restores from here without rereading the trail.
                    self.gate.save_snapshot(self.state.task_id)
                    self._time("snapshot")
                self.state.save()
                self._time("save")
            finally:
                lock.release()
        finally:
            if self.gates is None:
                self.gate.governor.close(1.0)
        return answer

    def _note_head(self) -> None:
        tid = self.state.task_id
        if tid:
            self.state.head = max(self.state.head, self.gate.last_seq(tid))

    def _open_gate(self) -> None:
        import charter

        self.charter = charter
        self._time("import")
        if self.gates is not None:
            self.gate, self.policy_source, self.settings = self.gates.get(
                self.config, self.root, self.environ, self.state_dir
            )
            self._time("gate")
            return
        self.gate, self.policy_source, self.settings = open_gate(
            self.config,
            self.root,
            self.environ,
            self.state_dir,
            templates=self.name in _TOOL_EVENTS,
        )
        self.gate.use_snapshots(self.root, self.environ)
        self._time("gate")

    # -- restoring the session ------------------------------------------------------------------

    def _restore(self, *, start: bool) -> str | None:
        """Restore (or, with `start`, open) the session's task; returns its id or None."""
        gate = self.gate
        health = gate.store_health()
        if not health.get("ok"):
            raise _Refusal(f"the audit store {self.settings.audit_location} {health['detail']}")
        if self.config.pin:
            self._check_anchor()
        state = self.state
        base = self.charter.task_id_from(self.session_id)
        tid = state.task_id or base
        while True:
            if self.gates is not None:
                gate.resync_task(tid)
            found = gate.resume_task(tid)
            stored = gate.last_seq(tid)
            if tid == state.task_id and found != "ended" and stored < state.head:
                raise _Refusal(
                    f"the audit store {self.settings.audit_location} holds {stored} "
                    f"steps of task {tid!r}, but {state.head} were recorded: the trail was "
                    "deleted or replaced, and the history rules would start from nothing; "
                    f"restore it, or delete {state.path} to start this session's history anew"
                )
            if found != "ended":
                break
            # The session's task was closed (SessionEnd) and the session goes on (resume):
            # its chain cannot grow, so the session continues in the next task id.
            for table in (
                state.intents,
                state.asks,
                state.pending,
                state.ungoverned,
                state.digests,
            ):
                table.clear()
            if not start:
                state.task_id = tid
                self._time("restore")
                return None
            state.generation = max(state.generation, 1) + 1
            state.head = 0
            tid = f"{base}.{state.generation}"
        if found == "unknown":
            if not start:
                self._time("restore")
                return None
            started = gate.start_task(
                tid,
                name=TASK_NAME,
                input={"source": self.event.get("source") or f"first seen at {self.name}"},
                properties={"claude": self._claude_props(), "framework": self._framework()},
            )
            if isinstance(started, Blocked):
                raise _Refusal(f"the session's task could not start: {started.reason}")
        state.task_id = tid
        self._reconcile(tid)
        self._time("restore")
        return tid

    def _check_anchor(self) -> None:
        """A pinned install's trail must still hold its anchor (see `_trust`)."""
        from charter_claude_code._trust import anchor_marker, has_anchor, write_anchor

        if has_anchor(self.gate):
            return
        marker = anchor_marker(self.root, self.environ)
        if marker is not None and os.path.exists(marker):
            raise _Untrusted(
                f"the audit store {self.settings.audit_location} no longer holds the trail "
                "anchor recorded when this project's governance was trusted: it was deleted, "
                "emptied or replaced, and with it the history the rules judge from; a person "
                "must check it and run: charter claude trust"
            )
        # First call in this project under an install made elsewhere (user or managed
        # settings, a teammate's project settings): the trail starts here.
        write_anchor(self.gate, str(self.config.pin), self.root, self.environ)

    def _reconcile(self, tid: str) -> None:
        """Re-register the intents other processes allowed; drop what the store settled;
        retry outcomes that could not be recorded before."""
        state = self.state
        gate = self.gate

        def used(action_id: Any) -> bool:
            return isinstance(action_id, str) and gate.is_recorded(tid, action_id)

        for key, wire in list(state.asks.items()):
            if used(wire.get("step", {}).get("action_id")):
                del state.asks[key]
        for key, wire in list(state.intents.items()):
            if used(wire.get("action_id")) or wire.get("task_id") != tid:
                del state.intents[key]
                state.pending.pop(key, None)
                continue
            try:
                self.gate.reopen(wire)
            except ValueError:  # the same action twice: keep the first registration
                del state.intents[key]
                state.pending.pop(key, None)
        self.unrecorded = []
        for key, how in list(state.pending.items()):
            if key not in state.intents:
                del state.pending[key]
                continue
            wire = state.intents[key]
            try:
                self._settle_outcome(self.gate.reopen(wire), how)
            except self.charter.AuditError as exc:
                self.unrecorded.append(f"{wire.get('step_name')!r} ({_one_line(str(exc))})")
                continue
            del state.pending[key]
            del state.intents[key]
        self._prune_digests()

    def _prune_digests(self) -> None:
        state = self.state
        open_keys = state.intents.keys() | state.asks.keys() | state.ungoverned.keys()
        for key in [k for k in state.digests if k not in open_keys]:
            del state.digests[key]

    # -- events ---------------------------------------------------------------------------------

    def _dispatch(self) -> HookAnswer:
        name = self.name
        if name == "PreToolUse":
            return self._pre_tool_use()
        if name in ("PostToolUse", "PostToolUseFailure"):
            return self._post_tool_use(failed=name == "PostToolUseFailure")
        if name == "UserPromptSubmit":
            return self._user_prompt()
        if name == "SessionStart":
            self._restore(start=True)
            if getattr(self.policy_source, "changed", False):
                return notice(
                    name,
                    "Charter: the policy files changed since they were trusted; the trusted "
                    "set stays in force until a person reviews them and runs: charter claude "
                    "trust",
                )
            return silent()
        if name == "SessionEnd":
            return self._session_end()
        return self._stop(subagent=name == "SubagentStop")

    def _claude_props(self, **extra: Any) -> dict[str, Any]:
        """Facts only Claude Code has (``properties.claude``): the session's cwd and
        permission mode, and `extra` (unmatched, input_changed)."""
        props: dict[str, Any] = {"cwd": self.cwd}
        mode = self.event.get("permission_mode")
        if isinstance(mode, str) and mode:
            props["permission_mode"] = mode
        props.update(extra)
        return props

    def _framework(self) -> dict[str, Any]:
        """``properties.framework`` of a step that no builder makes (the task start)."""
        return {"name": FRAMEWORK, **self._ids()}

    def _ids(self) -> dict[str, Any]:
        """Claude Code's ids, for ``properties.framework``: the session, and the subagent
        (agent_id, agent_type) when a subagent made the call."""
        ids: dict[str, Any] = {"session_id": self.session_id}
        for field in ("agent_id", "agent_type"):
            value = self.event.get(field)
            if isinstance(value, str) and value:
                ids[field] = value
        return ids

    def _call_id(self) -> str | None:
        tuid = self.event.get("tool_use_id")
        return tuid if isinstance(tuid, str) and tuid else None

    def _tool(self) -> tuple[str, dict[str, Any]]:
        tool_name = self.event.get("tool_name")
        tool_input = self.event.get("tool_input")
        if not isinstance(tool_name, str) or not tool_name:
            raise _Refusal(f"the {self.name} input has no tool_name")
        if tool_input is None:
            tool_input = {}
        if not isinstance(tool_input, dict):
            raise _Refusal(f"the {self.name} input's tool_input is not a JSON object")
        return tool_name, tool_input

    def _step(self, tool_name: str, tool_input: dict[str, Any], **claude: Any) -> Step:
        """The hook event as a Charter step: templates, resolved paths, Claude's facts."""
        from charter_claude_code._mapping import refine

        step = self.gate.tool_step(
            tool_name,
            tool_input,
            call_id=self._call_id(),
            ids=self._ids(),
            template=TEMPLATE,
        )
        refine(step.properties, step.kind, self.cwd)
        step.properties["claude"] = self._claude_props(**claude)
        return step

    def _recorded(self, tid: str) -> Any:
        """The recorded step of this tool_use_id in the session's task, or None."""
        call_id = self._call_id()
        if call_id is None:
            return None
        return self.gate.recorded_call(tid, call_id)

    def _pre_tool_use(self) -> HookAnswer:
        tool_name, tool_input = self._tool()
        tid = self._restore(start=True)
        assert tid is not None
        key = _key(self.event)
        auto = self.config.auto_approve
        state = self.state
        if self.unrecorded:
            raise _Refusal(
                "the outcome of an earlier step could not be recorded, so the session's "
                f"history is incomplete: {'; '.join(self.unrecorded)}; fix the audit store"
            )
        digest = _digest(tool_input)
        if key in state.intents or key in state.ungoverned or key in state.asks:
            if state.digests.get(key) == digest:
                if key in state.asks:
                    reason = state.asks[key]["verdict"].get("reason", "approval required")
                    return pre_tool_use(
                        "ask", f"Charter asks for approval: {reason}", auto_approve=auto
                    )
                return pre_tool_use(
                    "allow", "Charter: allowed (decided already)", auto_approve=auto
                )
            self._forget(key)  # the same id with another input: judged afresh
        else:
            earlier = self._recorded(tid)
            if earlier is not None:
                return self._repeat(tool_name, earlier)
        step = self._step(tool_name, tool_input)
        exec_props = step.properties.get("exec")
        view = exec_props.get("shell") if isinstance(exec_props, dict) else None
        protected = self._protected(tool_name, tool_input, view)
        if protected:
            step.properties["claude"]["protected"] = protected
        self._time("build")
        decision = self.gate.decide(step, tid, pause=True, call_id=self._call_id())
        self._time("evaluate")
        if isinstance(decision, Blocked):
            why = _one_line(decision.reason)
            if protected and POLICY_NAME in why:
                from charter_claude_code._protect import describe

                why = (
                    f"blocked by policy '{POLICY_NAME}': it touches what governs this agent "
                    f"({describe(protected)}); only a person may change Charter's policies, "
                    "settings and trail"
                )
                # The user's own policies that refused it too are named: `rm -rf /` is
                # theirs to explain as well, and the always-on rule must not hide them.
                also = _other_blocks(decision)
                if also:
                    why += "; also blocked by " + also
            return pre_tool_use(
                "block",
                f"Charter blocked this {tool_name} call: {why}. It did "
                "not run; do not retry it unchanged: take another approach or ask the user.",
                auto_approve=auto,
            )
        state.digests[key] = digest
        if isinstance(decision, Pending):
            state.asks[key] = self._kept_pending(decision)
            reason = _one_line(decision.request.reason)
            return pre_tool_use(
                "ask", f"Charter asks for your approval: {reason}", auto_approve=auto
            )
        if protected:
            # Always on: neither monitor mode nor fail-open lets the agent change what
            # governs it. The intent never runs, so it is recorded as abandoned.
            from charter_claude_code._protect import describe

            if decision.handle is not None:
                self.gate.abandon(decision.handle)
            state.digests.pop(key, None)
            return pre_tool_use(
                "block",
                f"Charter blocked this {tool_name} call: policy '{POLICY_NAME}' (always on, "
                f"even in monitor mode or fail-open): it touches what governs this agent "
                f"({describe(protected)}); only a person may change Charter's policies, "
                "settings and trail. It did not run.",
                auto_approve=auto,
            )
        reason = _one_line(decision.reason)
        if decision.handle is None:
            state.ungoverned[key] = {"reason": reason}
        else:
            state.intents[key] = self.gate.redacted(self.gate.intent(decision.handle).to_dict())
        warned = decision.result is not None and decision.result.decision.value == "warn"
        warning = None
        if warned:
            warning = f"Charter warning on {tool_name}: {reason}"
        elif decision.handle is None or (
            decision.result is not None
            and (decision.result.monitored or decision.result.failed_open)
        ):
            warning = f"Charter is not enforcing this step: {reason}"
        return pre_tool_use(
            "warn" if warned else "allow", f"Charter: {reason}", auto_approve=auto, warning=warning
        )

    def _kept_pending(self, decision: Pending) -> dict[str, Any]:
        """What the session state keeps of an ask: its wire form, secrets masked."""
        saved = self.gate.save_pending(decision)
        saved["step"] = self.gate.redacted(saved["step"])
        saved["verdict"] = self.gate.redacted({"meta": saved["verdict"]})["meta"]
        return saved

    def _forget(self, key: str) -> None:
        """Drop what an earlier PreToolUse of `key` left open: an intent is recorded as
        abandoned (it never ran as judged), an ask as blocked, an ungoverned note dropped."""
        state = self.state
        if key in state.intents:
            self.gate.abandon(self.gate.reopen(state.intents.pop(key)))
            state.pending.pop(key, None)
        if key in state.asks:
            self.gate.expire(
                self.gate.load_pending(state.asks.pop(key)),
                "blocked: the call was sent again with another input, which is judged afresh",
            )
        state.ungoverned.pop(key, None)
        state.digests.pop(key, None)

    def _protected(
        self, tool_name: str, tool_input: Mapping[str, Any], view: object = None
    ) -> list[str]:
        from charter_claude_code._protect import protected_for, touched

        files = [
            f if os.path.isabs(f) else os.path.join(self.root, f) for f in self.config.policy_files
        ]
        location = self.settings.audit_location
        if self.gates is not None:
            # The decision server keeps it per project (see GateCache.protected).
            protected = self.gates.protected(self.root, files, location, self.environ)
        else:
            protected = protected_for(self.root, files, location, self.environ)
        return touched(tool_name, tool_input, self.cwd, protected, self.environ, view)

    def _repeat(self, tool_name: str, earlier: Any) -> HookAnswer:
        verdict = earlier.meta.get("charter.eval") or {}
        why = verdict.get("reason") if isinstance(verdict, dict) else None
        status = earlier.outcome.value
        return pre_tool_use(
            "block",
            f"Charter blocked this {tool_name} call: the same tool_use_id was already "
            f"recorded ({status}{': ' + str(why) if why else ''}).",
            auto_approve=False,
        )

    def _post_tool_use(self, *, failed: bool) -> HookAnswer:
        tool_name, tool_input = self._tool()
        tid = self._restore(start=True)
        assert tid is not None
        charter = self.charter
        gate = self.gate
        key = _key(self.event)
        state = self.state
        judged = state.digests.pop(key, None)
        if key in state.ungoverned:
            del state.ungoverned[key]  # allowed ungoverned (fail_mode open): not recorded
            return silent()
        if key in state.asks:
            # The call ran after Charter asked: Claude Code's permission prompt approved it.
            # The outcome carries the approval too (approved_by, approval), so when the
            # store refuses the step.gate the call is still kept as an approved outcome to
            # record, never as an unanswered ask (which Stop would record as blocked).
            pending = gate.load_pending(state.asks.pop(key))
            mode = self.event.get("permission_mode") or "default"
            approval = Answer(
                "approve",
                "claude-code-user",
                "the call ran after Charter asked, so it was approved in Claude Code's "
                f"permission prompt (permission mode {mode})",
            )
            handle = gate.approved(pending, approval)
            try:
                gate.answer(pending, approval)
            except charter.AuditError as exc:
                return self._unrecorded(key, tool_name, handle, judged, exc)
        elif key in state.intents:
            handle = gate.reopen(state.intents[key])
        else:
            # No intent: the hooks were installed mid-call, or the PreToolUse answer came from
            # elsewhere. The call ran all the same, so history must have it.
            earlier = self._recorded(tid)
            if earlier is not None and earlier.outcome is not charter.Outcome.ABANDONED:
                # Already recorded: a second registration of the hook (user and project
                # settings both) reports the same call twice.
                return silent()
            # Recorded as abandoned: the turn ended (Stop) while it ran, e.g. in the
            # background. Late, not lost: what it did is recorded as a step of its own.
            handle = gate.adopt(self._step(tool_name, tool_input, unmatched=True), tid)
        changed = judged is not None and judged != _digest(tool_input)
        if changed:
            intent = handle.behavior
            props = dict(intent.properties)
            props["claude"] = {**(props.get("claude") or {}), "input_changed": True}
            handle.behavior = intent.replace(properties=props)
        how = self._how(failed)
        try:
            self._settle_outcome(handle, how)
        except charter.AuditError as exc:
            return self._unrecorded(key, tool_name, handle, judged, exc, how)
        state.intents.pop(key, None)
        self._time("record")
        if changed:
            # Another hook's updatedInput (or anything else) changed the call after Charter
            # judged it: what ran was never judged, and the user must hear it.
            message = (
                f"Charter warning: the {tool_name} call that ran is not the one Charter "
                "judged (its input was changed after PreToolUse, e.g. by another hook's "
                "updatedInput); it is recorded with input_changed."
            )
            return notice(self.name, message, context=message)
        return silent()

    def _unrecorded(
        self,
        key: str,
        tool_name: str,
        handle: Any,
        judged: str | None,
        exc: BaseException,
        how: Mapping[str, Any] | None = None,
    ) -> HookAnswer:
        """The store refused this call's records: keep its outcome to retry (the next call
        records it first, and is denied while it cannot) and say so. The call ran, so this
        is a recording failure, never a refusal."""
        state = self.state
        b = handle.behavior  # input_changed is on it; the verdict is on the registered intent
        verdict = self.gate.intent(handle).meta.get("charter.eval")
        if verdict is not None and "charter.eval" not in b.meta:
            b = b.replace(meta={**b.meta, "charter.eval": verdict})
        state.intents[key] = self.gate.redacted(b.to_dict())
        outcome = how if how is not None else self._how(self.name == "PostToolUseFailure")
        state.pending[key] = self.gate.redacted({"output": outcome})["output"]
        if judged is not None:
            state.digests[key] = judged
        message = (
            f"Charter could not record the outcome of this {tool_name} call "
            f"({_one_line(str(exc))}); further tool calls are denied until it is recorded."
        )
        return notice(self.name, message, context=message)

    def _how(self, failed: bool) -> dict[str, Any]:
        """The outcome the event reports, in the form the session state keeps for a retry."""
        if not failed:
            # Parsed from the hook's JSON, so it is kept as it came; the Gate captures and
            # cuts it once, at the output limits, when it is recorded.
            response = self.event.get("tool_response")
            return {
                "how": "ok",
                "output": response if isinstance(response, dict) else {"value": response},
            }
        if self.event.get("is_interrupt") is True:
            return {"how": "abandoned"}
        error = self.event.get("error")
        if not isinstance(error, str):
            error = self.event.get("error_message")
        message = error if isinstance(error, str) and error else "the tool call failed"
        return {"how": "failed", "error": message[:4000]}

    def _settle_outcome(self, handle: Any, how: Mapping[str, Any]) -> None:
        gate = self.gate
        if how.get("how") == "ok":
            gate.complete(handle, how.get("output") or {})
        elif how.get("how") == "failed":
            gate.fail(handle, ToolError(str(how.get("error") or "the tool call failed")))
        else:
            gate.abandon(handle)

    def _user_prompt(self) -> HookAnswer:
        from charter.integration import message_step

        from charter_claude_code._mapping import PROMPT_STEP

        prompt = self.event.get("prompt")
        if not isinstance(prompt, str):
            raise _Refusal("the UserPromptSubmit input has no prompt text")
        tid = self._restore(start=True)
        assert tid is not None
        step = message_step(FRAMEWORK, "GET", "user", prompt, name=PROMPT_STEP, ids=self._ids())
        step.properties["claude"] = self._claude_props()
        decision = self.gate.decide(step, tid, pause=True)
        if isinstance(decision, Pending):
            # Nobody but the person who typed it could approve a prompt, and Claude Code has no
            # prompt to ask with: the step is refused, and says so.
            why = _one_line(decision.request.reason) + " (a prompt cannot wait for an approval)"
            decision = self.gate.expire(decision, why)
        if isinstance(decision, Blocked):
            return blocked_prompt(f"Charter blocked this prompt: {_one_line(decision.reason)}")
        self.gate.complete(decision.handle, {})
        self._time("record")
        if decision.result is not None and decision.result.decision.value == "warn":
            warning = f"Charter warning on this prompt: {_one_line(decision.reason)}"
            return notice(self.name, warning)
        return silent()

    def _settle(self, why: str) -> None:
        """Record unanswered asks as blocked (the call never ran)."""
        for key, saved in list(self.state.asks.items()):
            self.gate.expire(self.gate.load_pending(saved), why)
            del self.state.asks[key]

    def _stop(self, *, subagent: bool) -> HookAnswer:
        tid = self._restore(start=False)
        if tid is None or subagent:
            # A subagent's end leaves the parent's calls (its Task call included) running.
            return silent()
        self._settle(
            "blocked: approval was asked and the call never ran before the turn ended "
            "(declined in Claude Code's permission prompt, or interrupted)",
        )
        for key, wire in list(self.state.intents.items()):
            if key in self.state.pending:
                continue
            self.gate.abandon(self.gate.reopen(wire))
            del self.state.intents[key]
        self.state.ungoverned.clear()
        self._prune_digests()
        return silent()

    def _session_end(self) -> HookAnswer:
        tid = self._restore(start=False)
        if tid is None:
            return silent()
        self._settle("blocked: approval was asked and the session ended before the call ran")
        reason = self.event.get("reason")
        self.gate.end_task(tid, output={"reason": reason if isinstance(reason, str) else "exit"})
        for table in (
            self.state.intents,
            self.state.pending,
            self.state.ungoverned,
            self.state.digests,
        ):
            table.clear()
        return silent()


def open_gate(
    config: HookConfig,
    root: str,
    environ: Mapping[str, str],
    cache_dir: str,
    *,
    templates: bool = True,
) -> tuple[Gate, Any, Any]:
    """(Gate, PolicySource, Settings) for one hook call of the project at `root`.

    With `config.pin` the policy set is the trusted record's (`pinned_source`); without, the
    files are read live. The self-protection policy is added to either, and enforcement and
    fail mode come from `config` alone. `templates` loads the Claude Code templates; a call
    that maps no tool leaves them out unless a template file is configured. Raises
    ConfigError (no policies, missing baseline), TrustError (a pinned set that cannot be
    used), _Refusal (an audit location that cannot be read back) and whatever Settings and
    the Gate refuse.
    """
    import charter

    from charter_claude_code._protect import POLICY

    files = tuple(f if os.path.isabs(f) else os.path.join(root, f) for f in config.policy_files)
    record: dict[str, Any] | None = None
    if config.pin:
        source, record = pinned_source(config, root, files, cache_dir)
    else:
        source = policy_source(files, config.baseline)
    kw: dict[str, Any] = dict(source.keywords)
    kw["policies"] = [*kw.get("policies", ()), POLICY]
    # Keywords beat CHARTER_ENFORCEMENT / CHARTER_FAIL_MODE and a manifest's enforcement:
    # an agent that can edit either must not be able to switch governance off with it.
    kw["enforcement"] = config.enforcement
    kw["fail_mode"] = config.fail_mode
    kw["project_root"] = root
    # The next hook process restores from the store: a record still queued in this one
    # when it exits would be missing from the history that process judges.
    kw["audit_durability"] = "sync"
    if config.audit_location:
        kw["audit_location"] = config.audit_location
    elif not environ.get("CHARTER_AUDIT_LOCATION", "").strip():
        kw["audit_location"] = f"sqlite:///{root}/.charter/audit.db"
    if config.max_output_chars is not None:
        kw["max_output_chars"] = config.max_output_chars
    if config.agent_id:
        kw["agent_id"] = config.agent_id
    elif not environ.get("CHARTER_AGENT_ID", "").strip():
        kw["agent_id"] = AGENT_ID
    settings = charter.Settings.from_sources(env=environ, **kw)
    if settings.audit_location in ("none", "stdout"):
        raise _Refusal(
            f"audit_location {settings.audit_location!r} cannot hold the session's history "
            "between hook calls; use a sqlite:/// or jsonl:/// location"
        )
    loaded = None
    if templates or settings.template_location:
        from charter_claude_code._mapping import template_set

        trusted = record.get("templates") if record is not None and config.cache else None
        loaded = template_set(settings.template_location, trusted)
    return Gate.from_settings(FRAMEWORK, settings, templates=loaded), source, settings


def pinned_source(
    config: HookConfig, root: str, files: tuple[str, ...], state_dir: str
) -> tuple[PolicySource, dict[str, Any]]:
    """The policy set pinned as `config.pin`, from its verified copy (or, with none left,
    from the files when they still hash to the pin). Raises TrustError when neither can be
    had: every action step is then denied until a person runs ``charter claude trust``.

    A pin an earlier Charter made (the first record format, see `_trust`) is never read
    from its copy: the set comes from the files, while they still hash to it."""
    from charter_claude_code._policies import baseline_file
    from charter_claude_code._trust import (
        TrustError,
        build_record,
        current_sources,
        first_format_pin,
        older_record,
        pin_of,
        read_record,
        source_names,
        write_record,
    )

    pin = str(config.pin)
    names = source_names(files, root)
    found = baseline_file(config.baseline) if config.baseline else None
    now = current_sources(files, names, found, config.baseline)
    record = read_record(state_dir, pin)
    if record is None:
        try:
            fresh = build_record(
                files, names, config.baseline, os.environ.get("CHARTER_TEMPLATE_LOCATION")
            )
        except TrustError:
            fresh = None
        if fresh is not None and pin_of(fresh) == pin:
            write_record(state_dir, fresh)
        elif fresh is None or first_format_pin(fresh) != pin:
            if older_record(state_dir, pin):
                raise TrustError(
                    f"the policy set was pinned ({pin[:19]}…) by an earlier Charter, whose "
                    "pin does not vouch for the order of the kept copy, and the policy files "
                    "changed since, so no tool call can be judged; a person must review the "
                    "policy files and run: charter claude trust"
                )
            raise TrustError(
                f"the policy set changed since it was trusted (pinned {pin[:19]}…) and no "
                "verified copy of the trusted set is left, so no tool call can be judged; a "
                "person must review the policy files and run: charter claude trust"
            )
        record = fresh
    described = [str(name) for name, _ in record["sources"]]
    return (
        PolicySource(
            {"policies": list(record["policies"])}, True, record["sources"] != now, (*described,)
        ),
        record,
    )
