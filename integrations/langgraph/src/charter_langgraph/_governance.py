"""The translation: LangGraph runs, nodes, branches and tool calls in; `charter.integration`
steps, decisions and task boundaries out.

One `Governance` belongs to one governed builder. It wraps the builder's node runnables (not
the user's functions: LangGraph has already read their signatures, so `config`, `runtime`,
`store`, `writer` and `error` injection keep working) and its branch functions, and opens,
continues and closes the Charter task of each graph run. Every decision, approval and record
is the Gate's; this module only carries LangGraph's facts to it and its answers back.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import charter
from charter import report_internal_error
from charter.integration import (
    Allowed,
    Answer,
    Blocked,
    Claim,
    Gate,
    Pending,
    Step,
    StepHandle,
    approval_request,
    claim,
    node_step,
    read_answers,
    user_inputs,
)
from langchain_core.messages import ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config

# RunnableCallable is what LangGraph makes of every node function (no public name): the
# wrapper must be one too, so that LangGraph still finds a subgraph node's graph and injects
# config/runtime/store/writer/error into the wrapped node as before.
from langgraph._internal._runnable import RunnableCallable
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphBubbleUp
from langgraph.graph import END
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from ._mapping import NodeRule, check_table_names, rule_for

# Run metadata keys (also written to the thread's checkpoints): how a resume finds its task.
TASK_KEY = "charter_task_id"
AGENT_KEY = "charter_agent_id"
RUN_KEY = "charter_run"

FRAMEWORK = "langgraph"
# How far back a resumed run looks for the checkpoint that names its task (update_state and
# forks write checkpoints without it); how many run numbers a new run tries.
_LOOKBACK = 20
_PROBE = 100
# Paused tasks that are never resumed must not grow the registry without bound.
_MAX_TASKS = 10_000
_ROUNDS = 3  # questions per node run: the calls, then edits a policy asks about again
_STALE = "the approval names another input (digest mismatch): answer the current interrupt"


class ToolCallFailed(Exception):
    """Stands for a tool call that ended in an error ToolMessage, so it is recorded failed."""


def approve(by: str = "human", why: str = "", *, digest: str | None = None) -> dict[str, Any]:
    """One approving decision: ``Command(resume=approve(...))`` for a single question, or an
    entry of ``{"decisions": [...]}``. `digest` (from the action's ``charter.digest``) binds
    it to that exact input: an answer for another input is a rejection."""
    return _decision("approve", by, why, digest)


def deny(by: str = "human", why: str = "", *, digest: str | None = None) -> dict[str, Any]:
    """One rejecting decision (see `approve`)."""
    return _decision("reject", by, why, digest)


def _decision(kind: str, by: str, why: str, digest: str | None) -> dict[str, Any]:
    out = {"type": kind, "by": str(by), "message": str(why)}
    return out if digest is None else {**out, "digest": str(digest)}


def _unstale(value: Any, pending: Sequence[Pending]) -> Any:
    """The resume value with every decision that names another input's digest rejected."""
    listed = isinstance(value, Mapping) and "decisions" in value
    decisions = value.get("decisions") if listed else [value] if len(pending) == 1 else None
    if not isinstance(decisions, list) or len(decisions) != len(pending):
        return value
    return {
        "decisions": [
            {"type": "reject", "by": d.get("by"), "message": _STALE}
            if isinstance(d, Mapping) and d.get("digest") not in (None, p.digest)
            else d
            for d, p in zip(decisions, pending, strict=True)
        ]
    }


@dataclass(slots=True)
class TaskState:
    """What charter-langgraph keeps about one open task of this process."""

    task_id: str
    pauses: bool  # asks pause the graph with interrupt() (it has a checkpointer)
    halted: str | None = None
    # LangGraph task paths whose gate asked: on a re-run they ask again, so the resume value
    # reaches the interrupt it answers, never the node's own.
    asked: set[str] = field(default_factory=set)
    edits: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)


