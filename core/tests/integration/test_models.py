"""charter.integration.ModelClient: the one lifecycle of a governed model client, driven by a
scripted provider function (what the SDK mappings do with a real SDK): a blocked call never
reaches the provider, outcomes carry usage, stop reason, latency and text, streams are
finalised once however they end, requested tool calls are judged and run through the Gate."""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import charter
import charter.integration as ci
import pytest
from charter.testing import recorded

NO_BIG_MODEL = {
    "name": "no-big-model",
    "rule_type": "deny",
    "severity": "critical",
    "match": {"kinds": ["step.model"], "step_names": ["big-model"]},
}
NO_DELETE = {
    "name": "no-delete",
    "rule_type": "deny",
    "severity": "critical",
    "match": {"step_names": ["delete_file"]},
}
BUDGET = {
    "name": "token-budget",
    "rule_type": "budget",
    "severity": "critical",
    "match": {"kinds": ["step.model"]},
    "params": {"field": "properties.model.usage.total_tokens", "limit": 100},
}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("CHARTER_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Callable[..., ci.ModelClient]]:
    built: list[ci.ModelClient] = []

    def build(*policies: dict[str, Any], **settings: Any) -> ci.ModelClient:
        settings.setdefault("audit_location", f"sqlite:///{tmp_path / 'audit.db'}")
        settings.setdefault("audit_durability", "sync")
        gate = ci.Gate("scripted", policies=list(policies), agent_id="bot", **settings)
        mc = ci.ModelClient(gate, "scripted-provider")
        built.append(mc)
        return mc

    yield build
    for mc in built:
        mc.close()
        mc.gate.governor.close(5.0)


def trail(mc: ci.ModelClient) -> list[dict[str, Any]]:
    return recorded(mc.gate.governor)


def model_records(mc: ci.ModelClient) -> list[dict[str, Any]]:
    return [r for r in trail(mc) if r["kind"] == "step.model"]


def step(model: str = "small-model", text: str = "hi") -> ci.Step:
    return ci.model_step(
        "scripted",
        model,
        [ci.chat_message("user", text)],
        provider="scripted-provider",
        params={"temperature": 0},
    )


def call_provider(mc: ci.ModelClient, sent: list[str], model: str = "small-model") -> Any:
    """What an SDK mapping does around one non-streaming call."""
    began = mc.begin(step(model))
    if isinstance(began, ci.Blocked):
        raise began.error()
    sent.append(model)
    reply = ci.ModelReply(
        model=f"{model}-2025",
        text="hello",
        usage=ci.usage(30, 10),
        stop_reason="stop",
        tool_calls=(ci.tool_call("read_file", '{"path": "a.txt"}', "call-1"),),
    )
    assert began is not None
    return began.finish(reply)


def test_an_allowed_call_records_model_provider_usage_stop_reason_latency_and_text(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client()
    sent: list[str] = []
    call_provider(mc, sent)
    assert sent == ["small-model"]
    [rec] = model_records(mc)
    model = rec["properties"]["model"]
    assert rec["meta"]["charter.outcome"] == "ok"
    assert model["name"] == "small-model" and model["provider"] == "scripted-provider"
    assert model["usage"] == {"input_tokens": 30, "output_tokens": 10, "total_tokens": 40}
    assert model["stop_reason"] == "stop" and model["response_model"] == "small-model-2025"
    assert isinstance(model["latency_ms"], float) and model["latency_ms"] >= 0
    assert rec["output"]["text"] == "hello"
    assert rec["output"]["tool_calls"] == [
        {"id": "call-1", "name": "read_file", "args": {"path": "a.txt"}}
    ]


def test_a_blocked_call_never_reaches_the_provider_and_is_recorded_once(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client(NO_BIG_MODEL)
    sent: list[str] = []
    with pytest.raises(charter.BlockedError, match="no-big-model"):
        call_provider(mc, sent, "big-model")
    assert sent == []
    [rec] = model_records(mc)
    assert rec["meta"]["charter.outcome"] == "blocked" and rec.get("output") is None


def test_payloads_metadata_only_keeps_no_text(client: Callable[..., ci.ModelClient]) -> None:
    mc = client(payload_mode="metadata_only")
    call_provider(mc, [])
    [rec] = model_records(mc)
    assert "hello" not in str(rec["output"])
    assert rec["properties"]["model"]["usage"]["total_tokens"] == 40


def test_calls_outside_any_task_share_the_clients_own_task_and_a_budget_holds_across_them(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client(BUDGET)
    sent: list[str] = []
    call_provider(mc, sent)  # 40
    call_provider(mc, sent)  # 80
    call_provider(mc, sent)  # 120: recorded once done, the budget is spent from here on
    with pytest.raises(charter.BlockedError, match="token-budget"):
        call_provider(mc, sent)
    assert len(sent) == 3
    records = model_records(mc)
    assert len({r["task_id"] for r in records}) == 1
    assert [r["meta"]["charter.outcome"] for r in records] == ["ok", "ok", "ok", "blocked"]


def test_a_call_inside_gov_task_goes_into_that_task(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client()
    with mc.gate.governor.task(name="outer") as task:
        call_provider(mc, [])
    [rec] = model_records(mc)
    assert rec["task_id"] == task.task_id


def test_a_model_call_claimed_by_another_integration_is_left_to_it(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client()
    task = mc.gate.start_task(None, name="framework run")
    assert isinstance(task, str)
    with ci.claim(ci.Claim("model", None, None, mc.gate.governor, task)):
        assert mc.begin(step()) is None
    with ci.claim(ci.Claim("node", None, "agent", mc.gate.governor, task)):
        call_provider(mc, [])  # a node's nested model call: recorded, in the node's task
    [rec] = model_records(mc)
    assert rec["task_id"] == task


def test_a_provider_error_is_recorded_as_the_calls_failure(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client()
    began = mc.begin(step())
    assert isinstance(began, ci.ModelCall)
    began.failed(RuntimeError("429 rate limited"))
    began.finish(ci.ModelReply(text="late"))  # settled once: ignored
    [rec] = model_records(mc)
    assert rec["meta"]["charter.outcome"] == "failed"
    assert "429" in rec["output"]["error"]["message"]


def _chunks(n: int) -> Iterator[str]:
    yield from (f"t{i} " for i in range(n))


def _stream(mc: ci.ModelClient, chunks: Iterator[str]) -> tuple[Iterator[str], list[Any]]:
    began = mc.begin(step())
    assert isinstance(began, ci.ModelCall)
    parts: list[str] = []
    done: list[Any] = []

    def reply(complete: bool) -> ci.ModelReply:
        return ci.ModelReply(text="".join(parts), usage=ci.usage(5, len(parts)), complete=complete)

    return began.stream(chunks, parts.append, reply, done.append), done


def test_a_stream_read_to_its_end_is_recorded_once_with_the_streamed_text(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client()
    observed, done = _stream(mc, _chunks(3))
    assert list(observed) == ["t0 ", "t1 ", "t2 "]
    assert done == [()]
    [rec] = model_records(mc)
    assert rec["output"] == {"text": "t0 t1 t2 "}
    assert rec["properties"]["model"]["usage"]["output_tokens"] == 3


def test_a_stream_closed_early_is_recorded_with_what_arrived_marked_incomplete(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client()
    observed, _ = _stream(mc, _chunks(10))
    assert next(observed) == "t0 "
    observed.close()  # type: ignore[attr-defined]
    [rec] = model_records(mc)
    assert rec["meta"]["charter.outcome"] == "ok"
    assert rec["output"] == {"text": "t0 ", "incomplete": True}


def test_a_stream_dropped_half_read_is_finalised_when_collected(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client()
    observed, _ = _stream(mc, _chunks(10))
    next(observed)
    next(observed)
    del observed
    gc.collect()
    [rec] = model_records(mc)
    assert rec["output"]["text"] == "t0 t1 " and rec["output"]["incomplete"] is True


def test_a_stream_object_dropped_unread_is_recorded_abandoned(
    client: Callable[..., ci.ModelClient],
) -> None:
    class SdkStream:
        pass

    mc = client()
    began = mc.begin(step())
    assert isinstance(began, ci.ModelCall)
    owner = SdkStream()
    began.watch(owner)
    del owner
    gc.collect()
    [rec] = model_records(mc)
    assert rec["meta"]["charter.outcome"] == "abandoned"


def test_a_watched_stream_dropped_half_read_keeps_what_arrived(
    client: Callable[..., ci.ModelClient],
) -> None:
    class SdkStream:
        def __init__(self, chunks: Iterator[str]) -> None:
            self.chunks = chunks

    mc = client()
    began = mc.begin(step())
    assert isinstance(began, ci.ModelCall)
    parts: list[str] = []
    owner = SdkStream(iter(()))
    owner.chunks = began.stream(
        _chunks(5), parts.append, lambda complete: ci.ModelReply(text="".join(parts))
    )
    began.watch(owner)
    next(owner.chunks)
    del owner  # the owner's weak-reference callback runs before its generator is closed
    gc.collect()
    [rec] = model_records(mc)
    assert rec["meta"]["charter.outcome"] == "ok" and rec["output"]["text"] == "t0 "


def test_an_error_mid_stream_is_the_calls_failure_and_reaches_the_consumer(
    client: Callable[..., ci.ModelClient],
) -> None:
    def broken() -> Iterator[str]:
        yield "t0 "
        raise ConnectionError("stream cut")

    mc = client()
    observed, _ = _stream(mc, broken())
    with pytest.raises(ConnectionError):
        list(observed)
    [rec] = model_records(mc)
    assert rec["meta"]["charter.outcome"] == "failed"


@pytest.mark.allow_internal_errors
def test_a_mapping_fault_on_a_chunk_is_reported_never_raised(
    client: Callable[..., ci.ModelClient],
) -> None:
    from charter.testing import swallowed_errors

    mc = client()
    began = mc.begin(step())
    assert isinstance(began, ci.ModelCall)
    before = swallowed_errors()
    since = before[-1].serial if before else 0

    def fold(chunk: str) -> None:
        raise KeyError("unexpected chunk shape")

    out = list(began.stream(_chunks(2), fold, lambda complete: ci.ModelReply(text="?")))
    assert out == ["t0 ", "t1 "]
    assert any("streamed chunk" in e.where for e in swallowed_errors(since))
    assert model_records(mc)[0]["meta"]["charter.outcome"] == "ok"


def test_async_calls_and_streams_follow_the_same_lifecycle(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client(NO_BIG_MODEL)

    async def chunks() -> AsyncIterator[str]:
        for i in range(2):
            yield f"a{i}"

    async def main() -> list[str]:
        assert isinstance(await mc.abegin(step("big-model")), ci.Blocked)
        began = await mc.abegin(step())
        assert isinstance(began, ci.ModelCall)
        parts: list[str] = []
        got = [
            c
            async for c in began.astream(
                chunks(), parts.append, lambda complete: ci.ModelReply(text="".join(parts))
            )
        ]
        return got

    assert asyncio.run(main()) == ["a0", "a1"]
    outcomes = [(r["step_name"], r["meta"]["charter.outcome"]) for r in model_records(mc)]
    assert outcomes == [("big-model", "blocked"), ("small-model", "ok")]


def test_requested_tool_calls_are_judged_on_arrival_and_recorded_only_when_run(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client(NO_DELETE)
    began = mc.begin(step())
    assert isinstance(began, ci.ModelCall)
    calls = (
        ci.tool_call("read_file", '{"path": "a.txt"}', "c1"),
        ci.tool_call("delete_file", {"path": "a.txt"}, "c2"),
        ci.tool_call("read_file", "{not json", "c3"),
    )
    verdicts = began.finish(ci.ModelReply(text="", tool_calls=calls))
    assert [v.decision for v in verdicts[:2]] == ["allow", "block"]
    assert "no-delete" in verdicts[1].reason
    assert [r["kind"] for r in trail(mc)] == ["task.start", "step.message", "step.model"]

    ran: list[str] = []

    def read_file(path: str) -> str:
        ran.append(path)
        return "contents"

    def delete_file(path: str) -> str:
        ran.append(f"deleted {path}")
        return "gone"

    results = mc.run_tools(calls, {"read_file": read_file, "delete_file": delete_file})
    assert ran == ["a.txt"]
    assert [r.ok for r in results] == [True, False, False]
    assert results[0].content == "contents"
    assert "no-delete" in (results[1].refusal or "")
    assert "not valid JSON" in (results[2].refusal or "")
    tools = [(r["step_name"], r["meta"]["charter.outcome"]) for r in trail(mc)[3:]]
    assert tools == [("read_file", "ok"), ("delete_file", "blocked")]


def test_a_tool_that_raises_is_recorded_failed_and_returned_not_raised(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client()

    def read_file(path: str) -> str:
        raise FileNotFoundError(path)

    [result] = mc.run_tools(
        [ci.tool_call("read_file", {"path": "x"}, "c1")], {"read_file": read_file}
    )
    assert isinstance(result.error, FileNotFoundError)
    assert "FileNotFoundError" in result.content
    assert trail(mc)[-1]["meta"]["charter.outcome"] == "failed"


def test_a_model_call_inside_a_governed_tool_lands_in_the_same_task(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client()

    def summarise(text: str) -> Any:
        return call_provider(mc, [])

    with mc.gate.governor.task(name="outer") as task:
        mc.run_tools([ci.tool_call("summarise", {"text": "long"}, "c1")], {"summarise": summarise})
    kinds = [(r["task_id"], r["kind"]) for r in trail(mc) if r["kind"].startswith("step.")]
    assert kinds == [(task.task_id, "step.model"), (task.task_id, "step.unknown")]


def test_verdicts_travel_with_the_response_object() -> None:
    class Response:
        pass

    response = Response()
    verdict = ci.ToolVerdict(ci.tool_call("x", {}), "block", "no")
    ci.remember_verdicts(response, [verdict])
    assert ci.tool_verdicts(response) == (verdict,)
    assert ci.tool_verdicts(Response()) == ()


class Refused(Exception):
    """The scripted SDK's own refusal."""


def test_send_runs_one_provider_call_under_the_lifecycle(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client(NO_BIG_MODEL)
    sent: list[str] = []

    def provider(name: str) -> Callable[[], str]:
        return lambda: sent.append(name) or f"reply from {name}"

    def observe(call: ci.ModelCall, result: str) -> str:
        call.finish(ci.ModelReply(text=result))
        return result.upper()

    # Not a model call: sent unchanged, nothing recorded.
    assert mc.send(None, provider("health"), Refused, observe) == "reply from health"
    # A refused call raises the SDK's refusal and is never sent.
    with pytest.raises(Refused):
        mc.send(step("big-model"), provider("big"), Refused, observe)
    assert sent == ["health"]
    # An allowed call is sent, observed and settled.
    assert mc.send(step(), provider("small"), Refused, observe) == "REPLY FROM SMALL"

    # A send that raises is recorded as failed and the error reaches the caller.
    def down() -> str:
        raise ConnectionError("provider down")

    with pytest.raises(ConnectionError):
        mc.send(step(), down, Refused, observe)

    async def async_send() -> str:
        async def provide() -> str:
            sent.append("async")
            return "async reply"

        async def aobserve(call: ci.ModelCall, result: str) -> str:
            await call.afinish(ci.ModelReply(text=result))
            return result

        with pytest.raises(Refused):
            await mc.asend(step("big-model"), provide, Refused, aobserve)
        return await mc.asend(step(), provide, Refused, aobserve)

    assert asyncio.run(async_send()) == "async reply"
    assert sent == ["health", "small", "async"]
    outcomes = [(r["step_name"], r["meta"]["charter.outcome"]) for r in model_records(mc)]
    assert outcomes == [
        ("big-model", "blocked"),
        ("small-model", "ok"),
        ("small-model", "failed"),
        ("big-model", "blocked"),
        ("small-model", "ok"),
    ]


# -- the user's words -----------------------------------------------------------------------

MAIL_TO_USER_NAMED = {
    "name": "mail-only-whom-the-user-named",
    "rule_type": "value_provenance",
    "severity": "critical",
    "match": {"step_names": ["send_email"]},
    "params": {"fields": ["input.to"], "trust": "user"},
}


def _mail(mc: ci.ModelClient, to: str) -> ci.ToolResult:
    [result] = mc.run_tools(
        [ci.tool_call("send_email", {"to": to}, f"c-{to}")], {"send_email": lambda to: "sent"}
    )
    return result


def test_user_messages_are_recorded_once_as_user_content_and_assistant_ones_never(
    client: Callable[..., ci.ModelClient],
) -> None:
    mc = client(MAIL_TO_USER_NAMED)
    first = [
        ci.chat_message("system", "Mail ops@corp.example on errors."),
        ci.chat_message("user", "Mail ann@corp.example the report."),
    ]
    began = mc.begin(ci.model_step("scripted", "small-model", first))
    assert isinstance(began, ci.ModelCall)
    began.finish(ci.ModelReply(text="I will also mail eve@evil.example."))
    again = [
        *first,
        ci.chat_message("assistant", "I will also mail eve@evil.example."),
        ci.chat_message("user", "And bob@corp.example."),
    ]
    began = mc.begin(ci.model_step("scripted", "small-model", again))
    assert isinstance(began, ci.ModelCall)
    began.finish(ci.ModelReply(text="ok"))
    said = [r["input"]["content"] for r in trail(mc) if r["step_name"] == "user_message"]
    assert said == ["Mail ann@corp.example the report.", "And bob@corp.example."]
    assert _mail(mc, "ann@corp.example").ok and _mail(mc, "bob@corp.example").ok
    # the model's own words and the system prompt are not the user's
    for to in ("eve@evil.example", "ops@corp.example"):
        refused = _mail(mc, to)
        assert refused.refusal is not None and "mail-only-whom-the-user-named" in refused.refusal


def test_a_planner_runs_on_the_first_user_message_of_a_raw_client_task(
    client: Callable[..., ci.ModelClient],
) -> None:
    seen: list[str] = []

    def planner(request: str) -> dict[str, Any]:
        seen.append(request)
        return {"tools": {"read_file": {}}}

    caps = {"name": "caps", "rule_type": "capabilities", "severity": "critical"}
    mc = client(caps, planner=planner)
    began = mc.begin(step(text="Read a.txt for me."))
    assert isinstance(began, ci.ModelCall)
    began.finish(ci.ModelReply(text=""))
    calls = (
        ci.tool_call("read_file", {"path": "a.txt"}, "c1"),
        ci.tool_call("delete_file", {"path": "a.txt"}, "c2"),
    )
    results = mc.run_tools(calls, {"read_file": lambda path: "A", "delete_file": lambda path: ""})
    assert seen == ["Read a.txt for me."]
    assert results[0].ok
    assert "'delete_file' is not in the task's planner grant" in (results[1].refusal or "")


def test_a_refused_user_message_refuses_the_model_call(
    client: Callable[..., ci.ModelClient],
) -> None:
    no_input = {
        "name": "no-pasted-keys",
        "rule_type": "deny",
        "severity": "critical",
        "match": {"kinds": ["step.message"], "verbs": ["GET"]},
    }
    mc = client(no_input)
    began = mc.begin(step())
    assert isinstance(began, ci.Blocked) and "no-pasted-keys" in began.reason
    assert [r["kind"] for r in trail(mc)] == ["task.start", "step.message"]
    assert trail(mc)[-1]["meta"]["charter.outcome"] == "blocked"


def test_user_inputs_reads_the_shapes_chat_frameworks_take() -> None:
    class Human:
        type = "human"
        content = "from an object"

    class AI:
        type = "ai"
        content = "model words"

    given = [
        ("user", "old turn"),
        AI(),
        {"role": "user", "content": "a dict"},
        ("human", "a pair"),
        Human(),
        "a bare string",
        {"role": "system", "content": "not the user"},
        {"role": "tool", "content": "not the user"},
    ]
    assert ci.user_inputs(given) == ["a dict", "a pair", "from an object", "a bare string"]
    assert ci.user_inputs("one message") == ["one message"]
    assert ci.user_inputs(None) == []
