"""The fault matrix: every entry point through every fault, and no fail-open outcome.

Each case is one fault (a policy file that goes missing, corrupt or empty mid-run, a store
that refuses writes, a rule, approver or exporter that raises, an argument Charter cannot
capture, lone surrogates, 1 MB inputs, an evaluation past its deadline, and for Claude Code
a reused tool_use_id and the agent editing what governs it) with the action steps one
model turn asks for. Each entry point has an adapter that sets its host up with the case's
policy, runs the turn under the fault with real framework objects and scripted models (the
raw clients against a loopback server replaying provider responses; Claude Code through
real hook processes fed hook JSON), and reports per action whether the tool ran and what
the host was told. Every cell asserts: an action that must be blocked never ran and came
back with a reason; an action that must run ran (a fault in observability, or in a
buffered store, never changes an outcome).

``python tests/test_fault_matrix.py`` prints the cases x entry points table of outcomes.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

import pytest

_SCRATCH = tempfile.mkdtemp(prefix="charter-fault-matrix-")
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
import charter.rules  # noqa: E402
import charter_anthropic  # noqa: E402
import charter_crewai  # noqa: E402
import charter_langgraph  # noqa: E402
import charter_llamaindex  # noqa: E402
import charter_ollama  # noqa: E402
import charter_openai  # noqa: E402
import ollama  # noqa: E402
import openai  # noqa: E402
from charter._policy.registry import unregister  # noqa: E402
from charter.testing import charter_internal_errors, refused_writes  # noqa: E402, F401
from charter_crewai.testing import ScriptedLLM, native_tool_call  # noqa: E402
from charter_langchain import CharterMiddleware  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool as langchain_tool  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402
from llama_index.core.agent.workflow import FunctionAgent  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402

POLICY = """\
name: fault-matrix
version: 1
policies:
  - name: no-destructive-shell
    rule_type: field_matches
    severity: critical
    match: {kinds: [step.exec]}
    params: {field: input.command, pattern: '\\brm\\s+-rf\\s+/'}
  - name: no-pipe-to-shell
    rule_type: field_matches
    severity: critical
    match: {kinds: [step.exec]}
    params: {field: input.command, pattern: 'curl[^|]*\\|\\s*sh'}
"""
RAISING_RULE = """\
  - name: a-rule-that-raises
    rule_type: fault_matrix_raises
    severity: critical
    match: {kinds: [step.exec]}
"""
ASKING = """\
  - name: sudo-needs-a-person
    rule_type: field_matches
    severity: high
    action: ask
    match: {kinds: [step.exec]}
    params: {field: input.command, pattern: '^sudo '}
