"""LlamaIndex objects in, `charter.integration.Step` out: pure functions, no state, no I/O.

Tools, chat messages and chat responses are read duck-typed (attribute by attribute), so a
provider's own message or response class is read the same way as LlamaIndex's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import charter
from charter.integration import (
    ROLES,
    Gate,
    Step,
    after_model_turn,
    chat_message,
    is_mapping,
    model_outcome,
    usage,
)
from charter.integration import model_step as build_model_step

# LlamaIndex's MessageRole values in the contract's four roles. MessageRole is a str enum whose
# members hash and compare as their values, so a member finds its role here without asking
# its `value` (a Python-level property of every enum).
_ROLE = {
    **{role: role for role in ROLES},
    "developer": "system",
    "function": "tool",
    "chatbot": "assistant",
    "model": "assistant",
}
# Tool classes whose output is content from documents (retrieval), by class name so that
# importing LlamaIndex's query engine machinery is never needed to tell.
_RETRIEVAL_TOOLS = ("QueryEngineTool", "RetrieverTool")
# Model request parameters recorded at properties.model.params when the LLM has them.
_PARAMS = ("temperature", "max_tokens", "top_p", "context_window")
# The attribute names each pydantic class's instances can have (None: any name). A pydantic
# model answers a name it lacks with an AttributeError, about 22k instructions to build and
# catch, and messages, blocks and tool outputs are asked for names only some classes have.
_READABLE: dict[type, frozenset[str] | None] = {}
_READABLE_MAX = 1024
# Each LLM class's provider (see `provider`) and whether each tool class is a retrieval
# tool (see `is_retrieval`), bounded as `_READABLE` is.
_PROVIDERS: dict[type, str] = {}
_RETRIEVAL: dict[type, bool] = {}


def _remembered(table: dict[type, Any], cls: type, value: Any) -> Any:
    """Keep `value` as `cls`'s answer in one of the per-class tables above and return it; a
    full table is cleared first (classes can be made at run time, so none grows unbounded)."""
    if len(table) >= _READABLE_MAX:
        table.clear()
    table[cls] = value
    return value


def _readable(cls: type) -> frozenset[str] | None:
    """The names `cls`'s instances can have: for a pydantic model its fields, private
    attributes and what the classes define (properties, methods); None (any name) for a
    model that keeps extra fields or answers names itself (its own ``__getattr__``, as
    workflow events have) and for anything else. Found once per class."""
    try:
        return _READABLE[cls]
    except KeyError:
        pass
    fields = getattr(cls, "model_fields", None)
    config = getattr(cls, "model_config", None)
    extra = config.get("extra") if isinstance(config, Mapping) else None
    own_getattr = any(
        "__getattr__" in vars(klass) and not klass.__module__.startswith("pydantic")
        for klass in cls.__mro__
    )
    names: frozenset[str] | None = None
    if isinstance(fields, Mapping) and extra != "allow" and not own_getattr:
        private = getattr(cls, "__private_attributes__", None)
        names = frozenset(fields).union(
            private if isinstance(private, Mapping) else (),
            *(vars(klass) for klass in cls.__mro__),
        )
    return _remembered(_READABLE, cls, names)


def attribute(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)``, without asking a pydantic model for a name its class
    cannot have."""
    names = _readable(type(obj))
    if names is not None and name not in names:
        return None
    return getattr(obj, name, None)


def text(value: Any) -> str | None:
    """`value` as plain text when it is a non-empty string, else None."""
    return str.__str__(value) if isinstance(value, str) and value else None


def base_tool(tool: Any) -> Any:
    """The tool under LlamaIndex's async adapter (`adapt_to_async_tool`), or `tool`."""
    inner = getattr(tool, "base_tool", None)
    return inner if inner is not None else tool


def tool_name(tool: Any) -> str:
    metadata = getattr(tool, "metadata", None)
    return text(getattr(metadata, "name", None)) or "unnamed_tool"


def is_retrieval(tool: Any) -> bool:
    """True for a query-engine or retriever tool: its output is content from documents.
    Found once per tool class (every tool call asks)."""
    cls = type(base_tool(tool))
    found = _RETRIEVAL.get(cls)
    if found is None:
        found = _remembered(
            _RETRIEVAL, cls, any(c.__name__ in _RETRIEVAL_TOOLS for c in cls.__mro__)
        )
    return found


