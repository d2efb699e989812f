"""charter-anthropic on the real Anthropic SDK, replaying recorded traffic (network blocked)."""

from __future__ import annotations

import asyncio
import gc
import inspect
from collections.abc import Callable
from typing import Any

import anthropic
import charter
import charter_anthropic
import pytest
from charter.testing import recorded

pytestmark = pytest.mark.block_network

# Newer runners keep a server-side thread unless told not to; the cassettes hold the plain
# full-history exchange every supported version can send.
FULL_HISTORY = (
    {"thread": False}
    if "thread" in inspect.signature(anthropic.resources.beta.Messages.tool_runner).parameters
    else {}
)
FAKE_KEY = "sk-ant-test-fake-000000000000"
MODEL = "claude-sonnet-4-5"
ASK = [{"role": "user", "content": "Say hello."}]
NO_SONNET = {
    "name": "no-sonnet",
    "rule_type": "deny",
    "severity": "critical",
    "match": {"kinds": ["step.model"], "step_names": ["claude-sonnet-*"]},
}
NO_READ = {
    "name": "no-read",
    "rule_type": "deny",
    "severity": "critical",
    "match": {"step_names": ["read_file"]},
}


def models(gov: charter.Governor) -> list[dict[str, Any]]:
    return [r for r in recorded(gov) if r["kind"] == "step.model"]


def client_for(gov: charter.Governor) -> tuple[Any, charter_anthropic.Governance]:
    client = anthropic.Anthropic(api_key=FAKE_KEY, max_retries=2)
    return client, charter_anthropic.govern(client, governor=gov)


@pytest.mark.vcr
@pytest.mark.default_cassette("text.yaml")
def test_a_message_is_recorded_with_model_provider_usage_stop_reason_latency_and_text(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    out = client.messages.create(model=MODEL, max_tokens=64, system="Be brief.", messages=ASK)
    assert out.content[0].text == "Hello!"
    [rec] = models(gov)
    model = rec["properties"]["model"]
    assert rec["step_name"] == MODEL and rec["meta"]["charter.outcome"] == "ok"
    assert model["provider"] == "anthropic" and model["params"] == {"max_tokens": 64}
    assert model["usage"] == {"input_tokens": 25, "output_tokens": 9, "total_tokens": 34}
    assert model["stop_reason"] == "end_turn"
    assert model["response_model"] == "claude-sonnet-4-5-20250929" and model["latency_ms"] > 0
    assert rec["input"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello."},
    ]
    assert rec["output"]["text"] == "Hello!"


@pytest.mark.vcr
@pytest.mark.default_cassette("text.yaml")
def test_a_resent_conversation_records_what_followed_the_models_last_turn_and_counts_all(
    governor: Callable[..., charter.Governor],
) -> None:
    # An agent loop sends the whole conversation on every call: the model's earlier turns
    # and what preceded them are in the trail already, so only the rest is recorded. A user
    # message of tool results is one tool message per result (and itself, if it says more).
    gov = governor()
    client, _ = client_for(gov)
    use = {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "noon"}
    conversation = [
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, use]},
        {"role": "user", "content": [result, {"type": "text", "text": "And the date?"}]},
        {"role": "assistant", "content": "It is noon on the 6th."},
        {"role": "user", "content": [dict(result, tool_use_id="toolu_2")]},
        *ASK,
    ]
    client.messages.create(model=MODEL, max_tokens=64, system="Be brief.", messages=conversation)
    [rec] = models(gov)
    # system 1, user 1, assistant 1, tool + user 2, assistant 1, tool 1, user 1
    assert rec["input"]["message_count"] == 8
    assert rec["input"]["messages"] == [
        {"role": "tool", "content": "noon", "tool_call_id": "toolu_2"},
        {"role": "user", "content": "Say hello."},
    ]