"""
MB = 1 << 20


def _raises(view: Any, params: Any, ctx: Any) -> bool:
    raise RuntimeError("the rule exploded")


def _register_raising_rule() -> None:
    charter.rules.rule(
        name="fault_matrix_raises", description="raises on every step it judges", replace=True
    )(_raises)


class BadRepr:
    """An argument no capture can render: its repr raises."""

    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


def _raising_approver(request: Any) -> Any:
    raise RuntimeError("the approver exploded")


class RaisingExporter:
    """An exporter whose every hook raises (records and step observations)."""

    def export(self, records: Any) -> None:
        raise RuntimeError("the exporter exploded")

    def observe_step(self, b: Any, phase: str) -> None:
        raise RuntimeError("the exporter exploded")


# -- the cases ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """One tool call of the turn: Bash with `args`. `expect` is block (it must never run
    and the host must say why, naming one of `why`), run (it must run) or either (both are
    correct: a policy file lost mid-run leaves the last good set in force in a process that
    loaded it, while a new hook process has no set and fails closed)."""

    args: dict[str, Any]
    expect: str
    why: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    actions: tuple[Action, ...]
    fault: str  # what the adapter does: see Host.run
    policy: str = POLICY
    settings: dict[str, Any] = field(default_factory=dict)
    internal_errors: bool = False  # the fault is reported through report_internal_error


RM = {"command": "rm -rf /"}
LS = {"command": "ls"}
BLOCK_RM = Action(RM, "block", ("no-destructive-shell",))
LOST = ("no-destructive-shell", "no policy set could be loaded")

CASES: dict[str, Case] = {
    "policy_missing": Case((Action(RM, "block", LOST), Action(LS, "either")), "delete_policy"),
    "policy_corrupt": Case((Action(RM, "block", LOST), Action(LS, "either")), "corrupt_policy"),
    "policy_emptied": Case((Action(RM, "block", LOST), Action(LS, "either")), "empty_policy"),
    "store_refuses_sync": Case(
        (Action(RM, "block", ("audit store", "could not be recorded")),) * 1
        + (Action(LS, "block", ("audit store", "could not be recorded")),),
        "refuse_writes",
        settings={"audit_durability": "sync"},
        internal_errors=True,
    ),
    "store_refuses_buffered": Case(
        (BLOCK_RM, Action(LS, "run")),
        "refuse_writes",
        settings={"audit_durability": "buffered"},
        internal_errors=True,
    ),
    "raising_rule": Case(
        (Action(LS, "block", ("policy evaluation failed", "the rule exploded")),),
        "none",
        policy=POLICY + RAISING_RULE,
        internal_errors=False,
    ),
    "raising_approver": Case(
        (Action({"command": "sudo reboot"}, "block", ("approver", "exploded")),),
        "none",
        policy=POLICY + ASKING,
        settings={"approver": _raising_approver},
        internal_errors=True,
    ),
    "raising_exporter": Case(
        (BLOCK_RM, Action(LS, "run")),
        "none",
        settings={"exporters": (RaisingExporter(),)},
        internal_errors=True,
    ),
    "uncapturable_argument": Case(
        (Action({"command": BadRepr()}, "block", ("captur",)),),
        "none",
    ),
    "lone_surrogates": Case(
        (
            Action({"command": "rm -rf /\ud800"}, "block", ("no-destructive-shell",)),
            Action({"command": "echo \udc00"}, "run"),
        ),
        "none",
    ),
    "one_mb_inputs": Case(
        (
            Action({"command": "rm -rf / " + "a" * MB}, "block", ("no-destructive-shell",)),
            Action({"command": "echo " + "b" * MB}, "run"),
        ),
        "none",
    ),
    "past_deadline": Case(
        (Action(LS, "block", ("evaluation_deadline_seconds",)),),
        "none",
        settings={"evaluation_deadline_seconds": 1e-9},
    ),
    "reused_tool_use_id": Case(
        (Action(LS, "run"), Action(RM, "block", ("no-destructive-shell",))),
        "same_tool_use_id",
    ),
    "agent_tampers_governance": Case(
        (
            Action({"command": "echo 'policies: []' > policies.yaml"}, "block", ("protect",)),
            Action({"command": "echo '{}' > .claude/settings.json"}, "block", ("protect",)),
            Action({"command": "rm -rf .charter"}, "block", ("protect",)),
        ),
        "none",
    ),
}

ENTRY_POINTS = (
    "governor",
    "governor_async",
    "langchain",
    "langgraph",
    "crewai",
    "llamaindex",
    "openai",
    "anthropic",
    "ollama",
    "claude_code",
)
IN_PROCESS = ENTRY_POINTS[:-1]
# Where a case does not apply, and why (these cells are left out of the product).
NOT_APPLICABLE: dict[str, tuple[tuple[str, ...], str]] = {
    # Only Python callers can hand a tool a value that is not JSON: the other hosts' tool
    # arguments arrive as JSON text (CrewAI and LlamaIndex parse a model's tool-call JSON,
    # the provider SDKs parse the HTTP response, Claude Code sends hook JSON).
    "uncapturable_argument": (
        ("crewai", "llamaindex", "openai", "anthropic", "ollama", "claude_code"),
        "tool arguments arrive as JSON",
    ),
    # The hook records with sync durability always: the next hook process reads the trail.
    "store_refuses_buffered": (("claude_code",), "the hook is always sync"),
    # The hook process loads the installed rule set; a rule registered in another Python
    # process is not in it.
    "raising_rule": (("claude_code",), "no in-process rule registry in the hook"),
    # Claude Code asks the person in its own permission prompt, LlamaIndex through the
    # workflow's input events (the run waits for a person): neither calls an approver.
    "raising_approver": (("llamaindex", "claude_code"), "the host asks a person itself"),
    # tool_use_id and the self-protection rule belong to the Claude Code integration.
    "reused_tool_use_id": (IN_PROCESS, "tool_use_id is Claude Code's"),
    "agent_tampers_governance": (IN_PROCESS, "self-protection is Claude Code's"),
}


def cells() -> list[tuple[str, str]]:
    return [
        (case, entry)
        for case in CASES
        for entry in ENTRY_POINTS
        if entry not in NOT_APPLICABLE.get(case, ((), ""))[0]
    ]


# -- what a cell reports ------------------------------------------------------------------


@dataclass
class Outcome:
    """Per action: whether the tool ran; and every text the host handed back (tool results,
    refusals, errors) in which the reason for a block must be found."""

    ran: list[bool]
    texts: list[str]

    def said(self, why: tuple[str, ...]) -> bool:
        return any(w in t for t in self.texts for w in why)


class Ran:
    """The tool body: notes which action's command it was given."""

    def __init__(self, actions: tuple[Action, ...]) -> None:
        self.commands = [a.args["command"] for a in actions]
        self.seen: list[int] = []

    def __call__(self, command: Any) -> str:
        for i, c in enumerate(self.commands):
            if c is command or (isinstance(c, str) and c == command):
                self.seen.append(i)
        return "ran"

    def flags(self) -> list[bool]:
        return [i in self.seen for i in range(len(self.commands))]


