"""One policy file, every host: the same logical actions (a model asks to run ``rm -rf /``
and ``ls`` with a ``Bash`` tool) driven through LangChain, LangGraph, CrewAI, LlamaIndex, the
three raw model clients (recorded provider traffic, network blocked) and Claude Code's real
hook process get the same decisions and leave the same kinds, step names and key properties
in the trail. A token budget holds across providers, and two integrations active on one
Governor record each step once.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

_SCRATCH = tempfile.mkdtemp(prefix="charter-every-host-")
_CREWAI_ENV = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "OTEL_SDK_DISABLED": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_STORAGE_DIR": os.path.join(_SCRATCH, "crewai"),
    "HOME": _SCRATCH,
}
_saved = {name: os.environ.get(name) for name in _CREWAI_ENV}
os.environ.update(_CREWAI_ENV)
try:  # CrewAI writes under HOME and reads its switches when imported
    from crewai import Agent, Crew, Task
    from crewai.tools import tool as crewai_tool
finally:
    for _name, _value in _saved.items():
        if _value is None:
            os.environ.pop(_name, None)
        else:
            os.environ[_name] = _value

import anthropic  # noqa: E402
import charter  # noqa: E402
import charter.audit  # noqa: E402
import charter_anthropic  # noqa: E402
import charter_crewai  # noqa: E402
import charter_langgraph  # noqa: E402
import charter_llamaindex  # noqa: E402
import charter_ollama  # noqa: E402
import charter_openai  # noqa: E402
import ollama  # noqa: E402
import openai  # noqa: E402
import vcr  # noqa: E402
from charter.testing import charter_internal_errors  # noqa: E402, F401  (autouse)
from charter_crewai.testing import ScriptedLLM, native_tool_call  # noqa: E402
from charter_langchain import CharterMiddleware  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage  # noqa: E402
from langchain_core.tools import tool as langchain_tool  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402
from llama_index.core.agent.workflow import FunctionAgent  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CASSETTES = {
    "openai": REPO / "integrations" / "openai" / "tests" / "cassettes",
    "anthropic": REPO / "integrations" / "anthropic" / "tests" / "cassettes",
    "ollama": REPO / "integrations" / "ollama" / "tests" / "cassettes",
}
POLICY = """\
name: one-policy-every-host
version: 1
policies:
  - name: no-destructive-shell
    description: Recursive deletes of the root destroy machines.
    rule_type: field_matches
    severity: critical
    match: {kinds: [step.exec]}
    params: {field: input.command, pattern: '\\brm\\s+-rf\\s+/'}
  - name: token-budget
    rule_type: budget
    severity: critical
    match: {kinds: [step.model]}
    params: {field: properties.model.usage.total_tokens, limit: 60}
"""
ACTIONS = [{"command": "rm -rf /"}, {"command": "ls"}]
# What every host must leave in the trail for the two Bash calls, sorted by command.
EXPECTED = [
    ("step.exec", "Bash", "ls", "ok", []),
    ("step.exec", "Bash", "rm -rf /", "blocked", ["no-destructive-shell"]),
]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith(("CHARTER_", "OPENAI_", "ANTHROPIC_", "OLLAMA_")):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    for name, value in {**_CREWAI_ENV, "HOME": str(home)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(home / "crewai"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policies.yaml"
    path.write_text(POLICY, encoding="utf-8")
    return path


@pytest.fixture
def governor(tmp_path: Path, policy_file: Path) -> Iterator[Callable[[str], charter.Governor]]:
    built: list[charter.Governor] = []

    def make(agent: str) -> charter.Governor:
        gov = charter.Governor(
            policy_file=str(policy_file),
            agent_id=agent,
            audit_location=f"sqlite:///{tmp_path / 'audit.db'}",
            audit_durability="sync",
        )
        built.append(gov)
        return gov

    yield make
    for gov in built:
        gov.close(5.0)


def records(location: str, agent: str) -> list[dict[str, Any]]:
    store = charter.audit.open_store(location)
    try:
        assert store.verify().ok
        out: list[dict[str, Any]] = []
        for task in store.list_tasks(agent):
            out.extend(store.read_task(task.task_id, agent))
        # Outcomes only: sync durability also stores each allowed step's intent ahead of it.
        return [r for r in out if not charter.audit.is_intent_record(r)]
    finally:
        store.close()


def bash_steps(found: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The Bash calls as (kind, step name, command, outcome, violated policies), sorted."""
    out = []
    for r in found:
        if str(r.get("step_name")).lower() != "bash" or str(r["kind"]).startswith("task."):
            continue
        verdict = r["meta"].get("charter.eval") or {}
        violated = sorted(v["name"] for v in verdict.get("violations") or ())
        out.append(
            (
                r["kind"],
                r["step_name"],
                r["input"]["command"],
                r["meta"]["charter.outcome"],
                violated,
            )
        )
    return sorted(out, key=lambda t: t[2])


