"""The runner: the I/O shell around one PolicyEngine.

It owns the policy sources (and the fail mode when they give nothing usable), the audit
writer (redaction, queue, store, exporters), a per-task lock, and a sweeper thread that
closes idle tasks. Everything the engine refuses is raised to the caller; everything that
goes wrong on the recording path is counted and reported, and raised only in sync durability.

Write-ahead (sync durability): before an allowed step runs, its intent is committed to the
store as a record of its own, the step's wire form with no output, its verdict in
``meta["charter.eval"]`` and ``meta["charter.intent"] = true``, at the seq the step takes
when it is allowed; its outcome follows later at a seq of its own. When the store cannot
take the intent, the step is blocked instead (with the failing store named), so nothing
runs that the trail does not show. Intent records are not history: `restore_task` skips
them (only their seq is kept), and history rules never see them.

Seq: the engine numbers a task's steps (last + 1) when they are recorded, and the wire form
carries that number: the store keeps it and never renumbers, so a record dropped on the way
(a full queue, a refused write) leaves a gap its chain declares (see the writer). When several
processes write one chain (the Claude Code integration runs one process per hook call), each
process must first `restore_task` from the store so its engine continues from the stored
head, one process at a time (a store refuses a seq that is not above its chain's head).
"""

from __future__ import annotations

import atexit
import threading
import time
from _weakrefset import WeakSet
from collections.abc import Iterable, Mapping, Sequence

from charter._audit.base import INTENT_KEY, SHARED_KEY, AuditStore
from charter._engine.engine import (
    Decision,
    EvalResult,
    EvaluationDeadline,
    PolicyEngine,
    _applies,
)
from charter._model.behavior import (
    CLOSING_KINDS,
    TASK_BOUNDARY_KINDS,
    ActionKind,
    Behavior,
    Outcome,
    derived,
)
from charter._model.context import EvalContext
from charter._model.errors import AgentBindingError, AuditError
from charter._model.identifiers import new_id
from charter._runtime.internal import charter_logger, internal_error_count, report_internal_error
from charter._runtime.redact import Redactor
from charter._runtime.settings import Settings
from charter._runtime.sources import PolicySources
from charter._runtime.wire import wire_form
from charter._runtime.writer import AuditWriter, ExporterLike, StepObserver

# Signed checkpoints and shared counters load when a setting asks for them: a process that
# uses neither (a hook call) never pays for the signing and counter code.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from charter._audit.counters import CounterStore
    from charter._runtime.checkpoints import Checkpointer
    from charter._runtime.shared import Demands, SharedCounts, SharedLimits

__all__ = ["Runner"]


# weakref.WeakSet is _weakrefset's, which threading has loaded already: importing weakref
# (35 KB of bytecode, six classes) for it would cost every hook process.
_live: WeakSet[Runner] = WeakSet()
_live_lock = threading.Lock()
_atexit_registered = False


_new_id = new_id


