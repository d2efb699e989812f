"""charter-openai on the real OpenAI SDK, replaying recorded traffic (network blocked)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import charter
import charter_openai
import openai
import pytest
from charter.testing import recorded

pytestmark = pytest.mark.block_network

ASK = [{"role": "user", "content": "Say hello."}]
MODEL = "gpt-4o-mini"
NO_MINI = {
    "name": "no-mini",
    "rule_type": "deny",
    "severity": "critical",
    "match": {"kinds": ["step.model"], "step_names": ["gpt-4o-mini"]},
}
NO_DELETE = {
    "name": "no-delete",
    "rule_type": "deny",
    "severity": "critical",
    "match": {"step_names": ["delete_file"]},
}


FAKE_KEY = "sk-test-fake-0000000000000000"


def models(gov: charter.Governor) -> list[dict[str, Any]]:
    return [r for r in recorded(gov) if r["kind"] == "step.model"]


def client_for(gov: charter.Governor, **kw: Any) -> tuple[Any, charter_openai.Governance]:
    client = openai.OpenAI(api_key=FAKE_KEY, max_retries=kw.pop("max_retries", 2), **kw)
    return client, charter_openai.govern(client, governor=gov)


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_text.yaml")
def test_a_chat_completion_is_recorded_with_model_provider_usage_stop_reason_latency_and_text(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    out = client.chat.completions.create(model=MODEL, messages=ASK, temperature=0)
    assert out.choices[0].message.content == "Hello!"
    [rec] = models(gov)
    model = rec["properties"]["model"]
    assert rec["step_name"] == MODEL and rec["meta"]["charter.outcome"] == "ok"
    assert model["provider"] == "openai" and model["params"] == {"temperature": 0}
    assert model["usage"] == {"input_tokens": 20, "output_tokens": 8, "total_tokens": 28}
    assert model["stop_reason"] == "stop" and model["response_model"] == "gpt-4o-mini-2024-07-18"
    assert model["latency_ms"] > 0
    assert rec["input"]["messages"] == [{"role": "user", "content": "Say hello."}]
    assert rec["output"]["text"] == "Hello!"
    assert rec["properties"]["framework"] == {"name": "openai", "api": "chat"}


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_text.yaml")
def test_a_resent_conversation_records_what_followed_the_models_last_turn_and_counts_all(
    governor: Callable[..., charter.Governor],
) -> None:
    # An agent loop sends the whole conversation on every call: the model's earlier turns
    # and what preceded them are in the trail already, so only the rest is recorded.
    gov = governor()
    client, _ = client_for(gov)
    call = {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "noon"},
        {"role": "assistant", "content": "It is noon."},
        {"role": "developer", "content": "Greet the user."},
        *ASK,
    ]
    client.chat.completions.create(model=MODEL, messages=conversation)
    [rec] = models(gov)
    assert rec["input"]["message_count"] == 7
    assert rec["input"]["messages"] == [
        {"role": "system", "content": "Greet the user."},
        {"role": "user", "content": "Say hello."},
    ]


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_text.yaml")
def test_a_blocked_call_never_reaches_the_provider_and_raises_the_sdks_403(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor(NO_MINI)
    client, _ = client_for(gov)
    with pytest.raises(openai.PermissionDeniedError) as caught:
        client.chat.completions.create(model=MODEL, messages=ASK)
    err = caught.value
    assert isinstance(err, charter.BlockedError) and isinstance(
        err, charter_openai.BlockedCallError
    )
    assert err.status_code == 403 and "no-mini" in str(err)
    assert err.body["error"]["code"] == "policy_blocked"  # type: ignore[index]
    assert vcr.play_count == 0, "the blocked call reached the network"
    [rec] = models(gov)
    assert rec["meta"]["charter.outcome"] == "blocked" and rec.get("output") is None


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_text.yaml")
def test_with_raw_response_is_one_record_and_parse_returns_what_was_recorded(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=ASK)
    assert raw.headers["x-request-id"] == "req_test_0001"
    assert raw.parse().choices[0].message.content == "Hello!"
    [rec] = models(gov)
    assert rec["output"]["text"] == "Hello!" and rec["meta"]["charter.outcome"] == "ok"


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_text.yaml")
def test_with_streaming_response_settles_when_parsed(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    with client.chat.completions.with_streaming_response.create(model=MODEL, messages=ASK) as r:
        assert r.parse().choices[0].message.content == "Hello!"
    [rec] = models(gov)
    assert rec["properties"]["model"]["usage"]["total_tokens"] == 28


@pytest.mark.vcr
@pytest.mark.default_cassette("retry_429.yaml")
def test_a_429_retried_by_the_sdk_is_one_step(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    out = client.chat.completions.create(model=MODEL, messages=ASK)
    assert out.choices[0].message.content == "After the retry."
    assert vcr.play_count == 2
    [rec] = models(gov)
    assert rec["meta"]["charter.outcome"] == "ok"


@pytest.mark.vcr
@pytest.mark.default_cassette("error_500.yaml")
def test_a_500_after_every_retry_is_one_failed_step_and_the_sdks_error(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    with pytest.raises(openai.InternalServerError):
        client.with_options(max_retries=2).chat.completions.create(model=MODEL, messages=ASK)
    assert vcr.play_count == 3
    [rec] = models(gov)
    assert rec["meta"]["charter.outcome"] == "failed"
    assert rec["output"]["error"]["type"] == "InternalServerError"


@pytest.mark.vcr
@pytest.mark.default_cassette("error_400.yaml")
def test_a_400_is_a_failed_step_not_retried(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=ASK, temperature=9)
    assert vcr.play_count == 1
    [rec] = models(gov)
    assert rec["meta"]["charter.outcome"] == "failed"
    assert rec["properties"]["model"]["params"] == {"temperature": 9}


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_stream.yaml")
def test_a_stream_is_recorded_once_at_its_end_with_text_and_the_last_chunks_usage(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    stream = client.chat.completions.create(
        model=MODEL, messages=ASK, stream=True, stream_options={"include_usage": True}
    )
    assert isinstance(stream, openai.Stream)
    assert models(gov) == [], "recorded before the stream was read"
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Hello!"
    [rec] = models(gov)
    assert rec["output"] == {"text": "Hello!"}
    assert rec["properties"]["model"]["usage"] == {
        "input_tokens": 12,
        "output_tokens": 3,
        "total_tokens": 15,
    }
    assert rec["properties"]["model"]["stop_reason"] == "stop"


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_stream.yaml")
def test_a_stream_closed_early_is_recorded_with_what_arrived(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    with client.chat.completions.create(model=MODEL, messages=ASK, stream=True) as stream:
        next(iter(stream))
        next(iter(stream))
    [rec] = models(gov)
    assert rec["output"] == {"text": "Hel", "incomplete": True}


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_stream.yaml")
def test_a_stream_dropped_half_read_is_recorded_with_what_arrived(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    stream = client.chat.completions.create(model=MODEL, messages=ASK, stream=True)
    chunks = iter(stream)
    next(chunks)
    next(chunks)
    del stream, chunks
    gc.collect()
    [rec] = models(gov)
    assert rec["meta"]["charter.outcome"] == "ok"
    assert rec["output"] == {"text": "Hel", "incomplete": True}


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_stream.yaml")
def test_a_stream_dropped_unread_is_recorded_abandoned(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    stream = client.chat.completions.create(model=MODEL, messages=ASK, stream=True)
    del stream
    gc.collect()
    [rec] = models(gov)
    assert rec["meta"]["charter.outcome"] == "abandoned"


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_stream_tools.yaml")
def test_streamed_tool_calls_are_judged_when_complete_and_run_through_charter(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, governance = client_for(gov)
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Read notes.txt."}], stream=True
    )
    for _ in stream:
        pass
    [verdict] = governance.verdicts(stream)
    assert verdict.call.name == "read_file" and verdict.call.args == {"path": "notes.txt"}
    assert verdict.decision == "allow"
    messages = governance.run_tools(stream, {"read_file": lambda path: f"contents of {path}"})
    assert messages == [
        {"role": "tool", "tool_call_id": "call_read_2", "content": "contents of notes.txt"}
    ]
    tool = recorded(gov)[-1]
    assert tool["step_name"] == "read_file" and tool["properties"]["tool"]["call_id"] == (
        "call_read_2"
    )


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_files.yaml")
def test_requested_tool_calls_are_judged_on_arrival_and_the_executor_refuses_blocked_ones(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor(NO_DELETE)
    client, governance = client_for(gov)
    response = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Read notes.txt, then delete it."}]
    )
    assert [(v.call.name, v.decision) for v in governance.verdicts(response)] == [
        ("read_file", "allow"),
        ("delete_file", "block"),
    ]
    ran: list[str] = []

    def read_file(path: str) -> str:
        ran.append(f"read {path}")
        return "notes"

    def delete_file(path: str) -> str:
        ran.append(f"delete {path}")
        return "deleted"

    messages = governance.run_tools(response, {"read_file": read_file, "delete_file": delete_file})
    assert ran == ["read notes.txt"]
    assert messages[0] == {"role": "tool", "tool_call_id": "call_read_1", "content": "notes"}
    assert messages[1]["tool_call_id"] == "call_del_1" and "no-delete" in messages[1]["content"]
    steps = [(r["kind"], r["step_name"], r["meta"]["charter.outcome"]) for r in recorded(gov)[1:]]
    assert steps == [
        ("step.message", "user_message", "ok"),
        ("step.model", MODEL, "ok"),
        ("step.resource", "read_file", "ok"),
        ("step.resource", "delete_file", "blocked"),
    ]


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_files.yaml")
def test_the_users_message_is_user_content_and_a_planner_grants_the_task_from_it(
    governor: Callable[..., charter.Governor],
) -> None:
    seen: list[str] = []

    def planner(request: str) -> dict[str, Any]:
        seen.append(request)
        return {"tools": {"read_file": {"args": {"path": {"source": "user"}}}}}

    caps = {"name": "caps", "rule_type": "capabilities", "severity": "critical"}
    gov = governor(caps, planner=planner)
    client, governance = client_for(gov)
    request = "Read notes.txt, then delete it."
    response = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": request}]
    )
    assert seen == [request], "the planner reads the user's message, nothing else"
    verdicts = [(v.call.name, v.decision) for v in governance.verdicts(response)]
    assert verdicts == [("read_file", "allow"), ("delete_file", "block")]
    ran: list[str] = []
    messages = governance.run_tools(
        response, {"read_file": lambda path: ran.append(path) or "notes", "delete_file": ran.append}
    )
    # notes.txt was named by the user: the grant's source user holds it
    assert ran == ["notes.txt"]
    assert "'delete_file' is not in the task's planner grant" in messages[1]["content"]
    said = [r for r in recorded(gov) if r["kind"] == "step.message"]
    assert [(r["input"]["content"], r["properties"]["message"]["role"]) for r in said] == [
        (request, "user")
    ]


@pytest.mark.vcr
@pytest.mark.default_cassette("responses_text.yaml")
def test_the_responses_api_is_governed_with_instructions_as_the_system_message(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    out = client.responses.create(model=MODEL, input="Say hello.", instructions="Be brief.")
    assert out.output_text == "Hello from Responses."
    [rec] = models(gov)
    assert rec["input"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello."},
    ]
    assert rec["properties"]["model"]["usage"]["total_tokens"] == 24
    assert rec["properties"]["model"]["stop_reason"] == "completed"
    assert rec["properties"]["framework"]["api"] == "responses"


@pytest.mark.vcr
@pytest.mark.default_cassette("responses_text.yaml")
def test_a_resent_responses_input_records_what_followed_the_models_last_turn_and_counts_all(
    governor: Callable[..., charter.Governor],
) -> None:
    # The Responses API's input is the conversation as items: the model's function calls and
    # messages are its turns, items no message is made of (reasoning) count for nothing.
    gov = governor()
    client, _ = client_for(gov)
    items = [
        {"role": "user", "content": "What time is it?"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "now", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "noon"},
        {"type": "message", "role": "assistant", "content": "It is noon."},
        {"type": "message", "role": "developer", "content": "Greet the user."},
        {"role": "user", "content": "Say hello."},
    ]
    client.responses.create(model=MODEL, input=items, instructions="Be brief.")
    [rec] = models(gov)
    assert rec["input"]["message_count"] == 7  # the instructions and six items
    assert rec["input"]["messages"] == [
        {"role": "system", "content": "Greet the user."},
        {"role": "user", "content": "Say hello."},
    ]


@pytest.mark.vcr
@pytest.mark.default_cassette("responses_tools.yaml")
def test_responses_function_calls_get_verdicts_and_function_call_output_items(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor(NO_DELETE)
    client, governance = client_for(gov)
    out = client.responses.create(model=MODEL, input="Delete a.txt.")
    [verdict] = governance.verdicts(out)
    assert verdict.decision == "block" and "no-delete" in verdict.reason
    [item] = governance.run_tools(out, {"delete_file": lambda path: "gone"})
    assert item["type"] == "function_call_output" and item["call_id"] == "call_del_2"
    assert "no-delete" in item["output"]


@pytest.mark.vcr
@pytest.mark.default_cassette("responses_stream.yaml")
def test_a_responses_stream_is_recorded_from_its_completed_event(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    deltas = [
        e.delta
        for e in client.responses.create(model=MODEL, input="Say hello.", stream=True)
        if e.type == "response.output_text.delta"
    ]
    assert deltas == ["Str", "eamed."]
    [rec] = models(gov)
    assert rec["output"] == {"text": "Streamed."}
    assert rec["properties"]["model"]["usage"]["total_tokens"] == 24


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_stream.yaml")
def test_the_async_client_streams_and_blocks_the_same_way(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()

    async def main() -> str:
        client = openai.AsyncOpenAI(api_key=FAKE_KEY)
        charter_openai.govern(client, governor=gov)
        stream = await client.chat.completions.create(
            model=MODEL, messages=ASK, stream=True, stream_options={"include_usage": True}
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await client.close()
        return text

    assert asyncio.run(main()) == "Hello!"
    [rec] = models(gov)
    assert rec["output"] == {"text": "Hello!"}
    assert rec["properties"]["model"]["usage"]["total_tokens"] == 15


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_text.yaml")
def test_an_async_blocked_call_raises_before_sending(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor(NO_MINI)

    async def main() -> None:
        client = openai.AsyncOpenAI(api_key=FAKE_KEY)
        charter_openai.govern(client, governor=gov)
        await client.chat.completions.create(model=MODEL, messages=ASK)

    with pytest.raises(charter_openai.BlockedCallError):
        asyncio.run(main())
    assert vcr.play_count == 0


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_probe.yaml")
def test_a_token_budget_holds_across_calls_of_one_client(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    budget = {
        "name": "token-budget",
        "rule_type": "budget",
        "severity": "critical",
        "match": {"kinds": ["step.model"]},
        "params": {"field": "properties.model.usage.total_tokens", "limit": 20},
    }
    gov = governor(budget)
    client, _ = client_for(gov)
    client.chat.completions.create(model=MODEL, messages=ASK)  # 28 tokens: over from now on
    with pytest.raises(charter_openai.BlockedCallError, match="token-budget"):
        client.chat.completions.create(model=MODEL, messages=ASK)
    assert vcr.play_count == 1
    assert [r["meta"]["charter.outcome"] for r in models(gov)] == ["ok", "blocked"]


@pytest.mark.vcr
@pytest.mark.default_cassette("chat_probe.yaml")
def test_copies_are_governed_and_uninstall_removes_governance(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, governance = client_for(gov)
    client.with_options(timeout=5).chat.completions.create(model=MODEL, messages=ASK)
    governance.uninstall()
    governance.uninstall()
    client.chat.completions.create(model=MODEL, messages=ASK)
    assert len(models(gov)) == 1
    again = charter_openai.govern(client, governor=gov)
    with pytest.raises(ValueError, match="governed already"):
        charter_openai.govern(client, governor=gov)
    again.uninstall()


def test_govern_refuses_what_is_not_an_openai_client() -> None:
    with pytest.raises(TypeError, match=r"openai\.OpenAI"):
        charter_openai.govern(object())