def _text(value: Any) -> str:
    try:
        return value if isinstance(value, str) else json.dumps(value, default=str)
    except Exception:
        return str(value)


# -- the host: a Governor under the case's fault -------------------------------------------


class Host:
    """One cell's setup: the policy file, the store, the Governor; applies the fault."""

    def __init__(self, case: Case, root: Path) -> None:
        self.case = case
        self.root = root
        self.policy = root / "policies.yaml"
        self.policy.write_text(case.policy, encoding="utf-8")
        self.db = root / "audit.db"
        self.built: list[charter.Governor] = []

    def governor(self) -> charter.Governor:
        settings = dict(self.case.settings)
        approver = settings.pop("approver", None)
        exporters = settings.pop("exporters", ())
        settings.setdefault("audit_durability", "sync")
        gov = charter.Governor(
            policy_file=str(self.policy),
            agent_id="fault-matrix",
            audit_location=f"sqlite:///{self.db}",
            approver=approver,
            exporters=exporters,
            **settings,
        )
        self.built.append(gov)
        # The store exists once the Governor wrote to it: the fault comes mid-run.
        gov.end_task(gov.start_task(name="warm-up"))
        gov.flush(5.0)
        return gov

    @contextlib.contextmanager
    def fault(self) -> Iterator[None]:
        kind = self.case.fault
        if kind == "refuse_writes":
            with refused_writes(self.db):
                yield
            return
        if kind == "delete_policy":
            self.policy.unlink()
        elif kind == "corrupt_policy":
            _rewrite(self.policy, "name: x\nversion: 1\npolicies: [\n  - {name: a\n")
        elif kind == "empty_policy":
            _rewrite(self.policy, "")
        yield

    def close(self) -> None:
        for gov in self.built:
            gov.close(5.0)


