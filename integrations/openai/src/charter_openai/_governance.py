"""govern(client): Charter's model-client lifecycle around one OpenAI / AsyncOpenAI client.

The client's own ``request`` method is wrapped on the instance: every resource method (plain,
``with_raw_response``, ``with_streaming_response``, the ``.stream()`` / ``.parse()`` helpers)
goes through it once, outside the SDK's retry loop, so a call retried three times is one step.
"""

from __future__ import annotations

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
    import httpx
    import openai
    from openai._legacy_response import LegacyAPIResponse
    from openai._response import APIResponse, AsyncAPIResponse
    from openai._streaming import AsyncStream, Stream
except ImportError as exc:  # pragma: no cover - a dependency of this distribution
    raise ImportError("charter-openai needs the OpenAI SDK: pip install charter-openai") from exc

__all__ = ["BlockedCallError", "Governance", "govern"]

_ATTR = "_charter_governance"


class BlockedCallError(openai.PermissionDeniedError, charter.BlockedError):
    """A model call Charter blocked before it was sent: the SDK's own 403 refusal
    (`openai.PermissionDeniedError`, which code already catches as an `openai.APIStatusError`
    and which the SDK and common retry policies never retry) and a `charter.BlockedError`
    (`reason`, `result`, `step_name`, `kind`). ``status_code`` is 403 and ``body`` is
    ``{"error": {"type": "charter_blocked", "message": reason, "code": "policy_blocked"}}``."""

    def __init__(self, blocked: Blocked, request: httpx.Request) -> None:
        body = {
            "error": {
                "message": blocked.reason,
                "type": "charter_blocked",
                "param": None,
                "code": "policy_blocked",
            }
        }
        response = httpx.Response(403, request=request, json=body)
        openai.PermissionDeniedError.__init__(self, blocked.reason, response=response, body=body)
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
                "this OpenAI client is governed already; call uninstall() on its Governance "
                "before governing it again"
            )
        original = type(client).request
        is_async = isinstance(client, openai.AsyncOpenAI)
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

    def uninstall(self) -> None:
        """Remove governance from the client (and the copies made of it while governed),
        and end the task the client started for itself. Safe to call twice."""
        for ref in self._installed:
            client = ref()
            if client is not None and getattr(client, _ATTR, None) is self:
                for name in ("request", "copy", "with_options", _ATTR):
                    client.__dict__.pop(name, None)
        self._installed.clear()
        self.models.close()

    # -- the wrapped request --------------------------------------------------------------

    def _begin(self, options: Any) -> tuple[str, Any]:
        """The API a request calls and its prepared step (None: not a model call)."""
        api = _mapping.endpoint(str(getattr(options, "url", "")))
        if api is None or str(getattr(options, "method", "")).lower() != "post":
            return "", None
        body = options.json_data if isinstance(options.json_data, Mapping) else {}
        try:
            return api, _mapping.request_step(api, body, {})
        except Exception as exc:
            return api, self.gate.undecided(
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
            reply = (
                _mapping.chat_reply(parsed) if api == "chat" else _mapping.responses_reply(parsed)
            )
        except Exception as exc:
            charter.report_internal_error(exc, "openai: reading a response")
            reply = charter.integration.ModelReply()
        self._keep(parsed, api, call.finish(reply))

    def _observe(self, api: str, call: ModelCall, result: Any) -> Any:
        if isinstance(result, LegacyAPIResponse):
            # with_raw_response: the body is read already (or a stream); parse() caches, so
            # the caller's own parse() returns this very object.
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
        if isinstance(result, LegacyAPIResponse | APIResponse | AsyncAPIResponse):
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
        acc = _mapping.ChatChunks() if api == "chat" else _mapping.ResponseEvents()
        ref = weakref.ref(stream)

        def done(verdicts: tuple[ToolVerdict, ...]) -> None:
            owner = ref()
            if owner is not None:
                self._keep(owner, api, verdicts)

        call.watch(stream)
        if isinstance(stream, AsyncStream):
            stream._iterator = call.astream(stream._iterator, acc.fold, acc.reply, done)
            close = stream.close

            async def aclose() -> None:
                await close()
                await stream._iterator.aclose()

            stream.close = aclose
        else:
            stream._iterator = call.stream(stream._iterator, acc.fold, acc.reply, done)
            close = stream.close

            def sclose() -> None:
                close()
                stream._iterator.close()

            stream.close = sclose

    # -- tool calls -----------------------------------------------------------------------

    def verdicts(self, source: Any) -> tuple[ToolVerdict, ...]:
        """The verdicts on the tool calls a governed response (or a finished stream) asked
        for; empty when it asked for none or was not produced by a governed client."""
        return tool_verdicts(source)

    def _calls(self, source: Any) -> tuple[str, tuple[ToolCall, ...]]:
        found = _mapping.calls_of(source)
        if found is not None:
            return found
        verdicts = tool_verdicts(source)
        api = self._api.get(id(source))
        if api is not None:
            return api, tuple(v.call for v in verdicts)
        raise TypeError(
            f"cannot read tool calls from {type(source).__name__}: pass a ChatCompletion, a "
            "ChatCompletionMessage, a Responses API response, or a governed stream read to its end"
        )

    def run_tools(
        self, source: Any, tools: Mapping[str, Callable[..., Any]]
    ) -> list[dict[str, Any]]:
        """Run the tool calls `source` asks for through Charter and return the messages the
        model reads next, one per call, in order (``tool`` messages for Chat Completions,
        ``function_call_output`` items for the Responses API): allowed calls run with their
        arguments as keywords, blocked ones and asks a person refused come back as the
        refusal, a tool that raised as its error. Nothing is raised into the loop."""
        api, calls = self._calls(source)
        return _mapping.result_messages(api, self.models.run_tools(calls, tools))

    async def arun_tools(
        self, source: Any, tools: Mapping[str, Callable[..., Any]]
    ) -> list[dict[str, Any]]:
        """`run_tools` for async code (coroutine tools are awaited)."""
        api, calls = self._calls(source)
        return _mapping.result_messages(api, await self.models.arun_tools(calls, tools))

    def tool_results(
        self, source: Any, tools: Mapping[str, Callable[..., Any]]
    ) -> list[ToolResult]:
        """`run_tools` returning the `ToolResult` of each call instead of messages."""
        return self.models.run_tools(self._calls(source)[1], tools)


def govern(
    client: Any,
    *,
    governor: charter.Governor | None = None,
    approver: Any = None,
    **settings: Any,
) -> Governance:
    """Govern one `openai.OpenAI` or `openai.AsyncOpenAI` client (Azure's included): every
    Chat Completions and Responses API call is judged before it is sent and recorded after,
    streams included; a blocked call raises `BlockedCallError` without reaching the network.

    Pass an existing `governor`, or the Governor's setting keywords (`policy_file`,
    `agent_id`, ...) and an optional `approver`. Refuses (TypeError) anything but an OpenAI
    client, (ValueError) a client governed already and what `charter.Governor` refuses.
    """
    if not isinstance(client, openai.OpenAI | openai.AsyncOpenAI):
        raise TypeError(
            f"charter_openai.govern() takes an openai.OpenAI or openai.AsyncOpenAI client, "
            f"not {type(client).__name__}"
        )
    if governor is not None:
        gate = Gate(_mapping.FRAMEWORK, governor=governor)
    else:
        gate = Gate(_mapping.FRAMEWORK, approver=approver, **settings)
    governance = Governance(client, gate)
    governance._install(client)
    return governance
