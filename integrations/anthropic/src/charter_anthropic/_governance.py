"""govern(client): Charter's model-client lifecycle around one Anthropic / AsyncAnthropic client.

The client's own ``request`` method is wrapped on the instance: every Messages call (plain,
streamed, ``with_raw_response``, ``with_streaming_response``, beta) goes through it once,
outside the SDK's retry loop, so a call retried three times is one step. The SDK's tool
runner gets governed copies of its tools: each call is judged before the tool runs.
"""

from __future__ import annotations

import copy
import inspect
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import charter
from charter.integration import (
    Blocked,
    Gate,
    ModelCall,
    ModelClient,
    ToolCall,
    ToolResult,
    ToolVerdict,
    remember_verdicts,
    tool_verdicts,
)

from . import _mapping

try:
    import anthropic
    from anthropic import _base_client
    from anthropic._constants import RAW_RESPONSE_HEADER
    from anthropic._response import APIResponse, AsyncAPIResponse
    from anthropic._streaming import AsyncStream, Stream
    from anthropic.lib.tools import ToolError
except ImportError as exc:  # pragma: no cover - a dependency of this distribution
    raise ImportError(
        "charter-anthropic needs the Anthropic SDK: pip install charter-anthropic"
    ) from exc

__all__ = ["BlockedCallError", "Governance", "govern"]

# The SDK's own HTTP library: httpx2 since anthropic 2.x, httpx before; a refusal carries a
# response of the same library, as the SDK's own errors do.
httpx: Any = getattr(_base_client, "httpx2", None) or _base_client.httpx

_ATTR = "_charter_governance"


class BlockedCallError(anthropic.PermissionDeniedError, charter.BlockedError):
    """A model call Charter blocked before it was sent: the SDK's own 403 refusal
    (`anthropic.PermissionDeniedError`, which code already catches as an
    `anthropic.APIStatusError` and which the SDK never retries) and a `charter.BlockedError`
    (`reason`, `result`, `step_name`, `kind`). ``status_code`` is 403 and ``body`` is
    Anthropic's error shape, ``{"type": "error", "error": {"type": "permission_error",
    "message": reason}}``."""

    def __init__(self, blocked: Blocked, request: Any) -> None:
        body = {"type": "error", "error": {"type": "permission_error", "message": blocked.reason}}
        response = httpx.Response(403, request=request, json=body)
        anthropic.PermissionDeniedError.__init__(self, blocked.reason, response=response, body=body)
        self.reason = blocked.reason
        self.result = blocked.result
        self.step_name = blocked.step.name
        self.kind = blocked.step.kind

    def __str__(self) -> str:
        return self.reason

    def __reduce__(self) -> Any:  # the SDK's error does not pickle; its reason does
        return (charter.BlockedError, (self.reason, None, self.step_name, self.kind))