# -- the hosts ------------------------------------------------------------------------------


def _langchain_tool(ran: list[str]) -> Any:
    @langchain_tool("Bash")
    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return f"ran {command}"

    return bash


class _ScriptedChat(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> _ScriptedChat:
        return self


def _turn() -> AIMessage:
    calls = [
        {"name": "Bash", "args": a, "id": f"call_{i}", "type": "tool_call"}
        for i, a in enumerate(ACTIONS)
    ]
    return AIMessage("", tool_calls=calls)


def run_langchain(gov: charter.Governor, ran: list[str]) -> None:
    model = _ScriptedChat(messages=iter([_turn(), AIMessage("done")]))
    agent = create_agent(model, [_langchain_tool(ran)], middleware=[CharterMiddleware(gov)])
    agent.invoke({"messages": [HumanMessage("clean up, then list")]})


class _Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def run_langgraph(gov: charter.Governor, ran: list[str]) -> None:
    model = GenericFakeChatModel(messages=iter([_turn(), AIMessage("done")]))

    def agent(state: _Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(_Chat)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([_langchain_tool(ran)]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = charter_langgraph.govern(builder, governor=gov).compile()
    graph.invoke({"messages": [HumanMessage("clean up, then list")]})


def run_crewai(gov: charter.Governor, ran: list[str]) -> None:
    @crewai_tool("Bash")
    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return f"ran {command}"

    script: list[Any] = [[native_tool_call("Bash", a) for a in ACTIONS], "done"]
    llm = ScriptedLLM(model="scripted-model", responses=script, native=True)
    agent = Agent(role="operator", goal="tidy up", backstory="an operator", llm=llm, tools=[bash])
    task = Task(description="clean up, then list", expected_output="a report", agent=agent)
    crew = Crew(agents=[agent], tasks=[task], name="every-host")
    with charter_crewai.govern(crew, governor=gov):
        crew.kickoff()


def run_llamaindex(gov: charter.Governor, ran: list[str]) -> None:
    from charter_llamaindex.testing import ScriptedLLM as ScriptedLlama
    from charter_llamaindex.testing import tool_call

    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return f"ran {command}"

    llm = ScriptedLlama([[tool_call("Bash", a) for a in ACTIONS], "done"])
    agent = FunctionAgent(
        name="operator",
        description="tidies up",
        tools=[FunctionTool.from_defaults(bash, name="Bash")],
        llm=llm,
    )
    with charter_llamaindex.govern(agent, governor=gov):

        async def drive() -> None:
            await agent.run(user_msg="clean up, then list")

        asyncio.run(drive())


def _bash(ran: list[str]) -> dict[str, Callable[..., str]]:
    def bash(command: str) -> str:
        ran.append(command)
        return f"ran {command}"

    return {"Bash": bash}


def run_openai(gov: charter.Governor, ran: list[str]) -> None:
    client = openai.OpenAI(api_key="sk-test-fake-every-host", max_retries=0)
    governance = charter_openai.govern(client, governor=gov)
    with vcr.use_cassette(str(CASSETTES["openai"] / "chat_bash.yaml"), record_mode="none"):
        response = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "clean up, then list"}]
        )
    governance.run_tools(response, _bash(ran))
    governance.uninstall()


def run_anthropic(gov: charter.Governor, ran: list[str]) -> None:
    client = anthropic.Anthropic(api_key="sk-ant-test-fake-every-host", max_retries=0)
    governance = charter_anthropic.govern(client, governor=gov)
    with vcr.use_cassette(str(CASSETTES["anthropic"] / "bash.yaml"), record_mode="none"):
        message = client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": "clean up, then list"}],
        )
    governance.run_tools(message, _bash(ran))
    governance.uninstall()


