"""OTLP export: governed steps arrive at a real OTLP/HTTP receiver on loopback as GenAI spans,
nest under the caller's span, carry payloads only when asked (redacted as stored), and a
receiver that refuses or is down changes nothing for the agent but the counters."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import charter
import charter.testing
import pytest
from charter.audit import OtlpExporter, is_intent_record, verify
from charter.testing import OtlpReceiver
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

POLICIES: list[dict[str, Any]] = [
    {
        "name": "no-rm",
        "rule_type": "field_matches",
        "severity": "critical",
        "match": {"kinds": ["step.exec"]},
        "params": {"field": "input.command", "pattern": "rm -rf"},
    },
    {
        "name": "warn-curl",
        "rule_type": "field_matches",
        "severity": "medium",
        "match": {"kinds": ["step.exec"]},
        "params": {"field": "input.command", "pattern": "curl"},
    },
    {
        "name": "ask-delete",
        "rule_type": "deny",
        "severity": "high",
        "action": "ask",
        "match": {"step_names": ["delete_*"]},
        "params": {"reason": "deleting needs a human"},
    },
]

SECRET = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"  # a fake Stripe key shape


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


def _store_records(location: str) -> list[dict[str, Any]]:
    store = charter.open_store(location)
    try:
        return [
            r
            for t in store.list_tasks()
            for r in store.read_task(t.task_id, t.agent_id)
            if not is_intent_record(r)
        ]
    finally:
        store.close()


def _run_agent(gov: charter.Governor) -> None:
    """A small agent: a model call with usage, an allowed tool, a warned tool, a blocked tool,
    an approved delete, and a tool that fails."""
    with gov.task(name="support"):
        model = gov.begin_step(
            "step.model",
            name="gpt-4o",
            input={"messages": [{"role": "user", "content": "hi"}]},
            properties={"model": {"name": "gpt-4o", "provider": "openai"}},
        )
        model.complete(
            {"content": "calling a tool"},
            properties={
                "model": {
                    "usage": {"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
                    "response_model": "gpt-4o-2024-08-06",
                    "stop_reason": "tool_calls",
                }
            },
        )
        with gov.step(
            "step.exec",
            name="Bash",
            input={"command": "ls"},
            properties={"tool": {"name": "Bash", "call_id": "call_1"}},
        ) as s:
            s.output = {"stdout": "a b"}
        with (
            pytest.warns(charter.PolicyWarning),
            gov.step("step.exec", name="Bash", input={"command": "curl example.com"}) as s,
        ):
            s.output = {"stdout": "<html>"}
        with (
            pytest.raises(charter.BlockedError),
            gov.step("step.exec", name="Bash", input={"command": "rm -rf /"}),
        ):
            pass
        with gov.step("step.resource", "DELETE", name="delete_file", input={"path": "a"}) as s:
            s.output = {"deleted": True}
        with (
            pytest.raises(KeyError),
            gov.step("step.resource", "GET", name="read_file", input={"path": "b"}),
        ):
            raise KeyError("b")


def _by_name(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        out.setdefault(span["name"], []).append(span)
    return out


def test_a_governed_run_arrives_at_the_receiver_as_genai_spans_linked_to_the_chain(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    location = f"sqlite:///{tmp_path}/audit.db"
    gov = charter.Governor(
        policies=POLICIES,
        audit_location=location,
        agent_id="support-bot",
        agent_name="Support bot",
        otlp_endpoint=receiver.endpoint,
        approver=lambda request: charter.Approval(True, "ops@example.com", "fine"),
    )
    _run_agent(gov)
    assert gov.close(10)
    records = _store_records(location)
    # 6 steps, each with its decision, and the task: 13 spans.
    spans = receiver.wait_for(13)
    named = _by_name(spans)
    assert sorted((n, len(s)) for n, s in named.items()) == [
        ("apply_guardrail Charter", 6),
        ("chat gpt-4o", 1),
        ("execute_tool Bash", 3),
        ("invoke_agent Support bot", 1),
        ("step.resource delete_file", 1),
        ("step.resource read_file", 1),
    ]
    assert {s["resource"]["service.name"] for s in spans} == {"support-bot"}
    assert {s["scope"] for s in spans} == {"charter"}
    (task,) = named["invoke_agent Support bot"]
    assert len({s["trace_id"] for s in spans}) == 1  # one task, one trace
    assert task["parent_span_id"] == ""
    assert task["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert task["attributes"]["gen_ai.agent.id"] == "support-bot"
    assert (
        task["attributes"]["charter.task.records"] == records[-1]["meta"]["charter.chain"]["count"]
    )
    assert task["attributes"]["charter.hash"] == records[-1]["hash"]

    (chat,) = named["chat gpt-4o"]
    assert chat["kind"] == 3  # SPAN_KIND_CLIENT
    assert chat["parent_span_id"] == task["span_id"]
    a = chat["attributes"]
    assert (a["gen_ai.operation.name"], a["gen_ai.request.model"], a["gen_ai.provider.name"]) == (
        "chat",
        "gpt-4o",
        "openai",
    )
    assert a["gen_ai.response.model"] == "gpt-4o-2024-08-06"
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (12, 7)
    assert a["gen_ai.response.finish_reasons"] == ("tool_calls",)

    by_seq = {r["seq"]: r for r in records}
    step_spans = [s for s in spans if s["name"].startswith(("chat", "execute_tool", "step."))]
    for span in step_spans:
        seq = span["attributes"]["charter.seq"]
        assert span["attributes"]["charter.hash"] == by_seq[seq]["hash"]
        assert span["attributes"]["charter.action_id"] == by_seq[seq]["action_id"]
        assert span["parent_span_id"] == task["span_id"]
        (decision,) = [
            g for g in named["apply_guardrail Charter"] if g["parent_span_id"] == span["span_id"]
        ]
        assert decision["attributes"]["charter.seq"] == seq
        assert decision["attributes"]["charter.hash"] == by_seq[seq]["hash"]
        assert decision["start"] >= span["start"] and decision["end"] <= span["end"]

    ls, curl, rm = sorted(named["execute_tool Bash"], key=lambda s: s["attributes"]["charter.seq"])
    assert ls["attributes"]["gen_ai.tool.name"] == "Bash"
    assert ls["attributes"]["gen_ai.tool.call.id"] == "call_1"
    assert ls["status"]["code"] == 0 and "error.type" not in ls["attributes"]
    assert rm["attributes"]["error.type"] == "charter.blocked"
    assert rm["attributes"]["charter.outcome"] == "blocked"
    assert rm["status"]["code"] == 2  # STATUS_CODE_ERROR

    def decision_of(span: dict[str, Any]) -> dict[str, Any]:
        (found,) = [
            g for g in named["apply_guardrail Charter"] if g["parent_span_id"] == span["span_id"]
        ]
        return found

    allowed = decision_of(ls)["attributes"]
    assert allowed["gen_ai.security.decision.type"] == "allow"
    assert allowed["gen_ai.security.target.type"] == "tool_call"
    assert allowed["gen_ai.security.target.id"] == "call_1"
    assert allowed["gen_ai.guardian.name"] == "Charter"
    assert allowed["charter.violated_policies"] == ()
    warned = decision_of(curl)
    assert warned["attributes"]["gen_ai.security.decision.type"] == "warn"
    assert warned["attributes"]["charter.violated_policies"] == ("warn-curl",)
    (finding,) = warned["events"]
    assert finding["name"] == "gen_ai.security.finding"
    assert finding["attributes"]["gen_ai.security.policy.id"] == "warn-curl"
    assert finding["attributes"]["gen_ai.security.risk.severity"] == "medium"
    assert finding["attributes"]["charter.rule_type"] == "field_matches"
    denied = decision_of(rm)["attributes"]
    assert denied["gen_ai.security.decision.type"] == "deny"
    assert denied["charter.decision"] == "block"
    assert denied["gen_ai.security.policy.id"] == "no-rm"
    assert denied["charter.risk_score"] == 1.0

    (delete,) = named["step.resource delete_file"]
    approved = decision_of(delete)["attributes"]
    assert approved["charter.decision"] == "ask"
    assert approved["gen_ai.security.decision.type"] == "allow"
    assert approved["charter.approval.by"] == "ops@example.com"
    assert approved["charter.approval.decision"] == "pass"
    gate = by_seq[approved["charter.approval.seq"]]
    assert gate["kind"] == "step.gate" and approved["charter.approval.hash"] == gate["hash"]

    (failed,) = named["step.resource read_file"]
    assert failed["attributes"]["error.type"] == "KeyError"
    assert failed["status"]["code"] == 2
    assert failed["status"]["message"] == ""  # the error message is a payload: off by default

    counters = gov.status()["exporters"][0]
    assert counters["spans_exported"] == 13 and counters["spans_failed"] == 0


def test_signed_checkpoints_arrive_as_spans_a_verifier_can_rebuild_and_check(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    import sqlite3

    from charter.audit import checkpoints_from_spans, create_key_pair, load_public_key

    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700)
    pair = create_key_pair(folder / "signing")
    location = f"sqlite:///{tmp_path}/audit.db"
    kept = tmp_path / "kept.jsonl"
    gov = charter.Governor(
        policies=[],
        audit_location=location,
        agent_id="support-bot",
        otlp_endpoint=receiver.endpoint,
        signing_key=str(folder / "signing"),
        checkpoint_file=str(kept),
    )
    for name in ("first", "second"):
        with gov.task(name=name), gov.step("step.exec", name="Bash", input={"command": "ls"}):
            pass
    gov.close(10)
    spans = receiver.wait_for(8)
    carried = [s for s in spans if s["name"] == "charter.checkpoint"]
    assert len(carried) == 2 and all(s["parent_span_id"] == "" for s in carried)
    rebuilt = checkpoints_from_spans(spans)
    # The same signed heads the checkpoint file holds, field for field and byte for byte.
    lines = kept.read_text().splitlines()
    assert [c.line().decode().rstrip("\n") for c in rebuilt] == lines
    assert [s["attributes"]["charter.checkpoint.line"] for s in carried] == lines
    public = load_public_key(pair.public_path)
    assert all(public.verifies(c.signature, c.signed_bytes()) for c in rebuilt)
    store = charter.open_store(location)
    heads = {(t.task_id, t.steps) for t in store.list_tasks()}
    assert {(c.task_id, c.seq) for c in rebuilt} == heads
    store.close()
    # Rebuilt into a file, they prove a task deleted from the store behind the fleet's back.
    from_otlp = tmp_path / "from-otlp.jsonl"
    from_otlp.write_bytes(b"".join(c.line() for c in rebuilt))
    assert verify(location, keys=[public], checkpoints=[from_otlp]).ok
    with sqlite3.connect(tmp_path / "audit.db") as db:
        for table in ("steps", "chains", "checkpoints"):
            db.execute(f"DELETE FROM {table} WHERE task_id = ?", (rebuilt[0].task_id,))
    assert verify(location).ok  # without the checkpoints nothing shows
    assert not verify(location, keys=[public], checkpoints=[from_otlp]).ok


def _memory_governor(tmp_path: Path, **settings: Any) -> tuple[charter.Governor, Any]:
    memory = InMemorySpanExporter()
    exporter = OtlpExporter(span_exporter=memory, payloads=settings.pop("payloads", False))
    gov = charter.Governor(
        policies=POLICIES,
        audit_location=f"sqlite:///{tmp_path}/audit.db",
        exporters=(exporter,),
        **settings,
    )
    return gov, memory


def _attrs(memory: Any) -> list[dict[str, Any]]:
    return [dict(s.attributes or {}) for s in memory.get_finished_spans()]


def test_a_task_has_the_trace_its_ids_derive_with_an_applications_provider_too(
    tmp_path: Path,
) -> None:
    from charter.audit import task_trace_ids

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    exporter = OtlpExporter(tracer_provider=provider)
    gov = charter.Governor(
        policies=[], audit_location=f"sqlite:///{tmp_path}/a.db", exporters=(exporter,)
    )
    task = gov.start_task("job-7")
    with gov.step("step.exec", name="Bash", input={"command": "ls"}, task_id=task):
        pass
    gov.end_task(task)
    gov.close(10)
    trace_id, root_id = task_trace_ids("default", "job-7")
    spans = memory.get_finished_spans()
    assert spans and {s.context.trace_id for s in spans} == {trace_id}
    # Charter does not own this provider's ids: the task's span hangs under the derived root.
    (agent,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert agent.parent is not None and agent.parent.span_id == root_id


def test_payloads_are_off_by_default_and_nothing_of_them_leaves(tmp_path: Path) -> None:
    gov, memory = _memory_governor(tmp_path)
    with gov.task(name="t"):
        with gov.step("step.exec", name="Bash", input={"command": f"echo {SECRET} marker-in"}) as s:
            s.output = {"stdout": "marker-out"}
        with pytest.raises(ValueError), gov.step("step.exec", name="Bash", input={"command": "x"}):
            raise ValueError("marker-error")
    assert gov.flush(10)
    text = json.dumps(_attrs(memory)) + repr(
        [
            (s.status.description, [e.attributes for e in s.events])
            for s in memory.get_finished_spans()
        ]
    )
    for marker in ("marker-in", "marker-out", "marker-error", SECRET[8:], "REDACTED"):
        assert marker not in text
    keys = {k for a in _attrs(memory) for k in a}
    assert not keys & {
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "charter.input",
        "charter.output",
        "charter.reason",
    }
    gov.close(10)


def test_payloads_when_on_are_the_stored_form_redacted(tmp_path: Path) -> None:
    gov, memory = _memory_governor(tmp_path, payloads=True)
    with gov.task(name="t"):
        with gov.step(
            "step.exec",
            name="Bash",
            input={"command": f"echo {SECRET}"},
            properties={"tool": {"name": "Bash"}},
        ) as s:
            s.output = {"stdout": "done"}
        model = gov.begin_step(
            "step.model",
            name="m",
            input={"messages": [{"role": "user", "content": f"key {SECRET}"}]},
            properties={"model": {"name": "m"}},
        )
        model.complete({"content": "ok"})
    assert gov.flush(10)
    (stored_tool, stored_model) = [
        r for r in charter.testing.recorded(gov) if r["kind"] in ("step.exec", "step.model")
    ]
    (tool,) = [a for a in _attrs(memory) if a.get("gen_ai.operation.name") == "execute_tool"]
    assert SECRET not in json.dumps(_attrs(memory))
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == stored_tool["input"]
    assert "[REDACTED:" in stored_tool["input"]["command"]
    assert (
        json.loads(tool["gen_ai.tool.call.result"]) == stored_tool["output"] == {"stdout": "done"}
    )
    (chat,) = [a for a in _attrs(memory) if a.get("gen_ai.operation.name") == "chat"]
    messages = json.loads(chat["gen_ai.input.messages"])
    assert messages == [
        {
            "role": "user",
            "parts": [{"type": "text", "content": stored_model["input"]["messages"][0]["content"]}],
        }
    ]
    assert "[REDACTED:" in messages[0]["parts"][0]["content"]
    gov.close(10)


def test_steps_nest_under_the_span_current_when_they_start(tmp_path: Path) -> None:
    # The application's own tracing (another provider, as a framework would have).
    app_spans = InMemorySpanExporter()
    app = TracerProvider()
    app.add_span_processor(SimpleSpanProcessor(app_spans))
    tracer = app.get_tracer("app")
    gov, memory = _memory_governor(tmp_path)
    with tracer.start_as_current_span("handle request") as request, gov.task(name="t"):
        with (
            tracer.start_as_current_span("framework tool run") as run,
            gov.step("step.exec", name="Bash", input={"command": "ls"}) as s,
        ):
            s.output = {}
        with gov.step("step.exec", name="Bash", input={"command": "pwd"}) as s:
            s.output = {}
    assert gov.flush(10)
    spans = {
        (s.name, s.attributes.get("charter.seq") if s.attributes else None): s
        for s in memory.get_finished_spans()
    }
    (task,) = [s for s in memory.get_finished_spans() if s.name == "invoke_agent default"]
    under_run = spans[("execute_tool Bash", 2)]
    under_task = spans[("execute_tool Bash", 3)]
    trace_id = request.get_span_context().trace_id
    assert task.parent is not None and task.parent.span_id == request.get_span_context().span_id
    assert under_run.parent is not None
    assert under_run.parent.span_id == run.get_span_context().span_id
    assert under_task.parent is not None and under_task.parent.span_id == task.context.span_id
    assert {s.context.trace_id for s in memory.get_finished_spans()} == {trace_id}
    gov.close(10)


def test_sync_durability_exports_each_step_once(tmp_path: Path) -> None:
    gov, memory = _memory_governor(tmp_path, audit_durability="sync")
    with gov.task(name="t"):
        for command in ("ls", "pwd"):
            with gov.step("step.exec", name="Bash", input={"command": command}) as s:
                s.output = {}
    assert gov.flush(10)
    names = sorted(s.name for s in memory.get_finished_spans())
    assert names == ["apply_guardrail Charter"] * 2 + ["execute_tool Bash"] * 2 + [
        "invoke_agent default"
    ]
    outcomes = [a.get("charter.outcome") for a in _attrs(memory) if "charter.outcome" in a]
    assert outcomes == ["ok", "ok"]
    gov.close(10)


def test_a_task_still_open_at_close_is_sent_marked_open(tmp_path: Path) -> None:
    memory = InMemorySpanExporter()
    exporter = OtlpExporter(span_exporter=memory)
    gov = charter.Governor(
        policies=[], audit_location=f"sqlite:///{tmp_path}/a.db", exporters=(exporter,)
    )
    gov.start_task("left-open", name="t")
    with gov.step("step.exec", name="Bash", input={"command": "ls"}, task_id="left-open") as s:
        s.output = {}
    gov.close(10)  # flushes the exporter it was given; its owner closes it
    assert [s.name for s in memory.get_finished_spans()] == [
        "apply_guardrail Charter",
        "execute_tool Bash",
    ]
    assert exporter.close(10)
    (task,) = [s for s in memory.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert task.attributes is not None and task.attributes["charter.task.open"] is True


@pytest.mark.allow_internal_errors
@pytest.mark.parametrize("how", ["refuses", "is down"])
def test_a_receiver_that_refuses_or_is_down_changes_nothing_but_the_counters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")  # the SDK's own retry bound
    receiver = OtlpReceiver(status=500)
    if how == "is down":
        receiver.close()
    location = f"sqlite:///{tmp_path}/audit.db"
    gov = charter.Governor(
        policies=POLICIES, audit_location=location, otlp_endpoint=receiver.endpoint
    )
    with gov.task(name="t"):
        with gov.step("step.exec", name="Bash", input={"command": "ls"}) as s:
            s.output = {"stdout": "a"}
        with (
            pytest.raises(charter.BlockedError),
            gov.step("step.exec", name="Bash", input={"command": "rm -rf /"}),
        ):
            pass
    gov.flush(10)
    counters = gov.status()["exporters"][0]
    assert counters["spans_ended"] == 5
    assert counters["spans_failed"] == 5 and counters["spans_exported"] == 0
    assert "could not be sent" in counters["last_error"]
    if how == "refuses":
        assert receiver.requests >= 1 and receiver.spans() == []
    gov.close(10)
    receiver.close()
    # The agent's trail is whole and verifies, with the decisions it had.
    outcomes = [r["meta"].get("charter.outcome") for r in _store_records(location)]
    assert outcomes == [None, "ok", "blocked", None]
    assert charter.verify(location).ok


def test_settings_configure_the_exporter_and_hide_header_values(
    receiver: OtlpReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHARTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("CHARTER_OTLP_HEADERS", "Authorization=Bearer%20fake-token,x-team=ops")
    monkeypatch.setenv("CHARTER_OTLP_PAYLOADS", "on")
    gov = charter.Governor(policies=[], audit_location=f"sqlite:///{tmp_path}/a.db")
    shown = {name: value for name, value, _ in gov.runner.settings.describe()}
    assert shown["otlp_headers"] == "authorization=***, x-team=***"
    assert shown["otlp_payloads"] == "true"
    with gov.task(name="t"), gov.step("step.exec", name="Bash", input={"command": "ls"}) as s:
        s.output = {}
    gov.close(10)
    spans = receiver.wait_for(3)
    assert receiver.headers[0]["authorization"] == "Bearer fake-token"
    assert receiver.headers[0]["x-team"] == "ops"
    (tool,) = [s for s in spans if s["name"] == "execute_tool Bash"]
    assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"]) == {"command": "ls"}


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("otlp_endpoint", "localhost:4318", "http:// or https://"),
        ("otlp_headers", "no-equals-sign", "name=value"),
        ("otlp_payloads", "maybe", "true or false"),
    ],
)
def test_bad_otlp_settings_are_refused_naming_both_spellings(
    name: str, value: str, says: str
) -> None:
    with pytest.raises(ValueError) as caught:
        charter.Settings.from_sources(policies=[], **{name: value})
    assert f"{name}= / CHARTER_{name.upper()}" in str(caught.value)
    assert says in str(caught.value)


def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(ImportError, match=r"charter\[otlp\]"):
        charter.Governor(policies=[], audit_location="none", otlp_endpoint="http://127.0.0.1:9")


def test_status_says_where_spans_go(monkeypatch: pytest.MonkeyPatch) -> None:
    from charter._cli.status import collect_status

    report = collect_status({"policies": [], "otlp_endpoint": "http://127.0.0.1:4318/"})
    assert report["otlp"] == {
        "endpoint": "http://127.0.0.1:4318/v1/traces",
        "payloads": False,
        "installed": True,
        "detail": "",
    }
    assert report["healthy"], report["problems"]
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    report = collect_status({"policies": [], "otlp_endpoint": "http://127.0.0.1:4318"})
    assert not report["healthy"]
    assert any("charter[otlp]" in p for p in report["problems"])
