"""Model calls of governed agents: recorded as step.model with model, provider, token usage
and stop reason; judged before the call (a blocked call never reaches the model)."""

from __future__ import annotations

import charter
import pytest
from charter_llamaindex import govern
from charter_llamaindex.testing import ScriptedLLM, tool_call
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.tools import FunctionTool

from .conftest import run, steps, trail


def _lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "plain"])
def test_each_model_call_is_recorded_with_usage_and_stop_reason(governor, streaming) -> None:
    llm = ScriptedLLM(
        [tool_call("lookup_weather", {"city": "Oslo"}), "It is sunny."],
        usage={"input_tokens": 12, "output_tokens": 5},
    )
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(_lookup, name="lookup_weather")],
        llm=llm,
        system_prompt="Be brief.",
        streaming=streaming,
    )
    gov = governor([])
    with govern(agent, governor=gov):
        run(lambda: agent.run(user_msg="Weather in Oslo?"))
    models = steps(trail(gov), "step.model")
    assert len(models) == 2
    first, second = models
    assert first["step_name"] == "scripted-model"
    assert first["properties"]["model"]["name"] == "scripted-model"
    assert first["properties"]["model"]["provider"] == "MockFunctionCallingLLM"
    assert first["properties"]["model"]["tools"] == ["lookup_weather"]
    assert first["properties"]["model"]["usage"] == {
        "input_tokens": 12,
        "output_tokens": 5,
        "total_tokens": 17,
    }
    assert first["properties"]["model"]["stop_reason"] == "stop"
    roles = [m["role"] for m in first["input"]["messages"]]
    assert roles == ["system", "user"]
    assert first["output"]["message"]["tool_calls"][0]["name"] == "lookup_weather"
    # The second call is sent only what is new since the model's turn: the tool's result.
    assert [m["role"] for m in second["input"]["messages"]] == ["tool"]
    assert second["input"]["message_count"] == 4
    assert second["output"]["message"]["content"] == "It is sunny."


def test_a_blocked_model_call_never_reaches_the_model(governor) -> None:
    llm = ScriptedLLM(["hello"])
    agent = FunctionAgent(tools=[], llm=llm)
    gov = governor(
        [
            {
                "name": "no-scripted-model",
                "rule_type": "deny",
                "severity": "critical",
                "match": {"kinds": ["step.model"]},
            }
        ]
    )
    with govern(agent, governor=gov), pytest.raises(charter.BlockedError, match="no-scripted"):
        run(lambda: agent.run(user_msg="hi"))
    assert llm.calls == []
    records = trail(gov)
    models = steps(records, "step.model")
    assert [r["meta"].get("charter.outcome") for r in models] == ["blocked"]
    assert records[-1]["kind"] == "task.error"


def test_a_react_agent_is_governed_the_same_way(governor) -> None:
    ran: list[str] = []

    def lookup_weather(city: str) -> str:
        """Look up the weather of a city."""
        ran.append(city)
        return f"sunny in {city}"

    react_turns = [
        'Thought: I need the weather.\nAction: lookup_weather\nAction Input: {"city": "Oslo"}',
        "Thought: I can answer.\nAnswer: It is sunny.",
    ]
    llm = ScriptedLLM(react_turns)
    agent = ReActAgent(tools=[FunctionTool.from_defaults(lookup_weather)], llm=llm)
    gov = governor([])
    with govern(agent, governor=gov):
        result = run(lambda: agent.run(user_msg="Weather in Oslo?"))
    assert "sunny" in str(result) and ran == ["Oslo"]
    kinds = [r["kind"] for r in steps(trail(gov))]
    assert kinds == ["step.message", "step.model", "step.resource", "step.model"]


@pytest.mark.allow_internal_errors
@pytest.mark.parametrize("fail_mode", ["closed", "open"])
def test_a_model_call_charter_cannot_describe_follows_the_fail_mode(
    governor, monkeypatch, fail_mode
) -> None:
    import charter_llamaindex._translate as translate

    def broken(*args, **kwargs):
        raise RuntimeError("injected fault")

    monkeypatch.setattr(translate, "model_step", broken)
    llm = ScriptedLLM(["hello"])
    agent = FunctionAgent(tools=[], llm=llm)
    gov = governor([], fail_mode=fail_mode)
    with govern(agent, governor=gov):
        if fail_mode == "closed":
            with pytest.raises(charter.BlockedError, match="could not judge"):
                run(lambda: agent.run(user_msg="hi"))
            assert llm.calls == []
        else:
            assert str(run(lambda: agent.run(user_msg="hi"))) == "hello"


def test_a_method_patched_on_the_llm_class_later_is_the_one_called(governor, monkeypatch) -> None:
    # Another instrumentation (or a test) may wrap the LLM class's method after governance
    # was installed: a governed call must run that wrapper, not the method found first.
    class LLM(ScriptedLLM):
        pass

    llm = LLM(["first answer", "second answer"])
    agent = FunctionAgent(tools=[], llm=llm, streaming=False)
    gov = governor([])
    wrapped: list[int] = []
    with govern(agent, governor=gov):
        run(lambda: agent.run(user_msg="one"))
        original = LLM.achat

        async def counted(self, messages, **kwargs):
            wrapped.append(len(messages))
            return await original(self, messages, **kwargs)

        monkeypatch.setattr(LLM, "achat", counted)
        result = run(lambda: agent.run(user_msg="two"))
    assert str(result) == "second answer"
    assert len(wrapped) == 1
    assert len(steps(trail(gov), "step.model")) == 2


class _TunedLLM(ScriptedLLM):
    temperature: float = 0.2
    max_tokens: int | None = 256

    @property
    def top_p(self) -> float:  # a parameter a class derives instead of storing
        return 0.9


def test_a_model_calls_sampling_parameters_are_recorded(governor) -> None:
    # Fields and class-defined attributes are read; the ones the class lacks are absent,
    # not guessed (a policy on properties.model.params sees what the model runs with).
    llm = _TunedLLM(["hello"])
    agent = FunctionAgent(tools=[], llm=llm)
    gov = governor([])
    with govern(agent, governor=gov):
        run(lambda: agent.run(user_msg="hi"))
    (model,) = steps(trail(gov), "step.model")
    assert model["properties"]["model"]["params"] == {
        "temperature": 0.2,
        "max_tokens": 256,
        "top_p": 0.9,
    }
