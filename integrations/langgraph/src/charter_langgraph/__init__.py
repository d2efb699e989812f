"""Charter for LangGraph: every node, tool call and human approval of a graph, governed.

``graph = charter_langgraph.govern(builder, policy_file="policies.yaml").compile(...)``
gates each node run and each ToolNode tool call before it runs, records its outcome after,
bounds each graph run of a thread with a Charter task, and turns a policy's ``ask`` into a
LangGraph ``interrupt()`` (one HumanInTheLoopMiddleware-shaped request for every pending
action) answered with ``Command(resume={"decisions": [...]})``.
"""

from __future__ import annotations

try:
    import langgraph.graph as _langgraph_graph  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without langgraph
    raise ImportError(
        "charter_langgraph needs LangGraph; install it with `pip install charter-langgraph`"
    ) from exc

from ._governance import AGENT_KEY, TASK_KEY, Governance, ToolCallFailed, approve, deny
from ._graph import govern, governor_of

__all__ = [
    "AGENT_KEY",
    "TASK_KEY",
    "Governance",
    "ToolCallFailed",
    "approve",
    "deny",
    "govern",
    "governor_of",
]
