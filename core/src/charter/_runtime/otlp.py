"""OTLP export: every governed step as a span in OpenTelemetry's GenAI conventions.

`OtlpExporter` is an audit exporter (it receives each committed record, chained, with its seq
and hash) and a step observer (the runner tells it when a step starts, is decided and is
recorded, on the agent's thread). Observing costs the agent one context read and a clock read
per phase; spans are built from the committed records on the writer thread and handed to the
SDK's batch span processor, whose own thread sends them over OTLP/HTTP.

What a trace shows:

- a task is an ``invoke_agent {agent}`` span from its task.start to its closing record;
- a tool call (a step with ``properties.tool`` or a ``step.exec``) is ``execute_tool {tool}``,
  a model call ``chat {model}`` (``text_completion`` for prompts), any other step
  ``{kind} {step name}``; each with the GenAI attributes the step's properties give
  (``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.request.model``,
  ``gen_ai.response.model``, ``gen_ai.provider.name``, ``gen_ai.usage.*``) and ``error.type``
  when it failed or was blocked;
- under each step, the governance decision as an ``apply_guardrail Charter`` span (the GenAI
  security conventions) with one ``gen_ai.security.finding`` event per violated policy, and
  ``charter.seq`` / ``charter.hash`` of the step's record, so a trace leads back to its chain;
- each signed checkpoint (with a signing key) as a root span ``charter.checkpoint`` whose
  attributes are its fields: ``charter.agent_id``, ``charter.task_id``, ``charter.seq``,
  ``charter.hash`` (the head), ``charter.checkpoint.time``, ``charter.checkpoint.key_id`` and
  ``charter.checkpoint.signature``, and ``charter.checkpoint.line``, its wire form as one JSON
  line (what ``charter verify --checkpoint FILE`` reads; `checkpoints_from_spans` rebuilds
  them from received spans).

A step's span is a child of the span that was current (the OpenTelemetry context) when the step
started, when there was one, else of its task's span. A task that did not start under a current
span gets a trace id and a root span id derived from its agent and task ids (`task_trace_ids`),
so processes that each record part of one task (a Claude Code session's hook calls) put every
span into one trace, under the task's span: a step recorded where the task did not start is a
child of that root all the same, and the task's closing record there becomes a ``task.end``
span under it. (With an application's `tracer_provider`, whose id generator Charter does not
own, the task's own span is a child of that root instead of being it.)

Payloads (inputs, outputs, error messages, policy details and reasons) are left out unless
`payloads` is set; they are then the stored form, redacted as in the store. Export never
changes an outcome: spans that fail to leave are counted (see `status`) and reported as
swallowed internal errors.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from charter._audit.base import is_intent_record
from charter._audit.checkpoint import CHECKPOINT_KEY, Checkpoint
from charter._model.behavior import CLOSING_KINDS, Behavior
from charter._runtime.internal import report_internal_error

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Span, Tracer

    from charter._runtime.settings import Settings

__all__ = [
    "CHECKPOINT_SPAN",
    "EXTRA_HINT",
    "OtlpExporter",
    "checkpoints_from_spans",
    "task_trace_ids",
    "traces_url",
]

EXTRA_HINT = (
    "OTLP export needs the otlp extra: pip install 'charter[otlp]' "
    "(opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)"
)

GUARDIAN = "Charter"
#: The name of the span that carries one signed checkpoint.
CHECKPOINT_SPAN = "charter.checkpoint"
_TRACES_PATH = "/v1/traces"
_MARKS_MAX = 65_536
_PAYLOAD_MAX = 65_536
_DECISION_TYPES = {"allow": "allow", "warn": "warn", "block": "deny", "ask": "deny"}
_SEVERITIES = {"info": "low"}
_TASK = "task"


def traces_url(endpoint: str) -> str:
    """The traces URL of an OTLP/HTTP receiver: `endpoint` with ``/v1/traces`` appended, as
    the SDK does for ``OTEL_EXPORTER_OTLP_ENDPOINT``, unless it already ends with it."""
    base = endpoint.rstrip("/")
    return base if base.endswith(_TRACES_PATH) else base + _TRACES_PATH


def checkpoints_from_spans(spans: Sequence[Mapping[str, Any]]) -> list[Checkpoint]:
    """The signed checkpoints carried by received spans (each a mapping with ``name`` and
    ``attributes``, as `charter.testing.OtlpReceiver` or a collector's JSON gives them),
    rebuilt from their field attributes; other spans are skipped. Nothing is trusted here:
    check the signatures with the public key (``charter verify --checkpoint``).

    Raises ValueError naming the span when a checkpoint span's fields are missing or bad.
    """
    found: list[Checkpoint] = []
    for index, span in enumerate(spans):
        if span.get("name") != CHECKPOINT_SPAN:
            continue
        attrs = span.get("attributes")
        attrs = attrs if isinstance(attrs, Mapping) else {}
        seq = attrs.get("charter.seq")
        body = {
            "agent_id": attrs.get("charter.agent_id"),
            "task_id": attrs.get("charter.task_id"),
            "seq": int(seq) if isinstance(seq, (int, str)) and str(seq).isdigit() else seq,
            "hash": attrs.get("charter.hash"),
            "time": attrs.get("charter.checkpoint.time"),
            "key_id": attrs.get("charter.checkpoint.key_id"),
            "signature": attrs.get("charter.checkpoint.signature", ""),
        }
        try:
            found.append(Checkpoint.from_wire({CHECKPOINT_KEY: body}))
        except ValueError as exc:
            raise ValueError(
                f"span {index + 1} ({CHECKPOINT_SPAN}) is not a checkpoint: {exc}"
            ) from None
    return found


def task_trace_ids(agent_id: str, task_id: str) -> tuple[int, int]:
    """(trace id, root span id) of a task that started under no current span: a keyed
    BLAKE2b of the agent and task ids, so every process recording the task derives the same.
    """
    digest = hashlib.blake2b(
        f"{agent_id}\0{task_id}".encode(), digest_size=24, person=b"charter.trace"
    ).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:], "big") or 1
    return trace_id, span_id


def _task_root(chain: tuple[str, str]) -> Context:
    """A context whose current span is the task's root (never ended here: a parent only)."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    trace_id, span_id = task_trace_ids(*chain)
    root = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(1))
    return trace.set_span_in_context(NonRecordingSpan(root))


