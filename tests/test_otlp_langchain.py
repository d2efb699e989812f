"""A LangChain agent governed by CharterMiddleware, exported over OTLP to a real receiver on
loopback: the model calls and tool calls arrive as GenAI spans under the application's span,
with the decision on each and the chain's seq and hash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import charter
import charter.testing
from charter.testing import OtlpReceiver
from charter_langchain import CharterMiddleware
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, bindable to tools as create_agent needs."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self


def _turn(*calls: dict[str, Any], text: str = "") -> AIMessage:
    return AIMessage(
        content=text,
        tool_calls=list(calls),
        usage_metadata={"input_tokens": 20, "output_tokens": 4, "total_tokens": 24},
        response_metadata={"finish_reason": "tool_calls" if calls else "stop"},
    )


def test_a_langchain_agent_arrives_as_genai_spans_under_the_application_span(
    tmp_path: Path,
) -> None:
    ran: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Read the weather for a city."""
        ran.append(city)
        return f"sunny in {city}"

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    app = TracerProvider()
    app.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    with OtlpReceiver() as receiver:
        gov = charter.Governor(
            policies=[
                {
                    "name": "no-deletes",
                    "rule_type": "deny",
                    "severity": "critical",
                    "match": {"step_names": ["delete_file"]},
                }
            ],
            agent_id="weather-bot",
            audit_location=f"sqlite:///{tmp_path}/audit.db",
            otlp_endpoint=receiver.endpoint,
        )
        model = ScriptedChatModel(
            messages=iter(
                [
                    _turn(
                        {"name": "get_weather", "args": {"city": "Oslo"}, "id": "call_w"},
                        {"name": "delete_file", "args": {"path": "/etc"}, "id": "call_d"},
                    ),
                    _turn(text="It is sunny; I may not delete files."),
                ]
            )
        )
        agent = create_agent(model, [get_weather, delete_file], middleware=[CharterMiddleware(gov)])
        with app.get_tracer("app").start_as_current_span("POST /chat") as request:
            result = agent.invoke({"messages": [{"role": "user", "content": "weather?"}]})
        assert result["messages"][-1].content == "It is sunny; I may not delete files."
        assert ran == ["Oslo"]
        records = charter.testing.recorded(gov)
        assert gov.close(10)
        # task, the user's message, two model calls, two tool calls, a decision under each step
        spans = receiver.wait_for(11)
    names = sorted(s["name"] for s in spans)
    assert names == [
        "apply_guardrail Charter",
        "apply_guardrail Charter",
        "apply_guardrail Charter",
        "apply_guardrail Charter",
        "apply_guardrail Charter",
        "chat ScriptedChatModel",
        "chat ScriptedChatModel",
        "execute_tool delete_file",
        "execute_tool get_weather",
        "invoke_agent weather-bot",
        "step.message user_message",
    ]
    request_ctx = request.get_span_context()
    assert {s["trace_id"] for s in spans} == {f"{request_ctx.trace_id:032x}"}
    (task,) = [s for s in spans if s["name"].startswith("invoke_agent")]
    assert task["parent_span_id"] == f"{request_ctx.span_id:016x}"
    steps = [s for s in spans if s["name"].startswith(("chat", "execute_tool"))]
    assert {s["parent_span_id"] for s in steps} == {task["span_id"]}

    chat = [s for s in steps if s["name"].startswith("chat")]
    for span in chat:
        a = span["attributes"]
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == "ScriptedChatModel"
        assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (20, 4)
    (weather,) = [s for s in steps if s["name"] == "execute_tool get_weather"]
    (delete,) = [s for s in steps if s["name"] == "execute_tool delete_file"]
    assert weather["attributes"]["gen_ai.tool.call.id"] == "call_w"
    assert delete["attributes"]["gen_ai.tool.call.id"] == "call_d"
    assert delete["attributes"]["error.type"] == "charter.blocked"
    by_seq = {r["seq"]: r for r in records}
    for span in steps:
        record = by_seq[span["attributes"]["charter.seq"]]
        assert span["attributes"]["charter.hash"] == record["hash"]
        assert record["step_name"] in span["name"]
    (denied,) = [s for s in spans if s["parent_span_id"] == delete["span_id"]]
    assert denied["attributes"]["gen_ai.security.decision.type"] == "deny"
    assert denied["attributes"]["gen_ai.security.target.id"] == "call_d"
    assert denied["attributes"]["charter.violated_policies"] == ("no-deletes",)
    assert "gen_ai.tool.call.arguments" not in weather["attributes"]  # payloads are off