@pytest.mark.vcr
@pytest.mark.default_cassette("text.yaml")
def test_a_blocked_call_never_reaches_the_provider_and_raises_the_sdks_403(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor(NO_SONNET)
    client, _ = client_for(gov)
    with pytest.raises(anthropic.PermissionDeniedError) as caught:
        client.messages.create(model=MODEL, max_tokens=64, messages=ASK)
    assert isinstance(caught.value, charter.BlockedError)
    assert caught.value.status_code == 403 and "no-sonnet" in str(caught.value)
    assert vcr.play_count == 0
    [rec] = models(gov)
    assert rec["meta"]["charter.outcome"] == "blocked"


@pytest.mark.vcr
@pytest.mark.default_cassette("text.yaml")
def test_with_raw_response_is_one_record(governor: Callable[..., charter.Governor]) -> None:
    gov = governor()
    client, _ = client_for(gov)
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=64, messages=ASK)
    assert raw.parse().content[0].text == "Hello!"
    [rec] = models(gov)
    assert rec["output"]["text"] == "Hello!"


@pytest.mark.vcr
@pytest.mark.default_cassette("text.yaml")
def test_with_streaming_response_settles_when_parsed(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    with client.messages.with_streaming_response.create(
        model=MODEL, max_tokens=64, messages=ASK
    ) as response:
        assert models(gov) == []
        assert response.parse().content[0].text == "Hello!"
    [rec] = models(gov)
    assert rec["properties"]["model"]["usage"]["total_tokens"] == 34


@pytest.mark.vcr
@pytest.mark.default_cassette("stream.yaml")
def test_a_stream_closed_early_is_recorded_with_what_arrived(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    stream = client.messages.create(model=MODEL, max_tokens=64, messages=ASK, stream=True)
    events = iter(stream)
    while next(events).type != "content_block_delta":
        pass
    stream.close()
    [rec] = models(gov)
    assert rec["output"] == {"text": "Hel", "incomplete": True}


@pytest.mark.vcr
@pytest.mark.default_cassette("retry_429.yaml")
def test_a_429_retried_by_the_sdk_is_one_step(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    out = client.messages.create(model=MODEL, max_tokens=64, messages=ASK)
    assert out.content[0].text == "After the retry."
    assert vcr.play_count == 2
    assert [r["meta"]["charter.outcome"] for r in models(gov)] == ["ok"]


@pytest.mark.vcr
@pytest.mark.default_cassette("error_500.yaml")
def test_a_500_after_every_retry_is_one_failed_step(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    with pytest.raises(anthropic.InternalServerError):
        client.with_options(max_retries=2).messages.create(model=MODEL, max_tokens=64, messages=ASK)
    assert vcr.play_count == 3
    [rec] = models(gov)
    assert rec["meta"]["charter.outcome"] == "failed"


@pytest.mark.vcr
@pytest.mark.default_cassette("error_400.yaml")
def test_a_400_is_a_failed_step_not_retried(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=0, messages=ASK)
    assert vcr.play_count == 1
    assert [r["meta"]["charter.outcome"] for r in models(gov)] == ["failed"]


@pytest.mark.vcr
@pytest.mark.default_cassette("stream.yaml")
def test_a_stream_is_recorded_once_at_its_end_with_text_and_usage(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    stream = client.messages.create(model=MODEL, max_tokens=64, messages=ASK, stream=True)
    assert models(gov) == []
    text = "".join(e.delta.text for e in stream if e.type == "content_block_delta")
    assert text == "Hello!"
    [rec] = models(gov)
    assert rec["output"] == {"text": "Hello!"}
    assert rec["properties"]["model"]["usage"] == {
        "input_tokens": 25,
        "output_tokens": 7,
        "total_tokens": 32,
    }
    assert rec["properties"]["model"]["stop_reason"] == "end_turn"


@pytest.mark.vcr
@pytest.mark.default_cassette("stream.yaml")
def test_a_stream_dropped_unread_is_recorded_abandoned(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    stream = client.messages.create(model=MODEL, max_tokens=64, messages=ASK, stream=True)
    del stream
    gc.collect()
    assert [r["meta"]["charter.outcome"] for r in models(gov)] == ["abandoned"]


@pytest.mark.vcr
@pytest.mark.default_cassette("stream.yaml")
def test_the_sdks_stream_helper_is_governed_too(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, _ = client_for(gov)
    with client.messages.stream(model=MODEL, max_tokens=64, messages=ASK) as stream:
        assert stream.get_final_text() == "Hello!"
    [rec] = models(gov)
    assert rec["output"] == {"text": "Hello!"}


@pytest.mark.vcr
@pytest.mark.default_cassette("stream_tool.yaml")
def test_a_streamed_tool_use_is_judged_when_complete_and_refused_by_the_executor(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor(NO_READ)
    client, governance = client_for(gov)
    stream = client.messages.create(model=MODEL, max_tokens=64, messages=ASK, stream=True)
    for _ in stream:
        pass
    [verdict] = governance.verdicts(stream)
    assert verdict.call.name == "read_file" and verdict.call.args == {"path": "notes.txt"}
    assert verdict.decision == "block"
    ran: list[str] = []
    message = governance.run_tools(stream, {"read_file": lambda path: ran.append(path)})
    assert ran == []
    [block] = message["content"]
    assert message["role"] == "user" and block["type"] == "tool_result"
    assert block["tool_use_id"] == "toolu_read_1" and block["is_error"] is True
    assert "no-read" in block["content"]
    assert recorded(gov)[-1]["meta"]["charter.outcome"] == "blocked"


@pytest.mark.vcr
@pytest.mark.default_cassette("runner.yaml")
def test_the_sdks_tool_runner_runs_governed_copies_of_its_tools(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor({**NO_READ, "name": "no-probe", "match": {"step_names": ["contract_probe"]}})
    client, _ = client_for(gov)
    ran: list[dict[str, Any]] = []

    @anthropic.beta_tool
    def contract_probe(target: str, count: int) -> str:
        """Probe a target."""
        ran.append({"target": target, "count": count})
        return "probed"

    runner = client.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": "Probe alpha-7 twice."}],
        tools=[contract_probe],
        **FULL_HISTORY,
    )
    turns = iter(runner)
    next(turns)  # the model asks for contract_probe
    answer = runner.generate_tool_call_response()  # what the runner sends back (cached)
    assert answer is not None
    [block] = answer["content"]  # type: ignore[index]
    assert block["is_error"] is True and "no-probe" in str(block["content"])
    final = list(turns)[-1]
    assert final.content[0].text == "Probed by the runner."
    assert ran == [], "the runner ran a blocked tool"
    assert vcr.play_count == 2
    steps = [(r["kind"], r["step_name"], r["meta"]["charter.outcome"]) for r in recorded(gov)[1:]]
    # The runner sends the user's message again with the tool result: it is recorded once,
    # and the tool result (a user-role block) is never the user's words.
    assert steps == [
        ("step.message", "user_message", "ok"),
        ("step.model", MODEL, "ok"),
        ("step.unknown", "contract_probe", "blocked"),
        ("step.model", MODEL, "ok"),
    ]


@pytest.mark.vcr
@pytest.mark.default_cassette("stream.yaml")
def test_the_async_client_streams_the_same_way(governor: Callable[..., charter.Governor]) -> None:
    gov = governor()

    async def main() -> str:
        client = anthropic.AsyncAnthropic(api_key=FAKE_KEY)
        charter_anthropic.govern(client, governor=gov)
        stream = await client.messages.create(model=MODEL, max_tokens=64, messages=ASK, stream=True)
        text = "".join([e.delta.text async for e in stream if e.type == "content_block_delta"])
        await client.close()
        return text

    assert asyncio.run(main()) == "Hello!"
    [rec] = models(gov)
    assert rec["properties"]["model"]["usage"]["total_tokens"] == 32


def test_uninstall_removes_governance_and_govern_refuses_other_objects(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client, governance = client_for(gov)
    with pytest.raises(ValueError, match="governed already"):
        charter_anthropic.govern(client, governor=gov)
    governance.uninstall()
    assert "request" not in vars(client)
    assert "tool_runner" not in vars(client.beta.messages)
    charter_anthropic.govern(client, governor=gov).uninstall()
    with pytest.raises(TypeError, match=r"anthropic\.Anthropic"):
        charter_anthropic.govern(object())
