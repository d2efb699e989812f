"""Offline CrewAI harness: isolated environment, network guard, scripted crews, audit readers.

CrewAI writes a key under HOME when it is imported and reads its telemetry and tracing
switches early, so the environment is pointed at a scratch folder here, before anything
imports CrewAI, and restored afterwards so other packages' tests in this pytest run keep
theirs. Every test then gets the same variables again, under its own tmp_path.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import shutil
import socket
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_SCRATCH = tempfile.mkdtemp(prefix="charter-crewai-tests-")
atexit.register(shutil.rmtree, _SCRATCH, True)


def _crewai_env(home: str) -> dict[str, str]:
    return {
        "CREWAI_DISABLE_TELEMETRY": "true",
        "CREWAI_DISABLE_TRACKING": "true",
        "OTEL_SDK_DISABLED": "true",
        "CREWAI_TRACING_ENABLED": "false",
        "CREWAI_STORAGE_DIR": os.path.join(home, "crewai-storage"),
        "HOME": home,
    }


_saved = {name: os.environ.get(name) for name in _crewai_env(_SCRATCH)}
os.environ.update(_crewai_env(_SCRATCH))
try:
    import crewai  # noqa: F401  (imported here so its import-time writes land in _SCRATCH)
    from crewai import Agent, Crew, Task
    from crewai.hooks.dispatch import InterceptionPoint, get_global_hook_list
    from crewai.tools import tool
finally:
    for _name, _value in _saved.items():
        if _value is None:
            os.environ.pop(_name, None)
        else:
            os.environ[_name] = _value

import charter  # noqa: E402
from charter.testing import charter_internal_errors  # noqa: E402, F401  (autouse fixture)
from charter_crewai import _governance  # noqa: E402
from charter_crewai.testing import (  # noqa: E402
    ScriptedLLM,
    final_answer,
    native_tool_call,
    react_tool_call,
)

_HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # CrewAI reads its own deprecated fields on every kickoff; that noise is not ours.
    for item in items:
        if str(item.path).startswith(_HERE):
            item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai"))


@pytest.fixture(autouse=True)
def crewai_environment(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Telemetry and tracing off; HOME, CrewAI's storage and the temp folder (where CrewAI
    leaves a lock file per crew) inside this test's tmp_path."""
    home = tmp_path / "home"
    home.mkdir()
    for name, value in _crewai_env(str(home)).items():
        monkeypatch.setenv(name, value)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))


