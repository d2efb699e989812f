"""The public surface, and the refusals that happen before any crew runs."""

from __future__ import annotations

import inspect
import subprocess
import sys

import charter
import charter_crewai
import charter_crewai.testing
import pytest
from charter_crewai import _crewai


def public_names(module) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and getattr(value, "__module__", module.__name__).startswith("charter_crewai")
    }


@pytest.mark.parametrize("module", [charter_crewai, charter_crewai.testing])
def test_all_is_exactly_the_public_names(module):
    assert sorted(module.__all__) == sorted(public_names(module))


def test_importing_the_package_does_not_import_crewai():
    # CrewAI takes seconds to import; `govern` imports it, `import charter_crewai` must not.
    code = "import sys, charter_crewai; print('crewai' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"


def test_govern_refuses_what_it_cannot_govern(build_crew, audit):
    with pytest.raises(TypeError, match=r"takes a crewai\.Crew or a crewai Agent, not str"):
        charter_crewai.govern("my crew", audit_location=audit)
    crew, _llm = build_crew(["unused"])
    governor = charter.Governor(policies=[], audit_location="none")
    try:
        with pytest.raises(ValueError, match="not both"):
            charter_crewai.govern(crew, governor=governor, agent_id="x")
    finally:
        governor.close()


def test_a_shared_governor_is_left_open(build_crew, audit, trail):
    crew, _llm = build_crew(["done"])
    governor = charter.Governor(policies=[], audit_location=audit)
    with charter_crewai.govern(crew, governor=governor) as handle:
        crew.kickoff()
    assert not handle.installed
    governor.flush()
    assert trail.summary(handle.task_ids[0])[0] == ("task.start", "crew", None)
    governor.close()


def test_a_missing_crewai_names_the_install_command(monkeypatch):
    for name in ("crewai", "crewai.hooks", "crewai.hooks.dispatch"):
        monkeypatch.setitem(sys.modules, name, None)
    _crewai.load.cache_clear()
    try:
        with pytest.raises(ImportError, match="pip install charter-crewai"):
            _crewai.load()
    finally:
        monkeypatch.undo()
        _crewai.load.cache_clear()


def test_a_too_old_crewai_names_the_upgrade(monkeypatch):
    monkeypatch.setattr(_crewai.metadata, "version", lambda name: "1.15.18")
    _crewai.load.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"supports CrewAI >=1\.15\.19,<2; crewai 1\.15\.18"):
            _crewai.load()
    finally:
        monkeypatch.undo()
        _crewai.load.cache_clear()


def test_the_guard_refuses_the_network(no_network):
    # The guard itself: a connection to a non-loopback address is refused before any packet
    # (the placeholder object would make a real connect fail too, without sending anything).
    import socket

    with pytest.raises(OSError, match="network access refused"):
        socket.socket.connect(object(), ("192.0.2.1", 9))
    assert no_network == [("192.0.2.1", 9)]
    no_network.clear()