class _Registry:
    """Open tasks per Governor, shared by every graph governed with it (a subgraph joins
    its parent's task)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: OrderedDict[str, TaskState] = OrderedDict()

    def get(self, task_id: Any) -> TaskState | None:
        return self.tasks.get(task_id) if isinstance(task_id, str) else None

    def put(self, state: TaskState) -> None:
        with self.lock:
            self.tasks[state.task_id] = state
            while len(self.tasks) > _MAX_TASKS:
                self.tasks.popitem(last=False)

    def drop(self, task_id: str) -> None:
        with self.lock:
            self.tasks.pop(task_id, None)


_registries: weakref.WeakKeyDictionary[charter.Governor, _Registry] = weakref.WeakKeyDictionary()
_registries_lock = threading.Lock()


def registry_for(governor: charter.Governor) -> _Registry:
    with _registries_lock:
        return _registries.setdefault(governor, _Registry())


@dataclass(slots=True)
class Run:
    """One call of stream/astream: the config the graph runs with, and whether it owns the
    task's boundaries (a subgraph joining its parent's task does not)."""

    config: dict[str, Any]
    task_id: str | None
    owns: bool
    saver: BaseCheckpointSaver[Any] | None = None


class Governance:
    """Charter on one StateGraph builder; returned by `charter_langgraph.govern`.

    `compile(...)` compiles the builder governed (as ``builder.compile`` does now),
    `builder` and `governor` are what it governs with, `uninstall()` detaches Charter: the
    builder and every graph compiled from it run ungoverned again, runs still open are
    closed as unfinished, and a Governor that `govern` built is closed. ``with govern(...)``
    uninstalls on exit.
    """

    def __init__(
        self,
        builder: Any,
        gate: Gate,
        *,
        owns_governor: bool,
        table: Mapping[str, NodeRule],
        on_block: str,
        block_key: str,
        ask: str,
    ) -> None:
        self.builder = builder
        self.gate = gate
        self.governor: charter.Governor = gate.governor
        self.table = dict(table)
        self.on_block, self.block_key, self.ask = on_block, block_key, ask
        self.registry = registry_for(self.governor)
        self.state_keys: frozenset[str] = frozenset()
        self.installed = True
        self._owns_governor = owns_governor
        self._builder_class: type = type(builder)
        self._nodes: dict[str, Any] = {}
        self._branches: dict[tuple[str, str], Any] = {}
        self._opened: set[str] = set()

    def __repr__(self) -> str:
        state = "installed" if self.installed else "uninstalled"
        return f"<charter_langgraph.Governance of {self._builder_class.__name__}: {state}>"

    def __enter__(self) -> Governance:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        """The builder compiled, every node, tool call and run governed (the arguments are
        `StateGraph.compile`'s)."""
        return self.builder.compile(*args, **kwargs)

    def uninstall(self) -> None:
        """Detach Charter (see the class); idempotent."""
        if not self.installed:
            return
        self.installed = False
        builder = self.builder
        builder.__class__ = self._builder_class
        vars(builder).pop("_charter_governance", None)
        for name, runnable in self._nodes.items():
            if name in builder.nodes:
                builder.nodes[name].runnable = runnable
        for (start, key), branch in self._branches.items():
            if key in builder.branches.get(start, {}):
                builder.branches[start][key] = branch
        for task_id in list(self._opened):
            self.registry.drop(task_id)
            self.gate.supersede(task_id, "charter_langgraph was uninstalled")
        self._opened.clear()
        if self._owns_governor:
            self.governor.close()

    # -- wrapping the builder (at compile time) ----------------------------------------------

    def wrap(self, builder: Any) -> None:
        """Wrap every node and branch of `builder` not wrapped yet (compile may run again)."""
        check_table_names(self.table, builder.nodes)
        self.state_keys = frozenset(builder.channels)
        for name, spec in builder.nodes.items():
            if getattr(spec.runnable, "_charter_langgraph", None) is not self:
                self._nodes.setdefault(name, spec.runnable)
                spec.runnable = self._wrap_node(name, spec)
        for start, branches in builder.branches.items():
            for key, branch in list(branches.items()):
                if getattr(branch.path, "_charter_langgraph", None) is not self:
                    self._branches.setdefault((start, key), branch)
                    branches[key] = branch._replace(path=self._wrap_branch(branch.path))

    def _wrap_node(self, name: str, spec: Any) -> Runnable[Any, Any]:
        inner = spec.runnable
        if isinstance(inner, ToolNode):
            tools = _governed_tool_node(inner, self, name)

            def tnode(input: Any, config: RunnableConfig) -> Any:
                return self._tools_sync(name, tools, input, config)

            async def atnode(input: Any, config: RunnableConfig) -> Any:
                return await self._tools_async(name, tools, input, config)

            return self._callable(name, tools, tnode, atnode)
        rule = rule_for(name, self.table, spec.metadata)

        # Both functions name `inner` in their bodies: LangGraph finds a subgraph node's
        # graph by reading the node function's closure (find_subgraph_pregel).
        def node(input: Any, config: RunnableConfig) -> Any:
            return self._node_sync(name, rule, inner, input, config)

        async def anode(input: Any, config: RunnableConfig) -> Any:
            return await self._node_async(name, rule, inner, input, config)

        return self._callable(name, inner, node, anode)

    def _callable(
        self, name: str, inner: Any, func: Callable[..., Any], afunc: Callable[..., Any]
    ) -> Runnable[Any, Any]:
        # Keep the inner node's sync/async shape: an async-only node stays async-only, so
        # LangGraph refuses (or allows) exactly what it did before.
        sync_fn, async_fn = func, afunc
        if isinstance(inner, RunnableCallable):
            sync_fn = func if inner.func is not None else None  # type: ignore[assignment]
            async_fn = afunc if inner.afunc is not None else None  # type: ignore[assignment]
        wrapped = RunnableCallable(sync_fn, async_fn, name=name, trace=False, recurse=False)
        wrapped._charter_langgraph = self  # type: ignore[attr-defined]
        return wrapped

    def _wrap_branch(self, path: Runnable[Any, Any]) -> Runnable[Any, Any]:
        def route(input: Any, config: RunnableConfig) -> Any:
            if self._halted(config):
                return []  # a blocked run routes nowhere: nothing after the block runs
            return path.invoke(input, config)

        async def aroute(input: Any, config: RunnableConfig) -> Any:
            if self._halted(config):
                return []
            return await path.ainvoke(input, config)

        return self._callable(getattr(path, "name", None) or "branch", path, route, aroute)

    # -- the facts of one node run or tool call ----------------------------------------------

    def _state(self, config: Any) -> TaskState | None:
        return self.registry.get((config.get("metadata") or {}).get(TASK_KEY))

    def _halted(self, config: Any) -> bool:
        state = self._state(config)
        return self.installed and state is not None and state.halted is not None

    @staticmethod
    def _ids(config: Any, node: str) -> dict[str, Any]:
        step = (config.get("metadata") or {}).get("langgraph_step")
        return {
            "thread_id": (config.get("configurable") or {}).get("thread_id"),
            "node": node,
            "step": step if isinstance(step, int) else None,
        }

    def _node_step(self, name: str, rule: NodeRule, input: Any, config: Any) -> Step:
        return node_step(
            FRAMEWORK,
            name,
            input,
            kind=rule.kind,
            verb=rule.verb,
            properties=rule.properties,
            ids=self._ids(config, name),
        )

    def _tool_step(self, node: str, call: Mapping[str, Any], config: Any) -> Step:
        args = call.get("args")
        call_id = call.get("id")
        return self.gate.tool_step(
            str(call.get("name") or "unnamed"),
            dict(args) if isinstance(args, Mapping) else {},
            call_id=call_id if isinstance(call_id, str) else None,
            ids=self._ids(config, node),
        )

    # -- deciding -------------------------------------------------------------------------------

    def _ask(self, state: TaskState, key: str, pending: Sequence[Pending]) -> None:
        """Pause with one `interrupt()` for every pending step, then record the answers.

        Runs again on every re-run of the node: LangGraph then hands back the resume value
        instead of pausing, so answers are recorded only once every question of the node
        was answered. A reviewer's edit a policy asks about again is one more question. A
        path that asked before asks again even when nothing is pending any more (a policy
        changed), so the resume value never reaches the node's own interrupt. Raises
        GraphInterrupt (LangGraph's pause) while nobody answered.
        """
        state.asked.add(key)
        if not pending:
            interrupt({"charter": "the approval asked for on an earlier run of this node"})
            return
        answered: list[tuple[Pending, Answer]] = []
        for _ in range(_ROUNDS):
            value = interrupt(approval_request(pending))
            answers = read_answers(_unstale(value, pending), pending)
            answered.extend(zip(pending, answers, strict=True))
            edits = [
                self.gate.edit(p, a) if p.call_id is not None else None
                for p, a in zip(pending, answers, strict=True)
            ]
            pending = [
                q for e in edits if e is not None and (q := self.gate.pending(e, state.task_id))
            ]
            if not pending:
                break
        for p, answer in answered:
            try:
                step = self.gate.answer(p, answer)
            except Exception as exc:  # not on record: deciding asks the approver instead
                report_internal_error(exc, f"langgraph: the answer on {p.step.name!r}")
                continue
            if answer.kind == "edit" and p.call_id is not None:
                state.edits[p.call_id] = (step.name, dict(step.input))

    def _asks_here(self, state: TaskState, key: str) -> bool:
        """Whether the node at `key` may have to ask: this run can pause, and a loaded
        policy can ask or the path asked on an earlier run (its resume value is due)."""
        return state.pauses and (key in state.asked or self.gate.asks)

    def _pause_for(self, state: TaskState, key: str, steps: Sequence[Step]) -> None:
        """Ask about the steps a policy asks about (when this run can pause)."""
        if not self._asks_here(state, key):
            return
        pending = [p for s in steps if (p := self.gate.pending(s, state.task_id)) is not None]
        if pending or key in state.asked:
            self._ask(state, key, pending)

    def _node_decision(
        self, name: str, rule: NodeRule, input: Any, config: Any
    ) -> tuple[TaskState | None, Step, Allowed | Blocked | None]:
        """The node's step, and its decision when it cannot be judged (None: decide it)."""
        state = self._state(config)
        try:
            step = self._node_step(name, rule, input, config)
        except Exception as exc:
            fallback = Step(rule.kind, rule.verb, name)
            return state, fallback, self.gate.undecided(fallback, exc)
        if state is None:
            why = RuntimeError("this run has no open Charter task (run the governed graph)")
            return state, step, self.gate.undecided(step, why)
        self._pause_for(state, _path(config, name), [step])
        return state, step, None

    def _refuse_node(self, name: str, state: TaskState | None, blocked: Blocked) -> Any:
        """End the run with the reason in state (on_block="end"), or raise the block."""
        if self.on_block == "raise":
            raise blocked.error()
        if state is not None:
            state.halted = f"{name}: {blocked.reason}"
        update = {self.block_key: blocked.reason} if self.block_key in self.state_keys else None
        return Command(goto=END, update=update)

    def _decided(self, decision: Allowed | Blocked | Pending) -> Allowed | Blocked:
        """A decision made after the pause: without `pause` the Gate never returns Pending
        (a recorded answer is used, or the Governor's approver answers)."""
        assert not isinstance(decision, Pending)
        return decision

    def _claim(self, kind: str, call_id: str | None, name: str, state: TaskState | None) -> Any:
        """The core claim held while a gated step runs: another integration on this
        Governor (charter-langchain's handler) then neither gates nor records it again."""
        if state is None:
            return nullcontext()
        return _claimed(Claim(kind, call_id, name, self.governor, state.task_id))

    # -- one node run -----------------------------------------------------------------------------

    def _node_sync(self, name: str, rule: NodeRule, inner: Any, input: Any, config: Any) -> Any:
        if not self.installed:
            return inner.invoke(input, config)
        if self._halted(config):
            return None
        state, step, decision = self._node_decision(name, rule, input, config)
        if decision is None:
            decision = self._decided(self.gate.decide(step, _task_of(state)))
        if isinstance(decision, Blocked):
            return self._refuse_node(name, state, decision)
        with self._claim("node", None, name, state):
            try:
                output = inner.invoke(input, config)
            except BaseException as exc:
                self._settle_error(decision.handle, exc)
                raise
        self.gate.complete(decision.handle, output)
        if state is not None:
            state.asked.discard(_path(config, name))
        return output

    async def _node_async(
        self, name: str, rule: NodeRule, inner: Any, input: Any, config: Any
    ) -> Any:
        if not self.installed:
            return await inner.ainvoke(input, config)
        if self._halted(config):
            return None
        state, step, decision = self._node_decision(name, rule, input, config)
        if decision is None:
            decision = self._decided(await self.gate.adecide(step, _task_of(state)))
        if isinstance(decision, Blocked):
            return self._refuse_node(name, state, decision)
        with self._claim("node", None, name, state):
            try:
                output = await inner.ainvoke(input, config)
            except BaseException as exc:
                await self._asettle_error(decision.handle, exc)
                raise
        await self.gate.acomplete(decision.handle, output)
        if state is not None:
            state.asked.discard(_path(config, name))
        return output

    def _settle_error(self, handle: StepHandle | None, exc: BaseException) -> None:
        # A pause (interrupt inside the body) or a cancellation is not a failure: the node
        # runs again later, as a new step.
        if isinstance(exc, GraphBubbleUp) or not isinstance(exc, Exception):
            self.gate.abandon(handle)
        else:
            self.gate.fail(handle, exc)

    async def _asettle_error(self, handle: StepHandle | None, exc: BaseException) -> None:
        if isinstance(exc, GraphBubbleUp) or not isinstance(exc, Exception):
            await self.gate.aabandon(handle)
        else:
            await self.gate.afail(handle, exc)

    # -- tool nodes: the calls are the steps --------------------------------------------------

    def _tools_first(self, name: str, inner: ToolNode, input: Any, config: Any) -> Any:
        """Before the calls run (in parallel): one interrupt for every call a policy asks
        about; returns the claim to hold while the ToolNode runs."""
        state = self._state(config)
        if state is None:
            return nullcontext()
        if not self._asks_here(state, _path(config, name)):
            # Nothing to ask about: each call is mapped and judged when it runs.
            return self._claim("node", None, name, state)
        try:
            calls, _ = inner._parse_input(input)
        except Exception:  # the ToolNode reports a bad input itself, with its own message
            calls = []
        steps = []
        for call in calls:
            try:
                steps.append(self._tool_step(name, call, config))
            except Exception:  # each call is refused with the reason when it is gated
                continue
        self._pause_for(state, _path(config, name), steps)
        return self._claim("node", None, name, state)

    def _tools_sync(self, name: str, inner: ToolNode, input: Any, config: Any) -> Any:
        if self._halted(config):
            return None
        if not self.installed:
            return inner.invoke(input, config)
        with self._tools_first(name, inner, input, config):
            output = inner.invoke(input, config)
        self._done_asking(name, config)
        return output

    async def _tools_async(self, name: str, inner: ToolNode, input: Any, config: Any) -> Any:
        if self._halted(config):
            return None
        if not self.installed:
            return await inner.ainvoke(input, config)
        with self._tools_first(name, inner, input, config):
            output = await inner.ainvoke(input, config)
        self._done_asking(name, config)
        return output

    def _done_asking(self, name: str, config: Any) -> None:
        state = self._state(config)
        if state is not None:
            state.asked.discard(_path(config, name))

    def edited(self, request: Any, tools: Mapping[str, Any]) -> Any:
        """The tool call request as a reviewer edited it (an ``edit`` decision), else as is."""
        call = request.tool_call
        state = self._state(request.runtime.config)
        found = state.edits.pop(call.get("id"), None) if state is not None else None
        if found is None:
            return request
        name, args = found
        tool = tools.get(name, request.tool)
        return request.override(tool_call={**call, "name": name, "args": args}, tool=tool)

    def _tool_decision(
        self, node: str, call: Mapping[str, Any], config: Any
    ) -> tuple[TaskState | None, Step, Allowed | Blocked | None]:
        state = self._state(config)
        try:
            step = self._tool_step(node, call, config)
        except Exception as exc:
            fallback = Step("step.unknown", None, str(call.get("name") or "unnamed"))
            return state, fallback, self.gate.undecided(fallback, exc)
        if state is None:
            return state, step, self.gate.undecided(step, RuntimeError("no open Charter task"))
        return state, step, None

    def gate_tool(self, node: str, request: Any, execute: Callable[[Any], Any]) -> Any:
        """Gate one tool call inside a ToolNode (sync); a refusal is an error ToolMessage."""
        if not self.installed:
            return execute(request)
        call = request.tool_call
        state, step, decision = self._tool_decision(node, call, request.runtime.config)
        if decision is None:
            decision = self._decided(self.gate.decide(step, _task_of(state)))
        if isinstance(decision, Blocked):
            return _refusal(call, decision.reason)
        with self._claim("tool", call.get("id"), step.name, state):
            try:
                result = execute(request)
            except BaseException as exc:
                self._settle_error(decision.handle, exc)
                raise
        failed = _tool_error(result)
        if failed is None:
            self.gate.complete(decision.handle, result)
        else:
            self.gate.fail(decision.handle, failed)
        return result

    async def agate_tool(self, node: str, request: Any, execute: Callable[[Any], Any]) -> Any:
        """Gate one tool call inside a ToolNode (async)."""
        if not self.installed:
            return await execute(request)
        call = request.tool_call
        state, step, decision = self._tool_decision(node, call, request.runtime.config)
        if decision is None:
            decision = self._decided(await self.gate.adecide(step, _task_of(state)))
        if isinstance(decision, Blocked):
            return _refusal(call, decision.reason)
        with self._claim("tool", call.get("id"), step.name, state):
            try:
                result = await execute(request)
            except BaseException as exc:
                await self._asettle_error(decision.handle, exc)
                raise
        failed = _tool_error(result)
        if failed is None:
            await self.gate.acomplete(decision.handle, result)
        else:
            await self.gate.afail(decision.handle, failed)
        return result

    # -- runs: the task's boundaries ----------------------------------------------------------

    def open_run(self, graph: Any, input: Any, config: Any) -> Run:
        """Start or continue the task of a stream() call. Raises BlockedError when the task
        may not start: an ungoverned run never starts."""
        run, lookup = self._begin(graph, input, config)
        previous = None
        if lookup is not None and run.saver is not None:
            try:
                previous = _previous_run(run.saver, lookup)
            except Exception as exc:
                report_internal_error(exc, "langgraph: the task of the thread's last checkpoint")
        return self._settle_task(graph, run, input, previous) if run.owns else run

    async def aopen_run(self, graph: Any, input: Any, config: Any) -> Run:
        """Start or continue the task of an astream() call (see open_run)."""
        run, lookup = self._begin(graph, input, config)
        previous = None
        if lookup is not None and run.saver is not None:
            try:
                previous = await _aprevious_run(run.saver, lookup)
            except Exception as exc:
                report_internal_error(exc, "langgraph: the task of the thread's last checkpoint")
        if not run.owns:
            return run
        return await asyncio.to_thread(self._settle_task, graph, run, input, previous)

    def _begin(self, graph: Any, input: Any, config: Any) -> tuple[Run, dict[str, Any] | None]:
        """The run, and the config that finds the thread's last checkpoint (None: no lookup)."""
        config = dict(config or {})
        configurable = dict(config.get("configurable") or {})
        joined = self._state(config)
        if joined is not None and self.gate.task_state(joined.task_id) == "open":
            # A governed subgraph (or a graph called inside a governed node) with the same
            # Governor: its nodes are steps of the parent's task.
            return Run(config, joined.task_id, owns=False), None
        saver = graph.checkpointer
        if not isinstance(saver, BaseCheckpointSaver) or configurable.get("checkpoint_ns"):
            saver = None
        run = Run(config, None, owns=True, saver=saver)
        if saver is None or configurable.get("thread_id") is None:
            return run, None
        return run, {**config, "configurable": configurable}

    def _settle_task(
        self, graph: Any, run: Run, input: Any, previous: tuple[str, int] | None
    ) -> Run:
        thread = (run.config.get("configurable") or {}).get("thread_id")
        continuing = input is None or isinstance(input, Command)
        task_id, number = None, 0
        if previous is not None:
            prev, number = previous
            state = self.gate.resume_task(prev)  # restored from the store after a restart
            if continuing and state == "open":
                task_id = prev
            else:
                self.gate.supersede(prev)  # new input on a paused thread drops the paused run
                self.registry.drop(prev)
        if task_id is None:
            props: dict[str, Any] = {"name": FRAMEWORK, "graph": graph.get_name()}
            if thread is not None:
                props["thread_id"] = str(thread)
            if previous is not None and continuing:
                props["continues"] = previous[0]
            wanted, number = self._new_task_id(thread, number + 1)
            started = self.gate.start_task(
                wanted,
                name=graph.get_name(),
                input=input,
                properties={"framework": {**props, "run": number}},
            )
            if isinstance(started, Blocked):
                raise started.error()
            refused = self.gate.user_messages(started, _user_words(input))
            if refused is not None:
                error = refused.error()
                self.gate.end_task(started, error)
                raise error
            task_id = started
            self._opened.add(task_id)
        if self.registry.get(task_id) is None:
            self.registry.put(TaskState(task_id, self.ask == "interrupt" and run.saver is not None))
        metadata = {
            **(run.config.get("metadata") or {}),
            TASK_KEY: task_id,
            AGENT_KEY: self.gate.agent_id,
            RUN_KEY: number,
        }
        run.config = {**run.config, "metadata": metadata}
        run.task_id = task_id
        return run

    def _new_task_id(self, thread: Any, number: int) -> tuple[str | None, int]:
        """The task id of the thread's next run: the first run number no task has taken
        (an audit store may hold runs of a thread whose checkpoints are gone)."""
        if thread is None:
            return None, number
        for _ in range(_PROBE):
            task_id = self.gate.run_task_id(thread, number)
            if self.gate.resume_task(task_id) == "unknown":
                return task_id, number
            self.gate.supersede(task_id)
            number += 1
        return None, number

    def close_run(self, graph: Any, run: Run, error: BaseException | None) -> None:
        """End the task at the run's end, unless the run paused (interrupt, breakpoint)."""
        if not run.owns or run.task_id is None:
            return
        state = self.registry.get(run.task_id)
        if error is None and (state is None or state.halted is None) and run.saver is not None:
            if _paused(graph, run.config):
                return
        self._end(run.task_id, state, error)

    async def aclose_run(self, graph: Any, run: Run, error: BaseException | None) -> None:
        if not run.owns or run.task_id is None:
            return
        state = self.registry.get(run.task_id)
        if error is None and (state is None or state.halted is None) and run.saver is not None:
            if await _apaused(graph, run.config):
                return
        await asyncio.to_thread(self._end, run.task_id, state, error)

    def _end(self, task_id: str, state: TaskState | None, error: BaseException | None) -> None:
        self.registry.drop(task_id)
        self._opened.discard(task_id)
        output = None
        if error is None and state is not None and state.halted is not None:
            output = {"langgraph": {"blocked": state.halted}}
        try:
            self.gate.end_task(task_id, error, output)
        except charter.AuditError as exc:  # sync durability: the end is not on record
            if error is None:
                raise
            error.add_note(f"charter: the task's end could not be recorded: {exc}")


def _user_words(input: Any) -> list[Any]:
    """The user's request in a run's input: the new human messages of its ``messages``
    channel (MessagesState and agents built on it); a graph whose input has no messages
    carries no user content."""
    messages = input.get("messages") if isinstance(input, Mapping) else None
    if isinstance(messages, str):
        return [messages]
    if not isinstance(messages, (list, tuple)):
        return []
    return user_inputs(messages)


def _task_of(state: TaskState | None) -> str:
    assert state is not None  # no task: the decision was made without the gate
    return state.task_id


def _path(config: Any, name: str) -> str:
    """The LangGraph task path of a node run: the same on every re-run of it."""
    return str((config.get("metadata") or {}).get("langgraph_checkpoint_ns") or name)


def _refusal(call: Mapping[str, Any], reason: str) -> ToolMessage:
    return ToolMessage(
        content=f"Blocked by Charter: {reason}",
        name=str(call.get("name") or "unnamed"),
        tool_call_id=str(call.get("id") or ""),
        status="error",
    )


def _tool_error(result: Any) -> ToolCallFailed | None:
    if isinstance(result, ToolMessage) and result.status == "error":
        content = result.content if isinstance(result.content, str) else str(result.content)
        return ToolCallFailed(content)
    return None


def _governed_tool_node(original: ToolNode, governance: Governance, name: str) -> ToolNode:
    """A copy of `original` whose tool calls pass the gate first, inside the user's own
    wrap_tool_call (so the gate sees the call exactly as it will run)."""
    clone = copy.copy(original)
    # RunnableCallable keeps bound methods of the original; rebind them to the clone so the
    # clone's wrappers are the ones used.
    for attr in ("func", "afunc"):
        fn = getattr(clone, attr, None)
        if isinstance(fn, types.MethodType) and fn.__self__ is original:
            setattr(clone, attr, types.MethodType(fn.__func__, clone))
    user_wrap, user_awrap = original._wrap_tool_call, original._awrap_tool_call

    def wrap(request: Any, execute: Callable[[Any], Any]) -> Any:
        def gated(req: Any) -> Any:
            return governance.gate_tool(name, req, execute)

        request = governance.edited(request, clone.tools_by_name)
        return gated(request) if user_wrap is None else user_wrap(request, gated)

    async def awrap(request: Any, execute: Callable[[Any], Any]) -> Any:
        async def gated(req: Any) -> Any:
            return await governance.agate_tool(name, req, execute)

        request = governance.edited(request, clone.tools_by_name)
        return await gated(request) if user_awrap is None else await user_awrap(request, gated)

    # Always a sync wrapper: a ToolNode without one runs its tools ungated under invoke().
    clone._wrap_tool_call = wrap
    # Without an async wrapper LangGraph runs the sync one under ainvoke; keep the user's
    # choice when they gave only a sync wrapper.
    clone._awrap_tool_call = awrap if (user_awrap is not None or user_wrap is None) else None
    return clone


# -- checkpoints: which run a thread is in, and whether it paused -----------------------------


def _run_in(metadata: Any) -> tuple[str, int] | None:
    found = metadata.get(TASK_KEY) if isinstance(metadata, Mapping) else None
    if not isinstance(found, str) or not found:
        return None
    number = metadata.get(RUN_KEY)
    return found, number if type(number) is int and number > 0 else 1


def _previous_run(saver: BaseCheckpointSaver[Any], config: Any) -> tuple[str, int] | None:
    for _ in range(_LOOKBACK):
        found = saver.get_tuple(config)
        if found is None:
            return None
        run = _run_in(found.metadata)
        if run is not None or found.parent_config is None:
            return run
        config = found.parent_config
    return None


async def _aprevious_run(saver: BaseCheckpointSaver[Any], config: Any) -> tuple[str, int] | None:
    for _ in range(_LOOKBACK):
        try:
            found = await saver.aget_tuple(config)
        except NotImplementedError:
            found = await asyncio.to_thread(saver.get_tuple, config)
        if found is None:
            return None
        run = _run_in(found.metadata)
        if run is not None or found.parent_config is None:
            return run
        config = found.parent_config
    return None


def _latest(config: dict[str, Any]) -> dict[str, Any]:
    configurable = {
        k: v for k, v in (config.get("configurable") or {}).items() if k != "checkpoint_id"
    }
    return {**config, "configurable": configurable}


def _waiting(snapshot: Any) -> bool:
    # Interrupts count on their own: LangGraph reports a task paused by a second interrupt()
    # with no `next`.
    return bool(snapshot.next) or any(task.interrupts for task in snapshot.tasks)


def _paused(graph: Any, config: dict[str, Any]) -> bool:
    try:
        return _waiting(graph.get_state(_latest(config)))
    except Exception as exc:
        # Unknown: leave the task open (the idle sweeper closes it) rather than cut a chain
        # a resume would continue.
        report_internal_error(exc, "langgraph: whether the run paused")
        return True


async def _apaused(graph: Any, config: dict[str, Any]) -> bool:
    try:
        return _waiting(await graph.aget_state(_latest(config)))
    except Exception as exc:
        report_internal_error(exc, "langgraph: whether the run paused")
        return True


@contextmanager
def _claimed(held: Claim) -> Iterator[Claim]:
    """Hold `held` in the context and in the run metadata child runs inherit: LangChain
    copies a parent's config (metadata included) to every child run, also where a context
    variable set here would not reach."""
    config = var_child_runnable_config.get()
    inherited = dict(config) if config else {}
    inherited["metadata"] = {**(inherited.get("metadata") or {}), **held.metadata()}
    token = var_child_runnable_config.set(inherited)  # type: ignore[arg-type]
    try:
        with claim(held):
            yield held
    finally:
        try:
            var_child_runnable_config.reset(token)
        except ValueError:  # reset from another context (a generator finalised elsewhere)
            var_child_runnable_config.set(config)
