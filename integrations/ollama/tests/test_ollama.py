"""charter-ollama on the real Ollama client, replaying recorded traffic (network blocked)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import charter
import charter_ollama
import ollama
import pytest
from charter.testing import recorded

pytestmark = pytest.mark.block_network

MODEL = "llama3.2"
ASK = [{"role": "user", "content": "Say hello."}]
NO_LLAMA = {
    "name": "no-llama",
    "rule_type": "deny",
    "severity": "critical",
    "match": {"kinds": ["step.model"], "step_names": ["llama*"]},
}
NO_READ = {
    "name": "no-read",
    "rule_type": "deny",
    "severity": "critical",
    "match": {"step_names": ["read_file"]},
}


def models(gov: charter.Governor) -> list[dict[str, Any]]:
    return [r for r in recorded(gov) if r["kind"] == "step.model"]


@pytest.mark.vcr
@pytest.mark.default_cassette("chat.yaml")
def test_a_chat_is_recorded_with_model_provider_usage_stop_reason_latency_and_text(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client = ollama.Client()
    charter_ollama.govern(client, governor=gov)
    out = client.chat(model=MODEL, messages=ASK, options={"temperature": 0})
    assert out.message.content == "Hello!"
    [rec] = models(gov)
    model = rec["properties"]["model"]
    assert rec["step_name"] == MODEL and model["provider"] == "ollama"
    assert model["params"] == {"temperature": 0, "stream": False}
    assert model["usage"] == {"input_tokens": 26, "output_tokens": 10, "total_tokens": 36}
    assert model["stop_reason"] == "stop" and model["latency_ms"] > 0
    assert rec["output"]["text"] == "Hello!"
    assert rec["properties"]["framework"] == {"name": "ollama", "api": "chat"}


@pytest.mark.vcr
@pytest.mark.default_cassette("chat.yaml")
def test_a_resent_conversation_records_what_followed_the_models_last_turn_and_counts_all(
    governor: Callable[..., charter.Governor],
) -> None:
    # An agent loop sends the whole conversation on every call: the model's earlier turns
    # and what preceded them are in the trail already, so only the rest is recorded.
    gov = governor()
    client = ollama.Client()
    charter_ollama.govern(client, governor=gov)
    call = {"function": {"name": "now", "arguments": {}}}
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "noon", "tool_name": "now"},
        {"role": "assistant", "content": "It is noon."},
        *ASK,
    ]
    client.chat(model=MODEL, messages=conversation, options={"temperature": 0})
    [rec] = models(gov)
    assert rec["input"]["message_count"] == 6
    assert rec["input"]["messages"] == [{"role": "user", "content": "Say hello."}]


@pytest.mark.vcr
@pytest.mark.default_cassette("chat.yaml")
def test_the_module_level_chat_is_governed_and_a_block_never_reaches_the_server(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor(NO_LLAMA)
    governance = charter_ollama.govern(ollama, governor=gov)
    try:
        with pytest.raises(ollama.ResponseError) as caught:
            ollama.chat(model=MODEL, messages=ASK)
    finally:
        governance.uninstall()
    assert isinstance(caught.value, charter.BlockedError)
    assert caught.value.status_code == 403 and "no-llama" in str(caught.value)
    assert vcr.play_count == 0
    assert [r["meta"]["charter.outcome"] for r in models(gov)] == ["blocked"]
    assert "_request" not in vars(ollama._client)


@pytest.mark.vcr
@pytest.mark.default_cassette("generate.yaml")
def test_generate_is_a_model_step_too(governor: Callable[..., charter.Governor]) -> None:
    gov = governor()
    client = ollama.Client()
    charter_ollama.govern(client, governor=gov)
    assert client.generate(model=MODEL, prompt="Say hello.", system="Be brief.").response == (
        "Generated."
    )
    [rec] = models(gov)
    assert rec["input"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello."},
    ]
    assert rec["output"]["text"] == "Generated."
    assert rec["properties"]["framework"]["api"] == "generate"


@pytest.mark.vcr
@pytest.mark.default_cassette("stream.yaml")
def test_an_ndjson_stream_is_recorded_once_at_its_done_chunk(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client = ollama.Client()
    charter_ollama.govern(client, governor=gov)
    stream = client.chat(model=MODEL, messages=ASK, stream=True)
    assert models(gov) == []
    assert "".join(c.message.content for c in stream) == "Hello!"
    [rec] = models(gov)
    assert rec["output"] == {"text": "Hello!"}
    assert rec["properties"]["model"]["usage"]["total_tokens"] == 36


@pytest.mark.vcr
@pytest.mark.default_cassette("stream.yaml")
def test_a_stream_dropped_half_read_is_recorded_with_what_arrived(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client = ollama.Client()
    charter_ollama.govern(client, governor=gov)
    stream = client.chat(model=MODEL, messages=ASK, stream=True)
    next(stream)
    del stream
    gc.collect()
    [rec] = models(gov)
    assert rec["meta"]["charter.outcome"] == "ok"
    assert rec["output"] == {"text": "Hel", "incomplete": True}


@pytest.mark.vcr
@pytest.mark.default_cassette("stream.yaml")
def test_a_stream_dropped_unread_is_recorded_abandoned_and_sent_nothing(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor()
    client = ollama.Client()
    charter_ollama.govern(client, governor=gov)
    stream = client.chat(model=MODEL, messages=ASK, stream=True)
    del stream
    gc.collect()
    assert vcr.play_count == 0
    assert [r["meta"]["charter.outcome"] for r in models(gov)] == ["abandoned"]


@pytest.mark.vcr
@pytest.mark.default_cassette("stream_tool.yaml")
def test_streamed_tool_calls_are_judged_and_the_executor_refuses_blocked_ones(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor(NO_READ)
    client = ollama.Client()
    governance = charter_ollama.govern(client, governor=gov)
    stream = client.chat(model=MODEL, messages=ASK, stream=True)
    for _ in stream:
        pass
    [verdict] = governance.verdicts(stream)
    assert verdict.call.name == "read_file" and verdict.call.id is None
    assert verdict.decision == "block"
    [message] = governance.run_tools(stream, {"read_file": lambda path: "secret"})
    assert message["role"] == "tool" and message["tool_name"] == "read_file"
    assert "no-read" in message["content"]
    assert recorded(gov)[-1]["meta"]["charter.outcome"] == "blocked"


@pytest.mark.vcr
@pytest.mark.default_cassette("errors.yaml")
def test_error_responses_are_failed_steps_with_the_clients_error(
    governor: Callable[..., charter.Governor], vcr: Any
) -> None:
    gov = governor()
    client = ollama.Client()
    charter_ollama.govern(client, governor=gov)
    codes = []
    for kwargs in (
        {"model": "llama9"},
        {"model": MODEL, "options": {"temperature": "hot"}},
        {"model": MODEL},
        {"model": MODEL},
    ):
        with pytest.raises(ollama.ResponseError) as caught:
            client.chat(messages=ASK, **kwargs)
        codes.append(caught.value.status_code)
    assert codes == [404, 400, 429, 500] and vcr.play_count == 4
    records = models(gov)
    assert [r["meta"]["charter.outcome"] for r in records] == ["failed"] * 4
    assert "not found" in records[0]["output"]["error"]["message"]


@pytest.mark.vcr
@pytest.mark.default_cassette("stream.yaml")
def test_the_async_client_streams_the_same_way(governor: Callable[..., charter.Governor]) -> None:
    gov = governor()

    async def main() -> str:
        client = ollama.AsyncClient()
        charter_ollama.govern(client, governor=gov)
        stream = await client.chat(model=MODEL, messages=ASK, stream=True)
        return "".join([c.message.content async for c in stream])

    assert asyncio.run(main()) == "Hello!"
    [rec] = models(gov)
    assert rec["properties"]["model"]["usage"]["total_tokens"] == 36


def test_govern_refuses_other_objects_and_a_second_govern(
    governor: Callable[..., charter.Governor],
) -> None:
    gov = governor()
    client = ollama.Client()
    governance = charter_ollama.govern(client, governor=gov)
    with pytest.raises(ValueError, match="governed already"):
        charter_ollama.govern(client, governor=gov)
    governance.uninstall()
    governance.uninstall()
    assert "_request" not in vars(client)
    with pytest.raises(TypeError, match=r"ollama\.Client"):
        charter_ollama.govern(object())
