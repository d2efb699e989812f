"""A `policy_file` that does not exist when a Governor or an integration is built is refused
right there, naming the path; one that disappears later is a load problem (fail closed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import charter
import charter_crewai
import charter_langgraph
import charter_llamaindex
import pytest
from charter.testing import charter_internal_errors  # noqa: F401  (autouse)
from charter_langchain import CharterCallbackHandler, CharterMiddleware
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict


class _State(TypedDict):
    n: int


def _graph() -> Any:
    builder = StateGraph(_State)
    builder.add_node("step", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "step")
    return builder


def _crew() -> Any:
    from crewai import Agent, Crew, Task

    agent = Agent(role="r", goal="g", backstory="b", llm="gpt-4o-mini")
    return Crew(agents=[agent], tasks=[Task(description="d", expected_output="e", agent=agent)])


def _agent() -> Any:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.llms.mock import MockFunctionCallingLLM

    return FunctionAgent(tools=[], llm=MockFunctionCallingLLM())


BUILDERS: dict[str, Callable[..., Any]] = {
    "Governor": lambda **kw: charter.Governor(**kw),
    "Gate": lambda **kw: charter.integration.Gate("test", **kw),
    "CharterCallbackHandler": lambda **kw: CharterCallbackHandler(**kw),
    "CharterMiddleware": lambda **kw: CharterMiddleware(**kw),
    "charter_langgraph.govern": lambda **kw: charter_langgraph.govern(_graph(), **kw),
    "charter_crewai.govern": lambda **kw: charter_crewai.govern(_crew(), **kw),
    "charter_llamaindex.govern": lambda **kw: charter_llamaindex.govern(_agent(), **kw),
    "charter_llamaindex.govern_tools": lambda **kw: charter_llamaindex.govern_tools([], **kw),
}


@pytest.mark.parametrize("build", BUILDERS.values(), ids=list(BUILDERS))
def test_a_mistyped_policy_file_is_refused_when_built(
    build: Callable[..., Any], tmp_path: Path
) -> None:
    typo = tmp_path / "polcies.yaml"
    with pytest.raises(ValueError, match="does not exist") as raised:
        build(policy_file=str(typo), audit_location=f"jsonl:///{tmp_path / 'a.jsonl'}")
    assert str(typo) in str(raised.value) and "policy_file=" in str(raised.value)


def test_the_environment_variable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHARTER_POLICY_FILE", str(tmp_path / "nope.yaml"))
    with pytest.raises(ValueError, match=r"CHARTER_POLICY_FILE: .*nope\.yaml.* does not exist"):
        charter.Governor(audit_location=f"jsonl:///{tmp_path / 'a.jsonl'}")


def test_a_file_that_disappears_later_keeps_the_last_good_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("charter._runtime.sources._CHECK_EVERY", 0.0)
    path = tmp_path / "policies.yaml"
    path.write_text(
        "name: p\nversion: 1\npolicies:\n  - name: no-rm\n    rule_type: field_matches\n"
        "    severity: critical\n    params: {field: input.command, pattern: 'rm -rf'}\n"
    )
    gov = charter.Governor(policy_file=str(path), audit_location=f"jsonl:///{tmp_path / 'a.jsonl'}")
    with gov.task("t1"):
        path.unlink()
        with (
            pytest.raises(charter.BlockedError, match="no-rm"),
            gov.step("step.exec", name="bash", input={"command": "rm -rf /"}),
        ):
            pass
    assert gov.runner.status()["cause"].startswith("file unreadable: ")
    gov.close()