class Runner:
    """One agent's policy engine with its policy sources, audit trail and background threads.

    Build it from `Settings` (or from the same keywords `Settings.from_sources` takes). Refuses
    (ValueError) bad settings, and raises PolicyLoadError for invalid inline policies; file and
    cache problems never raise, they set the load state (see `status`) and the fail mode
    decides. `store` and `exporters` replace the store opened from `audit_location` and add
    exporters (tests, custom sinks); `counters` replaces the store's shared limit counters
    (see `charter._runtime.shared`); `otlp_endpoint` adds an `OtlpExporter` the runner owns
    (ImportError naming the ``otlp`` extra when it is not installed).

    Thread-safe. Calls for one task are serialised by a per-task lock, so a step's verdict
    and its recording see the same history.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        store: AuditStore | None = None,
        exporters: Iterable[ExporterLike] = (),
        counters: CounterStore | None = None,
        **kwargs: Any,
    ) -> None:
        if settings is None:
            settings = Settings.from_sources(**kwargs)
        elif kwargs:
            raise ValueError(
                f"pass either settings or setting keywords, not both (got {', '.join(kwargs)})"
            )
        self.settings = settings
        self.engine = PolicyEngine()
        self._sources = PolicySources(settings, self.engine)
        self._sources.load_initial()
        self._redactor = Redactor(settings.payload_mode)
        exporters = tuple(exporters)
        self._owned: tuple[Any, ...] = ()
        if settings.otlp_endpoint is not None:
            from charter._runtime.otlp import OtlpExporter

            self._owned = (OtlpExporter.from_settings(settings),)
            exporters += self._owned
        self._exporters = exporters
        observers: list[StepObserver] = []
        for e in exporters:
            if isinstance(e, StepObserver):
                observers.append(e)
        self._observers = tuple(observers)
        self._checkpointer = _checkpointer(settings, exporters)
        self._writer = AuditWriter(
            settings.audit_location,
            store=store,
            exporters=exporters,
            durability=settings.audit_durability,
            queue_size=settings.queue_size,
            prepare=self._redactor.redact_batch,
            checkpointer=self._checkpointer,
        )
        self._sync = settings.audit_durability == "sync"
        # Built on the first step a policy counts outside its task (`_shared`): most
        # processes (a hook call among them) never reserve, and never load the module.
        self._shared_limits: SharedLimits | None = None
        self._shared_args = (self._writer.open_store, settings.shared_hold_seconds, counters)
        self._shared_lock = threading.Lock()
        self._guard = threading.Lock()
        self._locks: dict[str, threading.RLock] = {}
        self._contexts: dict[str, EvalContext] = {}
        self._activity: dict[str, float] = {}
        self._tickets: dict[str, int] = {}
        self._reserved: dict[str, int] = {}  # per task: the highest seq an intent record took
        self.evaluated = 0
        self.blocked = 0
        self.evaluation_errors = 0
        self.swept = 0
        self._stop = threading.Event()
        self._closed = False
        self._sweeper = threading.Thread(
            target=self._sweep_loop, name="charter-sweeper", daemon=True
        )
        self._sweeper.start()
        _register(self)

    # -- context and locks --------------------------------------------------------------------

    @property
    def agent_id(self) -> str:
        return self.settings.agent_id

    @property
    def monitor(self) -> bool:
        """True when nothing is blocked or asked (enforcement "monitor", set or by manifest)."""
        s = self.settings
        if s.enforcement == "monitor":
            return True
        # Read on every step: the manifests' flag (nearly always False) first.
        return self._sources.manifests_monitor and s.origin("enforcement") == "default"

    def context_for(self, task_id: str) -> EvalContext:
        """The evaluation context this runner builds from its settings for `task_id`."""
        ctx = self._contexts.get(task_id)
        if ctx is None:
            ctx = self._build_context(task_id)
            if task_id in self._activity:  # cached only for live tasks, forgotten at their end
                self._contexts[task_id] = ctx
        return ctx

    def _build_context(self, task_id: str) -> EvalContext:
        s = self.settings
        return EvalContext(
            agent_id=s.agent_id,
            task_id=task_id,
            environment=s.environment,
            risk_classification=s.risk_classification,
            agent_name=s.agent_name,
            agent_purpose=s.agent_purpose,
            agent_owner=s.agent_owner,
            declared_tools=s.declared_tools,
            project_root=s.project_root,
            trusted_values=s.trusted_values,
        )

    def _lock(self, task_id: str) -> threading.RLock:
        lock = self._locks.get(task_id)
        if lock is None:
            with self._guard:
                lock = self._locks.setdefault(task_id, threading.RLock())
        return lock

    def _check_agent(self, b: Behavior) -> None:
        if b.agent_id != self.settings.agent_id:
            raise AgentBindingError(
                f"this runner serves agent {self.settings.agent_id!r} (agent_id= / "
                f"CHARTER_AGENT_ID), not {b.agent_id!r}; use one Runner per agent"
            )

    def _check_skew(self, b: Behavior) -> None:
        bound = self.settings.max_clock_skew_seconds
        # POSIX seconds on both sides: a datetime's difference builds a timedelta per step.
        skew = abs(b.timestamp.timestamp() - time.time())
        if skew > bound:
            raise ValueError(
                f"step timestamp {b.timestamp.isoformat()} is {skew:.0f} s away from this "
                f"host's clock, beyond max_clock_skew_seconds= / CHARTER_MAX_CLOCK_SKEW_SECONDS "
                f"({bound:g}); stamp steps with the current time or fix the clock"
            )

    # -- judging ------------------------------------------------------------------------------

    @property
    def _shared(self) -> SharedLimits:
        limits = self._shared_limits
        if limits is None:
            from charter._runtime.shared import SharedLimits

            with self._shared_lock:
                limits = self._shared_limits
                if limits is None:
                    limits = self._shared_limits = SharedLimits(*self._shared_args)
        return limits

    def preview(self, intended: Behavior, context: EvalContext | None = None) -> EvalResult:
        """The decision `evaluate` would give, with no side effect (nothing recorded).

        The returned result is the enforced one (monitor mode turns block/ask into allow).
        Refuses what `evaluate` refuses.
        """
        self._check_agent(intended)
        self._check_skew(intended)
        self._sources.maybe_reload()
        ctx = self._checked_context(intended, context)
        demands = self.engine.shared_demands(intended, ctx)
        if not demands:
            return self._enforced(self._judge(intended, ctx))[0]
        read = self._shared.read(demands)
        if isinstance(read, str):
            return self._unshared(intended, demands, read)
        return self._enforced(self._judge(intended, ctx, read.counts))[0]

    def evaluate(self, intended: Behavior, context: EvalContext | None = None) -> EvalResult:
        """Gate one step before it runs; never raises because of a policy or an engine bug.

        Returns the decision. A `block` is recorded here, at once and inside the task's lock,
        as a blocked step with the verdict in ``meta["charter.eval"]`` (the result carries
        `recorded_seq`); `allow` and `warn` register the intent (the verdict travels with it
        to the outcome `record` writes later) and, in sync durability, commit it to the store
        first: a store that cannot take it turns the decision into a block naming the store;
        `ask` changes nothing, awaiting an approval. A block that cannot be recorded (sync
        durability, the store failing) is still returned as a block, its reason saying so.
        A step without action_id gets one (see ``result.action_id``). Task boundaries are only
        judged. With no usable policy set, action steps are blocked (fail_mode closed) or
        allowed (open), with a reason saying why; so is an exception inside the engine.

        Raises ValueError for a timestamp beyond the clock-skew bound, for a step that has
        already run, and for a task that was not started; AgentBindingError for another
        agent's step; TaskClosedError for an ended task.
        """
        self._check_agent(intended)
        self._check_skew(intended)
        self._sources.maybe_reload()
        ctx = self._checked_context(intended, context)
        if intended.kind in TASK_BOUNDARY_KINDS:
            if self._observers:
                self._observe(intended, "start")
            return self._enforced(self._judge(intended, ctx))[0]
        if not intended.is_intent:
            raise ValueError(
                "evaluate takes a step that has not run (no output, no outcome marker); "
                "record outcomes with record()"
            )
        if intended.action_id is None:
            intended = derive(intended, action_id=_new_id())
        intended = _own_shared(intended)
        if self._observers:
            self._observe(intended, "start")
        tid = intended.task_id
        with self._lock(tid):
            self._activity[tid] = time.monotonic()
            demands = self.engine.shared_demands(intended, ctx)
            if not demands:
                result, verdict = self._enforced(self._judge(intended, ctx))
                if result.decision is Decision.BLOCK:
                    result = self._record_block(intended, result, verdict)
                elif result.decision is not Decision.ASK:
                    result = self._admit(intended, result, verdict)
            else:
                result = self._evaluate_shared(intended, ctx, demands)
        if self._observers:
            self._observe(intended, "decided")
        return result

    def _observe(self, b: Behavior, phase: str) -> None:
        for observer in self._observers:
            try:
                observer.observe_step(b, phase)
            except Exception as exc:  # observability never reaches the agent
                report_internal_error(exc, f"exporter {type(observer).__name__}")

    def _evaluate_shared(
        self, intended: Behavior, ctx: EvalContext, demands: Demands
    ) -> EvalResult:
        """`evaluate` for a step counted outside its task: reserve, judge on the counts read,
        then keep the reservation with the admitted intent or release it. Task lock held."""
        held = self._shared.reserve(demands)
        if isinstance(held, str):
            blocked = self._unshared(intended, demands, held)
            return self._record_block(intended, blocked, self._verdict(blocked))
        intended = _with_meta(intended, {SHARED_KEY: held.meta})
        result, verdict = self._enforced(self._judge(intended, ctx, held.counts))
        if result.decision is not Decision.ALLOW and result.decision is not Decision.WARN:
            # Blocked, or waiting for an approval (authorize reserves again): the unit is
            # not held while nothing runs.
            self._shared.release(held.meta)
            if result.decision is Decision.BLOCK:
                return self._record_block(intended, result, verdict)
            return result
        admitted = self._admit(intended, result, verdict)
        if admitted.decision is Decision.BLOCK:
            self._shared.release(held.meta)
        return admitted

    def _unshared(self, intended: Behavior, demands: Demands, why: str) -> EvalResult:
        """The block for a step whose shared counts could not be read or reserved: whatever
        the fail mode and the enforcement, it is never judged on a partial count."""
        names = sorted({n for _, group in demands for n in group})
        scopes = sorted({d.scope for d, _ in demands})
        return EvalResult(
            Decision.BLOCK,
            1.0,
            (),
            intended.action_id,
            None,
            f"blocked: {why}; policies {', '.join(repr(n) for n in names)} count across the "
            f"{' and '.join(scopes)}, and Charter does not judge a limit on a count it could "
            "not read",
        )

    def record_block(self, intended: Behavior, result: EvalResult) -> EvalResult:
        """Record `intended` as blocked with `result` as its verdict (e.g. after an approval
        was denied); returns `result` with `recorded_seq` set. Refuses what `record` refuses.
        """
        self._check_agent(intended)
        if intended.action_id is None:
            intended = derive(intended, action_id=_new_id())
        intended = _own_shared(intended)
        blocked = result.replace(decision=Decision.BLOCK, action_id=intended.action_id)
        with self._lock(intended.task_id):
            self._activity[intended.task_id] = time.monotonic()
            return self._record_block(intended, blocked, self._verdict(blocked))

    def authorize(
        self,
        intended: Behavior,
        result: EvalResult,
        *,
        ran: bool = False,
        by: str | None = None,
        why: str | None = None,
    ) -> EvalResult:
        """Register `intended` as allowed to run although `result` said ask (an approval
        authorised it); returns `result` with the action_id used. The verdict its outcome
        carries says ``approved: true`` (and `by` / `why` as ``approved_by`` / ``approval``
        when given). Refuses what `PolicyEngine.register_intent` refuses.

        Before the step runs (`ran` False) this is an admission like `evaluate`'s: a shared
        limit that filled up while a person decided blocks it, and in sync durability the
        intent is committed first (a store that cannot take it blocks the step). With `ran`
        the step already ran (approved outside Charter, e.g. in Claude Code's permission
        prompt): nothing can be blocked any more, so the intent is only registered (its
        outcome, recorded next, is the step's record and carries the verdict) and a shared
        unit is taken when one is left.
        """
        self._check_agent(intended)
        if intended.action_id is None:
            intended = derive(intended, action_id=_new_id())
        intended = _own_shared(intended)
        verdict = self._verdict(result)
        verdict["approved"] = True
        if by is not None:
            verdict["approved_by"] = by
        if why is not None:
            verdict["approval"] = why
        with self._lock(intended.task_id):
            self._activity[intended.task_id] = time.monotonic()
            ctx = self.context_for(intended.task_id)
            demands = self.engine.shared_demands(intended, ctx)
            held: SharedCounts | None = None
            if demands and ran:
                got = self._shared.reserve(demands)
                if not isinstance(got, str):
                    held = got
                    intended = _with_meta(intended, {SHARED_KEY: held.meta})
            elif demands:
                # The approval does not lift a shared limit: the units are taken now, and a
                # limit that filled up while a person decided blocks the step.
                got = self._shared.reserve(demands)
                if isinstance(got, str):
                    blocked = self._unshared(intended, demands, got)
                    return self._record_block(intended, blocked, self._verdict(blocked))
                held = got
                intended = _with_meta(intended, {SHARED_KEY: held.meta})
                now = self._enforced(self._judge(intended, ctx, held.counts))
                if now[0].decision is Decision.BLOCK:
                    self._shared.release(held.meta)
                    return self._record_block(intended, now[0], now[1])
            if ran:
                self.engine.register_intent(_with_meta(intended, {"charter.eval": verdict}))
                return result.replace(action_id=intended.action_id)
            admitted = self._admit(intended, result, verdict)
            if held is not None and admitted.decision is Decision.BLOCK:
                self._shared.release(held.meta)
        if admitted.decision is Decision.BLOCK:
            return admitted
        return result.replace(action_id=intended.action_id)

    def _admit(self, intended: Behavior, result: EvalResult, verdict: dict[str, Any]) -> EvalResult:
        """Register an allowed intent and, in sync durability, commit it to the store first;
        a store that fails turns `result` into an (unrecorded) block. Task lock held."""
        admitted = _with_meta(intended, {"charter.eval": verdict})
        if not (self._sync and self._writer.enabled):
            self.engine.register_intent(admitted)
            return result
        tid = intended.task_id
        self.engine.register_intent(admitted)  # refuses a reused action_id before any write
        seq = self._next_seq(tid)
        wire = wire_form(derive(admitted, seq=seq))
        wire["meta"] = {**admitted.meta, INTENT_KEY: True}
        try:
            self._writer.write_now([wire])
        except Exception as exc:
            assert intended.action_id is not None  # evaluate and authorize gave it one
            self.engine.discard_intent(tid, intended.action_id)
            report_internal_error(exc, "audit.intent")
            self.blocked += 1
            return result.replace(
                decision=Decision.BLOCK,
                action_id=intended.action_id,
                reason=(
                    f"blocked: the step's intent could not be recorded in audit store "
                    f"{self._writer.target} ({exc}); audit_durability is sync, so no step runs "
                    f"unrecorded (was: {result.reason})"
                ),
                monitored=False,
                failed_open=False,
            )
        self._reserved[tid] = seq
        return result

    def _next_seq(self, task_id: str) -> int:
        """The seq the task's next record takes: after its history and its intent records."""
        return max(self.engine.next_seq(task_id), self._reserved.get(task_id, 0) + 1)

    def _checked_context(self, b: Behavior, context: EvalContext | None) -> EvalContext:
        if context is None:
            return self.context_for(b.task_id)
        if context.agent_id != b.agent_id or context.task_id != b.task_id:
            raise ValueError(
                "context does not describe this step: context is for "
                f"{context.agent_id!r}/{context.task_id!r}, the step for "
                f"{b.agent_id!r}/{b.task_id!r}"
            )
        return context

    def _judge(
        self, b: Behavior, ctx: EvalContext, shared: Mapping[str, float] | None = None
    ) -> EvalResult:
        self.evaluated += 1
        boundary = b.kind in TASK_BOUNDARY_KINDS
        if not self._sources.usable:
            why = f"no policy set could be loaded ({self._sources.detail})"
            return self._failed(b, why, boundary)
        limit = self.settings.evaluation_deadline_seconds
        deadline = time.monotonic() + limit
        try:
            return self.engine.evaluate(
                b, ctx, out_of_time=lambda: time.monotonic() > deadline, shared=shared
            )
        except EvaluationDeadline as late:
            self.evaluation_errors += 1
            charter_logger().warning(
                "charter: judging %s ran past its deadline (%s)", b.step_name, late
            )
            why = (
                f"judging the step took longer than evaluation_deadline_seconds={limit:g} ({late})"
            )
            return self._failed(b, why, boundary)
        except Exception as exc:  # a Charter bug must become a decision, never a crash
            self.evaluation_errors += 1
            charter_logger().error(
                "charter: policy evaluation failed on %s", b.step_name, exc_info=exc
            )
            return self._failed(
                b, f"policy evaluation failed ({type(exc).__name__}: {exc})", boundary
            )

    def _failed(self, b: Behavior, why: str, boundary: bool) -> EvalResult:
        if boundary:
            return EvalResult(
                Decision.ALLOW, 0.0, (), b.action_id, None, f"allowed: task boundaries pass; {why}"
            )
        if self.settings.fail_mode == "closed":
            return EvalResult(
                Decision.BLOCK, 1.0, (), b.action_id, None, f"blocked: {why}; fail_mode is closed"
            )
        return EvalResult(
            Decision.ALLOW,
            0.0,
            (),
            b.action_id,
            None,
            f"allowed: {why}; fail_mode is open",
            failed_open=True,
        )

    def _verdict(self, result: EvalResult, monitor: bool | None = None) -> dict[str, Any]:
        verdict = result.to_dict()
        risk = verdict.get("risk_score")
        if type(risk) is float and risk.is_integer():
            # 0.0 and 0 are the same JSON number with the same canonical bytes, but the audit
            # chain's fast encoder only takes floats without a trailing ".0".
            verdict["risk_score"] = int(risk)
        if self.monitor if monitor is None else monitor:
            verdict["enforcement"] = "monitor"
        return verdict

    def _enforced(self, would: EvalResult) -> tuple[EvalResult, dict[str, Any]]:
        """(what is enforced, the verdict to record: what it would have been)."""
        monitor = self.monitor
        verdict = self._verdict(would, monitor)
        if monitor and would.decision in (Decision.BLOCK, Decision.ASK):
            enforced = would.replace(
                decision=Decision.ALLOW,
                reason=f"monitor mode, not enforced: {would.reason}",
                monitored=True,
            )
            return enforced, verdict
        return would, verdict

    def _record_block(
        self, intended: Behavior, result: EvalResult, verdict: dict[str, Any]
    ) -> EvalResult:
        meta = dict(intended.meta)
        meta["charter.outcome"] = Outcome.BLOCKED.value
        meta["charter.eval"] = verdict
        try:
            recorded = self._commit(derive(intended, meta=meta, output=None))
        except AuditError as exc:
            self.blocked += 1
            # Sync durability and a failing store: the refusal stands (it is the safe side);
            # only its record is missing, which is reported and said in the reason.
            report_internal_error(exc, "audit.block")
            return result.replace(
                action_id=intended.action_id,
                reason=f"{result.reason} (not recorded: {exc})",
            )
        self.blocked += 1
        return result.replace(action_id=intended.action_id, recorded_seq=recorded.seq)

    # -- recording ----------------------------------------------------------------------------

    def record(self, outcome: Behavior) -> Behavior:
        """Record a step's outcome (or a task boundary) and return it with its seq.

        The outcome of an allowed intent inherits the intent's verdict in
        ``meta["charter.eval"]``. A closing boundary (task.end / task.error / task.idle) first
        records every still-open intent as abandoned, and carries
        ``meta["charter.chain"] = {"final": true, "count": <steps in the chain>}``.
        Refuses what `PolicyEngine.record` refuses (an unstarted or ended task, an action_id
        already used, a blocked step recorded again). Raises AuditError in sync durability
        when the store fails; the history is then unchanged.
        """
        self._check_agent(outcome)
        outcome = _own_shared(outcome)
        tid = outcome.task_id
        with self._lock(tid):
            self._activity[tid] = time.monotonic()
            extra: dict[str, Any] = {}
            aid = outcome.action_id
            intent = self.engine.open_intent(tid, aid) if aid is not None else None
            _inherit(extra, intent, outcome.meta)
            return self._commit(outcome, extra, (intent,))

    def _record_outcome(
        self,
        intent: Behavior,
        outcome: str,
        output: dict[str, Any] | None = None,
        properties: dict[str, Any] | None = None,
    ) -> Behavior:
        """Record how the allowed `intent` ended, as `record` records
        ``derive(intent, output=..., properties=..., meta={..., "charter.outcome": outcome})``,
        built in one copy (a gated step's outcome is recorded on every step).

        `output` and `properties` (None: the intent's own) must be I-JSON Charter captured
        itself; `outcome` is an `Outcome` value. Refuses and raises what `record` does.
        """
        self._check_agent(intent)
        meta = dict(intent.meta)
        meta.pop(SHARED_KEY, None)  # only the runner writes the counts (see `_own_shared`)
        meta["charter.outcome"] = outcome
        changes: dict[str, Any] = {"meta": meta}
        if output is not None:
            changes["output"] = output
        if properties is not None:
            changes["properties"] = properties
        tid = intent.task_id
        with self._lock(tid):
            self._activity[tid] = time.monotonic()
            aid = intent.action_id
            admitted = self.engine.open_intent(tid, aid) if aid is not None else None
            _inherit(meta, admitted, meta)
            if intent.seq is None and intent.kind not in CLOSING_KINDS:
                # Numbered in the same copy; a closing record is numbered by `_commit`,
                # after the intents it abandons.
                changes["seq"] = self._next_seq(tid)
            return self._commit(derived(intent, changes), None, (admitted,))

    def _commit(
        self,
        outcome: Behavior,
        extra: dict[str, Any] | None = None,
        looked_up: tuple[Behavior | None] | None = None,
    ) -> Behavior:
        """Record into the engine and hand the records to the writer; task lock held.

        `extra` is added to the outcome's meta. All changes are made in one unvalidated copy
        (see `derive`): the caller's behavior was validated when it was built. `looked_up`
        holds the outcome's open intent (or None) when the caller read it under the same task
        lock; a closing boundary reads it again after abandoning the open intents.
        """
        tid = outcome.task_id
        engine = self.engine
        checkpoint = engine.checkpoint(tid) if self._sync and self._writer.enabled else None
        recorded: list[Behavior] = []
        settle: list[tuple[Any, Behavior]] = []  # (the intent's charter.shared, its outcome)
        extra = dict(extra) if extra else {}
        try:
            if outcome.kind in CLOSING_KINDS and engine.task_state(tid) == "open":
                looked_up = None
                for intent in engine.open_intents(tid):
                    abandoned = _with_meta(intent, {"charter.outcome": Outcome.ABANDONED.value})
                    recorded.append(engine.record(derive(abandoned, seq=self._next_seq(tid))))
                    if SHARED_KEY in intent.meta:
                        settle.append((intent.meta[SHARED_KEY], recorded[-1]))
                # The closing record is the chain's last; its seq is the chain's length.
                extra["charter.chain"] = {"final": True, "count": self._next_seq(tid)}
            changes: dict[str, Any] = {}
            if extra:
                meta = dict(outcome.meta)
                meta.update(extra)
                changes["meta"] = meta
            if outcome.seq is None:
                # Numbered here so the engine does not make a validated copy just for the seq.
                changes["seq"] = self._next_seq(tid)
            if changes:
                outcome = derive(outcome, **changes)
            if not outcome.action_id:
                own = None
            elif looked_up is not None:
                own = looked_up[0]
            else:
                own = engine.open_intent(tid, outcome.action_id)
            recorded.append(engine.record(outcome))
            if own is not None and SHARED_KEY in own.meta:
                settle.append((own.meta[SHARED_KEY], recorded[-1]))
        except BaseException:
            if checkpoint is not None:
                engine.rollback(checkpoint)
            raise
        if self._observers:
            for b in recorded:
                self._observe(b, "end")
        if checkpoint is not None:
            try:
                self._writer.write_now([wire_form(b) for b in recorded])
            except Exception as exc:
                engine.rollback(checkpoint)
                raise AuditError(
                    f"step {outcome.step_name!r} of task {tid!r} could not be recorded in "
                    f"audit store {self._writer.target} ({exc}); nothing was written and the "
                    "task's history is unchanged (audit_durability is sync)"
                ) from exc
        else:
            # The writer builds the wire forms and redacts them, off the agent's thread.
            ticket = self._writer.submit(recorded)
            if ticket:
                self._tickets[tid] = ticket
        for meta, done in settle:
            self._shared.settle(meta, done)
        return recorded[-1]

    # -- task lifecycle -----------------------------------------------------------------------

    def end_task(
        self, task_id: str, closing: Behavior | None = None, *, wait: float | None = None
    ) -> bool:
        """Close a task and forget it: record `closing` (or a task.end when the task is still
        open and none is given), evict it from the engine, and wait up to `wait` seconds
        (default exit_flush_seconds) for its records to be committed.

        Returns whether they were. Ending an ended task does nothing; refuses (ValueError) a
        task this runner never saw.
        """
        with self._lock(task_id):
            state = self.engine.task_state(task_id)
            if state == "unknown":
                raise ValueError(
                    f"task {task_id!r} is not known to this runner; start it (or restore_task)"
                )
            if state != "ended":
                if closing is not None:
                    self.record(closing)
                elif state == "open":
                    self.record(self._default_end(task_id))
                self.engine.end_task(task_id)
            ticket = self._forget(task_id)
        timeout = self.settings.exit_flush_seconds if wait is None else wait
        return self._writer.wait(ticket, timeout)

    def _default_end(self, task_id: str) -> Behavior:
        history = self.engine.get_history(task_id)
        name = history[0].step_name if history else "task"
        return Behavior(
            agent_id=self.agent_id, task_id=task_id, kind=ActionKind.TASK_END, step_name=name
        )

    def _forget(self, task_id: str) -> int:
        self._contexts.pop(task_id, None)
        self._activity.pop(task_id, None)
        self._reserved.pop(task_id, None)
        with self._guard:
            self._locks.pop(task_id, None)
        return self._tickets.pop(task_id, 0)

    def restore_task(self, steps: Sequence[Behavior | Mapping[str, Any]]) -> None:
        """Rebuild a task from its recorded history (e.g. read from the store) in this process.

        Nothing is evaluated and nothing is written: the steps enter the engine with their
        stored seq, so the next `record` continues the chain. Write-ahead intent records
        (``meta["charter.intent"]``) are not history: they are skipped, and only their seq
        is kept. The first step must be the task.start. Refuses (ValueError) an empty list,
        steps of several tasks, and a task already active here; AgentBindingError for
        another agent's steps.
        """
        self._restore(steps, adopt=False)

    def _restore_stored(self, records: list[dict[str, Any]]) -> None:
        """`restore_task` for records this process just read from one of Charter's own stores
        and hands over (`Gate.resume_task`): their payloads are I-JSON already and nobody
        else holds them, so they are adopted instead of being walked and copied again."""
        self._restore(records, adopt=True)

    def _restore(self, steps: Sequence[Behavior | Mapping[str, Any]], *, adopt: bool) -> None:
        intents_top = 0
        kept: list[Behavior | Mapping[str, Any]] = []
        for s in steps:
            meta = s.meta if isinstance(s, Behavior) else s.get("meta")
            if isinstance(meta, Mapping) and meta.get(INTENT_KEY) is True:
                seq = s.seq if isinstance(s, Behavior) else s.get("seq")
                intents_top = max(intents_top, seq if type(seq) is int else 0)
            else:
                kept.append(s)
        build = Behavior._adopt if adopt else Behavior.from_dict
        items = [s if isinstance(s, Behavior) else build(dict(s)) for s in kept]
        if not items:
            raise ValueError("restore_task needs the task's recorded steps; got none")
        tid = items[0].task_id
        if any(b.task_id != tid for b in items):
            raise ValueError("restore_task takes the steps of one task; got several task ids")
        for b in items:
            self._check_agent(b)
        with self._lock(tid):
            if self.engine.task_state(tid) in ("open", "closing"):
                raise ValueError(f"task {tid!r} is already active in this runner")
            checkpoint = self.engine.checkpoint(tid)
            try:
                for b in items:
                    self.engine.record(b)
            except BaseException:
                self.engine.rollback(checkpoint)
                raise
            if intents_top:
                self._reserved[tid] = intents_top
            self._activity[tid] = time.monotonic()

    def _export_stored(self, task_id: str) -> tuple[int, str | None, int, dict[str, Any]] | None:
        """(the store's head seq and hash, the highest intent seq, `PolicyEngine.export_task`)
        for an open task whose stored chain ends exactly where this runner last wrote, and
        whose every record the writer stored as it was recorded (no redaction, none dropped);
        else None. A full restore from that chain then builds the same history."""
        writer = self._writer
        store = writer.store
        if store is None or self._redactor.altered or writer.dropped or writer.evicted:
            return None
        with self._lock(task_id):
            if self.engine.task_state(task_id) != "open":
                return None
            head = store.head(self.agent_id, task_id)
            if head.seq == 0 or head.seq != self._next_seq(task_id) - 1:
                return None
            exported = self.engine.export_task(task_id)
            if exported is None:
                return None
            return head.seq, head.hash, self._reserved.get(task_id, 0), exported

    def _adopt_stored(self, history: Mapping[str, Any], reserved: int) -> None:
        """Open the task `history` (`PolicyEngine.export_task` of a runner of the same agent)
        describes, its steps read from the store only when first needed: `restore_task`
        for a chain whose head is the one the export was taken at. Refuses (ValueError) what
        `PolicyEngine.adopt_task` refuses and another agent's history."""
        store = self._writer.store
        if store is None:
            raise ValueError("no audit store to read the task's steps from")
        if history.get("agent_id") != self.agent_id:
            raise AgentBindingError(f"the saved history is not agent {self.agent_id!r}'s")
        tid = history.get("task_id")
        last_seq = history.get("last_seq")
        if type(tid) is not str or type(last_seq) is not int:
            raise ValueError("not a saved task history")
        agent_id = self.agent_id

        def earlier() -> list[Behavior]:
            steps = []
            for r in store.read_task(tid, agent_id):
                seq = r.get("seq")
                meta = r.get("meta")
                if isinstance(meta, Mapping) and meta.get(INTENT_KEY) is True:
                    continue
                if type(seq) is int and seq <= last_seq:
                    steps.append(Behavior._adopt(dict(r)))
            if not steps or steps[-1].seq != last_seq:
                raise ValueError(f"the stored chain of task {tid!r} does not hold its history")
            return steps

        with self._lock(tid):
            if self.engine.task_state(tid) in ("open", "closing"):
                raise ValueError(f"task {tid!r} is already active in this runner")
            self.engine.adopt_task(history, earlier)
            if reserved:
                self._reserved[tid] = reserved
            self._activity[tid] = time.monotonic()

    def stored_head(self, task_id: str) -> tuple[int, int] | None:
        """(the seq of the chain's last committed record in the store, the seq this runner
        last gave the task) for an active task; None when the task is not active here or
        there is no store. In sync durability the two differ only when another process
        appended to the chain since this one last did."""
        store = self._writer.store
        if store is None or self.engine.task_state(task_id) == "unknown":
            return None
        with self._lock(task_id):
            if self.engine.task_state(task_id) in ("unknown", "ended"):
                return None
            return store.head(self.agent_id, task_id).seq, self._next_seq(task_id) - 1

    def forget_task(self, task_id: str) -> None:
        """Drop an active task from this runner without recording anything (another process
        wrote to its chain): the next `restore_task` reads it afresh from the store."""
        with self._lock(task_id):
            self.engine.forget_task(task_id)
            self._forget(task_id)

    def restore_intent(self, intent: Behavior | Mapping[str, Any]) -> None:
        """Re-register an intent allowed in another process, so its outcome can be recorded
        here (its ``meta["charter.eval"]``, if any, travels on). Refuses what
        `PolicyEngine.register_intent` refuses.
        """
        b = intent if isinstance(intent, Behavior) else Behavior.from_dict(dict(intent))
        self._check_agent(b)
        with self._lock(b.task_id):
            self.engine.register_intent(b)
            self._activity[b.task_id] = time.monotonic()

    # -- idle tasks ---------------------------------------------------------------------------

    def _sweep_loop(self) -> None:
        interval = self.settings.sweep_interval_seconds
        while not self._stop.wait(interval):
            try:
                self.sweep_idle()
            except Exception as exc:
                report_internal_error(exc, "sweeper")

    def sweep_idle(self) -> list[str]:
        """Close every task idle longer than task_idle_seconds with a task.idle record
        (``properties.idle.reason = "expired"``); returns their ids. Busy tasks are skipped.
        """
        limit = self.settings.task_idle_seconds
        now = time.monotonic()
        swept = []
        for tid, last in list(self._activity.items()):
            if now - last <= limit:
                continue
            lock = self._lock(tid)
            if not lock.acquire(blocking=False):
                continue
            try:
                last = self._activity.get(tid, now)
                idle = time.monotonic() - last
                if idle <= limit:
                    continue
                if self.engine.task_state(tid) == "open":
                    history = self.engine.get_history(tid)
                    closing = Behavior(
                        agent_id=self.agent_id,
                        task_id=tid,
                        kind=ActionKind.TASK_IDLE,
                        step_name=history[0].step_name if history else "task",
                        properties={"idle": {"reason": "expired", "idle_seconds": round(idle, 3)}},
                    )
                    self._commit(closing)
                self.engine.end_task(tid)
                self._forget(tid)
                self.swept += 1
                swept.append(tid)
            except Exception as exc:
                report_internal_error(exc, "sweeper")
            finally:
                lock.release()
        return swept

    # -- status and shutdown ------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """A snapshot for `charter status` and health checks (plain JSON-able values).

        Keys: load_state (enforcing / none_configured / unavailable / stale), cause,
        policy_source, policies (count per enforcement point), applicable_policies (names
        that apply to this agent), fail_mode, enforcement, durability, payload_mode, agent_id,
        queue (queued, delivered, failed, dropped, dropped_by_cause, evicted, pending,
        export_failed, and gaps: the dropped records no stored record declares yet, as
        `Gap.to_dict()`), exporters (each exporter's own `status()`, such as the OTLP
        exporter's span counters), store (ok, location, detail), checkpoints (None without a
        signing key, else key_id, key, file, every, written, failed, export_failed,
        pending_chains), active_tasks, and counters.
        """
        state, cause = self._sources.state()
        base = self._build_context("status")
        applicable = [p.name for p in self.engine.policies if _applies(p, base)]
        w = self._writer
        if not self._sources.usable:
            effective = (
                "blocks action steps"
                if self.settings.fail_mode == "closed"
                else ("allows every step")
            )
        else:
            effective = "enforcing the loaded set"
        return {
            "load_state": state,
            "cause": cause,
            "policy_source": self._sources.source,
            "policies": self.engine.counts_by_enforcement_point(),
            "applicable_policies": applicable,
            "fail_mode": self.settings.fail_mode,
            "fail_mode_effect": effective,
            "enforcement": "monitor" if self.monitor else "enforce",
            "durability": self.settings.audit_durability,
            "payload_mode": self.settings.payload_mode,
            "agent_id": self.agent_id,
            "queue": {
                "queued": w.queued,
                "delivered": w.delivered,
                "failed": w.failed,
                "dropped": w.dropped,
                "dropped_by_cause": dict(w.dropped_by_cause),
                "evicted": w.evicted,
                "gaps": [g.to_dict() for g in w.gaps()],
                "pending": w.pending,
                "export_failed": w.export_failed,
            },
            "exporters": [
                getattr(e, "status")()  # noqa: B009
                for e in self._exporters
                if callable(getattr(e, "status", None))
            ],
            "store": w.health(),
            "checkpoints": self._checkpoint_status(),
            "active_tasks": len(self.engine.active_tasks()),
            "counters": {
                "evaluated": self.evaluated,
                "blocked": self.blocked,
                "evaluation_errors": self.evaluation_errors,
                "idle_tasks_closed": self.swept,
                "secrets_masked": self._redactor.masked,
                "redaction_errors": self._redactor.errors,
                "policy_reloads": self._sources.reloads,
                "internal_errors_in_process": internal_error_count(),
                "shared_reserved": self._shared.reserved,
                "shared_refused": self._shared.refused,
                "shared_settle_errors": self._shared.settle_errors,
            },
        }

    def _checkpoint_status(self) -> dict[str, Any] | None:
        c = self._checkpointer
        if c is None:
            return None
        return {
            "key_id": c.key.key_id,
            "key": c.key.path,
            "file": self.settings.checkpoint_file,
            "every": c.every,
            "written": c.written,
            "failed": c.failed,
            "export_failed": c.export_failed,
            "pending_chains": c.pending,
        }

    @property
    def store(self) -> AuditStore | None:
        """The audit store in use (None when auditing is off or the store cannot be opened)."""
        return self._writer.store

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record queued so far is committed (or dropped) and exporters that
        buffer (OTLP) have sent what they hold; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        flushed = self._writer.flush(timeout)
        for exporter in self._exporters:
            finish = getattr(exporter, "flush", None)
            if finish is None:
                continue
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                flushed = bool(finish(left)) and flushed
            except Exception as exc:
                report_internal_error(exc, f"exporter {type(exporter).__name__}")
        return flushed

    def close(self, timeout: float | None = None) -> bool:
        """Stop the sweeper, flush within `timeout` (default exit_flush_seconds), stop the
        writer and close the store it opened. Returns whether everything was flushed.
        Idempotent; later evaluations still work but records are dropped and counted.
        """
        if self._closed:
            return True
        self._closed = True
        self._stop.set()
        limit = self.settings.exit_flush_seconds if timeout is None else timeout
        deadline = time.monotonic() + limit
        flushed = self._writer.close(limit)
        for exporter in self._exporters:
            # Exporters this runner built are shut down; the caller's are flushed only.
            finish = getattr(exporter, "close" if exporter in self._owned else "flush", None)
            if finish is None:
                continue
            try:
                finish(max(0.0, deadline - time.monotonic()))
            except Exception as exc:
                report_internal_error(exc, f"exporter {type(exporter).__name__}")
        with _live_lock:
            _live.discard(self)
        return flushed

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def derive(b: Behavior, **changes: Any) -> Behavior:
    """A copy of the already validated `b` with `changes`, skipping validation.

    Only for values Charter made itself and knows to be I-JSON (verdicts, outcome and chain
    markers, seq, captured output): validating a behavior deep-copies its payloads, which on
    the hot path costs more than the evaluation. Never for anything a caller handed in raw.
    """
    return derived(b, changes)


def _inherit(into: dict[str, Any], intent: Behavior | None, own: Mapping[str, Any]) -> None:
    """Put into `into` what an outcome's meta takes from its open `intent`: the verdict it
    ran under (unless the outcome's own meta `own` has one) and the shared counts it holds."""
    if intent is None:
        return
    if "charter.eval" not in own and "charter.eval" in intent.meta:
        into["charter.eval"] = intent.meta["charter.eval"]
    if SHARED_KEY in intent.meta:
        into[SHARED_KEY] = intent.meta[SHARED_KEY]


def _own_shared(b: Behavior) -> Behavior:
    """`b` without a ``charter.shared`` its caller put there: only the runner writes the
    counts a step was judged with (a forged one could release other steps' units)."""
    if SHARED_KEY not in b.meta:
        return b
    return derive(b, meta={k: v for k, v in b.meta.items() if k != SHARED_KEY})


def _with_meta(b: Behavior, extra: Mapping[str, Any]) -> Behavior:
    meta = dict(b.meta)
    meta.update(extra)
    return derive(b, meta=meta)


def _checkpointer(settings: Settings, exporters: Sequence[ExporterLike]) -> Checkpointer | None:
    """The checkpointer for `settings`, or None when no signing key is set.

    Raises ValueError naming the setting when the key cannot be used (missing, unreadable,
    readable by others, not an Ed25519 private key): signed evidence was asked for, so the
    runner does not start without it.
    """
    if settings.signing_key is None:
        return None
    from charter._audit.checkpoint import CheckpointExporter, JsonlCheckpointFile
    from charter._audit.signing import KeyFileError, load_signing_key
    from charter._runtime.checkpoints import Checkpointer

    try:
        key = load_signing_key(settings.signing_key)
    except KeyFileError as exc:
        raise ValueError(f"signing_key= / CHARTER_SIGNING_KEY: {exc}") from None
    sinks: list[CheckpointExporter] = [e for e in exporters if isinstance(e, CheckpointExporter)]
    if settings.checkpoint_file is not None:
        sinks.insert(0, JsonlCheckpointFile(settings.checkpoint_file))
    return Checkpointer(key, settings.checkpoint_every, sinks)


def _register(runner: Runner) -> None:
    global _atexit_registered
    with _live_lock:
        _live.add(runner)
        if not _atexit_registered:
            _atexit_registered = True
            atexit.register(_flush_at_exit)


def _flush_at_exit() -> None:
    with _live_lock:
        runners = list(_live)
    for runner in runners:
        try:
            runner.close(runner.settings.exit_flush_seconds)
        except Exception as exc:
            report_internal_error(exc, "atexit flush")


def flush_live_runners(timeout: float) -> None:
    """Flush every open runner of this process (used by charter.testing between tests)."""
    with _live_lock:
        runners = list(_live)
    for runner in runners:
        runner.flush(timeout)
