"""The translation: LangGraph runs, nodes, branches and tool calls in; Governor calls out.

One `Governance` belongs to one governed builder. It wraps the builder's node runnables (not
the user's functions: LangGraph has already read their signatures, so `config`, `runtime`,
`store`, `writer` and `error` injection keep working unchanged) and its branch functions, and
opens, continues and closes the Charter task of each graph run. Everything a gate decides is
decided by the Governor; this module only carries LangGraph's facts to it and its verdicts
back.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import threading
import types
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import charter
from charter import report_internal_error
from charter_templates import TemplateSet, resolve
from langchain_core.messages import ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig

# RunnableCallable is what LangGraph makes of every node function (no public name): the
# wrapper must be one too, so that LangGraph still finds a subgraph node's graph and injects
# config/runtime/store/writer/error into the wrapped node as before.
from langgraph._internal._runnable import RunnableCallable
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphBubbleUp
from langgraph.graph import END
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from ._answers import Answer, answering, question, read_answer
from ._mapping import NodeRule, check_table_names, rule_for

# Callback/config metadata keys: the contract with other integrations (see the README).
TASK_KEY = "charter_task_id"
AGENT_KEY = "charter_agent_id"
GATED_KEY = "charter_gated"

TEMPLATE_INTEGRATION = "langgraph"
# Payloads bigger than this are cut with visible markers before they are recorded.
MAX_STRING = 16_384
MAX_ITEMS = 500
# How far back a resumed run looks for the checkpoint that names its task (update_state and
# forks write checkpoints without it).
_LOOKBACK = 20
# Paused tasks that are never resumed must not grow the registry without bound.
_MAX_TASKS = 10_000
_CLOSING = {k.value for k in (charter.ActionKind.TASK_END, charter.ActionKind.TASK_ERROR)} | {
    charter.ActionKind.TASK_IDLE.value
}
_CHECKPOINT_NS = "checkpoint_ns"


def captured(value: Any) -> Any:
    """`value` as I-JSON, cut with markers when large (the Governor keeps it as is)."""
    return charter.capture(value, max_string=MAX_STRING, max_items=MAX_ITEMS)


class ToolCallFailed(Exception):
    """Stands for a tool call that ended in an error ToolMessage, so it is recorded failed."""


@dataclass(slots=True)
class TaskState:
    """What charter-langgraph keeps about one open task of this process."""

    task_id: str
    can_interrupt: bool
    halted: str | None = None
    # LangGraph task paths (checkpoint_ns, plus the tool call id) whose gate asked: on a
    # re-run they ask again, so the resume value reaches the interrupt it answers.
    asked: set[str] = field(default_factory=set)


class _Registry:
    """Open tasks per Governor, shared by every graph governed with that Governor (a
    subgraph joins its parent's task)."""

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
        found = _registries.get(governor)
        if found is None:
            found = _registries[governor] = _Registry()
        return found


@dataclass(slots=True)
class Run:
    """One call of stream/astream: the config the graph runs with, and whether it owns the
    task's boundaries (a subgraph joining its parent's task does not)."""

    config: dict[str, Any]
    task_id: str | None
    owns: bool
    saver: BaseCheckpointSaver[Any] | None = None


# The answers collected before a ToolNode runs its calls, by tool_call_id; read by the
# per-call gate on the ToolNode's executor threads (which copy the context).
_tool_answers: contextvars.ContextVar[dict[str, Answer] | None] = contextvars.ContextVar(
    "charter_langgraph.tool_answers", default=None
)


class Governance:
    """Gates one builder's nodes and tool calls and bounds its runs' tasks with a Governor."""

    def __init__(
        self,
        governor: charter.Governor,
        *,
        table: Mapping[str, NodeRule],
        on_block: str,
        block_key: str,
        ask: str,
        templates: TemplateSet | None,
    ) -> None:
        self.governor = governor
        self.table = dict(table)
        self.on_block = on_block
        self.block_key = block_key
        self.ask = ask
        self.templates = templates
        self.registry = registry_for(governor)
        self.state_keys: frozenset[str] = frozenset()

    # -- wrapping the builder (at compile time) ----------------------------------------------

    def wrap(self, builder: Any) -> None:
        """Wrap every node and branch of `builder` not wrapped yet (compile may run again)."""
        check_table_names(self.table, builder.nodes)
        self.state_keys = frozenset(builder.channels)
        for name, spec in builder.nodes.items():
            if getattr(spec.runnable, "_charter_langgraph", None) is self:
                continue
            spec.runnable = self._wrap_node(name, spec)
            spec.metadata = {**(spec.metadata or {}), GATED_KEY: f"node:{name}"}
        for branches in builder.branches.values():
            for key, branch in list(branches.items()):
                if getattr(branch.path, "_charter_langgraph", None) is self:
                    continue
                branches[key] = branch._replace(path=self._wrap_branch(branch.path))

    def _wrap_node(self, name: str, spec: Any) -> Runnable[Any, Any]:
        inner = spec.runnable
        if isinstance(inner, ToolNode):
            return self._wrap_tool_node(name, inner)
        rule = rule_for(name, self.table, spec.metadata)
        run_sync = self._node_sync
        run_async = self._node_async

        # Both functions name `inner` in their bodies: LangGraph finds a subgraph node's
        # graph by reading the node function's closure (find_subgraph_pregel).
        def node(input: Any, config: RunnableConfig) -> Any:
            return run_sync(name, rule, inner, input, config)

        async def anode(input: Any, config: RunnableConfig) -> Any:
            return await run_async(name, rule, inner, input, config)

        return self._callable(name, inner, node, anode)

    def _callable(
        self, name: str, inner: Any, func: Callable[..., Any], afunc: Callable[..., Any]
    ) -> Runnable[Any, Any]:
        # Keep the inner node's sync/async shape: an async-only node stays async-only, so
        # LangGraph refuses (or allows) exactly what it did before.
        if isinstance(inner, RunnableCallable):
            sync_fn = func if inner.func is not None else None
            async_fn = afunc if inner.afunc is not None else None
        else:
            sync_fn, async_fn = func, afunc
        wrapped = RunnableCallable(sync_fn, async_fn, name=name, trace=False, recurse=False)
        wrapped._charter_langgraph = self  # type: ignore[attr-defined]
        return wrapped

    def _wrap_branch(self, path: Runnable[Any, Any]) -> Runnable[Any, Any]:
        registry = self.registry

        def route(input: Any, config: RunnableConfig) -> Any:
            state = registry.get((config.get("metadata") or {}).get(TASK_KEY))
            if state is not None and state.halted is not None:
                return []  # a blocked run routes nowhere: nothing after the block runs
            return path.invoke(input, config)

        async def aroute(input: Any, config: RunnableConfig) -> Any:
            state = registry.get((config.get("metadata") or {}).get(TASK_KEY))
            if state is not None and state.halted is not None:
                return []
            return await path.ainvoke(input, config)

        return self._callable(getattr(path, "name", None) or "branch", path, route, aroute)

    # -- one node execution -------------------------------------------------------------------

    def _task(self, config: Any) -> tuple[TaskState | None, Mapping[str, Any]]:
        metadata = config.get("metadata") or {}
        return self.registry.get(metadata.get(TASK_KEY)), metadata

    def _properties(self, name: str, rule: NodeRule, metadata: Mapping[str, Any]) -> Any:
        own = {"node": name}
        step = metadata.get("langgraph_step")
        if isinstance(step, int):
            own["step"] = step
        return {**rule.properties, "langgraph": own}

    def _ask_first(
        self,
        state: TaskState,
        key: str,
        build: Callable[[], charter.Behavior],
        node: str,
        tool_call_id: str | None = None,
    ) -> Answer | None:
        """Pause with `interrupt()` when a policy asks about the step; the human's answer.

        Runs before the gate, again on every re-run of the node: a step that asked once asks
        again (LangGraph then hands back the resume value instead of pausing), so a
        decision that changed meanwhile cannot shift the interrupt numbering of the node.
        Raises GraphInterrupt (LangGraph's pause) when nobody answered yet.
        """
        if self.ask != "interrupt" or not state.can_interrupt:
            return None
        if key not in state.asked and not self._may_ask():
            return None
        step = build()
        result = self.governor.runner.preview(step)
        if key not in state.asked and result.decision is not charter.Decision.ASK:
            return None
        state.asked.add(key)
        digest = charter.ApprovalRequest(step, (), "").digest
        value = interrupt(question(step, result, digest, node=node, tool_call_id=tool_call_id))
        return Answer(step.step_name, digest, read_answer(value, digest))

    def _may_ask(self) -> bool:
        # Without an `action: ask` policy no step can ask, so the preview (a second
        # evaluation per step) is skipped. A set reloaded meanwhile that asks is still safe:
        # the gate then gets no answer and the approver (deny by default) decides.
        return any(p.action == "ask" for p in self.governor.runner.engine.policies)

    def _blocked(self, name: str, state: TaskState | None, exc: Exception) -> Any:
        """A node the gate refused (`exc`: the block, or the error that kept the gate from
        deciding): end the run with the reason in state, or raise a BlockedError."""
        reason = _refused(exc, f"node {name!r}")
        if self.on_block == "raise":
            if isinstance(exc, charter.BlockedError):
                raise exc
            raise charter.BlockedError(reason) from exc
        if state is not None:
            state.halted = f"{name}: {reason}"
        update = {self.block_key: reason} if self.block_key in self.state_keys else None
        return Command(goto=END, update=update)

    def _gate_args(
        self, name: str, rule: NodeRule, input: Any, metadata: Mapping[str, Any], tid: str
    ) -> dict[str, Any]:
        return {
            "kind": rule.kind,
            "verb": rule.verb,
            "name": name,
            "input": captured(input),
            "properties": self._properties(name, rule, metadata),
            "task_id": tid,
        }

    def _node_sync(self, name: str, rule: NodeRule, inner: Any, input: Any, config: Any) -> Any:
        state, metadata = self._task(config)
        if state is not None and state.halted is not None:
            return None
        try:
            if state is None:
                raise RuntimeError(
                    "this run has no open Charter task (run the graph compiled from the "
                    "governed builder)"
                )
            args = self._gate_args(name, rule, input, metadata, state.task_id)
            key = _path(metadata, name)
            answer = self._ask_first(state, key, lambda: self.governor.build_step(**args), name)
            with answering(answer):
                handle = self.governor.begin_step(**args)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            return self._blocked(name, state, exc)
        try:
            output = inner.invoke(input, config)
        except BaseException as exc:
            _settle_failed(handle, exc)
            raise
        _settle_ok(handle, output)
        if state.asked:
            state.asked.discard(key)
        return output

    async def _node_async(
        self, name: str, rule: NodeRule, inner: Any, input: Any, config: Any
    ) -> Any:
        state, metadata = self._task(config)
        if state is not None and state.halted is not None:
            return None
        try:
            if state is None:
                raise RuntimeError(
                    "this run has no open Charter task (run the graph compiled from the "
                    "governed builder)"
                )
            args = self._gate_args(name, rule, input, metadata, state.task_id)
            key = _path(metadata, name)
            answer = self._ask_first(state, key, lambda: self.governor.build_step(**args), name)
            with answering(answer):
                handle = await self.governor.abegin_step(**args)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            return self._blocked(name, state, exc)
        try:
            output = await inner.ainvoke(input, config)
        except BaseException as exc:
            await _asettle_failed(handle, exc)
            raise
        await _asettle_ok(handle, output)
        if state.asked:
            state.asked.discard(key)
        return output

    # -- tool nodes ---------------------------------------------------------------------------

    def _wrap_tool_node(self, name: str, original: ToolNode) -> Runnable[Any, Any]:
        inner = _governed_tool_node(original, self, name)
        run_sync = self._tools_sync
        run_async = self._tools_async

        def node(input: Any, config: RunnableConfig) -> Any:
            return run_sync(name, inner, input, config)

        async def anode(input: Any, config: RunnableConfig) -> Any:
            return await run_async(name, inner, input, config)

        return self._callable(name, inner, node, anode)

    def _tool_answers_for(
        self, name: str, inner: ToolNode, input: Any, config: Any
    ) -> dict[str, Answer]:
        """Ask, one interrupt per tool call in call order, about the calls a policy asks
        about. Done before the tools run in parallel so the interrupts are numbered the same
        on every re-run."""
        state, metadata = self._task(config)
        if state is None or self.ask != "interrupt" or not state.can_interrupt:
            return {}
        try:
            calls, _ = inner._parse_input(input)
        except Exception:  # the ToolNode reports a bad input itself, with its own message
            return {}
        answers: dict[str, Answer] = {}
        ns = _path(metadata, name)
        for call in calls:
            call_id = call.get("id")
            if not isinstance(call_id, str):
                continue
            args = self._tool_gate_args(name, call, state.task_id)
            answer = self._ask_first(
                state,
                f"{ns}|{call_id}",
                lambda args=args: self.governor.build_step(**args),
                name,
                tool_call_id=call_id,
            )
            if answer is not None:
                answers[call_id] = answer
        return answers

    def _tools_sync(self, name: str, inner: ToolNode, input: Any, config: Any) -> Any:
        state, _ = self._task(config)
        if state is not None and state.halted is not None:
            return None
        answers = self._tool_answers_for(name, inner, input, config)
        token = _tool_answers.set(answers)
        try:
            output = inner.invoke(input, config)
        finally:
            _tool_answers.reset(token)
        _forget_asked(state, config, name)
        return output

    async def _tools_async(self, name: str, inner: ToolNode, input: Any, config: Any) -> Any:
        state, _ = self._task(config)
        if state is not None and state.halted is not None:
            return None
        answers = self._tool_answers_for(name, inner, input, config)
        token = _tool_answers.set(answers)
        try:
            output = await inner.ainvoke(input, config)
        finally:
            _tool_answers.reset(token)
        _forget_asked(state, config, name)
        return output

    def _tool_gate_args(self, node: str, call: Mapping[str, Any], tid: str) -> dict[str, Any]:
        tool = str(call.get("name") or "unnamed")
        args = call.get("args")
        args = args if isinstance(args, Mapping) else {}
        kind, verb, props, _ = resolve(TEMPLATE_INTEGRATION, tool, args, overrides=self.templates)
        own: dict[str, Any] = {"node": node}
        if isinstance(call.get("id"), str):
            own["tool_call_id"] = call["id"]
        return {
            "kind": kind,
            "verb": verb,
            "name": tool,
            "input": captured(dict(args)),
            "properties": {**props, "langgraph": own},
            "task_id": tid,
        }

    def _tool_refusal(self, call: Mapping[str, Any], reason: str) -> ToolMessage:
        return ToolMessage(
            content=f"Blocked by Charter: {reason}",
            name=str(call.get("name") or "unnamed"),
            tool_call_id=str(call.get("id") or ""),
            status="error",
        )

    def gate_tool(self, node: str, request: Any, execute: Callable[[Any], Any]) -> Any:
        """Gate one tool call inside a ToolNode (sync); a refusal is an error ToolMessage."""
        call = request.tool_call
        config = request.runtime.config
        state, _ = self._task(config)
        try:
            if state is None:
                raise RuntimeError("this run has no open Charter task")
            args = self._tool_gate_args(node, call, state.task_id)
            answers = _tool_answers.get() or {}
            with answering(answers.get(call.get("id"))):
                handle = self.governor.begin_step(**args)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            return self._tool_refusal(call, _refused(exc, f"tool call {call.get('name')!r}"))
        _mark_tool_run(config, call)
        try:
            result = execute(request)
        except BaseException as exc:
            _settle_failed(handle, exc)
            raise
        _settle_tool(handle, result)
        return result

    async def agate_tool(self, node: str, request: Any, execute: Callable[[Any], Any]) -> Any:
        """Gate one tool call inside a ToolNode (async)."""
        call = request.tool_call
        config = request.runtime.config
        state, _ = self._task(config)
        try:
            if state is None:
                raise RuntimeError("this run has no open Charter task")
            args = self._tool_gate_args(node, call, state.task_id)
            answers = _tool_answers.get() or {}
            with answering(answers.get(call.get("id"))):
                handle = await self.governor.abegin_step(**args)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            return self._tool_refusal(call, _refused(exc, f"tool call {call.get('name')!r}"))
        _mark_tool_run(config, call)
        try:
            result = await execute(request)
        except BaseException as exc:
            await _asettle_failed(handle, exc)
            raise
        await _asettle_tool(handle, result)
        return result

    # -- runs: the task's boundaries ----------------------------------------------------------

    def open_run(self, graph: Any, input: Any, config: Any) -> Run:
        """Start or continue the task of a stream() call (sync path).

        Raises BlockedError when a policy blocks the task itself; any other refusal of the
        core (a bad setting, a task id in use) is raised too: an ungoverned run never starts.
        """
        run, lookup = self._begin(graph, input, config)
        if not run.owns:
            return run
        previous = None
        if run.saver is not None and lookup is not None:
            try:
                previous = _previous_task(run.saver, lookup)
            except Exception as exc:
                report_internal_error(exc, "langgraph: the task of the thread's last checkpoint")
        return self._settle_task(graph, run, input, previous)

    async def aopen_run(self, graph: Any, input: Any, config: Any) -> Run:
        """Start or continue the task of an astream() call (see open_run)."""
        run, lookup = self._begin(graph, input, config)
        if not run.owns:
            return run
        previous = None
        if run.saver is not None and lookup is not None:
            try:
                previous = await _aprevious_task(run.saver, lookup)
            except Exception as exc:
                report_internal_error(exc, "langgraph: the task of the thread's last checkpoint")
        return await asyncio.to_thread(self._settle_task, graph, run, input, previous)

    def _begin(self, graph: Any, input: Any, config: Any) -> tuple[Run, dict[str, Any] | None]:
        """The run, and the config that finds the thread's last checkpoint (None: no lookup)."""
        config = dict(config or {})
        metadata = config.get("metadata") or {}
        configurable = dict(config.get("configurable") or {})
        joined = self.registry.get(metadata.get(TASK_KEY))
        engine = self.governor.runner.engine
        if joined is not None and engine.task_state(joined.task_id) == "open":
            # A governed subgraph (or a graph called inside a governed node) with the same
            # Governor: its nodes are steps of the parent's task.
            return Run(config, joined.task_id, owns=False), None
        saver = graph.checkpointer
        if not isinstance(saver, BaseCheckpointSaver) or configurable.get(_CHECKPOINT_NS):
            saver = None
        run = Run(config, None, owns=True, saver=saver)
        if saver is None or configurable.get("thread_id") is None:
            return run, None
        return run, {**config, "configurable": configurable}

    def _settle_task(self, graph: Any, run: Run, input: Any, previous: str | None) -> Run:
        gov = self.governor
        configurable = run.config.get("configurable") or {}
        thread = configurable.get("thread_id")
        continuing = input is None or isinstance(input, Command)
        task_id = None
        if previous is not None:
            if continuing:
                task_id = self._continue(previous)
                if task_id is None:
                    self.registry.drop(previous)  # ended meanwhile (e.g. closed as idle)
            elif gov.runner.engine.task_state(previous) == "open":
                # New input on a thread paused mid-run: LangGraph drops the paused run.
                try:
                    gov.end_task(previous, output={"langgraph": {"superseded": True}})
                except Exception as exc:
                    report_internal_error(exc, "langgraph: the end of a superseded task")
                self.registry.drop(previous)
        if task_id is None:
            props: dict[str, Any] = {"graph": graph.get_name()}
            if thread is not None:
                props["thread_id"] = str(thread)
            if previous is not None and continuing:
                props["continues"] = previous
            raw = f"{thread}:{uuid.uuid4().hex[:12]}" if thread is not None else None
            task_id = gov.start_task(
                charter.task_id_from(raw) if raw is not None else None,
                name=graph.get_name(),
                input=captured(input),
                properties={"langgraph": props},
            )
        if self.registry.get(task_id) is None:
            self.registry.put(TaskState(task_id, can_interrupt=run.saver is not None))
        metadata = {
            **(run.config.get("metadata") or {}),
            TASK_KEY: task_id,
            AGENT_KEY: gov.runner.agent_id,
        }
        run.config = {**run.config, "metadata": metadata}
        run.task_id = task_id
        return run

    def _continue(self, task_id: str) -> str | None:
        """The task to continue: open here, or restored from the audit store after a
        restart; None when it has ended (or cannot be restored)."""
        runner = self.governor.runner
        state = runner.engine.task_state(task_id)
        if state == "open":
            return task_id
        if state != "unknown" or runner.store is None:
            return None
        try:
            records = runner.store.read_task(task_id, runner.agent_id)
        except charter.StoreError:
            return None
        if not records or records[-1].get("kind") in _CLOSING:
            return None
        runner.restore_task(records)
        return task_id

    def close_run(self, graph: Any, run: Run, error: BaseException | None) -> None:
        """End the task at the run's end, unless the run paused (interrupt, breakpoint)."""
        if not run.owns or run.task_id is None:
            return
        state = self.registry.get(run.task_id)
        try:
            if error is None and (state is None or state.halted is None):
                if run.saver is not None and _paused(graph, run.config):
                    return
            self._end(run.task_id, state, error)
        except charter.AuditError:
            if error is None:
                raise
        except Exception as exc:
            report_internal_error(exc, "langgraph: the end of the task")

    async def aclose_run(self, graph: Any, run: Run, error: BaseException | None) -> None:
        if not run.owns or run.task_id is None:
            return
        state = self.registry.get(run.task_id)
        try:
            if error is None and (state is None or state.halted is None):
                if run.saver is not None and await _apaused(graph, run.config):
                    return
            await asyncio.to_thread(self._end, run.task_id, state, error)
        except charter.AuditError:
            if error is None:
                raise
        except Exception as exc:
            report_internal_error(exc, "langgraph: the end of the task")

    def _end(self, task_id: str, state: TaskState | None, error: BaseException | None) -> None:
        self.registry.drop(task_id)
        output = None
        if error is None and state is not None and state.halted is not None:
            output = {"langgraph": {"blocked": state.halted}}
        try:
            self.governor.end_task(task_id, error=error, output=output)
        except BaseException as exc:
            if error is not None and isinstance(exc, Exception):
                error.add_note(f"charter: the task's end could not be recorded: {exc}")
            raise


def _refused(exc: BaseException, what: str) -> str:
    """The one-line reason a step did not run: the block's, or why no decision was made."""
    if isinstance(exc, charter.BlockedError):
        return exc.reason
    return (
        f"charter could not decide on {what} ({type(exc).__name__}: {exc}); it did not run "
        "(governance fails closed)"
    )


def _path(metadata: Mapping[str, Any], name: str) -> str:
    """The LangGraph task path of a node execution: the same on every re-run of it."""
    return str(metadata.get("langgraph_checkpoint_ns") or name)


def _forget_asked(state: TaskState | None, config: Any, name: str) -> None:
    if state is None or not state.asked:
        return
    prefix = _path(config.get("metadata") or {}, name) + "|"
    state.asked.difference_update({k for k in state.asked if k.startswith(prefix)})


# -- settling a gated step --------------------------------------------------------------------


def _settle_ok(handle: charter.StepHandle, output: Any) -> None:
    try:
        handle.complete(captured(output))
    except charter.AuditError:
        raise
    except Exception as exc:
        report_internal_error(exc, f"langgraph: the outcome of {handle.behavior.step_name!r}")


async def _asettle_ok(handle: charter.StepHandle, output: Any) -> None:
    try:
        await handle.acomplete(captured(output))
    except charter.AuditError:
        raise
    except Exception as exc:
        report_internal_error(exc, f"langgraph: the outcome of {handle.behavior.step_name!r}")


def _settle_failed(handle: charter.StepHandle, exc: BaseException) -> None:
    # A pause (interrupt inside the body) or a cancellation is not a failure: the node runs
    # again later, as a new step.
    try:
        if isinstance(exc, GraphBubbleUp) or not isinstance(exc, Exception):
            handle.abandon()
        else:
            handle.fail(exc)
    except Exception as recording:
        exc.add_note(f"charter: the step's outcome could not be recorded: {recording}")
        report_internal_error(recording, f"langgraph: the outcome of {handle.behavior.step_name!r}")


async def _asettle_failed(handle: charter.StepHandle, exc: BaseException) -> None:
    try:
        if isinstance(exc, GraphBubbleUp) or not isinstance(exc, Exception):
            await handle.aabandon()
        else:
            await handle.afail(exc)
    except Exception as recording:
        exc.add_note(f"charter: the step's outcome could not be recorded: {recording}")
        report_internal_error(recording, f"langgraph: the outcome of {handle.behavior.step_name!r}")


def _tool_error(result: Any) -> ToolCallFailed | None:
    if isinstance(result, ToolMessage) and result.status == "error":
        content = result.content if isinstance(result.content, str) else str(result.content)
        return ToolCallFailed(content)
    return None


def _settle_tool(handle: charter.StepHandle, result: Any) -> None:
    failed = _tool_error(result)
    if failed is None:
        _settle_ok(handle, result)
        return
    try:
        handle.fail(failed)
    except charter.AuditError:
        raise
    except Exception as exc:
        report_internal_error(exc, f"langgraph: the outcome of {handle.behavior.step_name!r}")


async def _asettle_tool(handle: charter.StepHandle, result: Any) -> None:
    failed = _tool_error(result)
    if failed is None:
        await _asettle_ok(handle, result)
        return
    try:
        await handle.afail(failed)
    except charter.AuditError:
        raise
    except Exception as exc:
        report_internal_error(exc, f"langgraph: the outcome of {handle.behavior.step_name!r}")


def _mark_tool_run(config: Any, call: Mapping[str, Any]) -> None:
    """Tag the tool's own run as gated here, for callback handlers of other integrations.

    `config` is the per-call config LangGraph made for this tool call alone and passes to
    the tool's invoke, so the tag reaches exactly this run (and, inherited, its children).
    """
    call_id = call.get("id")
    if not isinstance(call_id, str):
        return
    try:
        config["metadata"] = {**(config.get("metadata") or {}), GATED_KEY: f"tool:{call_id}"}
    except Exception as exc:
        report_internal_error(exc, "langgraph: the tool run's gated marker")


# -- tool node cloning ------------------------------------------------------------------------


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
    user_wrap = original._wrap_tool_call
    user_awrap = original._awrap_tool_call

    def wrap(request: Any, execute: Callable[[Any], Any]) -> Any:
        def gated(req: Any) -> Any:
            return governance.gate_tool(name, req, execute)

        if user_wrap is None:
            return gated(request)
        return user_wrap(request, gated)

    async def awrap(request: Any, execute: Callable[[Any], Any]) -> Any:
        async def gated(req: Any) -> Any:
            return await governance.agate_tool(name, req, execute)

        if user_awrap is None:
            return await gated(request)
        return await user_awrap(request, gated)

    # Always a sync wrapper: a ToolNode without one runs its tools ungated under invoke().
    clone._wrap_tool_call = wrap
    # Without an async wrapper LangGraph runs the sync one under ainvoke; keep the user's
    # choice when they gave only a sync wrapper.
    clone._awrap_tool_call = awrap if (user_awrap is not None or user_wrap is None) else None
    return clone


# -- checkpoints: which task a thread is in, and whether the run paused -----------------------


def _task_in(metadata: Any) -> str | None:
    found = metadata.get(TASK_KEY) if isinstance(metadata, Mapping) else None
    return found if isinstance(found, str) and found else None


def _previous_task(saver: BaseCheckpointSaver[Any], config: dict[str, Any]) -> str | None:
    if not config:
        return None
    current: Any = config
    for _ in range(_LOOKBACK):
        found = saver.get_tuple(current)
        if found is None:
            return None
        task = _task_in(found.metadata)
        if task is not None or found.parent_config is None:
            return task
        current = found.parent_config
    return None


async def _aprevious_task(saver: BaseCheckpointSaver[Any], config: dict[str, Any]) -> str | None:
    if not config:
        return None
    current: Any = config
    for _ in range(_LOOKBACK):
        try:
            found = await saver.aget_tuple(current)
        except NotImplementedError:
            found = await asyncio.to_thread(saver.get_tuple, current)
        if found is None:
            return None
        task = _task_in(found.metadata)
        if task is not None or found.parent_config is None:
            return task
        current = found.parent_config
    return None


def _latest(config: dict[str, Any]) -> dict[str, Any]:
    configurable = {
        k: v for k, v in (config.get("configurable") or {}).items() if k != "checkpoint_id"
    }
    return {**config, "configurable": configurable}


def _waiting(snapshot: Any) -> bool:
    # Interrupts count on their own: langgraph 1.2.0 reports a task paused by a second
    # interrupt() with no `next`.
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