def _forcing_ids() -> Any:
    """An SDK IdGenerator that is random, except for the next span after `force(...)`."""
    from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

    class ForcingIds(IdGenerator):
        def __init__(self) -> None:
            self._random = RandomIdGenerator()
            self._next = threading.local()

        def force(self, trace_id: int, span_id: int) -> None:
            self._next.ids = (trace_id, span_id)

        def generate_trace_id(self) -> int:
            ids = getattr(self._next, "ids", None)
            return ids[0] if ids else self._random.generate_trace_id()

        def is_trace_id_random(self) -> bool:
            return getattr(self._next, "ids", None) is None

        def generate_span_id(self) -> int:
            ids = getattr(self._next, "ids", None)
            if ids:
                self._next.ids = None
                return int(ids[1])
            return self._random.generate_span_id()

    return ForcingIds()


def _require() -> None:
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{EXTRA_HINT}; importing it failed: {exc}") from None


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if len(text) > _PAYLOAD_MAX:
        cut = len(text) - _PAYLOAD_MAX
        text = text[:_PAYLOAD_MAX] + f"…[truncated {cut}]"
    return text


def _ns(stamp: Any) -> int | None:
    if not isinstance(stamp, str):
        return None
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return None


def _group(record: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    props = record.get("properties")
    found = props.get(name) if isinstance(props, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _messages(items: Any) -> list[dict[str, Any]] | None:
    """Charter's recorded messages in the GenAI input-messages shape (role and parts)."""
    if not isinstance(items, list):
        return None
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        role = item.get("role")
        parts: list[dict[str, Any]] = []
        content = item.get("content")
        if role == "tool":
            parts.append(
                {"type": "tool_call_response", "id": item.get("tool_call_id"), "response": content}
            )
        elif content not in (None, "", []):
            if isinstance(content, str):
                parts.append({"type": "text", "content": content})
            else:
                parts.append({"type": "text", "content": _json(content)})
        for call in item.get("tool_calls") or ():
            if isinstance(call, Mapping):
                parts.append(
                    {
                        "type": "tool_call",
                        "id": call.get("id"),
                        "name": call.get("name"),
                        "arguments": call.get("args"),
                    }
                )
        out.append({"role": role, "parts": parts})
    return out


class _Counted:
    """Wraps the SDK span exporter so every span that leaves, or fails to, is counted."""

    def __init__(self, inner: SpanExporter, owner: OtlpExporter) -> None:
        self._inner = inner
        self._owner = owner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self._inner.export(spans)
        except Exception as exc:
            self._owner._count_failed(len(spans), exc)
            return SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self._owner._count_sent(len(spans))
        else:
            self._owner._count_failed(
                len(spans),
                ConnectionError(
                    f"{len(spans)} span(s) could not be sent to {self._owner.target}: the "
                    "receiver refused them or could not be reached (the agent was not affected)"
                ),
            )
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


class OtlpExporter:
    """Sends every governed step as OpenTelemetry spans (see the module docstring).

    Give exactly one of: `endpoint`, the URL of an OTLP/HTTP receiver (``/v1/traces`` is
    appended unless present; `headers` and `timeout` go to the SDK's exporter, which reads
    the ``OTEL_EXPORTER_OTLP_*`` variables for what is not given); `span_exporter`, any SDK
    ``SpanExporter`` (an in-memory one in tests); or `tracer_provider`, an SDK
    ``TracerProvider`` the application already exports with (its failures are then its own
    to count). `payloads` adds step inputs and outputs, as stored. `service_name` names the
    resource unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` do.

    Raises ImportError naming the ``otlp`` extra when the OpenTelemetry SDK is missing, and
    ValueError for a bad combination of arguments.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        payloads: bool = False,
        span_exporter: SpanExporter | None = None,
        tracer_provider: TracerProvider | None = None,
        service_name: str = "charter",
        agent_name: str | None = None,
    ) -> None:
        _require()
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        given = [n for n, v in (("endpoint", endpoint), ("span_exporter", span_exporter),
                                ("tracer_provider", tracer_provider)) if v is not None]  # fmt: skip
        if len(given) != 1:
            raise ValueError(
                "OtlpExporter takes exactly one of endpoint= (an OTLP/HTTP receiver URL), "
                f"span_exporter= or tracer_provider=; got {', '.join(given) or 'none'}"
            )
        self.payloads = bool(payloads)
        self.agent_name = agent_name
        self._lock = threading.Lock()
        self._marks: dict[tuple[str, str, str], list[Any]] = {}
        self._tasks: dict[tuple[str, str], Span] = {}
        self._gates: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        self.spans_ended = 0
        self.spans_exported = 0
        self.spans_failed = 0
        self.records_failed = 0
        self.last_error = ""
        self._closed = False
        self._ids: Any = None  # the forcing id generator of a provider this exporter owns
        if tracer_provider is not None:
            self.target = "the application's tracer provider"
            self._provider: TracerProvider | None = None
            self._counted = False
            provider = tracer_provider
        else:
            if endpoint is not None:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )

                self.target = traces_url(endpoint)
                span_exporter = OTLPSpanExporter(
                    endpoint=self.target,
                    headers=dict(headers) if headers is not None else None,
                    timeout=timeout,
                )
            else:
                self.target = type(span_exporter).__name__
            attributes: dict[str, Any] = {}
            if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
                "OTEL_RESOURCE_ATTRIBUTES", ""
            ):
                attributes["service.name"] = service_name
            self._ids = _forcing_ids()
            provider = TracerProvider(
                resource=Resource.create(attributes), shutdown_on_exit=False, id_generator=self._ids
            )
            assert span_exporter is not None
            counted: Any = _Counted(span_exporter, self)
            provider.add_span_processor(BatchSpanProcessor(counted))
            self._provider = provider
            self._counted = True
        self._tracer: Tracer = provider.get_tracer("charter", _version())
        from opentelemetry import context

        self._current = context.get_current
        if self._provider is not None:
            # The SDK's own exit hook would wait up to 30 s on a receiver that is down; this
            # one waits as long as a runner's exit flush does.
            atexit.register(self.close, 5.0)

    @classmethod
    def from_settings(cls, settings: Settings) -> OtlpExporter:
        """The exporter `otlp_endpoint`, `otlp_headers` and `otlp_payloads` describe."""
        if settings.otlp_endpoint is None:
            raise ValueError("otlp_endpoint= / CHARTER_OTLP_ENDPOINT is not set")
        return cls(
            settings.otlp_endpoint,
            headers=dict(settings.otlp_headers) if settings.otlp_headers is not None else None,
            payloads=settings.otlp_payloads,
            service_name=settings.agent_id,
            agent_name=settings.agent_name,
        )

    # -- the agent's thread: when steps start and end -----------------------------------------

    def observe_step(self, b: Behavior, phase: str) -> None:
        """Note when `b` started (``start``, with the current OpenTelemetry context), was
        decided (``decided``) or was recorded (``end``). Cheap; never raises on its own."""
        now = time.time_ns()
        key = _key(b.agent_id, b.task_id, b.action_id, b.kind.value)
        with self._lock:
            mark = self._marks.get(key)
            if mark is None:
                if len(self._marks) >= _MARKS_MAX:
                    del self._marks[next(iter(self._marks))]
                mark = self._marks[key] = [None, now, None, None]
                if phase == "start":
                    mark[0] = self._current()
            if phase == "decided":
                mark[2] = now
            elif phase == "end":
                mark[3] = now

    # -- the writer's thread: committed records become spans ----------------------------------

    def export(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Turn committed records into spans; a record that cannot be is counted, not raised."""
        for record in records:
            if is_intent_record(record):
                continue  # the outcome that follows carries everything
            try:
                self._record(record)
            except Exception as exc:
                with self._lock:
                    self.records_failed += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"
                report_internal_error(exc, "exporter OtlpExporter")

    def _take(self, record: Mapping[str, Any]) -> list[Any]:
        key = _key(
            str(record.get("agent_id")),
            str(record.get("task_id")),
            record.get("action_id"),
            str(record.get("kind")),
        )
        with self._lock:
            mark = self._marks.pop(key, None)
        stamp = _ns(record.get("timestamp")) or time.time_ns()
        if mark is None:
            return [None, stamp, stamp, stamp]
        mark[1] = mark[1] or stamp
        mark[3] = mark[3] or max(mark[1], mark[2] or 0)
        # A blocked step is recorded inside its own judging: its decision ends with it.
        mark[2] = min(mark[2] or mark[3], mark[3])
        return mark

    def _record(self, record: Mapping[str, Any]) -> None:
        kind = str(record.get("kind"))
        chain = (str(record.get("agent_id")), str(record.get("task_id")))
        if kind == "step.gate":
            gate = _group(record, "gate")
            step_action = gate.get("action_id")
            if isinstance(step_action, str):
                with self._lock:
                    if len(self._gates) >= _MARKS_MAX:
                        del self._gates[next(iter(self._gates))]
                    self._gates[(*chain, step_action)] = record
            self._take(record)
            return
        if kind == "task.start":
            self._start_task(chain, record)
        elif kind in CLOSING_KINDS:
            self._end_task(chain, record)
        else:
            self._step(chain, record)

    def _parent(self, chain: tuple[str, str], ctx: Context | None) -> Context:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import ReadableSpan

        with self._lock:
            task = self._tasks.get(chain)
        if ctx is not None and _has_span(ctx):
            # A span opened inside the task is the nearer parent; the span the task itself
            # started under is not: the task's span sits between them.
            current = trace.get_current_span(ctx).get_span_context()
            if task is None or not isinstance(task, ReadableSpan) or task.parent is None:
                return ctx
            if current.span_id != task.parent.span_id:
                return ctx
        return trace.set_span_in_context(task) if task is not None else _task_root(chain)

    def _ended(self, span: Span, end: int) -> None:
        span.end(end_time=end)
        if self._counted:
            with self._lock:
                self.spans_ended += 1

    def _start_task(self, chain: tuple[str, str], record: Mapping[str, Any]) -> None:
        from opentelemetry.context import Context

        ctx, start, _, _ = self._take(record)
        agent = self.agent_name or chain[0]
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.id": chain[0],
            "gen_ai.agent.name": agent,
            "charter.agent_id": chain[0],
            "charter.task_id": chain[1],
            "charter.task.name": str(record.get("step_name")),
            "charter.task.start_seq": record.get("seq"),
            "charter.task.start_hash": str(record.get("hash")),
        }
        if ctx is not None and _has_span(ctx):
            parent = ctx
        elif self._ids is not None:
            # The task's span is its trace's root, with the ids every process derives.
            self._ids.force(*task_trace_ids(*chain))
            parent = Context()
        else:
            parent = _task_root(chain)
        span = self._tracer.start_span(
            f"invoke_agent {agent}", context=parent, attributes=attrs, start_time=start
        )
        with self._lock:
            old = self._tasks.pop(chain, None)
            if len(self._tasks) >= _MARKS_MAX:
                self._ended(self._tasks.pop(next(iter(self._tasks))), start)
            self._tasks[chain] = span
        if old is not None:
            self._ended(old, start)

    def _end_task(self, chain: tuple[str, str], record: Mapping[str, Any]) -> None:
        from opentelemetry.trace import Status, StatusCode

        _, start, _, end = self._take(record)
        with self._lock:
            span = self._tasks.pop(chain, None)
        if span is None:
            # The task started in another process: its end is a span of its own in its trace.
            span = self._tracer.start_span(
                f"{record.get('kind')} {record.get('step_name')}",
                context=_task_root(chain),
                attributes={"charter.agent_id": chain[0], "charter.task_id": chain[1]},
                start_time=start,
            )
        meta = record.get("meta")
        final = meta.get("charter.chain") if isinstance(meta, Mapping) else None
        span.set_attributes(
            {
                "charter.task.end": str(record.get("kind")),
                "charter.seq": record.get("seq") or 0,
                "charter.hash": str(record.get("hash")),
            }
        )
        if isinstance(final, Mapping) and type(final.get("count")) is int:
            span.set_attribute("charter.task.records", final["count"])
        if record.get("kind") == "task.error":
            error = _error(record)
            span.set_attribute("error.type", error[0] or "_OTHER")
            span.set_status(Status(StatusCode.ERROR, error[1] if self.payloads else None))
        self._ended(span, end)

    def _step(self, chain: tuple[str, str], record: Mapping[str, Any]) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        ctx, start, decided, end = self._take(record)
        kind = str(record.get("kind"))
        name = str(record.get("step_name"))
        meta = record.get("meta") if isinstance(record.get("meta"), Mapping) else {}
        assert isinstance(meta, Mapping)
        outcome = str(meta.get("charter.outcome") or "ok")
        tool, model = _group(record, "tool"), _group(record, "model")
        attrs: dict[str, Any] = {"gen_ai.agent.id": chain[0]}
        span_kind = SpanKind.INTERNAL
        target = "tool_call"
        data_in, data_out = record.get("input"), record.get("output")
        if kind == "step.model":
            operation = "chat"
            if isinstance(data_in, Mapping) and "prompts" in data_in:
                operation = "text_completion"
            model_name = _text(model.get("name")) or name
            title = f"{operation} {model_name}"
            span_kind = SpanKind.CLIENT
            target = "llm_input"
            attrs.update(_model_attrs(operation, model_name, model))
            if self.payloads and isinstance(data_in, Mapping):
                found = _messages(data_in.get("messages"))
                if found is not None:
                    attrs["gen_ai.input.messages"] = _json(found)
        elif tool or kind == "step.exec":
            tool_name = _text(tool.get("name")) or name
            title = f"execute_tool {tool_name}"
            attrs["gen_ai.operation.name"] = "execute_tool"
            attrs["gen_ai.tool.name"] = tool_name
            for key, attr in (("call_id", "gen_ai.tool.call.id"),
                              ("description", "gen_ai.tool.description")):  # fmt: skip
                if _text(tool.get(key)):
                    attrs[attr] = tool[key]
            if self.payloads:
                attrs["gen_ai.tool.call.arguments"] = _json(data_in)
                if outcome == "ok":
                    attrs["gen_ai.tool.call.result"] = _json(data_out)
        else:
            title = f"{kind} {name}"
            if kind == "step.message":
                target = "message"
        attrs.update(_chain_attrs(record, outcome))
        if self.payloads:
            attrs["charter.input"] = _json(data_in)
            if data_out is not None:
                attrs["charter.output"] = _json(data_out)
        span = self._tracer.start_span(
            title,
            context=self._parent(chain, ctx),
            kind=span_kind,
            attributes={k: v for k, v in attrs.items() if v is not None},
            start_time=start,
        )
        if outcome == "failed":
            error = _error(record)
            span.set_attribute("error.type", error[0] or "_OTHER")
            span.set_status(Status(StatusCode.ERROR, error[1] if self.payloads else None))
        elif outcome == "blocked":
            span.set_attribute("error.type", "charter.blocked")
            span.set_status(Status(StatusCode.ERROR, "blocked by Charter"))
        self._decision(chain, record, meta, target, tool, trace.set_span_in_context(span),
                       start, decided)  # fmt: skip
        self._ended(span, end)

    def _decision(
        self,
        chain: tuple[str, str],
        record: Mapping[str, Any],
        meta: Mapping[str, Any],
        target: str,
        tool: Mapping[str, Any],
        parent: Context,
        start: int,
        decided: int,
    ) -> None:
        verdict = meta.get("charter.eval")
        verdict = verdict if isinstance(verdict, Mapping) else {}
        decision = str(verdict.get("decision") or "allow")
        outcome = meta.get("charter.outcome")
        violations = [v for v in verdict.get("violations") or () if isinstance(v, Mapping)]
        names = [str(v.get("name")) for v in violations]
        monitored = verdict.get("enforcement") == "monitor"
        if outcome == "blocked":
            security = "deny"
        elif monitored and decision in ("block", "ask"):
            security = "audit"
        elif decision == "ask":
            security = "allow" if verdict.get("approved") else "deny"
        else:
            security = _DECISION_TYPES.get(decision, decision)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "apply_guardrail",
            "gen_ai.guardian.name": GUARDIAN,
            "gen_ai.guardian.provider.name": "charter",
            "gen_ai.security.decision.type": security,
            "gen_ai.security.target.type": target,
            "gen_ai.agent.id": chain[0],
            "charter.decision": decision,
            "charter.violated_policies": names,
            "charter.agent_id": chain[0],
            "charter.task_id": chain[1],
            "charter.seq": record.get("seq") or 0,
            "charter.hash": str(record.get("hash")),
        }
        if _text(tool.get("call_id")):
            attrs["gen_ai.security.target.id"] = tool["call_id"]
        if _text(record.get("action_id")):
            attrs["charter.action_id"] = record["action_id"]
        risk = verdict.get("risk_score")
        if isinstance(risk, (int, float)) and not isinstance(risk, bool):
            attrs["charter.risk_score"] = float(risk)
        if names:
            attrs["gen_ai.security.policy.id"] = names[0]
            attrs["gen_ai.security.policy.name"] = names[0]
            # The spec asks for a reason without user content: the policies' names are that.
            attrs["gen_ai.security.decision.reason"] = "violated: " + ", ".join(names)
        if monitored:
            attrs["charter.enforcement"] = "monitor"
        if self.payloads and _text(verdict.get("reason")):
            attrs["charter.reason"] = verdict["reason"]
        gate = None
        action = record.get("action_id")
        if isinstance(action, str):
            with self._lock:
                gate = self._gates.pop((*chain, action), None)
        if gate is not None:
            answer = gate.get("output") if isinstance(gate.get("output"), Mapping) else {}
            assert isinstance(answer, Mapping)
            attrs["charter.approval.decision"] = str(answer.get("decision"))
            attrs["charter.approval.by"] = str(answer.get("by"))
            attrs["charter.approval.seq"] = gate.get("seq") or 0
            attrs["charter.approval.hash"] = str(gate.get("hash"))
            if self.payloads and _text(answer.get("why")):
                attrs["charter.approval.why"] = answer["why"]
        span = self._tracer.start_span(
            f"apply_guardrail {GUARDIAN}", context=parent, attributes=attrs, start_time=start
        )
        for v in violations:
            severity = str(v.get("severity"))
            finding: dict[str, Any] = {
                "gen_ai.security.risk.category": f"charter:{v.get('rule_type')}",
                "gen_ai.security.risk.severity": _SEVERITIES.get(severity, severity),
                "gen_ai.security.policy.id": str(v.get("name")),
                "gen_ai.security.policy.name": str(v.get("name")),
                "charter.rule_type": str(v.get("rule_type")),
                "charter.severity": severity,
                "charter.ask": bool(v.get("ask")),
            }
            if isinstance(risk, (int, float)) and not isinstance(risk, bool):
                finding["gen_ai.security.risk.score"] = float(risk)
            if self.payloads and v.get("details") not in (None, "", []):
                finding["charter.details"] = _json(v.get("details"))
            span.add_event("gen_ai.security.finding", finding, timestamp=decided)
        self._ended(span, max(decided, start))

    # -- signed checkpoints ----------------------------------------------------------------------

    def export_checkpoints(self, checkpoints: Sequence[Checkpoint]) -> None:
        """Send each signed checkpoint as one root span ``charter.checkpoint`` (see the module
        docstring for its attributes); a span that cannot leave is counted like any other."""
        if self._closed:
            raise RuntimeError("the OTLP exporter is closed; the checkpoints were not sent")
        from opentelemetry.context import Context

        now = time.time_ns()
        for c in checkpoints:
            attrs: dict[str, str | int] = {
                "charter.agent_id": c.agent_id,
                "charter.task_id": c.task_id,
                "charter.seq": c.seq,
                "charter.hash": c.hash,
                "charter.checkpoint.time": c.time,
                "charter.checkpoint.key_id": c.key_id,
                "charter.checkpoint.signature": c.signature,
                "charter.checkpoint.line": c.line().decode("utf-8").rstrip("\n"),
            }
            span = self._tracer.start_span(
                CHECKPOINT_SPAN, context=Context(), attributes=attrs, start_time=now
            )
            self._ended(span, now)

    # -- counting, status, shutdown ------------------------------------------------------------

    def _count_sent(self, count: int) -> None:
        with self._lock:
            self.spans_exported += count

    def _count_failed(self, count: int, exc: BaseException) -> None:
        with self._lock:
            self.spans_failed += count
            self.last_error = str(exc)
        report_internal_error(exc, "exporter OtlpExporter")

    def status(self) -> dict[str, Any]:
        """Counters (spans, not records): ``spans_ended`` handed to the batch processor,
        ``spans_exported`` accepted by the receiver, ``spans_failed`` that could not be sent,
        ``spans_unsent`` still queued or dropped by a full queue, ``records_failed`` that
        could not be turned into spans, and ``last_error``. Counters stay 0 for a
        tracer_provider= exporter, whose spans are the application's to count."""
        with self._lock:
            return {
                "exporter": "otlp",
                "target": self.target,
                "payloads": self.payloads,
                "spans_ended": self.spans_ended,
                "spans_exported": self.spans_exported,
                "spans_failed": self.spans_failed,
                "spans_unsent": max(0, self.spans_ended - self.spans_exported - self.spans_failed),
                "records_failed": self.records_failed,
                "open_tasks": len(self._tasks),
                "last_error": self.last_error,
            }

    def flush(self, timeout: float | None = None) -> bool:
        """Send every span ended so far, waiting at most `timeout` seconds (None: 30 s)."""
        if self._provider is None or self._closed:
            return True
        return self._bounded(self._provider.force_flush, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """End the spans of tasks still open (marked ``charter.task.open``), send what is
        queued within `timeout` seconds and shut the SDK pipeline down. Idempotent; an
        exporter built on the application's tracer_provider leaves it running."""
        if self._closed:
            return True
        now = time.time_ns()
        with self._lock:
            open_tasks = list(self._tasks.values())
            self._tasks.clear()
        for span in open_tasks:
            span.set_attribute("charter.task.open", True)
            self._ended(span, now)
        self._closed = True
        if self._provider is None:
            return True
        return self._bounded(self._provider.shutdown, timeout)

    @staticmethod
    def _bounded(call: Any, timeout: float | None) -> bool:
        # The SDK's flush and shutdown wait on a receiver that may be down (retries with
        # backoff): they run beside the caller, who waits at most `timeout`.
        done = threading.Event()

        def run() -> None:
            try:
                call()
            except Exception as exc:
                report_internal_error(exc, "exporter OtlpExporter")
            finally:
                done.set()

        threading.Thread(target=run, name="charter-otlp-flush", daemon=True).start()
        return done.wait(30.0 if timeout is None else timeout)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("charter")
    except PackageNotFoundError:
        return "unknown"


def _has_span(ctx: Context) -> bool:
    from opentelemetry import trace

    return trace.get_current_span(ctx).get_span_context().is_valid


def _key(agent_id: str, task_id: str, action_id: Any, kind: str) -> tuple[str, str, str]:
    if kind == "task.start":
        return (agent_id, task_id, _TASK)
    if kind in ("task.end", "task.error", "task.idle"):
        return (agent_id, task_id, "task.close")
    return (agent_id, task_id, action_id if isinstance(action_id, str) else kind)


def _error(record: Mapping[str, Any]) -> tuple[str | None, str | None]:
    output = record.get("output")
    error = output.get("error") if isinstance(output, Mapping) else None
    if not isinstance(error, Mapping):
        return None, None
    return _text(error.get("type")), _text(error.get("message"))


def _chain_attrs(record: Mapping[str, Any], outcome: str) -> dict[str, Any]:
    return {
        "charter.agent_id": str(record.get("agent_id")),
        "charter.task_id": str(record.get("task_id")),
        "charter.action_id": _text(record.get("action_id")),
        "charter.kind": str(record.get("kind")),
        "charter.verb": _text(record.get("verb")),
        "charter.step_name": str(record.get("step_name")),
        "charter.outcome": outcome,
        "charter.seq": record.get("seq") or 0,
        "charter.hash": str(record.get("hash")),
    }


_PARAMS = {
    "temperature": "gen_ai.request.temperature",
    "max_tokens": "gen_ai.request.max_tokens",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "seed": "gen_ai.request.seed",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
}


def _model_attrs(operation: str, name: str, model: Mapping[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {"gen_ai.operation.name": operation, "gen_ai.request.model": name}
    if _text(model.get("provider")):
        attrs["gen_ai.provider.name"] = model["provider"]
    if _text(model.get("response_model")):
        attrs["gen_ai.response.model"] = model["response_model"]
    usage = model.get("usage")
    if isinstance(usage, Mapping):
        for key in ("input_tokens", "output_tokens"):
            if type(usage.get(key)) is int:
                attrs[f"gen_ai.usage.{key}"] = usage[key]
    if _text(model.get("stop_reason")):
        attrs["gen_ai.response.finish_reasons"] = [model["stop_reason"]]
    params = model.get("params")
    if isinstance(params, Mapping):
        for key, attr in _PARAMS.items():
            value = params.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                attrs[attr] = value
    return attrs