def run_ollama(gov: charter.Governor, ran: list[str]) -> None:
    client = ollama.Client(host="http://127.0.0.1:11434")
    governance = charter_ollama.govern(client, governor=gov)
    with vcr.use_cassette(str(CASSETTES["ollama"] / "bash.yaml"), record_mode="none"):
        response = client.chat(
            model="llama3.2", messages=[{"role": "user", "content": "clean up, then list"}]
        )
    governance.run_tools(response, _bash(ran))
    governance.uninstall()


HOSTS: dict[str, Callable[[charter.Governor, list[str]], None]] = {
    "langchain": run_langchain,
    "langgraph": run_langgraph,
    "crewai": run_crewai,
    "llamaindex": run_llamaindex,
    "openai": run_openai,
    "anthropic": run_anthropic,
    "ollama": run_ollama,
}


@pytest.mark.block_network
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("host", sorted(HOSTS))
def test_the_same_actions_get_the_same_decisions_and_records_on_every_framework(
    host: str, governor: Callable[[str], charter.Governor], tmp_path: Path
) -> None:
    gov = governor(f"{host}-agent")
    ran: list[str] = []
    HOSTS[host](gov, ran)
    assert ran == ["ls"], f"{host}: the destructive command ran or the harmless one did not"
    gov.flush(5.0)
    found = records(f"sqlite:///{tmp_path / 'audit.db'}", f"{host}-agent")
    expected = EXPECTED
    if host == "crewai":
        # CrewAI renames every tool to a lowercase identifier before its agent calls it
        # (its own sanitising; charter-crewai sees only the new name), so a policy meant for
        # CrewAI must name the tool `bash`, or match kinds and inputs as this one does.
        expected = [(k, n.lower(), *rest) for k, n, *rest in EXPECTED]
    assert bash_steps(found) == expected
    blocked = next(
        r for r in found if r["kind"] == "step.exec" and r["input"].get("command") == "rm -rf /"
    )
    assert blocked.get("output") is None
    assert blocked["properties"]["tool"]["name"] == expected[1][1]
    assert blocked["properties"]["framework"]["name"] in (host, "langchain")


def _hook(
    event: str, payload: dict[str, Any], env: dict[str, str], policy: Path, audit: str
) -> dict[str, Any]:
    hook = shutil.which("charter-claude-hook", path=str(Path(sys.executable).parent))
    assert hook is not None, "charter-claude-hook is not installed next to this interpreter"
    argv = [
        hook,
        "--event",
        event,
        "--policy",
        str(policy),
        "--audit",
        audit,
        "--agent-id",
        "claude-agent",
    ]
    done = subprocess.run(
        argv, input=json.dumps(payload).encode(), capture_output=True, env=env, timeout=120
    )
    assert done.returncode in (0, 2), done.stderr.decode()
    return json.loads(done.stdout) if done.stdout.strip() else {}