def tool_step(
    gate: Gate, tool: Any, args: Mapping[str, Any], call_id: str | None, ids: dict[str, Any]
) -> Step:
    """A tool call mapped by the templates; a retrieval tool is a read
    (``step.resource GET``) whose output is external content (``properties.data.trust``),
    whatever its name, so provenance and flow rules see what came from documents."""
    name = tool_name(tool)
    metadata = getattr(tool, "metadata", None)
    description = text(getattr(metadata, "description", None))
    step = gate.tool_step(name, args, call_id=call_id, description=description, ids=ids)
    if getattr(metadata, "return_direct", False) is True:
        step.properties["tool"]["return_direct"] = True
    if not is_retrieval(tool):
        return step
    props = dict(step.properties)
    props["data"] = {**dict(props.get("data") or {}), "trust": "external"}
    props["tool"] = {**dict(props.get("tool") or {}), "effect": "read_only", "retrieval": True}
    query = args.get("input", args.get("query"))
    if isinstance(query, str):
        props["target"] = {**dict(props.get("target") or {}), "query": query}
    return step.replace(kind="step.resource", verb="GET", properties=props)


def tool_output(output: Any) -> dict[str, Any]:
    """What a tool returned: its text, and the sources of a retrieval (node ids, scores).

    A tool that returned a mapping or a list of plain values is recorded as that structure
    (LlamaIndex's text of it is a Python repr), so per-field trust paths of the templates
    (``emails[*].sender``) reach its parts."""
    found: dict[str, Any] = {"content": getattr(output, "content", None)}
    raw = getattr(output, "raw_output", None)
    if isinstance(raw, dict) or (isinstance(raw, list) and all(_plain(v) for v in raw)):
        found["content"] = charter.capture(raw)
        return found
    nodes = getattr(raw, "source_nodes", None)
    if nodes is None and isinstance(raw, list):
        nodes = raw
    sources = []
    for node in nodes if isinstance(nodes, list) else ():
        inner = getattr(node, "node", node)
        ident = getattr(inner, "node_id", None)
        if ident is None:
            continue
        entry: dict[str, Any] = {"id": str(ident)}
        score = getattr(node, "score", None)
        if isinstance(score, (int, float)):
            entry["score"] = float(score)
        sources.append(entry)
    if sources:
        found["sources"] = sources
    return found


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, dict, list))


def _role(message: Any) -> str:
    role = getattr(message, "role", None)
    if type(role) is str or isinstance(role, str):
        found = _ROLE.get(role)
        if found is not None:
            return found
    return _ROLE.get(str(getattr(role, "value", role)), "user")


def _content(message: Any) -> Any:
    content = getattr(message, "content", None)
    if content is not None:
        return content
    blocks = getattr(message, "blocks", None) or ()
    texts = [b.text for b in blocks if isinstance(attribute(b, "text"), str)]
    return "\n".join(texts) if texts else None


def _tool_calls(message: Any) -> list[dict[str, Any]]:
    calls = []
    for block in getattr(message, "blocks", None) or ():
        name = attribute(block, "tool_name")
        if isinstance(name, str) and hasattr(block, "tool_kwargs"):
            calls.append(
                {
                    "id": getattr(block, "tool_call_id", None),
                    "name": name,
                    "args": block.tool_kwargs,
                }
            )
    if calls:
        return calls
    extra = getattr(message, "additional_kwargs", None)
    for call in (extra.get("tool_calls") if is_mapping(extra) else None) or ():
        name = getattr(call, "tool_name", None)
        if isinstance(name, str):
            calls.append(
                {
                    "id": getattr(call, "tool_id", None),
                    "name": name,
                    "args": getattr(call, "tool_kwargs", None),
                }
            )
    return calls


def message(m: Any) -> dict[str, Any]:
    """One LlamaIndex ChatMessage in the contract's shape."""
    extra = getattr(m, "additional_kwargs", None)
    if not is_mapping(extra):
        extra = None
    return chat_message(
        _role(m),
        _content(m),
        name=text(extra.get("name")) if extra is not None else None,
        tool_calls=_tool_calls(m),
        tool_call_id=text(extra.get("tool_call_id")) if extra is not None else None,
    )