def _rewrite(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns
    path.write_text(text, encoding="utf-8")
    if path.stat().st_mtime_ns == before:  # coarse file-system clocks
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


# -- the adapters -------------------------------------------------------------------------


def run_governor(host: Host, actions: tuple[Action, ...]) -> Outcome:
    gov = host.governor()
    ran = Ran(actions)
    texts: list[str] = []
    with host.fault():
        try:
            with gov.task(name="matrix"):
                for a in actions:
                    try:
                        with gov.step("step.exec", name="Bash", input=a.args) as step:
                            step.output = ran(a.args["command"])
                    except (charter.BlockedError, charter.AuditError) as exc:
                        texts.append(str(exc))
        except Exception as exc:
            texts.append(str(exc))
    return Outcome(ran.flags(), texts)


def run_governor_async(host: Host, actions: tuple[Action, ...]) -> Outcome:
    gov = host.governor()
    ran = Ran(actions)
    texts: list[str] = []

    async def turn() -> None:
        async with gov.task(name="matrix"):
            for a in actions:
                try:
                    async with gov.step("step.exec", name="Bash", input=a.args) as step:
                        step.output = ran(a.args["command"])
                except (charter.BlockedError, charter.AuditError) as exc:
                    texts.append(str(exc))

    with host.fault():
        try:
            asyncio.run(turn())
        except Exception as exc:
            texts.append(str(exc))
    return Outcome(ran.flags(), texts)


def _lc_tool(ran: Ran) -> Any:
    @langchain_tool("Bash")
    def bash(command: Any) -> str:
        """Run a shell command."""
        return ran(command)

    return bash


class _ScriptedChat(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> _ScriptedChat:
        return self


def _turn(actions: tuple[Action, ...]) -> AIMessage:
    calls = [
        {"name": "Bash", "args": dict(a.args), "id": f"call_{i}", "type": "tool_call"}
        for i, a in enumerate(actions)
    ]
    return AIMessage("", tool_calls=calls)


def _lc_texts(state: Any) -> list[str]:
    if not isinstance(state, dict):
        return []
    messages = state.get("messages", [])
    said = [_text(m.content) for m in messages if isinstance(m, ToolMessage | AIMessage)]
    return [*said, str(state.get("charter_blocked") or "")]


def run_langchain(host: Host, actions: tuple[Action, ...]) -> Outcome:
    gov = host.governor()
    ran = Ran(actions)
    model = _ScriptedChat(messages=iter([_turn(actions), AIMessage("done")]))
    approval = "approver" if "approver" in host.case.settings else "interrupt"
    middleware = CharterMiddleware(gov, approval=approval)
    agent = create_agent(model, [_lc_tool(ran)], middleware=[middleware])
    texts: list[str] = []
    with host.fault():
        try:
            texts += _lc_texts(agent.invoke({"messages": [HumanMessage("go")]}))
        except Exception as exc:
            texts.append(str(exc))
    return Outcome(ran.flags(), texts)


class _Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    charter_blocked: NotRequired[str]  # where a node Charter blocked says why (block_key)


def run_langgraph(host: Host, actions: tuple[Action, ...]) -> Outcome:
    gov = host.governor()
    ran = Ran(actions)
    model = GenericFakeChatModel(messages=iter([_turn(actions), AIMessage("done")]))

    def agent(state: _Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(_Chat)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([_lc_tool(ran)]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = charter_langgraph.govern(builder, governor=gov).compile()
    texts: list[str] = []
    with host.fault():
        try:
            texts += _lc_texts(graph.invoke({"messages": [HumanMessage("go")]}))
        except Exception as exc:
            texts.append(str(exc))
    return Outcome(ran.flags(), texts)


def run_crewai(host: Host, actions: tuple[Action, ...]) -> Outcome:
    gov = host.governor()
    ran = Ran(actions)

    @crewai_tool("Bash")
    def bash(command: str) -> str:
        """Run a shell command."""
        return ran(command)

    script: list[Any] = [[native_tool_call("Bash", a.args) for a in actions], "done"]
    llm = ScriptedLLM(model="scripted-model", responses=script, native=True)
    agent = Agent(role="operator", goal="tidy up", backstory="an operator", llm=llm, tools=[bash])
    task = Task(description="go", expected_output="a report", agent=agent)
    crew = Crew(agents=[agent], tasks=[task], name="fault-matrix")
    texts: list[str] = []
    with host.fault():
        try:
            with charter_crewai.govern(crew, governor=gov):
                texts.append(_text(str(crew.kickoff())))
        except Exception as exc:
            texts.append(str(exc))
    texts += [_text(m) for call in llm.calls for m in call]
    return Outcome(ran.flags(), texts)


def run_llamaindex(host: Host, actions: tuple[Action, ...]) -> Outcome:
    from charter_llamaindex.testing import ScriptedLLM as ScriptedLlama
    from charter_llamaindex.testing import tool_call

    gov = host.governor()
    ran = Ran(actions)

    def bash(command: str) -> str:
        """Run a shell command."""
        return ran(command)

    llm = ScriptedLlama([[tool_call("Bash", a.args) for a in actions], "done"])
    agent = FunctionAgent(
        name="operator",
        description="tidies up",
        tools=[FunctionTool.from_defaults(bash, name="Bash")],
        llm=llm,
    )
    texts: list[str] = []

    async def drive() -> None:
        texts.append(_text(str(await agent.run(user_msg="go"))))

    with host.fault():
        try:
            with charter_llamaindex.govern(agent, governor=gov):
                asyncio.run(drive())
        except Exception as exc:
            texts.append(str(exc))
    texts += [_text(str(m)) for call in llm.calls for m in call]
    return Outcome(ran.flags(), texts)


class Replay:
    """A loopback HTTP server that answers every POST with one provider response."""

    def __init__(self, body: dict[str, Any], status: int = 200) -> None:
        payload = json.dumps(body).encode()  # ASCII: lone surrogates travel as \\u escapes

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Replay:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _replayed(
    host: Host,
    actions: tuple[Action, ...],
    body: dict[str, Any],
    call: Callable[[str, charter.Governor, Ran], Any],
) -> Outcome:
    gov = host.governor()
    ran = Ran(actions)
    texts: list[str] = []
    with Replay(body) as replay, host.fault():
        try:
            texts.append(_text(call(replay.url, gov, ran)))
        except Exception as exc:
            texts.append(str(exc))
    return Outcome(ran.flags(), texts)


def _tools(ran: Ran) -> dict[str, Callable[..., str]]:
    return {"Bash": lambda command: ran(command)}


def run_openai(host: Host, actions: tuple[Action, ...]) -> Outcome:
    body = {
        "id": "chatcmpl-fault",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": "Bash", "arguments": json.dumps(a.args)},
                        }
                        for i, a in enumerate(actions)
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }

    def call(url: str, gov: charter.Governor, ran: Ran) -> Any:
        client = openai.OpenAI(api_key="sk-test-fake-matrix", base_url=url, max_retries=0)
        governance = charter_openai.govern(client, governor=gov)
        try:
            response = client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "go"}]
            )
            return governance.run_tools(response, _tools(ran))
        finally:
            governance.uninstall()

    return _replayed(host, actions, body, call)


