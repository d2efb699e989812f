"""govern(client): Charter's model-client lifecycle around one Anthropic / AsyncAnthropic client.

The client's own ``request`` method is wrapped on the instance: every Messages call (plain,
streamed, ``with_raw_response``, ``with_streaming_response``, beta) goes through it once,
outside the SDK's retry loop, so a call retried three times is one step. The SDK's tool
runner gets governed copies of its tools: each call is judged before the tool runs.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import charter
from charter.integration import (
    Blocked,
    Gate,
    ModelReply,
    SDKClientGovernance,
    Step,
    ToolCall,
    ToolResult,
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


class Governance(SDKClientGovernance):
    """The handle `govern` returns: what it installed, and the governed tool executor."""

    client_label = "Anthropic"
    async_client = anthropic.AsyncAnthropic
    stream_types = (Stream, AsyncStream)
    response_types = (APIResponse, AsyncAPIResponse)
    provider = _mapping.PROVIDER

    def api_of(self, url: str) -> str | None:
        return "messages" if _mapping.endpoint(url) else None

    def request_step(self, api: str, body: Mapping[str, Any]) -> Step:
        return _mapping.request_step(body, {})

    def reply(self, api: str, parsed: Any) -> ModelReply:
        return _mapping.message_reply(parsed)

    def accumulator(self, api: str) -> Any:
        return _mapping.MessageEvents()

    def refusal(self, client: Any, options: Any, blocked: Blocked) -> BlockedCallError:
        url = client._prepare_url(options.url)
        return BlockedCallError(blocked, httpx.Request("POST", url))

    def is_read(self, result: Any) -> bool:
        """with_raw_response (the body is read already); with_streaming_response is not."""
        return isinstance(result, (APIResponse, AsyncAPIResponse)) and bool(
            result.http_request.headers.get(RAW_RESPONSE_HEADER) == "raw"
        )

    def installed(self, client: Any) -> None:
        self._govern_runner(client)

    def uninstalled(self, client: Any) -> None:
        client.beta.messages.__dict__.pop("tool_runner", None)

    # -- tool calls -----------------------------------------------------------------------

    def _calls(self, source: Any) -> tuple[ToolCall, ...]:
        if hasattr(source, "content") and hasattr(source, "stop_reason"):
            return _mapping.message_calls(source)
        if self.governed_api(source) is not None:
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
    if not isinstance(client, (anthropic.Anthropic, anthropic.AsyncAnthropic)):
        raise TypeError(
            "charter_anthropic.govern() takes an anthropic.Anthropic or anthropic.AsyncAnthropic "
            f"client, not {type(client).__name__}"
        )
    if governor is not None:
        gate = Gate(_mapping.FRAMEWORK, governor=governor)
    else:
        gate = Gate(_mapping.FRAMEWORK, approver=approver, **settings)
    governance = Governance(client, gate)
    governance.install(client)
    return governance
