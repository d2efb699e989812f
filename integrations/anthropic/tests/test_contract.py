"""The conformance kit on the real Anthropic SDK, twice: the governed executor in a raw loop,
and the SDK's own tool runner (network blocked, cassettes replayed)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import anthropic
import charter
import charter_anthropic
import pytest
import vcr
from charter.testing import CONTRACT_TOOL, IntegrationContract, ToolRun

# Newer runners keep a server-side thread unless told not to; the cassettes hold the plain
# full-history exchange every supported version can send.
FULL_HISTORY = (
    {"thread": False}
    if "thread" in inspect.signature(anthropic.resources.beta.Messages.tool_runner).parameters
    else {}
)
CASSETTES = Path(__file__).parent / "cassettes"
RECORDED_ARGS = {"target": "alpha-7", "count": 2}
MODEL = "claude-sonnet-4-5"
MATCH_ON = ["method", "scheme", "host", "port", "path"]  # older runners add ?beta=true


class AnthropicToolLoop:
    """A raw loop: ask, run the tool_use blocks through the governed executor, answer."""

    def run_tool(self, governor: charter.Governor, args: dict[str, Any], approve: bool) -> ToolRun:
        assert args == RECORDED_ARGS, "the cassette's tool call carries these arguments"
        run = ToolRun()

        def probe(**given: Any) -> str:
            run.calls.append(given)
            return "probed"

        client = anthropic.Anthropic(api_key="sk-ant-test-fake-contract", max_retries=0)
        governance = charter_anthropic.govern(client, governor=governor)
        messages: list[Any] = [{"role": "user", "content": "Probe alpha-7 twice."}]
        try:
            with vcr.use_cassette(
                str(CASSETTES / "probe.yaml"), record_mode="none", match_on=MATCH_ON
            ):
                first = client.messages.create(model=MODEL, max_tokens=64, messages=messages)
                messages.append({"role": "assistant", "content": first.content})
                answer = governance.run_tools(first, {CONTRACT_TOOL: probe})
                messages.append(answer)
                client.messages.create(model=MODEL, max_tokens=64, messages=messages)
            if not run.calls:
                run.refusal = answer["content"][0]["content"]
        except Exception as exc:
            run.error = exc
        finally:
            governance.uninstall()
        return run


class AnthropicToolRunner:
    """The SDK runs the tool itself: `client.beta.messages.tool_runner(...)`."""

    def run_tool(self, governor: charter.Governor, args: dict[str, Any], approve: bool) -> ToolRun:
        assert args == RECORDED_ARGS
        run = ToolRun()

        @anthropic.beta_tool
        def contract_probe(target: str, count: int) -> str:
            """Probe a target."""
            run.calls.append({"target": target, "count": count})
            return "probed"

        client = anthropic.Anthropic(api_key="sk-ant-test-fake-contract", max_retries=0)
        governance = charter_anthropic.govern(client, governor=governor)
        try:
            with vcr.use_cassette(
                str(CASSETTES / "runner.yaml"), record_mode="none", match_on=MATCH_ON
            ):
                runner = client.beta.messages.tool_runner(
                    model=MODEL,
                    max_tokens=64,
                    messages=[{"role": "user", "content": "Probe alpha-7 twice."}],
                    tools=[contract_probe],
                    **FULL_HISTORY,
                )
                turns = iter(runner)
                next(turns)
                answer = runner.generate_tool_call_response()  # cached: the runner sends this
                list(turns)
            if not run.calls and answer is not None:
                # The refusal went to the model as an is_error tool result.
                run.refusal = str(answer["content"])
        except Exception as exc:
            run.error = exc
        finally:
            governance.uninstall()
        return run


@pytest.mark.block_network
class TestContract(IntegrationContract):
    @pytest.fixture
    def adapter(self) -> AnthropicToolLoop:
        return AnthropicToolLoop()


@pytest.mark.block_network
class TestToolRunnerContract(IntegrationContract):
    @pytest.fixture
    def adapter(self) -> AnthropicToolRunner:
        return AnthropicToolRunner()