def run_anthropic(host: Host, actions: tuple[Action, ...]) -> Outcome:
    body = {
        "id": "msg_fault",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": a.args}
            for i, a in enumerate(actions)
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }

    def call(url: str, gov: charter.Governor, ran: Ran) -> Any:
        client = anthropic.Anthropic(api_key="sk-ant-test-fake-matrix", base_url=url)
        governance = charter_anthropic.govern(client, governor=gov)
        try:
            message = client.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=64,
                messages=[{"role": "user", "content": "go"}],
            )
            return governance.run_tools(message, _tools(ran))
        finally:
            governance.uninstall()

    return _replayed(host, actions, body, call)


def run_ollama(host: Host, actions: tuple[Action, ...]) -> Outcome:
    body = {
        "model": "llama3.2",
        "created_at": "2026-01-01T00:00:00Z",
        "message": {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "Bash", "arguments": a.args}} for a in actions],
        },
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 10,
        "eval_count": 10,
    }

    def call(url: str, gov: charter.Governor, ran: Ran) -> Any:
        client = ollama.Client(host=url)
        governance = charter_ollama.govern(client, governor=gov)
        try:
            response = client.chat(model="llama3.2", messages=[{"role": "user", "content": "go"}])
            return governance.run_tools(response, _tools(ran))
        finally:
            governance.uninstall()

    return _replayed(host, actions, body, call)


