"""govern(client): Charter's model-client lifecycle around one Ollama Client or AsyncClient,
or the module-level functions (``ollama.chat`` is bound to a client made at import).

The client's ``_request`` method is wrapped on the instance: ``chat`` and ``generate`` (plain
and ``stream=True``) go through it once per call."""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import charter
from charter.integration import (
    Blocked,
    Gate,
    ModelCall,
    ModelClient,
    ModelReply,
    Step,
    ToolCall,
    ToolResult,
    ToolVerdict,
    remember_verdicts,
    tool_verdicts,
)

from . import _mapping

try:
    import ollama
except ImportError as exc:  # pragma: no cover - a dependency of this distribution
    raise ImportError("charter-ollama needs the Ollama client: pip install charter-ollama") from exc

__all__ = ["BlockedCallError", "Governance", "govern"]

_ATTR = "_charter_governance"


class BlockedCallError(ollama.ResponseError, charter.BlockedError):
    """A model call Charter blocked before it was sent: the client's own refusal,
    `ollama.ResponseError` with ``status_code`` 403 (what code around Ollama already catches),
    and a `charter.BlockedError` (`reason`, `result`, `step_name`, `kind`)."""

    def __init__(self, blocked: Blocked) -> None:
        ollama.ResponseError.__init__(self, blocked.reason, 403)
        self.reason = blocked.reason
        self.result = blocked.result
        self.step_name = blocked.step.name
        self.kind = blocked.step.kind

    def __str__(self) -> str:
        return f"{self.reason} (status code: 403)"

    def __reduce__(self) -> Any:
        return (charter.BlockedError, (self.reason, None, self.step_name, self.kind))


