"""One hook call: rebuild the session from the audit store, translate the event, answer.

The translation (Claude Code event -> Charter call):

- SessionStart opens the audit task of the session (task id from ``session_id``; a session
  resumed after its task was closed continues in ``<session_id>.2``, ``.3``, ...).
- UserPromptSubmit judges and records the prompt as a trusted user message
  (``step.message GET``, ``properties.message.role = user``), so provenance rules can trust
  what the user typed; a blocked prompt is refused.
- PreToolUse judges the tool call (`Runner.evaluate`): block -> deny, ask -> ask, allow and
  warn -> the intent is kept for its outcome.
- PostToolUse / PostToolUseFailure record the outcome of that intent (paired by
  ``tool_use_id``). A call that Charter asked about and that ran anyway was approved in Claude
  Code's permission prompt: the approval is recorded as a ``step.gate`` first.
- Stop settles what the finished turn left open (calls that never reported back were
  rejected or interrupted: abandoned; unanswered asks: blocked). SubagentStop only retries
  unrecorded outcomes: the parent's calls are still running.
- SessionEnd closes the task (open intents are recorded as abandoned).

Every call takes the session lock, restores the task (`Runner.restore_task`) and its open
intents (`Runner.restore_intent`) so history rules judge exactly as they would in one
process, records with sync durability (the next hook process reads what this one wrote),
and saves the side state before the lock is released.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charter_claude_code._answers import (
    HOOK_EVENTS,
    HookAnswer,
    blocked_prompt,
    failure,
    notice,
    pre_tool_use,
    silent,
)
from charter_claude_code._policies import ConfigError, policy_source
from charter_claude_code._state import LockTimeout, SessionLock, SessionState, StateError

__all__ = ["HookConfig", "handle_event", "open_runner", "project_root", "state_dir"]

AGENT_ID = "claude-code"
TASK_NAME = "claude-code-session"
_STATE_DIR = "claude-code"
_REASON_MAX = 1000


@dataclass(frozen=True, slots=True)
class HookConfig:
    """How the hook judges: what `charter claude install` writes onto the hook's command line.

    `policy_files` (absolute, or relative to the project) and/or `baseline` name the
    policies; `auto_approve` makes an allowed step answer ``permissionDecision: allow``
    (skipping Claude Code's own permission prompt) instead of no opinion; `deadline` is how
    long a call may take before it denies on its own (keep it well under the hook timeout);
    `project_dir` overrides ``$CLAUDE_PROJECT_DIR`` / the event's cwd; `audit_location` and
    `agent_id` override the defaults (``sqlite:///<project>/.charter/audit.db``,
    ``claude-code``; ``CHARTER_AUDIT_LOCATION`` / ``CHARTER_AGENT_ID`` also work);
    `max_output_chars` bounds each string of a recorded tool response, so that restoring a
    long session stays fast; `cache` keeps parsed manifests and templates under
    ``.charter/claude-code/cache`` between calls. Every other setting comes from
    ``CHARTER_*`` variables.
    """

    policy_files: tuple[str, ...] = ()
    baseline: str | None = None
    auto_approve: bool = False
    deadline: float = 10.0
    project_dir: str | None = None
    audit_location: str | None = None
    agent_id: str | None = None
    max_output_chars: int = 32_768
    cache: bool = True


class _Refusal(Exception):
    """A condition under which this call cannot decide; the message is the reason."""


def state_dir(root: str) -> Path:
    """Where the hook keeps its per-session state and policy cache for the project `root`."""
    return Path(root) / ".charter" / _STATE_DIR


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
) -> HookAnswer:
    """Judge and record one Claude Code hook event; returns the answer. Never raises.

    `event` is the parsed JSON from stdin; `registered_as` is the event the hook was
    installed for (``--event``), which decides the answer's shape when the input itself is
    unusable. Anything that keeps Charter from deciding becomes `failure` (PreToolUse:
    deny; UserPromptSubmit: block; other events: a message to the user). `started` is the
    `time.monotonic()` at which the process started, from which `config.deadline` counts.
    """
    cfg = config or HookConfig()
    env = os.environ if environ is None else environ
    name = registered_as
    try:
        name = _event_name(event, registered_as)
        assert isinstance(event, dict)
        deadline_at = (time.monotonic() if started is None else started) + cfg.deadline
        return _Call(event, name, cfg, env, timings, deadline_at).run()
    except Exception as exc:  # the hook's one promise: never a crash, never a silent allow
        return failure(name, _describe(exc))


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
    known = (_Refusal, ConfigError, StateError, LockTimeout, ValueError)
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
    blob = json.dumps(
        [event.get("tool_name"), event.get("tool_input")], sort_keys=True, default=str
    )
    return "h-" + hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _one_line(text: str) -> str:
    return " ".join(text.split())


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
    ) -> None:
        self.event = event
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

        # Building the runner (imports, policy compilation, opening the store) needs no
        # session state, so it happens before the lock: parallel calls of one session then
        # hold the lock only for restore, judge, record and save.
        self._open_runner()
        try:
            key = session_key(self.session_id)
            lock = SessionLock(self.state_dir / "sessions" / f"{key}.lock")
            # Wait for the lock only as long as leaves time to judge and record before the
            # deadline, so a stuck sibling yields this precise reason, not the watchdog's.
            margin = min(1.0, self.config.deadline * 0.2)
            lock.acquire(max(0.05, self.deadline_at - time.monotonic() - margin))
            self._time("lock")
            try:
                self.state = SessionState.load(
                    self.state_dir / "sessions" / f"{key}.json", self.session_id
                )
                answer = self._dispatch()
                self._note_head()
                self.state.save()
                self._time("save")
            finally:
                lock.release()
        finally:
            self.runner.close(1.0)
        return answer

    def _note_head(self) -> None:
        tid = self.state.task_id
        history = self.runner.engine.get_history(tid) if tid else ()
        if history:
            self.state.head = max(self.state.head, history[-1].seq or 0)

    def _open_runner(self) -> None:
        import charter

        self.charter = charter
        self._time("import")
        self.runner, self.policy_source = open_runner(
            self.config, self.root, self.environ, self.state_dir
        )
        self.gov = charter.Governor(runner=self.runner)
        self.agent_id = self.runner.agent_id
        self._time("runner")

    # -- restoring the session ------------------------------------------------------------------

    def _restore(self, *, start: bool) -> str | None:
        """Restore (or, with `start`, open) the session's task; returns its id or None."""
        store = self.runner.store
        if store is None:
            detail = self.runner.status()["store"]["detail"]
            raise _Refusal(f"the audit store {self.runner.settings.audit_location} {detail}")
        charter = self.charter
        closing = {k.value for k in charter.TASK_BOUNDARY_KINDS} - {"task.start"}
        state = self.state
        base = charter.task_id_from(self.session_id)
        tid = state.task_id or base
        while True:
            records = (
                store.read_task(tid, self.agent_id) if store.head(self.agent_id, tid).seq else []
            )
            stored = records[-1].get("seq", 0) if records else 0
            if tid == state.task_id and stored < state.head:
                raise _Refusal(
                    f"the audit store {self.runner.settings.audit_location} holds {stored} "
                    f"steps of task {tid!r}, but {state.head} were recorded: the trail was "
                    "deleted or replaced, and the history rules would start from nothing; "
                    f"restore it, or delete {state.path} to start this session's history anew"
                )
            if not records or records[-1].get("kind") not in closing:
                break
            # The session's task was closed (SessionEnd) and the session goes on (resume):
            # its chain cannot grow, so the session continues in the next task id.
            state.intents.clear()
            state.asks.clear()
            state.pending.clear()
            if not start:
                state.task_id = tid
                self._time("restore")
                return None
            state.generation = max(state.generation, 1) + 1
            state.head = 0
            tid = f"{base}.{state.generation}"
        if records:
            self.runner.restore_task(records)
        elif start:
            self.gov.start_task(
                tid,
                name=TASK_NAME,
                input={"source": self.event.get("source") or f"first seen at {self.name}"},
                properties={"claude": self._claude_props()},
            )
        else:
            self._time("restore")
            return None
        state.task_id = tid
        self._reconcile(tid)
        self._time("restore")
        return tid

    def _reconcile(self, tid: str) -> None:
        """Re-register the intents other processes allowed; drop what the store settled;
        retry outcomes that could not be recorded before."""
        state = self.state
        used = {b.action_id for b in self.runner.engine.get_history(tid) if b.action_id}
        for key, wire in list(state.asks.items()):
            if wire.get("step", {}).get("action_id") in used:
                del state.asks[key]
        for key, wire in list(state.intents.items()):
            if wire.get("action_id") in used or wire.get("task_id") != tid:
                del state.intents[key]
                state.pending.pop(key, None)
                continue
            try:
                self.runner.restore_intent(wire)
            except ValueError:  # the same action twice: keep the first registration
                del state.intents[key]
                state.pending.pop(key, None)
        self.unrecorded = []
        for key, wire in list(state.pending.items()):
            if key not in state.intents:
                del state.pending[key]
                continue
            try:
                self.runner.record(self.charter.Behavior.from_dict(wire))
            except self.charter.AuditError as exc:
                self.unrecorded.append(f"{wire.get('step_name')!r} ({_one_line(str(exc))})")
                continue
            del state.pending[key]
            del state.intents[key]

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
            return silent()
        if name == "SessionEnd":
            return self._session_end()
        return self._stop(subagent=name == "SubagentStop")

    def _claude_props(self, **extra: Any) -> dict[str, Any]:
        event = self.event
        props: dict[str, Any] = {"cwd": self.cwd}
        for field in ("permission_mode", "agent_id", "agent_type", "tool_use_id"):
            value = event.get(field)
            if isinstance(value, str) and value:
                props[field] = value
        props.update(extra)
        return props

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

    def _templates(self) -> Any:
        from charter_claude_code._mapping import template_set

        cache = self.state_dir / "cache" if self.config.cache else None
        return template_set(self.runner.settings.template_location, cache)

    def _build(self, tool_name: str, tool_input: dict[str, Any], tid: str) -> Any:
        from charter_claude_code._mapping import tool_step

        kind, verb, props = tool_step(tool_name, tool_input, self.cwd, self._templates())
        props["claude"] = self._claude_props()
        step = self.gov.build_step(
            kind, verb, name=tool_name, input=tool_input, properties=props, task_id=tid
        )
        return step.replace(action_id=self.charter.task_id_from(_key(self.event)))

    def _pre_tool_use(self) -> HookAnswer:
        tool_name, tool_input = self._tool()
        tid = self._restore(start=True)
        assert tid is not None
        key = _key(self.event)
        auto = self.config.auto_approve
        if self.unrecorded:
            raise _Refusal(
                "the outcome of an earlier step could not be recorded, so the session's "
                f"history is incomplete: {'; '.join(self.unrecorded)}; fix the audit store"
            )
        if key in self.state.intents:
            return pre_tool_use("allow", "Charter: allowed (decided already)", auto_approve=auto)
        if key in self.state.asks:
            reason = self.state.asks[key]["verdict"].get("reason", "approval required")
            return pre_tool_use("ask", f"Charter asks for approval: {reason}", auto_approve=auto)
        step = self._build(tool_name, tool_input, tid)
        earlier = self._recorded(tid, step.action_id)
        if earlier is not None:
            return self._repeat(tool_name, earlier)
        self._time("build")
        result = self.runner.evaluate(step)
        self._time("evaluate")
        decision = result.decision.value
        reason = _one_line(result.reason)
        if decision == "block":
            return pre_tool_use(
                "block",
                f"Charter blocked this {tool_name} call: {reason}. It did not run; do not "
                "retry it unchanged: take another approach or ask the user.",
                auto_approve=auto,
            )
        if decision == "ask":
            self.state.asks[key] = {"step": step.to_dict(), "verdict": result.to_dict()}
            return pre_tool_use(
                "ask", f"Charter asks for your approval: {reason}", auto_approve=auto
            )
        intent = self.runner.engine.open_intent(tid, step.action_id) or step
        self.state.intents[key] = intent.to_dict()
        warning = None
        if decision == "warn":
            warning = f"Charter warning on {tool_name}: {reason}"
        elif reason.startswith("monitor mode") or "fail_mode is open" in reason:
            warning = f"Charter is not enforcing this step: {reason}"
        return pre_tool_use(
            "warn" if decision == "warn" else "allow",
            f"Charter: {reason}",
            auto_approve=auto,
            warning=warning,
        )

    def _recorded(self, tid: str, action_id: str) -> Any:
        for b in self.runner.engine.get_history(tid):
            if b.action_id == action_id:
                return b
        return None

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
        key = _key(self.event)
        state = self.state
        if key in state.asks:
            entry = state.asks.pop(key)
            step = charter.Behavior.from_dict(entry["step"])
            mode = self.event.get("permission_mode") or "default"
            self.gov.record_approval(
                tid,
                step,
                True,
                "claude-code-user",
                f"the call ran after Charter asked, so it was approved in Claude Code's "
                f"permission prompt (permission mode {mode})",
            )
            verdict = dict(entry["verdict"])
            verdict["approved"] = True
            intent = step.replace(meta={**step.meta, "charter.eval": verdict})
            self.runner.restore_intent(intent)
            state.intents[key] = intent.to_dict()
        elif key in state.intents:
            intent = charter.Behavior.from_dict(state.intents[key])
        else:
            # No intent: the hooks were installed mid-call, or the PreToolUse answer came from
            # elsewhere. The call ran all the same, so history must have it.
            intent = self._build(tool_name, tool_input, tid)
            earlier = self._recorded(tid, intent.action_id)
            if earlier is not None:
                if earlier.outcome is not charter.Outcome.ABANDONED:
                    # Already recorded: a second registration of the hook (user and project
                    # settings both) reports the same call twice.
                    return silent()
                # The turn ended (Stop) while it ran, e.g. in the background: late, not lost.
                intent = intent.replace(action_id=f"{intent.action_id}.late")
            props = dict(intent.properties)
            props["claude"] = self._claude_props(unmatched=True)
            intent = intent.replace(properties=props)
        changed = self._input_changed(intent, tool_input)
        if changed:
            props = dict(intent.properties)
            claude = dict(props.get("claude") or {})
            claude["input_changed"] = True
            props["claude"] = claude
            intent = intent.replace(properties=props)
        outcome = self._outcome(intent, failed)
        try:
            self.runner.record(outcome)
        except charter.AuditError as exc:
            state.intents[key] = intent.to_dict()
            state.pending[key] = outcome.to_dict()
            message = (
                f"Charter could not record the outcome of this {tool_name} call "
                f"({_one_line(str(exc))}); further tool calls are denied until it is recorded."
            )
            return notice(self.name, message, context=message)
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

    def _input_changed(self, intent: Any, tool_input: dict[str, Any]) -> bool:
        charter = self.charter
        if intent.input is None:
            return False
        ran = charter.capture(tool_input)
        return bool(charter.canonical_digest(ran) != charter.canonical_digest(intent.input))

    def _outcome(self, intent: Any, failed: bool) -> Any:
        charter = self.charter
        if not failed:
            response = charter.capture(
                self.event.get("tool_response"), max_string=self.config.max_output_chars
            )
            output = response if isinstance(response, dict) else {"value": response}
            return intent.completed(output)
        if self.event.get("is_interrupt") is True:
            meta = {**intent.meta, "charter.outcome": charter.Outcome.ABANDONED.value}
            return intent.replace(meta=meta)
        error = self.event.get("error")
        if not isinstance(error, str):
            error = self.event.get("error_message")
        message = error if isinstance(error, str) and error else "the tool call failed"
        output = {"error": {"type": "ToolError", "message": message[:4000]}}
        return intent.completed(output, outcome=charter.Outcome.FAILED)

    def _user_prompt(self) -> HookAnswer:
        prompt = self.event.get("prompt")
        if not isinstance(prompt, str):
            raise _Refusal("the UserPromptSubmit input has no prompt text")
        tid = self._restore(start=True)
        assert tid is not None
        from charter_claude_code._mapping import PROMPT_STEP

        step = self.gov.build_step(
            "step.message",
            "GET",
            name=PROMPT_STEP,
            input={"prompt": prompt},
            properties={"message": {"role": "user"}, "claude": self._claude_props()},
            task_id=tid,
        )
        result = self.runner.evaluate(step)
        decision = result.decision.value
        reason = _one_line(result.reason)
        if decision == "ask":
            # Nobody but the person who typed it could approve a prompt, and Claude Code has no
            # prompt to ask with: the step is refused, and says so.
            result = self.runner.record_block(step, result)
            reason = _one_line(result.reason) + " (a prompt cannot wait for an approval)"
            decision = "block"
        if decision == "block":
            return blocked_prompt(f"Charter blocked this prompt: {reason}")
        self.runner.record(step.completed({}))
        self._time("record")
        if decision == "warn":
            return notice(self.name, f"Charter warning on this prompt: {reason}")
        return silent()

    def _settle(self, tid: str, why: str) -> None:
        """Record unanswered asks as blocked (the call never ran)."""
        charter = self.charter
        for key, entry in list(self.state.asks.items()):
            step = charter.Behavior.from_dict(entry["step"])
            verdict = entry.get("verdict") or {}
            self.runner.record_block(step, _blocked_result(charter, verdict, why))
            del self.state.asks[key]

    def _stop(self, *, subagent: bool) -> HookAnswer:
        tid = self._restore(start=False)
        if tid is None or subagent:
            # A subagent's end leaves the parent's calls (its Task call included) running.
            return silent()
        charter = self.charter
        self._settle(
            tid,
            "blocked: approval was asked and the call never ran before the turn ended "
            "(declined in Claude Code's permission prompt, or interrupted)",
        )
        for key, wire in list(self.state.intents.items()):
            if key in self.state.pending:
                continue
            intent = charter.Behavior.from_dict(wire)
            meta = {**intent.meta, "charter.outcome": charter.Outcome.ABANDONED.value}
            self.runner.record(intent.replace(meta=meta))
            del self.state.intents[key]
        return silent()

    def _session_end(self) -> HookAnswer:
        tid = self._restore(start=False)
        if tid is None:
            return silent()
        self._settle(tid, "blocked: approval was asked and the session ended before the call ran")
        reason = self.event.get("reason")
        self.gov.end_task(tid, output={"reason": reason if isinstance(reason, str) else "exit"})
        self.state.intents.clear()
        self.state.pending.clear()
        return silent()


def open_runner(
    config: HookConfig, root: str, environ: Mapping[str, str], cache_dir: Path
) -> tuple[Any, Any]:
    """(Runner, PolicySource) for one hook call of the project at `root`.

    Raises ConfigError (no policies, missing baseline), _Refusal (an audit location that
    cannot be read back) and whatever Settings and Runner refuse.
    """
    import charter

    files = tuple(f if os.path.isabs(f) else os.path.join(root, f) for f in config.policy_files)
    source = policy_source(
        files,
        config.baseline,
        cache_dir / "cache" if config.cache else None,
        _charter_version(charter.__file__),
    )
    kw: dict[str, Any] = dict(source.keywords)
    kw["project_root"] = root
    # The next hook process restores from the store: a record still queued in this one
    # when it exits would be missing from the history that process judges.
    kw["audit_durability"] = "sync"
    if config.audit_location:
        kw["audit_location"] = config.audit_location
    elif not environ.get("CHARTER_AUDIT_LOCATION", "").strip():
        kw["audit_location"] = f"sqlite:///{root}/.charter/audit.db"
    if config.agent_id:
        kw["agent_id"] = config.agent_id
    elif not environ.get("CHARTER_AGENT_ID", "").strip():
        kw["agent_id"] = AGENT_ID
    if source.monitor and not environ.get("CHARTER_ENFORCEMENT", "").strip():
        kw["enforcement"] = "monitor"
    settings = charter.Settings.from_sources(env=environ, **kw)
    if settings.audit_location in ("none", "stdout"):
        raise _Refusal(
            f"audit_location {settings.audit_location!r} cannot hold the session's history "
            "between hook calls; use a sqlite:/// or jsonl:/// location"
        )
    return charter.Runner(settings), source


def _blocked_result(charter: Any, verdict: Mapping[str, Any], reason: str) -> Any:
    results = []
    for v in verdict.get("violations") or ():
        try:
            results.append(
                charter.PolicyResult(
                    str(v["name"]),
                    str(v["rule_type"]),
                    charter.Severity(v["severity"]),
                    True,
                    v.get("details"),
                    bool(v.get("ask")),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    risk = verdict.get("risk_score")
    return charter.EvalResult(
        charter.Decision.BLOCK,
        float(risk) if isinstance(risk, int | float) else 1.0,
        tuple(results),
        None,
        None,
        reason,
    )


def _charter_version(charter_file: str) -> str:
    # What decides how a manifest parses: reading package metadata would cost more.
    from charter_claude_code._mapping import code_stamp

    return code_stamp(charter_file, "_policy/manifest.py", "_policy/policy.py", "_policy/params.py")