class Governance:
    """The handle `govern` returns: what it installed, and the governed tool executor."""

    def __init__(self, client: Any, gate: Gate) -> None:
        self.client = client
        self.gate = gate
        self.models = ModelClient(gate, _mapping.PROVIDER)
        self._installed: list[weakref.ref[Any]] = []
        self._api: dict[int, str] = {}

    @property
    def governor(self) -> charter.Governor:
        return self.gate.governor

    # -- installing ---------------------------------------------------------------------

    def _install(self, client: Any) -> None:
        if getattr(client, _ATTR, None) is not None:
            raise ValueError(
                "this Anthropic client is governed already; call uninstall() on its Governance "
                "before governing it again"
            )
        original = type(client).request
        is_async = isinstance(client, anthropic.AsyncAnthropic)
        wrapped = self._arequest(client, original) if is_async else self._request(client, original)
        client.request = wrapped
        copy = client.copy

        def governed_copy(*args: Any, **kwargs: Any) -> Any:
            new = copy(*args, **kwargs)
            self._install(new)  # with_options() copies must not escape governance
            return new

        client.copy = governed_copy
        client.with_options = governed_copy
        setattr(client, _ATTR, self)
        self._installed.append(weakref.ref(client))
        self._govern_runner(client)

    def uninstall(self) -> None:
        """Remove governance from the client (and the copies made of it while governed),
        and end the task the client started for itself. Safe to call twice."""
        for ref in self._installed:
            client = ref()
            if client is not None and getattr(client, _ATTR, None) is self:
                for name in ("request", "copy", "with_options", _ATTR):
                    client.__dict__.pop(name, None)
                client.beta.messages.__dict__.pop("tool_runner", None)
        self._installed.clear()
        self.models.close()

    # -- the wrapped request --------------------------------------------------------------

    def _begin(self, options: Any) -> tuple[str, Any]:
        """The API a request calls and its prepared step (None: not a model call)."""
        if not _mapping.endpoint(str(getattr(options, "url", ""))):
            return "", None
        if str(getattr(options, "method", "")).lower() != "post":
            return "", None
        body = options.json_data if isinstance(options.json_data, Mapping) else {}
        try:
            return "messages", _mapping.request_step(body, {})
        except Exception as exc:
            return "messages", self.gate.undecided(
                charter.integration.Step("step.model", None, str(body.get("model"))), exc
            )

    def _refusal(self, client: Any, options: Any, blocked: Blocked) -> BlockedCallError:
        url = client._prepare_url(options.url)
        return BlockedCallError(blocked, httpx.Request("POST", url))

    def _request(self, client: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        def request(cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None):
            api, prepared = self._begin(options)
            return self.models.send(
                prepared,
                lambda: original(client, cast_to, options, stream=stream, stream_cls=stream_cls),
                lambda blocked: self._refusal(client, options, blocked),
                lambda call, result: self._observe(api, call, result),
            )

        return request

    def _arequest(self, client: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        async def request(
            cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None
        ):
            api, prepared = self._begin(options)
            return await self.models.asend(
                prepared,
                lambda: original(client, cast_to, options, stream=stream, stream_cls=stream_cls),
                lambda blocked: self._refusal(client, options, blocked),
                lambda call, result: self._aobserve(api, call, result),
            )

        return request

    # -- outcomes -------------------------------------------------------------------------

    def _keep(self, obj: Any, api: str, verdicts: Sequence[ToolVerdict]) -> None:
        remember_verdicts(obj, verdicts)
        key = id(obj)
        try:
            weakref.finalize(obj, self._api.pop, key, None)
        except TypeError:
            return
        self._api[key] = api

    def _settle(self, api: str, call: ModelCall, parsed: Any) -> None:
        if isinstance(parsed, Stream | AsyncStream):
            self._stream(api, call, parsed)
            return
        try:
            reply = _mapping.message_reply(parsed)
        except Exception as exc:
            charter.report_internal_error(exc, "anthropic: reading a response")
            reply = charter.integration.ModelReply()
        self._keep(parsed, api, call.finish(reply))

    @staticmethod
    def _raw(result: Any) -> bool:
        """with_raw_response (the body is read already); with_streaming_response is not."""
        return bool(result.http_request.headers.get(RAW_RESPONSE_HEADER) == "raw")

    def _observe(self, api: str, call: ModelCall, result: Any) -> Any:
        if isinstance(result, APIResponse) and self._raw(result):
            # parse() caches, so the caller's own parse() returns this very object.
            try:
                parsed = result.parse()
            except Exception as exc:
                call.failed(exc)
                raise
            self._settle(api, call, parsed)
            return result
        if isinstance(result, APIResponse | AsyncAPIResponse):
            self._on_parse(api, call, result)
            return result
        self._settle(api, call, result)
        return result

    async def _aobserve(self, api: str, call: ModelCall, result: Any) -> Any:
        if isinstance(result, AsyncAPIResponse) and self._raw(result):
            try:
                parsed = await result.parse()
            except Exception as exc:
                await call.afailed(exc)
                raise
            self._settle(api, call, parsed)
            return result
        if isinstance(result, APIResponse | AsyncAPIResponse):
            return self._observe(api, call, result)
        self._settle(api, call, result)
        return result

    def _on_parse(self, api: str, call: ModelCall, raw: Any) -> None:
        """with_streaming_response: nothing is read until the caller parses; settle then,
        and as abandoned if the response is dropped unparsed."""
        parse = raw.parse
        call.watch(raw)

        if isinstance(raw, AsyncAPIResponse):

            async def aparse(*args: Any, **kwargs: Any) -> Any:
                parsed = await parse(*args, **kwargs)
                if not call.settled and not kwargs.get("to"):
                    self._settle(api, call, parsed)
                return parsed

            raw.parse = aparse
        else:

            def sparse(*args: Any, **kwargs: Any) -> Any:
                parsed = parse(*args, **kwargs)
                if not call.settled and not kwargs.get("to"):
                    self._settle(api, call, parsed)
                return parsed

            raw.parse = sparse

    def _stream(self, api: str, call: ModelCall, stream: Any) -> None:
        acc = _mapping.MessageEvents()
        ref = weakref.ref(stream)

        def done(verdicts: tuple[ToolVerdict, ...]) -> None:
            owner = ref()
            if owner is not None:
                self._keep(owner, api, verdicts)

        call.watch(stream)
        if isinstance(stream, AsyncStream):
            stream.__dict__["_iterator"] = call.astream(stream._iterator, acc.fold, acc.reply, done)
            close = stream.close

            async def aclose() -> None:
                await close()
                await stream._iterator.aclose()

            stream.close = aclose
        else:
            stream.__dict__["_iterator"] = call.stream(stream._iterator, acc.fold, acc.reply, done)
            close = stream.close

            def sclose() -> None:
                close()
                stream._iterator.close()

            stream.close = sclose

    # -- tool calls -----------------------------------------------------------------------

    def verdicts(self, source: Any) -> tuple[ToolVerdict, ...]:
        """The verdicts on the tool calls a governed message (or a finished stream) asked
        for; empty when it asked for none or was not produced by a governed client."""
        return tool_verdicts(source)

    def _calls(self, source: Any) -> tuple[ToolCall, ...]:
        if hasattr(source, "content") and hasattr(source, "stop_reason"):
            return _mapping.message_calls(source)
        if id(source) in self._api:
            return tuple(v.call for v in tool_verdicts(source))
        raise TypeError(
            f"cannot read tool calls from {type(source).__name__}: pass a Message or a "
            "governed stream read to its end"
        )

    def run_tools(self, source: Any, tools: Mapping[str, Callable[..., Any]]) -> dict[str, Any]:
        """Run the tool_use blocks `source` asks for through Charter and return the user
        message the model reads next (one ``tool_result`` block per call, in order): allowed
        calls run with their input as keywords, blocked ones (and asks a person refused)
        come back as the refusal with ``is_error``, a tool that raised as its error."""
        return _mapping.result_message(self.models.run_tools(self._calls(source), tools))

    async def arun_tools(
        self, source: Any, tools: Mapping[str, Callable[..., Any]]
    ) -> dict[str, Any]:
        """`run_tools` for async code (coroutine tools are awaited)."""
        return _mapping.result_message(await self.models.arun_tools(self._calls(source), tools))

    def tool_results(
        self, source: Any, tools: Mapping[str, Callable[..., Any]]
    ) -> list[ToolResult]:
        """`run_tools` returning the `ToolResult` of each call instead of a message."""
        return self.models.run_tools(self._calls(source), tools)

    # -- the SDK's tool runner ----------------------------------------------------------

    def _govern_runner(self, client: Any) -> None:
        resource = client.beta.messages
        original = type(resource).tool_runner

        def tool_runner(*args: Any, tools: Any = (), **kwargs: Any) -> Any:
            return original(resource, *args, tools=[self._tool(t) for t in tools], **kwargs)

        resource.tool_runner = tool_runner

    def _tool(self, tool: Any) -> Any:
        """A governed copy of a runnable tool (same class, so the runner treats it alike):
        its call is judged first; a refusal raises ToolError, which the runner sends to the
        model as an ``is_error`` tool result."""
        call = getattr(tool, "call", None)
        name = getattr(tool, "name", None)
        if call is None or not isinstance(name, str):
            return tool  # a plain tool definition or a toolset: the runner does not run it here
        governed = copy.copy(tool)
        models = self.models

        def refusal(result: ToolResult) -> ToolError:
            return ToolError(result.content)

        if inspect.iscoroutinefunction(call):

            async def acall(input: Any) -> Any:
                args = input if isinstance(input, Mapping) else {"input": input}
                [result] = await models.arun_tools(
                    [charter.integration.ToolCall(name, dict(args))],
                    {name: lambda **a: call(input)},
                )
                if not result.ok:
                    raise refusal(result)
                return result.output

            governed.call = acall
        else:

            def scall(input: Any) -> Any:
                args = input if isinstance(input, Mapping) else {"input": input}
                [result] = models.run_tools(
                    [charter.integration.ToolCall(name, dict(args))],
                    {name: lambda **a: call(input)},
                )
                if not result.ok:
                    raise refusal(result)
                return result.output

            governed.call = scall
        return governed


def govern(
    client: Any,
    *,
    governor: charter.Governor | None = None,
    approver: Any = None,
    **settings: Any,
) -> Governance:
    """Govern one `anthropic.Anthropic` or `anthropic.AsyncAnthropic` client: every Messages
    call is judged before it is sent and recorded after, streams included (a blocked call
    raises `BlockedCallError` without reaching the network), and every tool the SDK's tool
    runner (`client.beta.messages.tool_runner`) runs is judged before it runs.

    Pass an existing `governor`, or the Governor's setting keywords (`policy_file`,
    `agent_id`, ...) and an optional `approver`. Refuses (TypeError) anything but an Anthropic
    client, (ValueError) a client governed already and what `charter.Governor` refuses.
    """
    if not isinstance(client, anthropic.Anthropic | anthropic.AsyncAnthropic):
        raise TypeError(
            "charter_anthropic.govern() takes an anthropic.Anthropic or anthropic.AsyncAnthropic "
            f"client, not {type(client).__name__}"
        )
    if governor is not None:
        gate = Gate(_mapping.FRAMEWORK, governor=governor)
    else:
        gate = Gate(_mapping.FRAMEWORK, approver=approver, **settings)
    governance = Governance(client, gate)
    governance._install(client)
    return governance
