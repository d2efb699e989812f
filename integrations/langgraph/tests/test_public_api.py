"""The public surface: `__all__` is exactly the public names, and a missing LangGraph gives
an ImportError that names the install command."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import charter_langgraph
import pytest


def test_all_is_exactly_the_public_names():
    public = {n for n in vars(charter_langgraph) if not n.startswith("_")}
    public -= {"annotations"}  # from __future__
    assert set(charter_langgraph.__all__) == public
    assert charter_langgraph.TASK_KEY == "charter_task_id"
    assert charter_langgraph.AGENT_KEY == "charter_agent_id"
    # The gated-run marker is gone: the core claim (charter.integration) says it instead.
    assert not hasattr(charter_langgraph, "GATED_KEY")


def test_a_missing_langgraph_names_the_install_command(monkeypatch):
    init = Path(charter_langgraph.__file__)
    spec = importlib.util.spec_from_file_location("charter_langgraph_probe", init)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "langgraph.graph", None)
    with pytest.raises(ImportError, match=r"pip install charter-langgraph"):
        spec.loader.exec_module(module)


def test_govern_refuses_what_it_cannot_govern(settings):
    with pytest.raises(TypeError, match="StateGraph builder"):
        charter_langgraph.govern(object(), **settings)
    from langgraph.graph import StateGraph

    with pytest.raises(ValueError, match="on_block='stop'"):
        charter_langgraph.govern(StateGraph(dict), on_block="stop", **settings)
    with pytest.raises(ValueError, match="not both"):
        charter_langgraph.govern(StateGraph(dict), governor=object(), agent_id="x")
    with pytest.raises(ValueError, match="not governed"):
        charter_langgraph.governor_of(StateGraph(dict))
