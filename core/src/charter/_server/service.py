"""What the decision server does with each request: one Gate, its handles, and extensions.

The service holds one `Gate` (a Governor on one Runner: policies compiled, history in
memory, store open) built lazily from the server's settings, and the handles of the steps
it allowed (by action id) and of the steps waiting for a person (by approval id), so a
client that is not Python drives the same contract as an in-process integration:
``start_task`` -> ``step`` (allow / warn / ask / block) -> ``record`` its outcome, ``answer``
an ask, ``end_task``. A task this process does not hold (the server restarted) is restored
from the store on its next step. Requests of one task are serialised by the Runner's task
lock; each connection's requests are answered in order.

Extensions add operations: every ``charter.serve`` entry point names a callable that takes
the service and returns ``{op name: handler}`` (charter-claude-code adds ``claude.hook``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from charter._model.behavior import ActionKind, verbs_for
from charter._runtime.gate import Allowed, Answer, Blocked, Gate, Pending
from charter._runtime.governor import StepHandle
from charter._runtime.project_files import PROTOCOL
from charter._runtime.settings import Settings
from charter._runtime.steps import Step
from charter._server.protocol import ProtocolError, optional, required

__all__ = ["OPS", "Handler", "Service"]

logger = logging.getLogger("charter")

Handler = Callable[[dict[str, Any]], Any]
FRAMEWORK = "charter-serve"
_OUTCOMES = ("ok", "failed", "abandoned")
# Operations of the protocol itself (extensions add theirs), as the OpenAPI document lists them.
OPS = ("hello", "status", "start_task", "step", "record", "answer", "end_task", "shutdown")


class RemoteError(Exception):
    """A failed step as the client reported it (type and message kept in the trail)."""


class Service:
    """The operations of one server. `settings` builds the Gate on first use (so a server
    started for the Claude Code hook alone opens nothing it does not need); `project` is
    the project root the server was started for; `on_shutdown` is called by ``shutdown``.
    Thread-safe."""

    def __init__(
        self,
        settings: Callable[[], Settings],
        *,
        project: str,
        on_shutdown: Callable[[], None] | None = None,
        extensions: bool = True,
    ) -> None:
        self.project = project
        self.started = time.time()
        self._settings = settings
        self._gate: Gate | None = None
        self._lock = threading.Lock()
        self._handles: dict[str, StepHandle] = {}
        self._pending: dict[str, Pending] = {}
        self._on_shutdown = on_shutdown
        self._closers: list[Callable[[], None]] = []
        self.ops: dict[str, Handler] = {
            "hello": self._hello,
            "status": self._status,
            "start_task": self._start_task,
            "step": self._step,
            "record": self._record,
            "answer": self._answer,
            "end_task": self._end_task,
            "shutdown": self._shutdown,
        }
        self.requests = 0
        self.errors = 0
        if extensions:
            self._load_extensions()

    # -- plumbing ---------------------------------------------------------------------------

    def _load_extensions(self) -> None:
        from importlib.metadata import entry_points

        for ep in entry_points(group="charter.serve"):
            try:
                added = ep.load()(self)
            except Exception as exc:  # one broken extension must not take the server down
                logger.warning("charter serve: extension %s not loaded: %s", ep.name, exc)
                continue
            for name, handler in dict(added).items():
                self.ops.setdefault(str(name), handler)

    def on_close(self, fn: Callable[[], None]) -> None:
        """Call `fn` when the service closes (an extension's own runners, say)."""
        self._closers.append(fn)

    def handle(self, op: str, params: dict[str, Any]) -> Any:
        """The result of `op` on `params`; raises ProtocolError (never anything else)."""
        self.requests += 1
        handler = self.ops.get(op)
        if handler is None:
            self.errors += 1
            raise ProtocolError(
                "unknown_op", f"unknown op {op!r}; this server serves {', '.join(self.ops)}", "op"
            )
        try:
            return handler(params)
        except ProtocolError:
            self.errors += 1
            raise
        except ValueError as exc:  # what an extension refuses in a request
            self.errors += 1
            raise ProtocolError("bad_request", str(exc)) from None
        except Exception as exc:  # a bug answers an error; the server keeps serving
            self.errors += 1
            logger.error("charter serve: %s failed", op, exc_info=exc)
            raise ProtocolError(
                "internal", f"the server failed on {op} ({type(exc).__name__}: {exc})"
            ) from None

    @property
    def gate(self) -> Gate:
        """The Gate of the generic operations, built on first use."""
        gate = self._gate
        if gate is None:
            with self._lock:
                if self._gate is None:
                    self._gate = Gate.from_settings(FRAMEWORK, self._settings())
                gate = self._gate
        return gate

    def close(self, timeout: float = 5.0) -> None:
        """Flush and close everything the service opened."""
        for fn in self._closers:
            try:
                fn()
            except Exception as exc:
                logger.warning("charter serve: closing an extension failed: %s", exc)
        if self._gate is not None:
            self._gate.governor.close(timeout)

    # -- operations -------------------------------------------------------------------------

    def _hello(self, params: dict[str, Any]) -> dict[str, Any]:
        from importlib.metadata import version

        return {
            "protocol": PROTOCOL,
            "server": "charter",
            "version": version("charter"),
            "project": self.project,
            "ops": sorted(self.ops),
            "started": self.started,
        }

    def _status(self, params: dict[str, Any]) -> dict[str, Any]:
        status = self.gate.governor.status() if self._gate is not None else None
        return {
            "project": self.project,
            "requests": self.requests,
            "errors": self.errors,
            "open_steps": len(self._handles),
            "pending_approvals": len(self._pending),
            "runner": status,
        }

    def _start_task(self, params: dict[str, Any]) -> dict[str, Any]:
        name = required(params, "name")
        task_id = optional(params, "task_id")
        started = self.gate.start_task(
            task_id,
            name=name,
            input=optional(params, "input", dict),
            properties=optional(params, "properties", dict),
        )
        if isinstance(started, Blocked):
            return {"decision": "block", "reason": started.reason, "task_id": task_id}
        return {"decision": "allow", "task_id": started}

    def _task(self, params: dict[str, Any]) -> str:
        task_id: str = required(params, "task_id")
        state = self.gate.resume_task(task_id)
        if state == "unknown":
            raise ProtocolError(
                "unknown_task",
                f"task {task_id!r} is not started (and not in the store); start it with start_task",
                "params.task_id",
            )
        if state == "ended":
            raise ProtocolError(
                "task_ended",
                f"task {task_id!r} has ended; start a new task for further steps",
                "params.task_id",
            )
        return task_id

    def _build(self, params: dict[str, Any]) -> Step:
        tool = optional(params, "tool")
        if tool is not None:
            try:
                return self.gate.tool_step(
                    tool,
                    optional(params, "args", dict, {}),
                    call_id=optional(params, "call_id"),
                    template=optional(params, "template", str, "generic"),
                )
            except ImportError as exc:
                raise ProtocolError("bad_request", str(exc), "params.tool") from None
        kind = required(params, "kind")
        try:
            takes = verbs_for(ActionKind(kind))
        except ValueError:
            kinds = ", ".join(k.value for k in ActionKind)
            raise ProtocolError(
                "bad_request",
                f"params.kind {kind!r} is not a kind; use one of {kinds}",
                "params.kind",
            ) from None
        verb = optional(params, "verb")
        if takes and verb not in {v.value for v in takes}:
            raise ProtocolError(
                "bad_request",
                f"params.verb: {kind} takes verb {'/'.join(v.value for v in takes)}",
                "params.verb",
            )
        if not takes and verb is not None:
            raise ProtocolError("bad_request", f"params.verb: {kind} takes no verb", "params.verb")
        properties = dict(optional(params, "properties", dict, {}))
        framework = dict(properties.get("framework") or {})
        framework.setdefault("name", optional(params, "framework", str, FRAMEWORK))
        properties["framework"] = framework
        call_id = optional(params, "call_id")
        if call_id is not None:
            properties["tool"] = {**dict(properties.get("tool") or {}), "call_id": call_id}
        return Step(
            kind,
            verb,
            required(params, "name"),
            dict(optional(params, "input", dict, {})),
            properties,
        )

    def _step(self, params: dict[str, Any]) -> dict[str, Any]:
        task_id = self._task(params)
        step = self._build(params)
        return self._decision(self.gate.decide(step, task_id, pause=True))

    def _decision(self, decision: Allowed | Blocked | Pending) -> dict[str, Any]:
        if isinstance(decision, Blocked):
            return {
                "decision": "block",
                "reason": decision.reason,
                "violations": _violations(decision.result),
            }
        if isinstance(decision, Pending):
            approval_id = decision.request.behavior.action_id or _new_id()
            with self._lock:
                self._pending[approval_id] = decision
            return {
                "decision": "ask",
                "reason": decision.request.reason,
                "approval_id": approval_id,
                "digest": decision.digest,
                "violations": _violations(decision.request.result),
            }
        result = decision.result
        handle = decision.handle
        verdict = result.decision.value if result is not None else "allow"
        out: dict[str, Any] = {
            # An ask that a person approved runs: it is an allow, marked approved.
            "decision": "warn" if verdict == "warn" else "allow",
            "reason": decision.reason,
            "action_id": None,
            "violations": _violations(result),
        }
        if verdict == "ask":
            out["approved"] = True
        if handle is None:
            out["ungoverned"] = True
            return out
        with self._lock:
            self._handles[handle.action_id] = handle
        out["action_id"] = handle.action_id
        return out

    def _record(self, params: dict[str, Any]) -> dict[str, Any]:
        action_id = required(params, "action_id")
        outcome = required(params, "outcome")
        if outcome not in _OUTCOMES:
            raise ProtocolError(
                "bad_request",
                f"params.outcome must be one of {', '.join(_OUTCOMES)}",
                "params.outcome",
            )
        with self._lock:
            handle = self._handles.pop(action_id, None)
        if handle is None:
            raise ProtocolError(
                "unknown_action",
                f"no allowed step {action_id!r} is waiting for its outcome here (recorded "
                "already, or allowed before the server restarted: judge the step again)",
                "params.action_id",
            )
        try:
            if outcome == "ok":
                self.gate.complete(handle, params.get("output"))
            elif outcome == "failed":
                error = params.get("error")
                text = error.get("message") if isinstance(error, dict) else error
                self.gate.fail(handle, RemoteError(str(text or "the step failed")))
            else:
                self.gate.abandon(handle)
        except Exception as exc:
            raise ProtocolError(
                "internal", f"the outcome could not be recorded ({exc})", "params.action_id"
            ) from None
        return {"recorded": True, "action_id": action_id}

    def _answer(self, params: dict[str, Any]) -> dict[str, Any]:
        approval_id = required(params, "approval_id")
        approve = required(params, "approve", bool)
        by = required(params, "by")
        why = optional(params, "reason", str, "")
        with self._lock:
            pending = self._pending.pop(approval_id, None)
        if pending is None:
            raise ProtocolError(
                "unknown_approval",
                f"no step is waiting for approval {approval_id!r} here (answered already, or "
                "asked before the server restarted: send the step again)",
                "params.approval_id",
            )
        answer = Answer("approve" if approve else "reject", by, why)
        step = self.gate.answer(pending, answer)
        return self._decision(self.gate.decide(step, pending.task_id, pause=True))

    def _end_task(self, params: dict[str, Any]) -> dict[str, Any]:
        task_id = required(params, "task_id")
        state = self.gate.resume_task(task_id)
        if state == "unknown":
            raise ProtocolError("unknown_task", f"task {task_id!r} is not known", "params.task_id")
        error = params.get("error")
        exc = (
            RemoteError(str(error.get("message") if isinstance(error, dict) else error))
            if error
            else None
        )
        self.gate.end_task(task_id, exc, output=params.get("output"))
        with self._lock:
            for key in [k for k, h in self._handles.items() if h.task_id == task_id]:
                del self._handles[key]
            for key in [k for k, p in self._pending.items() if p.task_id == task_id]:
                del self._pending[key]
        return {"ended": True, "task_id": task_id}

    def _shutdown(self, params: dict[str, Any]) -> dict[str, Any]:
        if self._on_shutdown is not None:
            threading.Thread(target=self._on_shutdown, daemon=True).start()
        return {"stopping": True}


def _new_id() -> str:
    import uuid

    return uuid.uuid4().hex


def _violations(result: Any) -> list[dict[str, Any]]:
    if result is None:
        return []
    return [
        {
            "policy": r.name,
            "rule_type": r.rule_type,
            "severity": r.severity.value,
            "ask": r.ask,
            "details": r.details,
        }
        for r in result.violations
    ]


def settings_from(options: Mapping[str, Any]) -> Settings:
    """Settings for the generic operations from ``charter serve``'s options and CHARTER_*."""
    return Settings.from_sources(**{k: v for k, v in options.items() if v is not None})
