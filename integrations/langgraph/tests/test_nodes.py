"""Node gating on real StateGraphs: allowed nodes run and are recorded, blocked nodes never
run (in both block modes), retries, failures, injection and the node mapping."""

from __future__ import annotations

import operator
from typing import Annotated, Any, NotRequired, TypedDict

import charter
import charter_langgraph
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.errors import NodeError
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.types import RetryPolicy, StreamWriter


class State(TypedDict):
    count: int
    log: Annotated[list[str], operator.add]
    charter_blocked: NotRequired[str]


def pipeline(ran: list[str], **mapping: Any) -> StateGraph:
    """fetch -> charge -> ship, each node noting that its body ran."""

    def fetch(state: State) -> dict[str, Any]:
        ran.append("fetch")
        return {"count": state["count"] + 1, "log": ["fetched"]}

    def charge(state: State) -> dict[str, Any]:
        ran.append("charge")
        return {"count": state["count"] * 10, "log": ["charged"]}

    def ship(state: State) -> dict[str, Any]:
        ran.append("ship")
        return {"log": ["shipped"]}

    builder = StateGraph(State)
    builder.add_node("fetch", fetch)
    builder.add_node("charge", charge, **mapping)
    builder.add_node("ship", ship)
    builder.add_edge(START, "fetch")
    builder.add_edge("fetch", "charge")
    builder.add_edge("charge", "ship")
    builder.add_edge("ship", END)
    return builder


def test_allowed_nodes_run_and_each_is_one_recorded_step(settings, governors, trail, lg):
    ran: list[str] = []
    graph = charter_langgraph.govern(pipeline(ran), **settings).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = graph.invoke({"count": 1, "log": []})

    assert out["count"] == 20 and ran == ["fetch", "charge", "ship"]
    records = trail()
    assert lg.steps(records) == [
        ("task.start", "LangGraph", None),
        ("step.exec", "fetch", "ok"),
        ("step.exec", "charge", "ok"),
        ("step.exec", "ship", "ok"),
        ("task.end", "LangGraph", None),
    ]
    fetch = records[1]
    assert fetch["input"] == {"count": 1, "log": []}
    assert fetch["output"] == {"count": 2, "log": ["fetched"]}
    assert fetch["properties"]["framework"] == {"name": "langgraph", "node": "fetch", "step": 1}
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5]


def test_block_ends_the_run_cleanly_with_the_reason_in_state(settings, governors, trail, lg):
    ran: list[str] = []
    builder = pipeline(ran, metadata={"charter": ("step.resource", "DELETE")})
    graph = charter_langgraph.govern(builder, **settings).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = graph.invoke({"count": 1, "log": []})

    # The blocked body never ran, and neither did anything after it (its static edge too).
    assert ran == ["fetch"]
    assert out["count"] == 2
    assert "deletes are not allowed" in out["charter_blocked"]
    records = trail()
    assert lg.steps(records) == [
        ("task.start", "LangGraph", None),
        ("step.exec", "fetch", "ok"),
        ("step.resource", "charge", "blocked"),
        ("task.end", "LangGraph", None),
    ]
    assert records[2]["verb"] == "DELETE"
    assert "charge: blocked by policy 'no-deletes'" in records[3]["output"]["langgraph"]["blocked"]


def test_block_in_a_loop_with_conditional_edges_stops_the_loop(settings, governors, trail, lg):
    bodies: list[str] = []

    def think(state: State) -> dict[str, Any]:
        bodies.append("think")
        return {"count": state["count"] + 1}

    def act(state: State) -> dict[str, Any]:
        bodies.append("act")
        return {"log": ["acted"]}

    builder = StateGraph(State)
    builder.add_node("think", think)
    builder.add_node("act", act)
    builder.add_edge(START, "think")
    builder.add_conditional_edges("think", lambda s: "act" if s["count"] < 5 else END)
    builder.add_edge("act", "think")
    graph = charter_langgraph.govern(
        builder, nodes={"act": ("step.resource", "DELETE")}, **settings
    ).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = graph.invoke({"count": 0, "log": []})

    assert bodies == ["think"]
    assert out["log"] == [] and "deletes" in out["charter_blocked"]
    assert [s[1] for s in lg.steps(trail())] == ["LangGraph", "think", "act", "LangGraph"]