def _loopback(address: Any) -> bool:
    if not isinstance(address, tuple):
        return True  # AF_UNIX paths stay on this machine
    host = address[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name would need DNS: that is network


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Refuse every non-loopback connection, and fail the test if anything tried one."""
    attempts: list[Any] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def connect(sock: Any, address: Any) -> Any:
        if not _loopback(address):
            attempts.append(address)
            raise OSError(f"network access refused in a test: {address!r}")
        return real_connect(sock, address)

    def connect_ex(sock: Any, address: Any) -> Any:
        if not _loopback(address):
            attempts.append(address)
            raise OSError(f"network access refused in a test: {address!r}")
        return real_connect_ex(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    yield attempts
    assert attempts == [], f"the test tried to reach the network: {attempts}"


@pytest.fixture(autouse=True)
def nothing_left_installed() -> Iterator[None]:
    """Uninstall what a test left governed, and check no router stays behind."""
    yield
    for governance in list(_governance._active):
        governance.uninstall()
    leftover = [
        name
        for name, router in _governance._ROUTERS.items()
        if router in get_global_hook_list(getattr(InterceptionPoint, name))
    ]
    assert leftover == [], f"routers still registered after uninstall: {leftover}"


@pytest.fixture
def audit(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path}/audit.db"


@pytest.fixture
def ran() -> defaultdict[str, list[Any]]:
    """Side effects: every tool appends its input here when (and only when) it runs."""
    return defaultdict(list)


@pytest.fixture
def tools(ran: defaultdict[str, list[Any]]) -> dict[str, Any]:
    @tool("delete_file")
    def delete_file(path: str) -> str:
        """Delete the file at path."""
        ran["delete_file"].append(path)
        return f"deleted {path}"

    @tool("get_weather")
    def get_weather(city: str) -> str:
        """Get today's weather for a city."""
        ran["get_weather"].append(city)
        return f"sunny in {city}"

    return {"delete_file": delete_file, "get_weather": get_weather}


@pytest.fixture
def build_crew(tools: dict[str, Any]) -> Callable[..., tuple[Any, ScriptedLLM]]:
    """build_crew(responses, native=False, ...) -> (crew, llm): one agent, one task."""

    def build(
        responses: list[Any],
        *,
        native: bool = False,
        repeat_last: bool = False,
        usage: dict[str, int] | None = None,
        role: str = "cleaner",
        name: str = "crew",
        tool_names: tuple[str, ...] = ("delete_file", "get_weather"),
        tasks: int = 1,
    ) -> tuple[Any, ScriptedLLM]:
        llm = ScriptedLLM(
            model="scripted-model",
            responses=responses,
            native=native,
            repeat_last=repeat_last,
            usage=usage,
        )
        agent = Agent(
            role=role,
            goal="keep the workspace tidy",
            backstory="a careful assistant",
            llm=llm,
            tools=[tools[n] for n in tool_names],
            max_iter=10,
        )
        crew_tasks = [
            Task(
                description=f"tidy up, part {i + 1}",
                expected_output="a short report",
                agent=agent,
            )
            for i in range(tasks)
        ]
        return Crew(agents=[agent], tasks=crew_tasks, name=name), llm

    return build


class Trail:
    """The audit trail of one test: read it back by Charter task id, and verify it."""

    def __init__(self, location: str) -> None:
        self.location = location

    def read(self, task_id: str) -> list[dict[str, Any]]:
        store = charter.open_store(self.location)
        try:
            return store.read_task(task_id)
        finally:
            store.close()

    def summary(self, task_id: str) -> list[tuple[str, str, str | None]]:
        """(kind, step_name, outcome) per record; outcome None for task boundaries."""
        return [
            (r["kind"], r["step_name"], r["meta"].get("charter.outcome"))
            for r in self.read(task_id)
        ]

    def verify(self) -> charter.VerifyReport:
        return charter.verify(self.location)


@pytest.fixture
def trail(audit: str) -> Trail:
    return Trail(audit)


@pytest.fixture
def deny() -> Callable[..., dict[str, Any]]:
    """deny(name, kinds=[...], verbs=[...], step_names=[...]): a policy blocking those steps."""

    def policy(name: str, **match: Any) -> dict[str, Any]:
        return {"name": name, "rule_type": "deny", "severity": "critical", "match": match}

    return policy


@pytest.fixture
def observation() -> Callable[[ScriptedLLM], str]:
    """observation(llm): what the agent read for its most recent tool call (either path)."""

    def read(llm: ScriptedLLM) -> str:
        for message in reversed(llm.calls[-1]):
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str) and (
                message.get("role") == "tool" or "Observation:" in content
            ):
                return content
        raise AssertionError("no tool observation in the last model call")

    return read


class Calling:
    """Scripts for one of CrewAI's two tool-calling paths: ReAct text or native calls."""

    def __init__(self, native: bool) -> None:
        self.native = native

    def __repr__(self) -> str:
        return "native" if self.native else "react"

    def tool(self, name: str, **args: Any) -> Any:
        if self.native:
            return [native_tool_call(name, args)]
        return react_tool_call(name, args)

    def tools(self, *calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """Several tool calls in one native response (CrewAI runs them in parallel)."""
        assert self.native
        return [native_tool_call(name, args) for name, args in calls]

    def final(self, answer: str) -> str:
        return answer if self.native else final_answer(answer)


@pytest.fixture(params=[False, True], ids=["react", "native"])
def calling(request: pytest.FixtureRequest) -> Calling:
    return Calling(request.param)
