"""`govern(builder)`: the builder and the graphs it compiles, governed.

The builder keeps its class's behavior plus one change: `compile()` wraps every node and
branch first (so nodes added after `govern` are governed too) and returns a compiled graph
whose `stream` / `astream` (which `invoke`, `ainvoke`, `batch` and the event streams all go
through) open, continue and close the run's Charter task. Both are subclasses made on the
fly of the object's own class, so `isinstance` checks and every other method are unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import charter
from charter.integration import Gate
from langgraph.graph import StateGraph

from ._governance import FRAMEWORK, Governance
from ._mapping import parse_table

_ATTR = "_charter_governance"
_ON_BLOCK = ("end", "raise")
_ASK = ("interrupt", "approver")


def govern(
    builder: Any,
    *,
    governor: charter.Governor | None = None,
    nodes: Mapping[str, Any] | None = None,
    on_block: str = "end",
    block_key: str = "charter_blocked",
    ask: str = "interrupt",
    approver: Any = None,
    **settings: Any,
) -> Governance:
    """Govern every node, tool call and approval of a StateGraph builder; returns the
    `Governance` handle (``govern(builder, ...).compile(...)`` compiles it governed;
    ``builder.compile(...)`` does too, until ``handle.uninstall()``).

    Each node run is one step (kind/verb from `nodes`, else the node's
    ``metadata={"charter": ...}``, else step.exec); each tool call of a ToolNode is one step
    mapped by the behavior templates; each graph run of a thread is one task. Pass an
    existing `governor` (shared with other integrations) or Governor setting keywords
    (``policy_file=``, ``agent_id=``, ``audit_location=``, ...) and `approver`, not both.

    `on_block`: ``"end"`` ends the run cleanly (the blocked node returns ``Command(goto=END)``
    with the reason under `block_key` when the state has that key, and nothing after it
    runs); ``"raise"`` raises `charter.BlockedError` (a PermissionError, which RetryPolicy's
    default never retries). `ask`: ``"interrupt"`` pauses with LangGraph's ``interrupt()``
    (needs a checkpointer; without one the approver decides); ``"approver"`` asks the
    Governor's approver in place (default: deny).

    Refuses (ValueError) an unknown `on_block` / `ask`, a bad `nodes` entry, settings
    together with `governor`, and a builder governed already; TypeError for a non-builder.
    """
    if not isinstance(builder, StateGraph):
        raise TypeError(
            f"govern() takes a langgraph StateGraph builder, not {type(builder).__name__}; "
            "govern the builder before compile()"
        )
    if getattr(builder, _ATTR, None) is not None:
        raise ValueError(
            "this builder is governed already; call govern() once per builder (or "
            "handle.uninstall() first)"
        )
    if on_block not in _ON_BLOCK:
        raise ValueError(f"on_block={on_block!r}: use 'end' or 'raise'")
    if ask not in _ASK:
        raise ValueError(f"ask={ask!r}: use 'interrupt' or 'approver'")
    if not isinstance(block_key, str) or not block_key:
        raise ValueError("block_key= must name a state key (a non-empty string)")
    table = parse_table(nodes)
    gate = Gate(FRAMEWORK, governor=governor, approver=approver, **settings)
    governance = Governance(
        builder,
        gate,
        owns_governor=governor is None,
        table=table,
        on_block=on_block,
        block_key=block_key,
        ask=ask,
    )
    setattr(builder, _ATTR, governance)
    original: Any = type(builder)
    builder.__class__ = _governed_builder_class(original)
    return governance


def governor_of(graph: Any) -> charter.Governor:
    """The Governor of a `govern` handle, a governed builder or a graph compiled from one
    (ValueError else)."""
    found = graph if isinstance(graph, Governance) else getattr(graph, _ATTR, None)
    if not isinstance(found, Governance):
        raise ValueError("this graph is not governed by charter_langgraph.govern()")
    return found.governor


@functools.cache
def _governed_builder_class(cls: type) -> Any:
    """`cls` with a compile() that governs what it compiles (a plain subclass: a mixin base
    would change the instance layout and forbid the __class__ swap)."""

    def compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        governance: Governance = getattr(self, _ATTR)
        governance.wrap(self)
        compiled = super(governed, self).compile(*args, **kwargs)
        compiled.__class__ = _governed_graph_class(type(compiled), governance)
        return compiled

    governed: Any = type(f"Governed{cls.__name__}", (cls,), {"compile": compile})
    return governed


def _governed_graph_class(cls: type, governance: Governance) -> Any:
    """`cls` whose stream/astream (which invoke, ainvoke, batch and the event streams all
    go through) bound every run with its Charter task. The governance is a class attribute:
    copies of the graph (``with_config``) keep it."""

    def stream(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Iterator[Any]:
        governance: Governance = self._charter_governance
        if not governance.installed:
            yield from super(governed, self).stream(input, config, **kwargs)
            return
        run = governance.open_run(self, input, config)
        try:
            yield from super(governed, self).stream(input, run.config, **kwargs)
        except GeneratorExit:
            # The caller stopped reading: like a pause, the thread can be continued later.
            raise
        except BaseException as exc:
            governance.close_run(self, run, exc)
            raise
        governance.close_run(self, run, None)

    async def astream(
        self: Any, input: Any, config: Any = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        governance: Governance = self._charter_governance
        if not governance.installed:
            async for chunk in super(governed, self).astream(input, config, **kwargs):
                yield chunk
            return
        run = await governance.aopen_run(self, input, config)
        try:
            async for chunk in super(governed, self).astream(input, run.config, **kwargs):
                yield chunk
        except GeneratorExit:
            raise
        except BaseException as exc:
            await governance.aclose_run(self, run, exc)
            raise
        await governance.aclose_run(self, run, None)

    namespace = {"stream": stream, "astream": astream, "_charter_governance": governance}
    governed: Any = type(f"Governed{cls.__name__}", (cls,), namespace)
    return governed
