"""CharterCallbackHandler on real LangChain runnables: every sync/async combination that can
block does, blocked steps never run, outcomes (usage, streams, errors) are recorded."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import charter
import pytest
from charter_langchain import BlockedStepError, CharterCallbackHandler
from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import ToolException, tool


def _cfg(handler: Any) -> dict[str, Any]:
    return {"callbacks": [handler]}


# -- tools: the four sync/async combinations -------------------------------------------------


@pytest.mark.parametrize(
    ("tool_name", "mode"),
    [
        ("delete_file", "invoke"),  # sync tool, sync run
        ("delete_file", "ainvoke"),  # sync tool under ainvoke (runs in an executor)
        ("remove_file", "ainvoke"),  # async tool, async run
        ("delete_file", "nested-async"),  # sync tool inside an async chain
    ],
)
def test_blocked_tool_never_runs_in_every_sync_async_combination(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str], tool_name: str, mode: str
) -> None:
    gov, audit = make_governor([h.deny("no-deletes", step_names=["delete_file", "remove_file"])])
    handler = CharterCallbackHandler(gov)
    target = tools[tool_name]
    with pytest.raises(BlockedStepError) as caught:
        if mode == "invoke":
            target.invoke({"path": "/etc"}, config=_cfg(handler))
        elif mode == "ainvoke":
            asyncio.run(target.ainvoke({"path": "/etc"}, config=_cfg(handler)))
        else:
            chain = RunnableLambda(lambda x: x) | target
            asyncio.run(chain.ainvoke({"path": "/etc"}, config=_cfg(handler)))
    assert isinstance(caught.value, charter.BlockedError)
    assert "no-deletes" in caught.value.reason
    assert ran[tool_name] == 0
    blocked = audit.steps("step.resource")
    assert [(r["step_name"], audit.outcome(r)) for r in blocked] == [(tool_name, "blocked")]
    assert blocked[0]["verb"] == "DELETE" and blocked[0]["input"] == {"path": "/etc"}
    (task,) = audit.tasks()
    assert task[-1]["kind"] == "task.error"
    assert task[-1]["output"]["error"]["type"] == "BlockedStepError"
    audit.verify()


def test_allowed_tool_runs_and_its_output_is_recorded(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    gov, audit = make_governor([h.deny("no-deletes", step_names=["delete_file"])])
    handler = CharterCallbackHandler(gov)
    assert tools["get_weather"].invoke({"city": "Oslo"}, config=_cfg(handler)) == "sunny in Oslo"
    assert asyncio.run(tools["get_forecast"].ainvoke({"city": "Rome"}, config=_cfg(handler)))
    assert ran == Counter({"get_weather": 1, "get_forecast": 1})
    steps = audit.steps()
    assert [(s["kind"], s["verb"], s["step_name"]) for s in steps] == [
        ("step.resource", "GET", "get_weather"),
        ("step.resource", "GET", "get_forecast"),
    ]
    assert steps[0]["output"] == {"content": "sunny in Oslo"}
    assert steps[0]["properties"]["tool"]["effect"] == "read_only"
    assert len(audit.tasks()) == 2  # one task per root run
    audit.verify()


def test_tool_errors_are_recorded_as_failures_with_their_type(
    h: Any,
    make_governor: Any,
) -> None:
    gov, audit = make_governor()
    handler = CharterCallbackHandler(gov)

    @tool
    def flaky_lookup(key: str) -> str:
        """Look a key up."""
        raise KeyError(key)

    @tool
    def fussy_lookup(key: str) -> str:
        """Look a key up, reporting failures to the model."""
        raise ToolException(f"no such key {key}")

    fussy_lookup.handle_tool_error = True

    with pytest.raises(KeyError):
        flaky_lookup.invoke({"key": "a"}, config=_cfg(handler))
    # Called as a tool call (as agents do), a handled error comes back as status="error".
    answer = fussy_lookup.invoke(h.call("fussy_lookup", key="b"), config=_cfg(handler))
    assert (answer.content, answer.status) == ("no such key b", "error")
    failed = audit.steps()
    assert [(s["step_name"], audit.outcome(s), s["output"]["error"]["type"]) for s in failed] == [
        ("flaky_lookup", "failed", "KeyError"),
        ("fussy_lookup", "failed", "ToolException"),
    ]
    tasks = audit.tasks()
    assert [t[-1]["kind"] for t in tasks] == ["task.error", "task.end"]
    audit.verify()


# -- models -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "stream", "astream"])
def test_blocked_model_call_never_reaches_the_model(h: Any, make_governor: Any, mode: str) -> None:
    gov, audit = make_governor([h.deny("no-models", kinds=["step.model"])])
    handler = CharterCallbackHandler(gov)
    model = h.scripted(h.ai(text="never"))

    async def consume_async() -> None:
        if mode == "ainvoke":
            await model.ainvoke("hi", config=_cfg(handler))
        else:
            async for _ in model.astream("hi", config=_cfg(handler)):
                pass

    with pytest.raises(BlockedStepError):
        if mode == "invoke":
            model.invoke("hi", config=_cfg(handler))
        elif mode == "stream":
            list(model.stream("hi", config=_cfg(handler)))
        else:
            asyncio.run(consume_async())
    assert model.calls == 0
    (step,) = audit.steps("step.model")
    assert audit.outcome(step) == "blocked"
    assert step["input"]["messages"] == [{"role": "user", "content": "hi"}]
    audit.verify()


def test_model_call_records_provider_usage_and_stop_reason(h: Any, make_governor: Any) -> None:
    gov, audit = make_governor()
    handler = CharterCallbackHandler(gov)
    model = h.scripted(h.ai(text="hello there", tokens=40))
    model.invoke("hi", config=_cfg(handler))
    (step,) = audit.steps("step.model")
    assert step["step_name"] == "ScriptedChatModel"
    assert step["properties"]["model"]["provider"] == "scriptedchatmodel"
    assert step["properties"]["model"]["usage"] == {
        "input_tokens": 40,
        "output_tokens": 20,
        "total_tokens": 60,
    }
    assert step["properties"]["model"]["stop_reason"] == "stop"
    assert step["output"]["messages"][0]["content"] == "hello there"
    audit.verify()


@pytest.mark.parametrize("mode", ["stream", "astream"])
def test_streamed_model_output_is_recorded_whole(h: Any, make_governor: Any, mode: str) -> None:
    gov, audit = make_governor()
    handler = CharterCallbackHandler(gov)
    model = h.scripted(h.ai(text="streamed in four words", tokens=8))
    if mode == "stream":
        chunks = list(model.stream("hi", config=_cfg(handler)))
    else:

        async def collect() -> list[Any]:
            return [c async for c in model.astream("hi", config=_cfg(handler))]

        chunks = asyncio.run(collect())
    assert "".join(str(c.content) for c in chunks) == "streamed in four words"
    assert len(chunks) >= 4
    (step,) = audit.steps("step.model")
    assert step["output"]["messages"][0]["content"] == "streamed in four words"
    assert step["properties"]["model"]["usage"]["total_tokens"] == 12
    audit.verify()


def test_a_history_kept_as_streamed_chunks_is_recorded_by_role(h: Any, make_governor: Any) -> None:
    # A loop that streams and keeps the merged chunks passes AIMessageChunk (and
    # ToolMessageChunk) back to the model: they are the assistant's and the tool's turns,
    # and only the messages after the assistant's last turn are new to the trail.
    from langchain_core.messages import AIMessageChunk, HumanMessage, ToolMessageChunk

    gov, audit = make_governor()
    handler = CharterCallbackHandler(gov)
    model = h.scripted(h.ai(text="it is sunny"))
    asked = AIMessageChunk(
        content="",
        tool_call_chunks=[
            {"name": "get_weather", "args": '{"city": "Oslo"}', "id": "call_9", "index": 0}
        ],
    )
    history = [
        HumanMessage(content="weather in Oslo?"),
        asked,
        ToolMessageChunk(content="no data", tool_call_id="call_9", status="error"),
    ]
    model.invoke(history, config=_cfg(handler))
    (step,) = audit.steps("step.model")
    assert step["input"]["messages"] == [
        {"role": "tool", "content": "no data", "tool_call_id": "call_9", "status": "error"}
    ]
    assert step["input"]["message_count"] == 3
    audit.verify()


def test_model_errors_are_recorded_as_failures(h: Any, make_governor: Any) -> None:
    gov, audit = make_governor()
    handler = CharterCallbackHandler(gov)
    model = h.scripted()  # nothing scripted: the fake raises StopIteration-derived errors
    with pytest.raises(Exception) as caught:
        model.invoke("hi", config=_cfg(handler))
    (step,) = audit.steps("step.model")
    assert audit.outcome(step) == "failed"
    assert step["output"]["error"]["type"] == type(caught.value).__name__
    audit.verify()


def test_completion_llm_is_blocked_under_ainvoke_even_beside_an_inline_handler(
    h: Any,
    make_governor: Any,
) -> None:
    """LangChain's async `on_llm_start` skips every non-inline handler once an inline one
    (LangSmith's tracer, LangGraph's stream handlers) is present; the gate is inline."""

    class Inline(BaseCallbackHandler):
        run_inline = True

    class Bystander(BaseCallbackHandler):
        def __init__(self) -> None:
            self.starts = 0

        def on_llm_start(self, *args: Any, **kwargs: Any) -> None:
            self.starts += 1

    gov, audit = make_governor([h.deny("no-models", kinds=["step.model"])])
    bystander = Bystander()
    llm = FakeListLLM(responses=["never"])
    config = {"callbacks": [Inline(), bystander, CharterCallbackHandler(gov)]}
    with pytest.raises(BlockedStepError):
        asyncio.run(llm.ainvoke("hi", config=config))
    assert bystander.starts == 0  # the hazard: a non-inline gate would have been skipped
    (step,) = audit.steps("step.model")
    assert step["input"] == {"prompts": ["hi"]} and audit.outcome(step) == "blocked"


def test_an_async_handler_cannot_block_on_the_sync_path(
    tools: dict[str, Any], ran: Counter[str]
) -> None:
    """Why the handler is sync: LangChain swallows an AsyncCallbackHandler's error on the
    sync path whatever raise_error says, and the tool runs."""

    class AsyncGate(AsyncCallbackHandler):
        raise_error = True

        async def on_tool_start(self, *args: Any, **kwargs: Any) -> None:
            raise PermissionError("blocked")

    tools["delete_file"].invoke({"path": "/tmp/x"}, config={"callbacks": [AsyncGate()]})
    assert ran["delete_file"] == 1


# -- retrievers, chains, agents ---------------------------------------------------------------


class _Docs(BaseRetriever):
    reads: int = 0

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        self.reads += 1
        return [Document(page_content=f"about {query}", metadata={"source": "kb"})]


def test_retriever_is_a_resource_read(h: Any, make_governor: Any) -> None:
    gov, audit = make_governor([h.deny("no-kb", step_names=["secret_docs"])])
    handler = CharterCallbackHandler(gov)
    docs = _Docs()
    assert docs.invoke("refunds", config=_cfg(handler))[0].page_content == "about refunds"
    (step,) = audit.steps()
    assert (step["kind"], step["verb"], step["input"]) == (
        "step.resource",
        "GET",
        {"query": "refunds"},
    )
    assert step["output"]["count"] == 1
    secret = _Docs()
    with pytest.raises(BlockedStepError):
        secret.invoke("salaries", config={"callbacks": [handler], "run_name": "secret_docs"})
    assert secret.reads == 0
    audit.verify()


def test_one_task_per_root_run_with_steps_linked_by_parent(
    h: Any, make_governor: Any, tools: dict[str, Any]
) -> None:
    gov, audit = make_governor()
    handler = CharterCallbackHandler(gov)
    model = h.scripted(h.ai(text="it is sunny"))
    weather = tools["get_weather"]
    chain = RunnableLambda(lambda q: weather.invoke({"city": q})) | RunnableLambda(
        lambda text: model.invoke(text)
    )
    chain.invoke("Oslo", config=_cfg(handler))
    (task,) = audit.tasks()
    assert [r["kind"] for r in task] == ["task.start", "step.resource", "step.model", "task.end"]
    root = task[0]["task_id"]
    assert all(r["properties"].get("framework", {}).get("parent_run_id") for r in task[1:3])
    assert task[1]["properties"]["framework"]["run_id"] != root
    audit.verify()


def test_chains_can_be_governed_too(h: Any, make_governor: Any) -> None:
    gov, audit = make_governor([h.deny("no-purge", step_names=["purge_cache"])])
    handler = CharterCallbackHandler(gov, chains=True)
    purged = Counter[str]()

    def purge(x: Any) -> Any:
        purged["purge"] += 1
        return x

    chain = RunnableLambda(lambda x: x).with_config(run_name="get_user") | RunnableLambda(
        purge
    ).with_config(run_name="purge_cache")
    with pytest.raises(BlockedStepError):
        chain.invoke({"user": "ann"}, config=_cfg(handler))
    assert purged["purge"] == 0
    steps = audit.steps()
    assert [(s["step_name"], audit.outcome(s)) for s in steps] == [
        ("get_user", "ok"),
        ("purge_cache", "blocked"),
    ]


def test_agent_without_middleware_is_governed_by_the_handler(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    """A callback block aborts the whole agent run (no graceful refusal): the middleware
    exists for that. The blocked tool still never runs."""
    gov, audit = make_governor([h.deny("no-deletes", step_names=["delete_file"])])
    handler = CharterCallbackHandler(gov)
    model = h.scripted(
        h.ai(h.call("get_weather", city="Oslo")),
        h.ai(h.call("delete_file", path="/etc")),
        h.ai(text="done"),
    )
    agent = create_agent(model, [tools["get_weather"], tools["delete_file"]])
    with pytest.raises(BlockedStepError):
        agent.invoke({"messages": [{"role": "user", "content": "go"}]}, config=_cfg(handler))
    assert ran == Counter({"get_weather": 1})
    (task,) = audit.tasks()
    kinds = [(r["kind"], r["step_name"], r["meta"].get("charter.outcome", "-")) for r in task]
    assert kinds[1:-1] == [
        ("step.message", "user_message", "ok"),
        ("step.model", "ScriptedChatModel", "ok"),
        ("step.resource", "get_weather", "ok"),
        ("step.model", "ScriptedChatModel", "ok"),
        ("step.resource", "delete_file", "blocked"),
    ]
    assert task[-1]["kind"] == "task.error"
    audit.verify()


def test_ask_goes_to_the_governors_approver(
    make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    policies = [
        {
            "name": "mail-needs-approval",
            "rule_type": "deny",
            "severity": "high",
            "action": "ask",
            "match": {"step_names": ["send_email"]},
            "params": {"reason": "mail goes out"},
        }
    ]
    answers = iter([True, False])
    gov, audit = make_governor(policies)
    gov.approver = charter.callback_approver(lambda request: next(answers), by="ops")
    handler = CharterCallbackHandler(gov)
    mail = tools["send_email"]
    assert mail.invoke({"to": "a@example.com", "body": "hi"}, config=_cfg(handler))
    with pytest.raises(BlockedStepError, match="approval denied by ops"):
        mail.invoke({"to": "b@example.com", "body": "hi"}, config=_cfg(handler))
    assert ran["send_email"] == 1
    gates = audit.steps("step.gate")
    assert [g["output"]["decision"] for g in gates] == ["pass", "deny"]
    assert gates[0]["properties"]["gate"]["digest"] == charter.canonical_digest(
        {"to": "a@example.com", "body": "hi"}
    )
    audit.verify()


@pytest.mark.allow_internal_errors
def test_an_error_inside_charter_blocks_the_step(
    make_governor: Any, tools: dict[str, Any], ran: Counter[str], monkeypatch: Any
) -> None:
    gov, _ = make_governor()
    handler = CharterCallbackHandler(gov)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(gov, "build_step", broken)
    with pytest.raises(BlockedStepError, match=r"could not judge .*engine exploded"):
        tools["delete_file"].invoke({"path": "/tmp/x"}, config=_cfg(handler))
    assert ran["delete_file"] == 0


@pytest.mark.allow_internal_errors
def test_a_recording_failure_never_reaches_the_agent(
    make_governor: Any, tools: dict[str, Any], monkeypatch: Any
) -> None:
    gov, _ = make_governor()
    handler = CharterCallbackHandler(gov)

    def broken(self: Any, output: Any = None) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(charter.StepHandle, "complete", broken)
    assert tools["get_weather"].invoke({"city": "Oslo"}, config=_cfg(handler)) == "sunny in Oslo"


def test_the_gate_cannot_be_switched_off() -> None:
    handler = CharterCallbackHandler(policies=[], audit_location="none")
    assert handler.raise_error is True and handler.run_inline is True
    with pytest.raises(AttributeError):
        handler.raise_error = False  # type: ignore[misc]
    with pytest.raises(AttributeError):
        handler.run_inline = False  # type: ignore[misc]
    handler.governor.close()


def test_constructor_refusals(make_governor: Any) -> None:
    gov, _ = make_governor()
    with pytest.raises(ValueError, match="either governor= or setting keywords"):
        CharterCallbackHandler(gov, agent_id="other")
    with pytest.raises(ValueError, match="unknown setting"):
        CharterCallbackHandler(policies=[], polcy_file="x.yaml")


def test_a_claim_inherited_in_run_metadata_is_honoured(
    make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    """A framework that hands child runs its metadata (and not the context) still keeps the
    handler from recording a step it governs itself, and nested steps join its task."""
    gov, audit = make_governor()
    handler = CharterCallbackHandler(gov)
    with gov.task("outer"):
        claim = charter.integration.Claim("tool", None, "get_weather", gov, "outer")
        config = {**_cfg(handler), "metadata": claim.metadata()}
        tools["get_weather"].invoke({"city": "Oslo"}, config=config)
    assert ran["get_weather"] == 1
    (task,) = audit.tasks()
    assert [r["kind"] for r in task] == ["task.start", "task.end"]  # nothing recorded twice