class Governance:
    """The handle `govern` returns: what it installed, and the governed tool executor."""

    def __init__(self, client: Any, gate: Gate) -> None:
        self.client = client
        self.gate = gate
        self.models = ModelClient(gate, _mapping.PROVIDER)

    @property
    def governor(self) -> charter.Governor:
        return self.gate.governor

    def _install(self, client: Any) -> None:
        if getattr(client, _ATTR, None) is not None:
            raise ValueError(
                "this Ollama client is governed already; call uninstall() on its Governance "
                "before governing it again"
            )
        original = type(client)._request
        is_async = isinstance(client, ollama.AsyncClient)
        client._request = (self._arequest if is_async else self._request)(client, original)
        setattr(client, _ATTR, self)

    def uninstall(self) -> None:
        """Remove governance from the client and end the task it started for itself. Safe
        to call twice."""
        if getattr(self.client, _ATTR, None) is self:
            for name in ("_request", _ATTR):
                self.client.__dict__.pop(name, None)
        self.models.close()

    # -- the wrapped request --------------------------------------------------------------

    def _step(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The prepared step of a request (None: not a model call)."""
        if len(args) < 2 or str(args[0]).upper() != "POST":
            return None
        api = _mapping.endpoint(str(args[1]))
        if api is None:
            return None
        body = kwargs.get("json") if isinstance(kwargs.get("json"), Mapping) else {}
        try:
            return _mapping.request_step(api, body, {})
        except Exception as exc:
            return self.gate.undecided(Step("step.model", None, str(body.get("model"))), exc)

    def _request(self, client: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        def observe(call: ModelCall, result: Any, stream: bool) -> Any:
            if stream:
                return self._stream(call, result, asynchronous=False)
            self._keep(result, call.finish(self._reply(result)))
            return result

        def request(cls: Any, *args: Any, stream: bool = False, **kwargs: Any) -> Any:
            return self.models.send(
                self._step(args, kwargs),
                lambda: original(client, cls, *args, stream=stream, **kwargs),
                BlockedCallError,
                lambda call, result: observe(call, result, stream),
            )

        return request

    def _arequest(self, client: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        async def observe(call: ModelCall, result: Any, stream: bool) -> Any:
            if stream:
                return self._stream(call, result, asynchronous=True)
            self._keep(result, await call.afinish(self._reply(result)))
            return result

        async def request(cls: Any, *args: Any, stream: bool = False, **kwargs: Any) -> Any:
            return await self.models.asend(
                self._step(args, kwargs),
                lambda: original(client, cls, *args, stream=stream, **kwargs),
                BlockedCallError,
                lambda call, result: observe(call, result, stream),
            )

        return request

    @staticmethod
    def _reply(result: Any) -> ModelReply:
        try:
            return _mapping.reply(result)
        except Exception as exc:
            charter.report_internal_error(exc, "ollama: reading a response")
            return ModelReply()

    def _keep(self, obj: Any, verdicts: tuple[ToolVerdict, ...]) -> None:
        remember_verdicts(obj, verdicts)

    def _stream(self, call: ModelCall, chunks: Any, *, asynchronous: bool) -> Any:
        """The client's chunk generator, observed. Ollama sends nothing before the first
        chunk is asked for; a stream dropped unread is recorded as abandoned."""
        acc = _mapping.Chunks()
        holder: list[Any] = []

        def done(verdicts: tuple[ToolVerdict, ...]) -> None:
            owner = holder[0]() if holder else None
            if owner is not None:
                self._keep(owner, verdicts)

        if asynchronous:
            observed: Any = call.astream(chunks, acc.fold, acc.reply, done)
        else:
            observed = call.stream(chunks, acc.fold, acc.reply, done)
        holder.append(weakref.ref(observed))
        call.watch(observed)
        return observed

    # -- tool calls -----------------------------------------------------------------------

    def verdicts(self, source: Any) -> tuple[ToolVerdict, ...]:
        """The verdicts on the tool calls a governed response (or a finished stream) asked
        for; empty when it asked for none or was not produced by a governed client."""
        return tool_verdicts(source)

    def _calls(self, source: Any) -> tuple[ToolCall, ...]:
        found = _mapping.calls_of(source)
        if found is not None:
            return found
        if isinstance(source, (types.GeneratorType, types.AsyncGeneratorType)):
            return tuple(v.call for v in tool_verdicts(source))
        raise TypeError(
            f"cannot read tool calls from {type(source).__name__}: pass a ChatResponse, a "
            "Message, or a governed stream read to its end"
        )

    def run_tools(
        self, source: Any, tools: Mapping[str, Callable[..., Any]]
    ) -> list[dict[str, Any]]:
        """Run the tool calls `source` asks for through Charter and return the ``tool``
        messages the model reads next, one per call, in order: allowed calls run with their
        arguments as keywords, blocked ones (and asks a person refused) come back as the
        refusal, a tool that raised as its error. Nothing is raised into the loop."""
        return _mapping.result_messages(self.models.run_tools(self._calls(source), tools))

    async def arun_tools(
        self, source: Any, tools: Mapping[str, Callable[..., Any]]
    ) -> list[dict[str, Any]]:
        """`run_tools` for async code (coroutine tools are awaited)."""
        return _mapping.result_messages(await self.models.arun_tools(self._calls(source), tools))

    def tool_results(
        self, source: Any, tools: Mapping[str, Callable[..., Any]]
    ) -> list[ToolResult]:
        """`run_tools` returning the `ToolResult` of each call instead of messages."""
        return self.models.run_tools(self._calls(source), tools)


def govern(
    client: Any = None,
    *,
    governor: charter.Governor | None = None,
    approver: Any = None,
    **settings: Any,
) -> Governance:
    """Govern one `ollama.Client` or `ollama.AsyncClient`, or (given the `ollama` module or
    None) the client behind the module-level functions (`ollama.chat`, `ollama.generate`):
    every chat and generate call is judged before it is sent and recorded after, streams
    included; a blocked call raises `BlockedCallError` without reaching the server.

    Pass an existing `governor`, or the Governor's setting keywords and an optional
    `approver`. Refuses (TypeError) anything else, (ValueError) a client governed already and
    what `charter.Governor` refuses.
    """
    if client is None or client is ollama:
        client = ollama._client
    if not isinstance(client, (ollama.Client, ollama.AsyncClient)):
        raise TypeError(
            "charter_ollama.govern() takes an ollama.Client, an ollama.AsyncClient or the "
            f"ollama module, not {type(client).__name__}"
        )
    if governor is not None:
        gate = Gate(_mapping.FRAMEWORK, governor=governor)
    else:
        gate = Gate(_mapping.FRAMEWORK, approver=approver, **settings)
    governance = Governance(client, gate)
    governance._install(client)
    return governance