def _tool_names(tools: Any) -> list[str]:
    names = []
    for tool in tools if type(tools) is list or isinstance(tools, Sequence) else ():
        if is_mapping(tool):  # a provider's tool spec
            fn = tool.get("function")
            name = fn.get("name") if is_mapping(fn) else tool.get("name")
        else:
            name = getattr(getattr(tool, "metadata", None), "name", None)
        if isinstance(name, str) and name:
            names.append(name)
    return names


def provider(llm: Any, cls: type) -> str:
    """The provider an LLM class belongs to: ``openai`` for ``llama_index.llms.openai``,
    else LlamaIndex's own class name for it (`class_name`, a classmethod). Found once per
    class: every model call asks."""
    try:
        return _PROVIDERS[cls]
    except KeyError:
        pass
    parts = cls.__module__.split(".")
    if parts[:2] == ["llama_index", "llms"] and len(parts) > 2:
        found = parts[2]
    else:
        try:
            found = str(llm.class_name())
        except Exception:
            found = cls.__name__
    return _remembered(_PROVIDERS, cls, found)


def model_name(llm: Any, cls: type) -> str:
    """The model an LLM calls: its ``model`` field (what LlamaIndex's provider LLMs send
    and report as ``metadata.model_name``), else its metadata's name, else its class name.
    The field is read first: ``metadata`` builds a new pydantic object on every read."""
    name = text(attribute(llm, "model"))
    if name is not None:
        return name
    try:
        name = text(getattr(llm.metadata, "model_name", None))
    except Exception:
        name = None
    return name or cls.__name__


def model_step(
    gate: Gate, llm: Any, cls: type, messages: Sequence[Any], kwargs: Mapping[str, Any], ids: Any
) -> Step:
    """A chat call: only the messages after the model's last turn are converted."""
    start = after_model_turn(messages, lambda m: _role(m) == "assistant")
    params = {k: v for k in _PARAMS if isinstance(v := attribute(llm, k), (int, float))}
    return build_model_step(
        gate.framework,
        model_name(llm, cls),
        [message(m) for m in messages[start:]],
        provider=provider(llm, cls),
        params=params,
        tools=_tool_names(kwargs.get("tools")),
        ids=ids,
        message_count=len(messages),
    )


def _nothing(key: str) -> None:
    return None


def _reader(obj: Any) -> Callable[[str], Any]:
    """How to read a field of `obj`: a mapping's ``get``, an object's `attribute`."""
    if obj is None:
        return _nothing
    if is_mapping(obj):
        return obj.get
    return functools.partial(attribute, obj)


def _either(read: Callable[[str], Any], key: str, other: str) -> Any:
    value = read(key)
    return value if value is not None else read(other)


def response_output(response: Any) -> dict[str, Any]:
    """A chat response as the model step's output: the reply and any tool calls."""
    reply = getattr(response, "message", None)
    out: dict[str, Any] = {"message": message(reply) if reply is not None else None}
    return out


def response_properties(response: Any) -> dict[str, Any] | None:
    """Token usage and stop reason of a chat response, from what providers report:
    ``additional_kwargs`` (OpenAI's prompt/completion tokens) or the raw response's
    ``usage`` (input/output tokens), and its finish or stop reason."""
    extra = getattr(response, "additional_kwargs", None) or {}
    read_raw = _reader(getattr(response, "raw", None))
    found = None
    for source in (extra, read_raw("usage")):
        if source is None:
            continue
        read = _reader(source)
        found = usage(
            _either(read, "input_tokens", "prompt_tokens"),
            _either(read, "output_tokens", "completion_tokens"),
            read("total_tokens"),
        )
        if found:
            break
    stop = read_raw("stop_reason") or read_raw("finish_reason") or read_raw("done_reason")
    choices = read_raw("choices")
    if stop is None and isinstance(choices, list) and choices:
        stop = _reader(choices[0])("finish_reason")
    return model_outcome(usage=found, stop_reason=text(stop))