def test_block_can_raise_a_permission_error_instead(settings, governors, trail, lg):
    ran: list[str] = []
    builder = pipeline(ran)
    graph = charter_langgraph.govern(
        builder, nodes={"charge": ("step.resource", "DELETE")}, on_block="raise", **settings
    ).compile()
    governors.append(charter_langgraph.governor_of(graph))

    with pytest.raises(charter.BlockedError) as caught:
        graph.invoke({"count": 1, "log": []})

    assert isinstance(caught.value, PermissionError)
    assert "deletes are not allowed" in caught.value.reason
    assert ran == ["fetch"]
    records = trail()
    assert lg.steps(records)[-2:] == [
        ("step.resource", "charge", "blocked"),
        ("task.error", "LangGraph", None),
    ]
    assert records[-1]["output"]["error"]["type"] == "BlockedError"


def test_retry_policy_never_retries_a_block_but_retries_plain_errors(
    settings, governors, trail, lg
):
    class Flaky(Exception):
        pass

    attempts: list[str] = []

    def flaky(state: State) -> dict[str, Any]:
        attempts.append("flaky")
        if len(attempts) < 3:
            raise Flaky(f"attempt {len(attempts)}")
        return {"count": 7}

    def delete(state: State) -> dict[str, Any]:
        attempts.append("delete")
        return {}

    retry = RetryPolicy(max_attempts=3, initial_interval=0.0, jitter=False)
    builder = StateGraph(State)
    builder.add_node("flaky", flaky, retry_policy=retry)
    builder.add_node("delete", delete, retry_policy=retry)
    builder.add_edge(START, "flaky")
    builder.add_edge("flaky", "delete")
    graph = charter_langgraph.govern(
        builder, nodes={"delete": ("step.resource", "DELETE")}, on_block="raise", **settings
    ).compile()
    governors.append(charter_langgraph.governor_of(graph))

    with pytest.raises(charter.BlockedError):
        graph.invoke({"count": 0, "log": []})

    assert attempts == ["flaky", "flaky", "flaky"]
    records = trail()
    assert lg.steps(records)[1:] == [
        ("step.exec", "flaky", "failed"),
        ("step.exec", "flaky", "failed"),
        ("step.exec", "flaky", "ok"),
        ("step.resource", "delete", "blocked"),  # once: the block was not retried
        ("task.error", "LangGraph", None),
    ]
    assert records[1]["output"]["error"] == {"type": "Flaky", "message": "attempt 1"}


def test_a_failing_node_is_recorded_failed_and_the_run_as_task_error(
    settings, governors, trail, lg
):
    def boom(state: State) -> dict[str, Any]:
        raise KeyError("missing")

    builder = StateGraph(State)
    builder.add_node("boom", boom)
    builder.add_edge(START, "boom")
    graph = charter_langgraph.govern(builder, **settings).compile()
    governors.append(charter_langgraph.governor_of(graph))

    with pytest.raises(KeyError):
        graph.invoke({"count": 0, "log": []})

    records = trail()
    assert lg.steps(records) == [
        ("task.start", "LangGraph", None),
        ("step.exec", "boom", "failed"),
        ("task.error", "LangGraph", None),
    ]
    assert records[-1]["output"]["error"]["type"] == "KeyError"


def test_an_error_handler_recovers_and_the_run_ends_normally(settings, governors, trail, lg):
    def boom(state: State) -> dict[str, Any]:
        raise RuntimeError("down")

    def recover(state: State, error: NodeError) -> dict[str, Any]:
        return {"log": [f"recovered from {type(error.error).__name__}"]}

    builder = StateGraph(State)
    builder.add_node("boom", boom, error_handler=recover)
    builder.add_edge(START, "boom")
    graph = charter_langgraph.govern(builder, **settings).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = graph.invoke({"count": 0, "log": []})

    assert out["log"] == ["recovered from RuntimeError"]
    kinds = lg.steps(trail())
    assert kinds[1] == ("step.exec", "boom", "failed")
    assert kinds[2] == ("step.exec", "__error_handler__boom", "ok")
    assert kinds[-1] == ("task.end", "LangGraph", None)


def test_config_runtime_store_and_writer_are_still_injected(settings, governors, trail):
    seen: dict[str, Any] = {}

    def node(
        state: State,
        config: RunnableConfig,
        runtime: Runtime[Any],
        store: BaseStore,
        writer: StreamWriter,
    ) -> dict[str, Any]:
        seen["thread"] = config["configurable"]["thread_id"]
        seen["runtime_store"] = runtime.store is store
        store.put(("notes",), "n1", {"text": "kept"})
        writer({"progress": "half"})
        get_stream_writer()({"progress": "done"})
        return {"count": 1}

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    store = InMemoryStore()
    graph = charter_langgraph.govern(builder, **settings).compile(
        checkpointer=InMemorySaver(), store=store
    )
    governors.append(charter_langgraph.governor_of(graph))

    chunks = list(
        graph.stream(
            {"count": 0, "log": []},
            {"configurable": {"thread_id": "inject"}},
            stream_mode=["custom", "values"],
        )
    )

    assert seen == {"thread": "inject", "runtime_store": True}
    assert ("custom", {"progress": "half"}) in chunks
    assert ("custom", {"progress": "done"}) in chunks
    assert store.get(("notes",), "n1").value == {"text": "kept"}
    assert [r["step_name"] for r in trail()][1] == "node"