def test_claude_code_hooks_get_the_same_decisions_and_records(
    policy_file: Path, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHARTER_", "CLAUDE_"))}
    env.update(CLAUDE_PROJECT_DIR=str(project), HOME=str(tmp_path / "home"))
    audit = f"sqlite:///{tmp_path / 'claude.db'}"
    base = {
        "session_id": "every-host-session",
        "transcript_path": str(tmp_path / "t.jsonl"),
        "cwd": str(project),
        "permission_mode": "default",
    }
    _hook(
        "SessionStart",
        {**base, "hook_event_name": "SessionStart", "source": "startup"},
        env,
        policy_file,
        audit,
    )
    ran: list[str] = []
    for i, args in enumerate(ACTIONS):
        call = {**base, "tool_name": "Bash", "tool_input": args, "tool_use_id": f"toolu_{i}"}
        answer = _hook(
            "PreToolUse", {**call, "hook_event_name": "PreToolUse"}, env, policy_file, audit
        )
        decision = answer.get("hookSpecificOutput", {}).get("permissionDecision")
        if decision == "deny":
            assert (
                "no-destructive-shell" in answer["hookSpecificOutput"]["permissionDecisionReason"]
            )
            continue
        ran.append(args["command"])
        response = {"stdout": "README.md", "stderr": "", "interrupted": False}
        _hook(
            "PostToolUse",
            {**call, "hook_event_name": "PostToolUse", "tool_response": response},
            env,
            policy_file,
            audit,
        )
    assert ran == ["ls"]
    # The hook adds its always-on self-protection policy, and `rm -rf /` removes the hook
    # itself: the record names it next to the user's policy (the decision is the same).
    always_on = "charter-self-protection"
    expected = [
        (kind, name, command, outcome, [always_on, *names] if command == "rm -rf /" else names)
        for kind, name, command, outcome, names in EXPECTED
    ]
    assert bash_steps(records(audit, "claude-agent")) == expected


@pytest.mark.block_network
def test_a_token_budget_holds_across_providers(governor: Callable[[str], charter.Governor]) -> None:
    gov = governor("budget-agent")
    clients = {
        "openai": openai.OpenAI(api_key="sk-test-fake-budget", max_retries=0),
        "anthropic": anthropic.Anthropic(api_key="sk-ant-test-fake-budget", max_retries=0),
        "ollama": ollama.Client(host="http://127.0.0.1:11434"),
    }
    handles = [
        charter_openai.govern(clients["openai"], governor=gov),
        charter_anthropic.govern(clients["anthropic"], governor=gov),
        charter_ollama.govern(clients["ollama"], governor=gov),
    ]
    ask = [{"role": "user", "content": "Say hello."}]
    with gov.task(name="one budget, three providers"):
        with vcr.use_cassette(str(CASSETTES["openai"] / "chat_text.yaml"), record_mode="none"):
            clients["openai"].chat.completions.create(model="gpt-4o-mini", messages=ask)  # 28
        with vcr.use_cassette(str(CASSETTES["anthropic"] / "text.yaml"), record_mode="none"):
            clients["anthropic"].messages.create(
                model="claude-sonnet-4-5", max_tokens=64, messages=ask
            )  # +34
        with vcr.use_cassette(str(CASSETTES["ollama"] / "chat.yaml"), record_mode="none") as tape:
            with pytest.raises(ollama.ResponseError, match="token-budget"):
                clients["ollama"].chat(model="llama3.2", messages=ask)
            assert tape.play_count == 0, "the call over budget reached the server"
    for handle in handles:
        handle.uninstall()
    gov.flush(5.0)
    models = [
        r
        for r in records(gov.runner.settings.audit_location, "budget-agent")
        if r["kind"] == "step.model"
    ]
    assert [
        (r["properties"]["model"]["provider"], r["meta"]["charter.outcome"]) for r in models
    ] == [
        ("openai", "ok"),
        ("anthropic", "ok"),
        ("ollama", "blocked"),
    ]
    assert len({r["task_id"] for r in models}) == 1


@pytest.mark.block_network
def test_a_governed_client_inside_a_governed_graph_records_each_step_once_in_one_task(
    governor: Callable[[str], charter.Governor],
) -> None:
    gov = governor("paired-agent")
    client = openai.OpenAI(api_key="sk-test-fake-paired", max_retries=0)
    governance = charter_openai.govern(client, governor=gov)

    def agent(state: _Chat) -> dict[str, Any]:
        out = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Say hello."}]
        )
        return {"messages": [AIMessage(out.choices[0].message.content or "")]}

    builder = StateGraph(_Chat)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    graph = charter_langgraph.govern(builder, governor=gov).compile()
    with vcr.use_cassette(str(CASSETTES["openai"] / "chat_text.yaml"), record_mode="none"):
        graph.invoke({"messages": [HumanMessage("hi")]})
    governance.uninstall()
    gov.flush(5.0)
    found = records(gov.runner.settings.audit_location, "paired-agent")
    steps = [(r["kind"], r["step_name"]) for r in found if not r["kind"].startswith("task.")]
    assert steps.count(("step.model", "gpt-4o-mini")) == 1
    assert len({r["task_id"] for r in found}) == 1
    assert len([r for r in found if r["kind"] == "task.start"]) == 1


def test_async_clients_follow_the_same_policy(governor: Callable[[str], charter.Governor]) -> None:
    gov = governor("async-agent")

    async def main() -> list[str]:
        ran: list[str] = []
        client = openai.AsyncOpenAI(api_key="sk-test-fake-async", max_retries=0)
        governance = charter_openai.govern(client, governor=gov)
        with vcr.use_cassette(str(CASSETTES["openai"] / "chat_bash.yaml"), record_mode="none"):
            response = await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "go"}]
            )
        await governance.arun_tools(response, _bash(ran))
        governance.uninstall()
        return ran

    assert asyncio.run(main()) == ["ls"]
    gov.flush(5.0)
    assert bash_steps(records(gov.runner.settings.audit_location, "async-agent")) == EXPECTED