# -- Claude Code: real hook processes ------------------------------------------------------


def _hook_executable() -> str:
    found = shutil.which("charter-claude-hook", path=str(Path(sys.executable).parent))
    assert found is not None, "charter-claude-hook is not installed next to this interpreter"
    return found


PYCACHE = Path(_SCRATCH) / "pycache"


def run_claude_code(host: Host, actions: tuple[Action, ...]) -> Outcome:
    """A session through real hook processes: SessionStart, then per action PreToolUse and,
    when Claude Code would run the call, the call itself (noted) and PostToolUse."""
    case = host.case
    project = host.root / "proj"
    (project / ".claude").mkdir(parents=True)
    host.policy = project / "policies.yaml"
    host.policy.write_text(case.policy, encoding="utf-8")
    host.db = project / ".charter" / "audit.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHARTER_", "CLAUDE_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        CLAUDE_PROJECT_DIR=str(project),
        HOME=str(host.root / "home"),
        PYTHONPYCACHEPREFIX=str(PYCACHE),
    )
    deadline = case.settings.get("evaluation_deadline_seconds")
    if deadline is not None:
        env["CHARTER_EVALUATION_DEADLINE_SECONDS"] = repr(deadline)
    argv = [_hook_executable(), "--policy", str(host.policy)]
    base = {
        "session_id": "fault-matrix",
        "transcript_path": str(project / "t.jsonl"),
        "cwd": str(project),
        "permission_mode": "default",
    }

    def hook(event: str, **fields: Any) -> tuple[int, dict[str, Any], str]:
        data = json.dumps({**base, "hook_event_name": event, **fields}).encode()
        done = subprocess.run(
            [*argv, "--event", event], input=data, capture_output=True, env=env, timeout=120
        )
        out = done.stdout.decode()
        return done.returncode, (json.loads(out) if out.strip() else {}), done.stderr.decode()

    exporter = contextlib.nullcontext()
    if "exporters" in case.settings:
        # The hook's exporter comes from its OTLP settings: a collector that refuses every
        # batch (400: not retried, so the hook is not slowed down by retries).
        exporter = Replay({"error": "refused"}, status=400)
        env["CHARTER_OTLP_ENDPOINT"] = f"{exporter.url}/v1/traces"
    ran = Ran(actions)
    texts: list[str] = []
    with exporter:
        hook("SessionStart", source="startup")
        with host.fault():
            run_hook_actions(case, actions, hook, ran, texts)
    return Outcome(ran.flags(), texts)


def run_hook_actions(
    case: Case,
    actions: tuple[Action, ...],
    hook: Callable[..., tuple[int, dict[str, Any], str]],
    ran: Ran,
    texts: list[str],
) -> None:
    """Per action: PreToolUse; when Claude Code would run the call, the call and PostToolUse."""
    for i, a in enumerate(actions):
        tuid = "toolu_same" if case.fault == "same_tool_use_id" else f"toolu_{i}"
        call = {"tool_name": "Bash", "tool_input": a.args, "tool_use_id": tuid}
        code, answer, stderr = hook("PreToolUse", **call)
        said = answer.get("hookSpecificOutput", {})
        decision = said.get("permissionDecision")
        texts.append(str(said.get("permissionDecisionReason") or stderr))
        # Claude Code's rules: exit 2 blocks, deny blocks, ask waits for the person
        # (who declines here); anything else lets the call run.
        if code == 2 or decision in ("deny", "ask"):
            continue
        ran(a.args["command"])
        if case.fault == "same_tool_use_id":
            continue  # still running when the model reuses its id
        response = {"stdout": "", "stderr": "", "interrupted": False}
        hook("PostToolUse", **call, tool_response=response)


ADAPTERS: dict[str, Callable[[Host, tuple[Action, ...]], Outcome]] = {
    "governor": run_governor,
    "governor_async": run_governor_async,
    "langchain": run_langchain,
    "langgraph": run_langgraph,
    "crewai": run_crewai,
    "llamaindex": run_llamaindex,
    "openai": run_openai,
    "anthropic": run_anthropic,
    "ollama": run_ollama,
    "claude_code": run_claude_code,
}


