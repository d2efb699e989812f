"""govern(client): Charter's model-client lifecycle around one OpenAI / AsyncOpenAI client.

The client's own ``request`` method is wrapped on the instance: every resource method (plain,
``with_raw_response``, ``with_streaming_response``, the ``.stream()`` / ``.parse()`` helpers)
goes through it once, outside the SDK's retry loop, so a call retried three times is one step.
"""

from __future__ import annotations

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
    import httpx
    import openai
    from openai._legacy_response import LegacyAPIResponse
    from openai._response import APIResponse, AsyncAPIResponse
    from openai._streaming import AsyncStream, Stream
except ImportError as exc:  # pragma: no cover - a dependency of this distribution
    raise ImportError("charter-openai needs the OpenAI SDK: pip install charter-openai") from exc

__all__ = ["BlockedCallError", "Governance", "govern"]


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


class Governance(SDKClientGovernance):
    """The handle `govern` returns: what it installed, and the governed tool executor."""

    client_label = "OpenAI"
    async_client = openai.AsyncOpenAI
    stream_types = (Stream, AsyncStream)
    response_types = (APIResponse, AsyncAPIResponse)
    provider = _mapping.PROVIDER

    def api_of(self, url: str) -> str | None:
        return _mapping.endpoint(url)

    def request_step(self, api: str, body: Mapping[str, Any]) -> Step:
        return _mapping.request_step(api, body, {})

    def reply(self, api: str, parsed: Any) -> ModelReply:
        return _mapping.chat_reply(parsed) if api == "chat" else _mapping.responses_reply(parsed)

    def accumulator(self, api: str) -> Any:
        return _mapping.ChatChunks() if api == "chat" else _mapping.ResponseEvents()

    def refusal(self, client: Any, options: Any, blocked: Blocked) -> BlockedCallError:
        url = client._prepare_url(options.url)
        return BlockedCallError(blocked, httpx.Request("POST", url))

    def is_read(self, result: Any) -> bool:
        # with_raw_response answers a LegacyAPIResponse, read already (or a stream)
        return isinstance(result, LegacyAPIResponse)

    # -- tool calls -----------------------------------------------------------------------

    def _calls(self, source: Any) -> tuple[str, tuple[ToolCall, ...]]:
        found = _mapping.calls_of(source)
        if found is not None:
            return found
        api = self.governed_api(source)
        if api is not None:
            return api, tuple(v.call for v in tool_verdicts(source))
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
    if not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        raise TypeError(
            f"charter_openai.govern() takes an openai.OpenAI or openai.AsyncOpenAI client, "
            f"not {type(client).__name__}"
        )
    if governor is not None:
        gate = Gate(_mapping.FRAMEWORK, governor=governor)
    else:
        gate = Gate(_mapping.FRAMEWORK, approver=approver, **settings)
    governance = Governance(client, gate)
    governance.install(client)
    return governance
