"""The conformance kit on the real OpenAI SDK: the governed tool executor runs the tool call
a recorded Chat Completions response asks for (network blocked, cassette replayed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import charter
import charter_openai
import openai
import pytest
import vcr
from charter.testing import CONTRACT_TOOL, IntegrationContract, ToolRun

CASSETTE = Path(__file__).parent / "cassettes" / "chat_probe.yaml"
RECORDED_ARGS = {"target": "alpha-7", "count": 2}


class OpenAIToolLoop:
    """A raw loop: ask the model, run what it asks for through the governed executor, send
    the results back."""

    def run_tool(self, governor: charter.Governor, args: dict[str, Any], approve: bool) -> ToolRun:
        assert args == RECORDED_ARGS, "the cassette's tool call carries these arguments"
        run = ToolRun()

        def probe(**given: Any) -> str:
            run.calls.append(given)
            return "probed"

        client = openai.OpenAI(api_key="sk-test-fake-contract", max_retries=0)
        governance = charter_openai.govern(client, governor=governor)
        messages: list[Any] = [{"role": "user", "content": "Probe alpha-7 twice."}]
        try:
            with vcr.use_cassette(str(CASSETTE), record_mode="none"):
                first = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
                messages.append(first.choices[0].message.model_dump(exclude_none=True))
                results = governance.run_tools(first, {CONTRACT_TOOL: probe})
                messages.extend(results)
                client.chat.completions.create(model="gpt-4o-mini", messages=messages)
            if not run.calls:
                run.refusal = results[0]["content"]
        except Exception as exc:
            run.error = exc
        finally:
            governance.uninstall()
        return run


@pytest.mark.block_network
class TestContract(IntegrationContract):
    @pytest.fixture
    def adapter(self) -> OpenAIToolLoop:
        return OpenAIToolLoop()