def run_cell(case_name: str, entry: str, root: Path) -> Outcome:
    case = CASES[case_name]
    host = Host(case, root)
    try:
        return ADAPTERS[entry](host, case.actions)
    finally:
        host.close()


def check(case_name: str, outcome: Outcome) -> list[str]:
    """What is wrong with `outcome` (empty: the cell holds)."""
    wrong = []
    for i, (action, ran) in enumerate(zip(CASES[case_name].actions, outcome.ran, strict=True)):
        if action.expect == "block" and ran:
            wrong.append(f"action {i} ran: fail-open")
        elif action.expect == "block" and not outcome.said(action.why):
            wrong.append(f"action {i} was blocked without a reason naming {action.why}")
        elif action.expect == "run" and not ran:
            wrong.append(f"action {i} did not run: the fault changed an outcome")
    return wrong


def cell_text(case_name: str, outcome: Outcome) -> str:
    marks = "".join("R" if ran else "B" for ran in outcome.ran)
    return marks + ("" if not check(case_name, outcome) else " FAIL")


# -- the tests ----------------------------------------------------------------------------

RESULTS: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module", autouse=True)
def _raising_rule() -> Iterator[None]:
    # Registered for this module only: the rule registry is process-wide, and the CLI's
    # schema and rule listings must not show a test's rule.
    _register_raising_rule()
    yield
    unregister("fault_matrix_raises")


@pytest.fixture(scope="module", autouse=True)
def _print_table(request: pytest.FixtureRequest) -> Iterator[None]:
    """At the end of the module, the table of the cells that ran (``-rA`` not needed)."""
    yield
    plugins = request.config.pluginmanager
    reporter = plugins.get_plugin("terminalreporter")
    capture = plugins.get_plugin("capturemanager")
    if reporter is None or capture is None or not RESULTS:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line("fault matrix (B blocked, R ran, one letter per action):")
        for line in table(RESULTS).splitlines():
            reporter.write_line(line)


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
    # The once-per-second policy-file check is tested on its own: here a change is seen at
    # the next step, as it would be a second later.
    monkeypatch.setattr("charter._runtime.sources._CHECK_EVERY", 0.0)
    monkeypatch.chdir(tmp_path)


def _params() -> list[Any]:
    out = []
    for case, entry in cells():
        marks = [pytest.mark.allow_internal_errors] if CASES[case].internal_errors else []
        out.append(pytest.param(case, entry, id=f"{case}-{entry}", marks=marks))
    return out


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize(("case", "entry"), _params())
def test_no_fault_lets_a_step_through(case: str, entry: str, tmp_path: Path) -> None:
    outcome = run_cell(case, entry, tmp_path)
    RESULTS[(case, entry)] = cell_text(case, outcome)
    wrong = check(case, outcome)
    assert not wrong, f"{case} through {entry}: {wrong}; the host said: {outcome.texts[:4]}"


def table(results: dict[tuple[str, str], str]) -> str:
    """The cases x entry points table (B blocked, R ran, one letter per action; n/a where a
    case does not apply, empty where the cell was not run), as Markdown."""
    lines = [
        "| case | " + " | ".join(ENTRY_POINTS) + " |",
        "| --- | " + " | ".join("---" for _ in ENTRY_POINTS) + " |",
    ]
    for case in CASES:
        left_out = NOT_APPLICABLE.get(case, ((), ""))[0]
        row = [results.get((case, e), "n/a" if e in left_out else "") for e in ENTRY_POINTS]
        lines.append(f"| {case} | " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    # The table for a note: every cell run once, outside pytest.
    import charter._runtime.sources as _sources

    _sources._CHECK_EVERY = 0.0
    _register_raising_rule()
    found: dict[tuple[str, str], str] = {}
    for case, entry in cells():
        with tempfile.TemporaryDirectory(prefix="charter-fault-cell-") as tmp:
            found[(case, entry)] = cell_text(case, run_cell(case, entry, Path(tmp)))
    print(table(found))
