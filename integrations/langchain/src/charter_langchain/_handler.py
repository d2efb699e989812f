"""`CharterCallbackHandler`: govern any Runnable through LangChain's callbacks.

The handler is a *sync* `BaseCallbackHandler` with ``raise_error`` and ``run_inline`` both
fixed to True, because those are the only settings under which LangChain lets a callback
stop a step:

- ``raise_error``: the callback manager logs and swallows a handler's exception unless the
  handler asks for it to be raised; a swallowed block lets the tool run.
- sync, not async: errors of an `AsyncCallbackHandler` driven from the sync path are
  swallowed whatever ``raise_error`` says (`langchain_core.callbacks.manager._run_coros`).
- ``run_inline``: on the async path, `AsyncCallbackManager.on_llm_start` skips every
  non-inline handler as soon as one inline handler is present (LangSmith's tracer and
  LangGraph's stream handlers are inline), so a non-inline gate would never see the call.

A task is opened per root run when its first governed step starts (so a run the agent
middleware governs entirely leaves no second task), and closed when the root run ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import charter
import charter.integration as ci
from charter import report_internal_error
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tools import ToolException

from ._errors import BlockedStepError
from ._translate import (
    FRAMEWORK,
    callback_model_identity,
    documents_outcome,
    jsonish,
    llm_result_outcome,
    model_step,
    prompt_step,
    retriever_step,
    tool_args,
    tool_names,
    tool_outcome,
)

# LangChain and LangGraph tag their plumbing runs (channel writes, routing) with this.
_HIDDEN_TAG = "langsmith:hidden"


@dataclass(slots=True)
class _Root:
    run_id: UUID
    name: str
    inputs: Any
    task_id: str | None = None
    borrowed: bool = False
    runs: set[UUID] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(slots=True)
class _Run:
    root: _Root
    handle: charter.StepHandle | None = None
    governed: bool = False


class CharterCallbackHandler(BaseCallbackHandler):
    """Gate and record the steps of any Runnable: pass it in ``callbacks=``.

    Model calls (chat and completion) are ``step.model``; tool calls take kind, verb and
    properties from the templates with the tool's arguments as input; retrievers are
    ``step.resource GET``; with ``chains=True`` every nested chain run is a step too,
    resolved through the templates by its name. Each step is judged before it starts: a
    block (or a denied approval, or an error inside Charter) raises `BlockedStepError` from
    the start callback, so the step never runs; LangChain then fails the run with it.
    Outcomes (output, token usage, stop reason, errors with their type) are recorded when
    the step ends. Policies that ask go to the Governor's `approver` (default: deny).

    Build it from a `governor`, or from `charter.Governor` setting keywords (policy_file=,
    agent_id=, audit_location=, ...) plus an optional `approver`; refuses both at once.
    """

    def __init__(
        self,
        governor: charter.Governor | None = None,
        *,
        chains: bool = False,
        approver: Any = None,
        **settings: Any,
    ) -> None:
        self._gate = ci.Gate(FRAMEWORK, governor=governor, approver=approver, **settings)
        self.governor: charter.Governor = self._gate.governor
        self.chains = bool(chains)
        self._lock = threading.Lock()
        self._runs: dict[UUID, _Run] = {}

    # Read-only on purpose: either one set to False silently turns the gate off.
    @property
    def raise_error(self) -> bool:  # type: ignore[override]
        """Always True: LangChain swallows a handler's errors otherwise, and the step runs."""
        return True

    @property
    def run_inline(self) -> bool:  # type: ignore[override]
        """Always True: LangChain's async path skips non-inline handlers on some events."""
        return True

    # -- bookkeeping ----------------------------------------------------------------------

    def _register(
        self, run_id: UUID, parent_run_id: UUID | None, name: str, inputs: Any
    ) -> tuple[_Run, bool]:
        """The run's record and whether it is a root (no parent this handler has seen)."""
        with self._lock:
            parent = self._runs.get(parent_run_id) if parent_run_id is not None else None
            is_root = parent is None
            root = _Root(run_id, name, inputs) if parent is None else parent.root
            run = _Run(root)
            root.runs.add(run_id)
            self._runs[run_id] = run
        return run, is_root

    def _task_for(self, root: _Root, claim: ci.Claim | None) -> str:
        if claim is not None and claim.governor is self.governor:
            # Nested inside a step another integration governs with this Governor: one task.
            return claim.task_id
        with root.lock:
            if root.task_id is None:
                started = self._gate.start_task(
                    str(root.run_id), root.name, _root_input(root.inputs)
                )
                if isinstance(started, ci.Blocked):
                    raise started.error(BlockedStepError)
                refused = self._gate.user_messages(started, _user_words(root.inputs))
                if refused is not None:
                    error = refused.error(BlockedStepError)
                    self._gate.end_task(started, error)
                    raise error
                root.task_id = started
            return root.task_id

    def _start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        build: Callable[[dict[str, Any]], ci.Step],
        claim_kind: str,
        name: str,
        call_id: str | None = None,
        *,
        root_inputs: Any = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Gate the run `build(ids)` describes, unless another integration claimed it (in
        this context, or in the run metadata it inherited).

        Raises BlockedStepError when the step may not run (LangChain then fails the run
        with it and the step never starts)."""
        run, is_root = self._register(run_id, parent_run_id, name, root_inputs)
        ids = {"run_id": str(run_id), "parent_run_id": str(parent_run_id or "") or None}
        try:
            claim = ci.current_claim()
            if claim is not None and claim.take(claim_kind, call_id, name):
                return  # the integration that claimed this call gates and records it
            inherited = ci.inherited_claim(metadata, self.governor)
            if inherited is not None and inherited.covers(claim_kind, call_id, name):
                return  # claimed upstream, and the claim came down in the run's metadata
            if claim is None or claim.governor is not self.governor:
                claim = inherited or claim
            try:
                step = build(ids)
            except Exception as exc:
                decision: ci.Decision = self._gate.undecided(
                    ci.Step("step.unknown", None, name), exc
                )
            else:
                decision = self._gate.decide(step, self._task_for(run.root, claim))
            if isinstance(decision, ci.Allowed):
                run.handle = decision.handle
                run.governed = True
                return
            assert isinstance(decision, ci.Blocked)  # without pause the approver answers
            raise decision.error(BlockedStepError)
        except BaseException as exc:
            if is_root:
                # No end event follows a refused start: close the run's task here.
                self._finish_root(run.root, error=exc)
            raise

    def _end(
        self,
        run_id: UUID,
        *,
        output: Any = None,
        model: Mapping[str, Any] | None = None,
        failure: BaseException | None = None,
        run_error: BaseException | None = None,
    ) -> None:
        """Record the outcome of `run_id`; never raises."""
        try:
            with self._lock:
                run = self._runs.get(run_id)
            if run is None:
                return
            handle, run.handle = run.handle, None
            if failure is not None:
                self._gate.fail(handle, failure)
            else:
                self._gate.complete(handle, output, properties=model)
            if run.root.run_id == run_id:
                self._finish_root(run.root, error=run_error, output=output)
        except Exception as exc:
            report_internal_error(exc, f"langchain: the end of run {run_id}")

    def _finish_root(
        self, root: _Root, error: BaseException | None = None, output: Any = None
    ) -> None:
        with self._lock:
            for rid in root.runs:
                self._runs.pop(rid, None)
        with root.lock:
            task_id, root.task_id = root.task_id, None
        if task_id is not None:
            self._gate.end_task(task_id, error=error, output=_root_output(output))

    # -- chains ---------------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "chain")
        with self._lock:
            known_parent = parent_run_id is not None and parent_run_id in self._runs
        if not known_parent or not self.chains or _HIDDEN_TAG in (tags or ()):
            self._register(run_id, parent_run_id, name, inputs)
            return
        args = dict(inputs) if isinstance(inputs, Mapping) else {"input": inputs}
        self._start(
            run_id,
            parent_run_id,
            lambda ids: self._gate.tool_step(name, args, ids=ids),
            "chain",
            name,
            metadata=metadata,
        )

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, output=outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, failure=error, run_error=error)

    # -- models ---------------------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name, provider = callback_model_identity(serialized, metadata, kwargs)
        params = kwargs.get("invocation_params") or {}

        def build(ids: dict[str, Any]) -> ci.Step:
            return model_step(
                name,
                provider,
                messages[0] if messages else [],
                tools=tool_names(params.get("tools")),
                params=params,
                ids=ids,
            )

        self._start(
            run_id,
            parent_run_id,
            build,
            "model",
            name,
            root_inputs={"messages": messages},
            metadata=metadata,
        )

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name, provider = callback_model_identity(serialized, metadata, kwargs)
        self._start(
            run_id,
            parent_run_id,
            lambda ids: prompt_step(name, provider, prompts, ids),
            "model",
            name,
            root_inputs={"prompts": prompts},
            metadata=metadata,
        )

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            output, model = llm_result_outcome(response)
        except Exception as exc:
            report_internal_error(exc, "langchain: a model's output")
            output, model = {}, None
        self._end(run_id, output=output, model=model)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, failure=error, run_error=error)

    # -- tools ----------------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        call_id = kwargs.get("tool_call_id")
        call_id = str(call_id) if call_id else None
        args = tool_args(inputs, input_str)
        self._start(
            run_id,
            parent_run_id,
            lambda ids: self._gate.tool_step(name, args, call_id=call_id, ids=ids),
            "tool",
            name,
            call_id,
            root_inputs=args,
            metadata=metadata,
        )

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            recorded, error = tool_outcome(output)
        except Exception as exc:
            report_internal_error(exc, "langchain: a tool's output")
            recorded, error = {}, None
        if error is not None:
            # A handled ToolException: the tool ran and reported a failure.
            self._end(run_id, failure=ToolException(error), output=recorded)
        else:
            self._end(run_id, output=recorded)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, failure=error, run_error=error)

    # -- retrievers -----------------------------------------------------------------------

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "retriever")
        self._start(
            run_id,
            parent_run_id,
            lambda ids: retriever_step(name, query, ids),
            "retriever",
            name,
            root_inputs={"query": query},
            metadata=metadata,
        )

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            output = documents_outcome(documents)
        except Exception as exc:
            report_internal_error(exc, "langchain: a retriever's output")
            output = {}
        self._end(run_id, output=output)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, failure=error, run_error=error)


def _root_input(inputs: Any) -> Any:
    return jsonish(inputs) if inputs is not None else None


def _root_output(output: Any) -> Any:
    return jsonish(output) if output is not None else None


def _user_words(inputs: Any) -> list[Any]:
    """The user's request in a root run's input: the new human messages of its
    ``messages`` (an agent's or a chat graph's input), or of a list of messages."""
    if isinstance(inputs, Mapping):
        inputs = inputs.get("messages")
    if isinstance(inputs, str) or not isinstance(inputs, (list, tuple)):
        return []
    return ci.user_inputs(inputs)