def test_nodes_added_after_govern_are_governed_too(settings, governors, trail, lg):
    ran: list[str] = []
    builder = StateGraph(State)
    handle = charter_langgraph.govern(builder, **settings)
    assert handle.builder is builder and isinstance(builder, StateGraph)

    def late(state: State) -> dict[str, Any]:
        ran.append("late")
        return {}

    builder.add_node(
        "late", late, metadata={"charter": {"kind": "step.resource", "verb": "DELETE"}}
    )
    builder.add_edge(START, "late")
    graph = handle.compile()
    governors.append(charter_langgraph.governor_of(graph))

    graph.invoke({"count": 0, "log": []})

    assert ran == []
    assert lg.steps(trail())[1] == ("step.resource", "late", "blocked")


def test_node_mapping_is_checked_when_the_graph_is_governed(settings):
    builder = pipeline([])
    with pytest.raises(ValueError, match=r"step\.resource needs a verb"):
        charter_langgraph.govern(builder, nodes={"charge": "step.resource"}, **settings)
    with pytest.raises(ValueError, match=r"did you mean step\.resource"):
        charter_langgraph.govern(builder, nodes={"charge": ("step.resorce", "POST")}, **settings)
    with pytest.raises(ValueError, match=r"does not take verb"):
        charter_langgraph.govern(builder, nodes={"charge": ("step.exec", "POST")}, **settings)
    governed = charter_langgraph.govern(
        builder, nodes={"chrage": ("step.resource", "POST")}, **settings
    )
    with pytest.raises(ValueError, match="did you mean 'charge'"):
        governed.compile()
    with pytest.raises(ValueError, match="governed already"):
        charter_langgraph.govern(builder, **settings)
    charter_langgraph.governor_of(governed).close()


def test_large_outputs_are_recorded_with_truncation_markers(settings, governors, trail):
    def big(state: State) -> dict[str, Any]:
        return {"log": ["x" * 50_000] + [str(i) for i in range(1_000)]}

    builder = StateGraph(State)
    builder.add_node("big", big)
    builder.add_node("after", lambda state: {})
    builder.add_edge(START, "big")
    builder.add_edge("big", "after")
    # Outputs are cut at the Governor's output limits; inputs (what policies judge) never.
    limits = {"max_output_chars": 16_384, "max_output_items": 500}
    graph = charter_langgraph.govern(builder, **limits, **settings).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = graph.invoke({"count": 0, "log": []})

    assert len(out["log"]) == 1_001  # the graph's own value is untouched
    records = trail()
    recorded = records[1]["output"]["log"]
    assert recorded[0].endswith("…[truncated 33616 chars]")
    assert recorded[-1] == "…[501 more items]"
    assert records[2]["step_name"] == "after"
    assert records[2]["input"]["log"] == ["x" * 50_000] + [str(i) for i in range(1_000)]


def test_a_governed_subgraph_joins_its_parents_task(settings, governors, trail, lg):
    ran: list[str] = []

    def inner_step(state: State) -> dict[str, Any]:
        ran.append("inner")
        return {"log": ["inner"]}

    governor = charter.Governor(**settings)
    governors.append(governor)
    sub = StateGraph(State)
    sub.add_node("inner_step", inner_step)
    sub.add_edge(START, "inner_step")
    subgraph = charter_langgraph.govern(sub, governor=governor).compile()

    parent = StateGraph(State)
    parent.add_node("sub", subgraph)
    parent.add_edge(START, "sub")
    graph = charter_langgraph.govern(parent, governor=governor).compile(
        checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "nested"}}

    graph.invoke({"count": 0, "log": []}, config)

    assert ran == ["inner"]
    # LangGraph still sees the node's subgraph through the gate's wrapper.
    assert graph.nodes["sub"].subgraphs == [subgraph]
    assert graph.get_state(config, subgraphs=True).values["log"] == ["inner"]
    assert lg.steps(trail()) == [
        ("task.start", "LangGraph", None),
        ("step.exec", "inner_step", "ok"),
        ("step.exec", "sub", "ok"),
        ("task.end", "LangGraph", None),
    ]


