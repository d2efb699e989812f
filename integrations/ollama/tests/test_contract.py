"""The conformance kit on the real Ollama client: the governed executor runs the tool call a
recorded chat response asks for (network blocked, cassette replayed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import charter
import charter_ollama
import ollama
import pytest
import vcr
from charter.testing import CONTRACT_TOOL, IntegrationContract, ToolRun

CASSETTE = Path(__file__).parent / "cassettes" / "probe.yaml"
RECORDED_ARGS = {"target": "alpha-7", "count": 2}


class OllamaToolLoop:
    def run_tool(self, governor: charter.Governor, args: dict[str, Any], approve: bool) -> ToolRun:
        assert args == RECORDED_ARGS, "the cassette's tool call carries these arguments"
        run = ToolRun()

        def probe(**given: Any) -> str:
            run.calls.append(given)
            return "probed"

        client = ollama.Client(host="http://127.0.0.1:11434")
        governance = charter_ollama.govern(client, governor=governor)
        messages: list[Any] = [{"role": "user", "content": "Probe alpha-7 twice."}]
        try:
            with vcr.use_cassette(str(CASSETTE), record_mode="none"):
                first = client.chat(model="llama3.2", messages=messages)
                messages.append(first.message)
                results = governance.run_tools(first, {CONTRACT_TOOL: probe})
                messages.extend(results)
                client.chat(model="llama3.2", messages=messages)
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
    def adapter(self) -> OllamaToolLoop:
        return OllamaToolLoop()
