"""The governed ``request`` of a generated HTTP SDK client (OpenAI's and Anthropic's).

Both SDKs come from one generator: every resource method of a client (plain,
``with_raw_response``, ``with_streaming_response``, the stream and parse helpers) funnels
through ``client.request(cast_to, options, *, stream, stream_cls)`` once, outside the SDK's
retry loop, and answers with a parsed object, a `Stream` / `AsyncStream` of events, a raw
response whose body is read already, or a streaming response that reads nothing until the
caller parses it. `SDKClientGovernance` wraps that one method on the instance and drives
`ModelClient`'s lifecycle for each of those answers; a provider's integration subclasses it
with its mapping (which URLs are model calls, the step a request body is, the reply a
response is, the refusal the SDK raises) and its SDK's classes.

What it refuses: governing a client twice (ValueError). What it guarantees: copies made with
``copy()`` / ``with_options()`` are governed by the same handle, and `uninstall` removes
every wrapper it put on any of them.
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from charter._runtime.gate import Blocked, Gate
from charter._runtime.governor import Governor
from charter._runtime.internal import report_internal_error
from charter._runtime.models import (
    ModelCall,
    ModelClient,
    ModelReply,
    ToolVerdict,
    remember_verdicts,
    tool_verdicts,
)
from charter._runtime.steps import Step

__all__ = ["SDKClientGovernance"]

_ATTR = "_charter_governance"


class SDKClientGovernance(ABC):
    """The handle a raw-client integration's ``govern`` returns: what it installed on the
    client (and its copies), and the provider-neutral handling of every kind of answer.

    A subclass sets the class attributes and implements the abstract mapping methods below
    (one left out makes the subclass refuse to be built, TypeError); it never wraps
    ``request`` itself.
    """

    #: how errors name the client ("OpenAI")
    client_label: ClassVar[str]
    #: the SDK's async client class: its requests are awaited
    async_client: ClassVar[type[Any]]
    #: the SDK's ``Stream`` and ``AsyncStream``
    stream_types: ClassVar[tuple[type[Any], type[Any]]]
    #: the SDK's ``APIResponse`` and ``AsyncAPIResponse`` (streaming or raw responses)
    response_types: ClassVar[tuple[type[Any], type[Any]]]
    #: the provider's name in ``ModelClient`` (recorded as the step's provider)
    provider: ClassVar[str]

    def __init__(self, client: Any, gate: Gate) -> None:
        self.client = client
        self.gate = gate
        self.models = ModelClient(gate, self.provider)
        self._installed: list[weakref.ref[Any]] = []
        self._api: dict[int, str] = {}

    @property
    def governor(self) -> Governor:
        return self.gate.governor

    # -- the provider's mapping ---------------------------------------------------------

    @abstractmethod
    def api_of(self, url: str) -> str | None:
        """The API a request URL calls ("chat", "messages", ...), or None: not a model call."""

    @abstractmethod
    def request_step(self, api: str, body: Mapping[str, Any]) -> Step:
        """The ``step.model`` intent of a request body (may raise: the step is undecided)."""

    @abstractmethod
    def reply(self, api: str, parsed: Any) -> ModelReply:
        """The reply a parsed response is (may raise: reported, recorded as an empty reply)."""

    @abstractmethod
    def accumulator(self, api: str) -> Any:
        """A fresh fold of stream events, with ``fold(event)`` and ``reply()``."""

    @abstractmethod
    def refusal(self, client: Any, options: Any, blocked: Blocked) -> BaseException:
        """The SDK's own error for a blocked call, raised before anything is sent."""

    @abstractmethod
    def is_read(self, result: Any) -> bool:
        """Whether `result` is a ``with_raw_response`` answer, whose body is read already."""

    def installed(self, client: Any) -> None:  # noqa: B027 (optional hook)
        """Called once `client` is governed: a subclass wraps more of it here."""

    def uninstalled(self, client: Any) -> None:  # noqa: B027 (optional hook)
        """Called for each governed client on `uninstall`: undo what `installed` did."""

    # -- installing ---------------------------------------------------------------------

    def install(self, client: Any) -> None:
        """Wrap `client.request` (and ``copy`` / ``with_options``, so that copies are
        governed too). Refuses (ValueError) a client that is governed already."""
        if getattr(client, _ATTR, None) is not None:
            raise ValueError(
                f"this {self.client_label} client is governed already; call uninstall() on "
                "its Governance before governing it again"
            )
        original = type(client).request
        if isinstance(client, self.async_client):
            client.request = self._arequest(client, original)
        else:
            client.request = self._request(client, original)
        copy = client.copy

        def governed_copy(*args: Any, **kwargs: Any) -> Any:
            new = copy(*args, **kwargs)
            self.install(new)  # with_options() copies must not escape governance
            return new

        client.copy = governed_copy
        client.with_options = governed_copy
        setattr(client, _ATTR, self)
        self._installed.append(weakref.ref(client))
        self.installed(client)

    def uninstall(self) -> None:
        """Remove governance from the client (and the copies made of it while governed),
        and end the task the client started for itself. Safe to call twice."""
        for ref in self._installed:
            client = ref()
            if client is not None and getattr(client, _ATTR, None) is self:
                for name in ("request", "copy", "with_options", _ATTR):
                    client.__dict__.pop(name, None)
                self.uninstalled(client)
        self._installed.clear()
        self.models.close()

    # -- the wrapped request --------------------------------------------------------------

    def _begin(self, options: Any) -> tuple[str, Any]:
        """The API a request calls and its prepared step (None: not a model call)."""
        api = self.api_of(str(getattr(options, "url", "")))
        if api is None or str(getattr(options, "method", "")).lower() != "post":
            return "", None
        body = options.json_data if isinstance(options.json_data, Mapping) else {}
        try:
            return api, self.request_step(api, body)
        except Exception as exc:
            return api, self.gate.undecided(Step("step.model", None, str(body.get("model"))), exc)

    def _request(self, client: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        def request(
            cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None
        ) -> Any:
            api, prepared = self._begin(options)
            return self.models.send(
                prepared,
                lambda: original(client, cast_to, options, stream=stream, stream_cls=stream_cls),
                lambda blocked: self.refusal(client, options, blocked),
                lambda call, result: self._observe(api, call, result),
            )

        return request

    def _arequest(self, client: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        async def request(
            cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None
        ) -> Any:
            api, prepared = self._begin(options)
            return await self.models.asend(
                prepared,
                lambda: original(client, cast_to, options, stream=stream, stream_cls=stream_cls),
                lambda blocked: self.refusal(client, options, blocked),
                lambda call, result: self._aobserve(api, call, result),
            )

        return request

    # -- outcomes -------------------------------------------------------------------------

    def _keep(self, obj: Any, api: str, verdicts: tuple[ToolVerdict, ...]) -> None:
        remember_verdicts(obj, verdicts)
        key = id(obj)
        try:
            weakref.finalize(obj, self._api.pop, key, None)
        except TypeError:
            return
        self._api[key] = api

    def _settle(self, api: str, call: ModelCall, parsed: Any) -> None:
        if isinstance(parsed, self.stream_types):
            self._stream(api, call, parsed)
            return
        try:
            reply = self.reply(api, parsed)
        except Exception as exc:
            report_internal_error(exc, f"{self.provider}: reading a response")
            reply = ModelReply()
        self._keep(parsed, api, call.finish(reply))

    def _observe(self, api: str, call: ModelCall, result: Any) -> Any:
        if self.is_read(result):
            # parse() caches, so the caller's own parse() returns this very object.
            try:
                parsed = result.parse()
            except Exception as exc:
                call.failed(exc)
                raise
            self._settle(api, call, parsed)
            return result
        if isinstance(result, self.response_types):
            self._on_parse(api, call, result)
            return result
        self._settle(api, call, result)
        return result

    async def _aobserve(self, api: str, call: ModelCall, result: Any) -> Any:
        if isinstance(result, self.response_types[1]) and self.is_read(result):
            try:
                parsed = await result.parse()
            except Exception as exc:
                await call.afailed(exc)
                raise
            self._settle(api, call, parsed)
            return result
        if self.is_read(result) or isinstance(result, self.response_types):
            return self._observe(api, call, result)
        self._settle(api, call, result)
        return result

    def _on_parse(self, api: str, call: ModelCall, raw: Any) -> None:
        """with_streaming_response: nothing is read until the caller parses; settle then,
        and as abandoned if the response is dropped unparsed."""
        parse = raw.parse
        call.watch(raw)

        if isinstance(raw, self.response_types[1]):

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
        acc = self.accumulator(api)
        ref = weakref.ref(stream)

        def done(verdicts: tuple[ToolVerdict, ...]) -> None:
            owner = ref()
            if owner is not None:
                self._keep(owner, api, verdicts)

        call.watch(stream)
        # Set in the instance's __dict__: newer SDKs compute the iterator lazily (a cached
        # property), and setting the attribute would fail there.
        if isinstance(stream, self.stream_types[1]):
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
        """The verdicts on the tool calls a governed response (or a finished stream) asked
        for; empty when it asked for none or was not produced by a governed client."""
        return tool_verdicts(source)

    def governed_api(self, source: Any) -> str | None:
        """The API of a response or finished stream this handle governed, else None."""
        return self._api.get(id(source))