def test_without_usable_policies_nothing_runs(tmp_path, audit, governors, trail, lg):
    ran: list[str] = []
    # A file that does not exist is refused when built; one that cannot be used blocks.
    broken = tmp_path / "broken.yaml"
    broken.write_text("policies: [\n")
    graph = charter_langgraph.govern(
        pipeline(ran),
        policy_file=str(broken),
        agent_id="graph-bot",
        audit_location=audit,
    ).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = graph.invoke({"count": 1, "log": []})

    assert ran == []
    assert "fail_mode is closed" in out["charter_blocked"]
    assert lg.steps(trail())[1] == ("step.exec", "fetch", "blocked")


@pytest.mark.allow_internal_errors  # reported, and the node refused (fail_mode closed)
def test_an_error_inside_the_gate_refuses_the_node(settings, governors, trail, monkeypatch):
    ran: list[str] = []
    graph = charter_langgraph.govern(pipeline(ran), on_block="raise", **settings).compile()
    governor = charter_langgraph.governor_of(graph)
    governors.append(governor)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("gate exploded")

    monkeypatch.setattr(governor, "build_step", broken)
    with pytest.raises(charter.BlockedError, match=r"Charter could not judge step\.exec 'fetch'"):
        graph.invoke({"count": 1, "log": []})

    assert ran == []


def test_a_stream_read_to_the_end_closes_the_task_once(settings, governors, trail, lg):
    ran: list[str] = []
    graph = charter_langgraph.govern(pipeline(ran), **settings).compile()
    governors.append(charter_langgraph.governor_of(graph))

    chunks = list(graph.stream({"count": 1, "log": []}, stream_mode="updates"))

    assert [next(iter(c)) for c in chunks] == ["fetch", "charge", "ship"]
    kinds = [k for k, _, _ in lg.steps(trail())]
    assert kinds.count("task.start") == 1 and kinds.count("task.end") == 1


def test_uninstall_detaches_charter_from_the_builder_and_its_graphs(settings, trail, lg):
    ran: list[str] = []
    builder = pipeline(ran, metadata={"charter": ("step.resource", "DELETE")})
    with charter_langgraph.govern(builder, **settings) as handle:
        governed = handle.compile(checkpointer=InMemorySaver())
        assert charter_langgraph.governor_of(governed) is handle.governor
        out = governed.invoke({"count": 1, "log": []}, {"configurable": {"thread_id": "u"}})
        assert ran == ["fetch"] and "deletes" in out["charter_blocked"]
        assert repr(handle) == "<charter_langgraph.Governance of StateGraph: installed>"
    handle.uninstall()  # idempotent; the Governor govern() built is closed

    # The graph compiled while governed and the builder itself now run ungoverned.
    governed.invoke({"count": 1, "log": []}, {"configurable": {"thread_id": "u2"}})
    builder.compile().invoke({"count": 1, "log": []})
    assert ran == ["fetch", "fetch", "charge", "ship", "fetch", "charge", "ship"]
    assert type(builder) is StateGraph
    with pytest.raises(ValueError, match="not governed"):
        charter_langgraph.governor_of(builder)
    assert lg.steps(trail()) == [
        ("task.start", "LangGraph", None),
        ("step.exec", "fetch", "ok"),
        ("step.resource", "charge", "blocked"),
        ("task.end", "LangGraph", None),
    ]
    # ...and the builder can be governed again.
    again = charter_langgraph.govern(builder, **settings)
    again.uninstall()


def test_uninstall_closes_a_paused_run_as_unfinished(settings, governors, trail, lg):
    ran: list[str] = []
    builder = pipeline(ran, metadata={"charter": ("step.resource", "POST")})
    governor = charter.Governor(
        policies=[
            {
                "name": "ask",
                "rule_type": "deny",
                "severity": "high",
                "action": "ask",
                "match": {"kinds": ["step.resource"]},
            }
        ],
        agent_id="graph-bot",
        audit_location=settings["audit_location"],
    )
    governors.append(governor)
    handle = charter_langgraph.govern(builder, governor=governor)
    graph = handle.compile(checkpointer=InMemorySaver())
    paused = graph.invoke({"count": 1, "log": []}, {"configurable": {"thread_id": "p"}})
    assert paused["__interrupt__"] and ran == ["fetch"]

    handle.uninstall()  # a Governor passed in stays open

    records = trail()
    assert lg.steps(records)[-1] == ("task.error", "LangGraph", None)
    assert records[-1]["output"]["error"]["type"] == "RunNotFinishedError"
    governor.end_task(governor.start_task(name="still usable"))
