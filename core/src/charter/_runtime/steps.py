"""Step descriptions and their builders: framework facts at one set of property paths.

Every integration describes a framework event as a `Step` before it is judged. The builders
put what frameworks know at the same paths whichever framework produced it, so one policy
file judges the same action the same way under LangChain, LangGraph, CrewAI, LlamaIndex,
Claude Code or a raw model client:

- ``properties.tool``: ``name``, ``call_id``, ``description`` of a tool call;
- ``properties.model``: ``name``, ``provider``, ``params`` (request parameters), ``tools``
  (names offered to the model), and after the call ``usage`` (``input_tokens``,
  ``output_tokens``, ``total_tokens``) and ``stop_reason``;
- ``properties.message``: ``role`` of a message step;
- ``properties.framework``: ``name`` of the integration and the framework's own ids
  (``run_id``, ``thread_id``, ``node``, ...), which policies may read but rarely need;
- ``properties.exec.shell`` of a ``step.exec`` whose command (``properties.exec.command``
  or ``input.command``) is a string: the parsed view of the command line
  (`charter._policy.shell.shell_view`), built here once for every integration;
- ``properties.target.credential``: true on a ``step.resource GET`` whose target path
  (``target.path``, ``target.resolved_path``; a glob counts) names a credential path;
- ``input.messages`` of a model step: ``[{role, content, ...}]`` with role ``system``,
  ``user``, ``assistant`` or ``tool``, only those new since the model's last turn;
- ``properties.data.trust`` and ``properties.data.field_trust``: the trust level of a tool's
  output and of parts of it by path (``emails[*].sender: internal``), from the templates or
  given by the integration (`tool_step`); a model step's output counts at the lowest level
  of the content recorded before it, never above ``internal`` (`model_step` can only lower
  it). See `charter.rules.Trust`.

Builders are pure: no I/O, no policy, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from charter._model.behavior import ActionKind, Verb, verbs_for
from charter._model.capture import capture, capture_noted
from charter._model.frozen import Frozen, slot_setters
from charter._model.trust import parse_output_path, parse_trust
from charter._policy.shell import is_credential_path, shell_view

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeGuard

__all__ = [
    "ROLES",
    "Step",
    "after_model_turn",
    "chat_message",
    "is_mapping",
    "message_step",
    "model_outcome",
    "model_step",
    "new_messages",
    "node_step",
    "tool_step",
    "usage",
    "user_contents",
    "user_inputs",
]

ROLES = ("system", "user", "assistant", "tool")


class Step(Frozen):
    """One step as an integration describes it before it is judged.

    `kind` and `verb` are a valid pair (`charter.verbs_for`), `name` the step name (mapped
    with `charter.step_name_from` when the step is built), `input` the arguments as the
    framework will pass them, `properties` the facts at the documented paths.
    """

    __slots__ = ("input", "kind", "name", "properties", "verb")
    kind: str
    verb: str | None
    name: str
    input: dict[str, Any]
    properties: dict[str, Any]

    def __init__(
        self,
        kind: str,
        verb: str | None,
        name: str,
        input: dict[str, Any] | None = None,
        properties: dict[str, Any] | None = None,
    ) -> None:
        _put_kind(self, kind)
        _put_verb(self, verb)
        _put_name(self, name)
        _put_input(self, {} if input is None else input)
        _put_properties(self, {} if properties is None else properties)


_put_kind, _put_verb, _put_name, _put_input, _put_properties = slot_setters(
    Step, "kind", "verb", "name", "input", "properties"
)


def is_mapping(value: object) -> TypeGuard[Mapping[Any, Any]]:
    """``isinstance(value, Mapping)``, answered by type for a dict and for None.

    What integrations read off framework and provider objects is mostly dicts and None, and
    an isinstance check against an abstract class runs Python code (about a function
    call's cost) on every ask: translation asks it several times per step.
    """
    return type(value) is dict or (value is not None and isinstance(value, Mapping))


def _framework(framework: str, ids: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": framework}
    for key, value in (ids or {}).items():
        if value is not None:
            out[str(key)] = value if isinstance(value, (str, int, bool)) else str(value)
    return out


def _add(group: dict[str, Any], key: str, value: Any) -> None:
    """Put `value` at `key` of `group` unless it is unknown (None) or an empty list or
    object. The step builders call it per field: building keyword arguments for one call
    (`_group`) cost more, on every model and tool step."""
    # Asked by type, not by comparing with [] and {}: that built two containers per value
    # and went through both types' comparisons.
    if value is not None and (value or not isinstance(value, (list, dict))):
        group[key] = value


def _group(**values: Any) -> dict[str, Any]:
    """`values` without those `_add` leaves out."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        _add(out, key, value)
    return out


def tool_step(
    framework: str,
    name: str,
    args: Mapping[str, Any] | None,
    *,
    kind: str = "step.unknown",
    verb: str | None = None,
    properties: Mapping[str, Any] | None = None,
    call_id: str | None = None,
    description: str | None = None,
    ids: Mapping[str, Any] | None = None,
    trust: str | None = None,
    field_trust: Mapping[str, str] | None = None,
) -> Step:
    """A tool call: `kind`, `verb` and `properties` usually come from the templates
    (`Gate.tool_step` resolves them); input = the arguments.

    `trust` is the level of the tool's whole output and `field_trust` the level of parts of
    it by path relative to the output (``{"emails[*].sender": "internal"}``); both replace
    what the templates said, path by path. Refuses (ValueError) a word that is not a level
    and a path that cannot be read."""
    props = dict(properties or {})
    if trust is not None or field_trust:
        props["data"] = _trust_group(props.get("data"), trust, field_trust)
    given = props.get("tool")
    tool = dict(given) if is_mapping(given) else {}
    _add(tool, "name", name)
    _add(tool, "call_id", call_id)
    _add(tool, "description", description)
    props["tool"] = tool
    props["framework"] = _framework(framework, ids)
    data = {str(k): v for k, v in (args or {}).items()}
    if kind == "step.exec":
        _add_shell_view(props, data)
    elif kind == "step.resource" and verb == "GET":
        _mark_credential(props)
    return Step(kind, verb, name, data, props)


def _trust_group(
    data: Any, trust: str | None, field_trust: Mapping[str, str] | None
) -> dict[str, Any]:
    out = dict(data) if isinstance(data, Mapping) else {}
    if trust is not None:
        parse_trust(trust, "trust")
        out["trust"] = trust
    if field_trust:
        fields = dict(out.get("field_trust") or {})
        for path, level in field_trust.items():
            parse_output_path(path)
            parse_trust(level, f"field_trust[{path!r}]")
            fields[str(path)] = level
        out["field_trust"] = fields
    return out


def _add_shell_view(props: dict[str, Any], data: Mapping[str, Any]) -> None:
    ex = props.get("exec")
    ex = dict(ex) if isinstance(ex, Mapping) else {}
    command = ex.get("command")
    if not isinstance(command, str):
        command = data.get("command")
    if isinstance(command, str):
        ex["shell"] = shell_view(command)
        props["exec"] = ex


def _mark_credential(props: dict[str, Any]) -> None:
    target = props.get("target")
    if not is_mapping(target):
        return
    for key in ("path", "resolved_path"):
        values = target.get(key)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str) and is_credential_path(value):
                props["target"] = {**target, "credential": True}
                return


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"message role {role!r} is not one of {', '.join(ROLES)}")


def chat_message(
    role: str,
    content: Any,
    *,
    name: str | None = None,
    tool_calls: Sequence[Mapping[str, Any]] = (),
    tool_call_id: str | None = None,
    error: bool = False,
) -> dict[str, Any]:
    """One model message in the shape every integration records: ``{role, content}`` plus
    ``name``, ``tool_calls`` (``[{id, name, args}]``), ``tool_call_id`` and ``status`` when
    known. Refuses (ValueError) a role outside `ROLES`."""
    _check_role(role)
    out: dict[str, Any] = {"role": role, "content": capture(content)}
    if name:
        out["name"] = str(name)
    if tool_calls:
        out["tool_calls"] = [
            _group(id=c.get("id"), name=c.get("name"), args=capture(c.get("args")))
            for c in tool_calls
        ]
    if tool_call_id:
        out["tool_call_id"] = str(tool_call_id)
    if error:
        out["status"] = "error"
    return out


def new_messages(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The messages after the model's last turn (the last ``assistant`` message): what is
    new to the model in this call; all of them when it has not spoken yet.

    The earlier ones are in the audit trail already (the first call's prompt, the model's
    outputs, the tool results), so a long run records each message once instead of a
    growing prefix on every call.
    """
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return list(messages[i + 1 :])
    return list(messages)


def after_model_turn(messages: Sequence[Any], is_model: Callable[[Any], bool]) -> int:
    """Where the messages new to the model start among a call's raw `messages`: just after
    the last one `is_model` says is the model's own turn; 0 when it has not spoken.

    Converted, the messages from there on are what `new_messages` keeps, found before any is
    converted: a call converts only those and passes the whole length as `message_count` to
    `model_step` (an agent loop resends the conversation on every call, and the earlier
    messages are in the trail already)."""
    for i in range(len(messages) - 1, -1, -1):
        if is_model(messages[i]):
            return i + 1
    return 0


def user_contents(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The content of each ``user`` message among chat `messages` (as `chat_message` builds
    them), in order: what `Gate.user_messages` records. Assistant, system and tool messages
    are never the user's words and are left out."""
    return [m.get("content") for m in messages if m.get("role") == "user"]


# Lowercased: LangChain's message types, its streamed chunks' included, are roles too.
_USER = frozenset(("user", "human", "humanmessagechunk"))
_ASSISTANT = frozenset(("assistant", "ai", "aimessagechunk"))


def _role_and_content(message: Any) -> tuple[str | None, Any]:
    if isinstance(message, str):
        return "user", message  # chat frameworks read a bare string as the user's message
    if is_mapping(message):
        return _word(message.get("role") or message.get("type")), message.get("content")
    if isinstance(message, tuple) and len(message) == 2:
        return _word(message[0]), message[1]
    role = _word(getattr(message, "type", None))
    if role not in _USER and role not in _ASSISTANT:
        role = _word(getattr(message, "role", None)) or role
    return role, getattr(message, "content", None)


def _word(value: Any) -> str | None:
    return value.lower() if isinstance(value, str) else None


def user_inputs(messages: Any) -> list[Any]:
    """The user's words in the input of a chat framework's run: the content of each user
    message after the last assistant message (earlier turns were recorded by earlier runs),
    in order, for `Gate.user_messages`.

    `messages` is a sequence of messages in the shapes chat frameworks take as input:
    mappings with ``role`` (or ``type``) and ``content`` (as `chat_message` builds them),
    ``(role, content)`` pairs, message objects with ``type`` or ``role`` and ``content``
    (LangChain's HumanMessage has type ``human``), and bare strings (a user message); a
    single string is one user message. Roles ``user`` and ``human`` are the user's; system,
    tool and unknown roles are nobody's words and are left out.
    """
    if isinstance(messages, str):
        return [messages]
    if not isinstance(messages, Sequence):
        return []
    seen = [_role_and_content(m) for m in messages]
    last = max((i for i, (role, _) in enumerate(seen) if role in _ASSISTANT), default=-1)
    return [content for role, content in seen[last + 1 :] if role in _USER]


def model_step(
    framework: str,
    model: str,
    messages: Sequence[Mapping[str, Any]] = (),
    *,
    provider: str | None = None,
    params: Mapping[str, Any] | None = None,
    tools: Sequence[str] = (),
    prompts: Sequence[str] | None = None,
    ids: Mapping[str, Any] | None = None,
    message_count: int | None = None,
    trust: str | None = None,
) -> Step:
    """A model call: ``step.model`` named after the model. Input: the messages new since
    the model's last turn (see `new_messages`) and how many it is sent in all, or the
    `prompts` of a completion model.

    Pass every message of the call, or (cheaper in a long run: nothing older is converted)
    only those after the model's last turn with `message_count` the number sent in all.

    The model's output counts as content at the lowest level of what the task recorded
    before it, never above ``internal`` (an assistant's words are never the user's);
    `trust` can only lower that (a model that browses on its own: ``external``). Refuses
    (ValueError) a word that is not a level.
    """
    if prompts is not None:
        data: dict[str, Any] = {"prompts": [str(p) for p in prompts]}
    else:
        count = len(messages) if message_count is None else message_count
        data = {"messages": new_messages(messages), "message_count": count}
    group: dict[str, Any] = {}
    _add(group, "name", str(model))
    _add(group, "provider", provider)
    _add(group, "params", capture(dict(params)) if params else None)
    _add(group, "tools", [str(t) for t in tools])
    props = {"model": group, "framework": _framework(framework, ids)}
    if trust is not None:
        props["data"] = _trust_group(None, trust, None)
    return Step("step.model", None, str(model), data, props)


def usage(
    input_tokens: Any = None, output_tokens: Any = None, total_tokens: Any = None
) -> dict[str, int] | None:
    """Token usage at ``properties.model.usage``: the integer counts given (a total is
    derived from input and output when missing); None when none is known."""
    # Written out: this runs on every model call's outcome.
    found: dict[str, int] = {}
    if type(input_tokens) is int and input_tokens >= 0:
        found["input_tokens"] = input_tokens
    if type(output_tokens) is int and output_tokens >= 0:
        found["output_tokens"] = output_tokens
    if type(total_tokens) is int and total_tokens >= 0:
        found["total_tokens"] = total_tokens
    elif "input_tokens" in found and "output_tokens" in found:
        found["total_tokens"] = found["input_tokens"] + found["output_tokens"]
    return found or None


def model_outcome(
    *, usage: Mapping[str, int] | None = None, stop_reason: str | None = None
) -> dict[str, Any] | None:
    """The outcome-only properties of a model call (``{"model": {usage, stop_reason}}``),
    for `Gate.complete(properties=...)`; None when nothing is known."""
    model: dict[str, Any] = {}
    if usage:
        model["usage"] = dict(usage)
    if stop_reason:
        model["stop_reason"] = stop_reason
    return {"model": model} if model else None


def message_step(
    framework: str,
    verb: str,
    role: str,
    content: Any,
    *,
    name: str = "message",
    to: Any = None,
    ids: Mapping[str, Any] | None = None,
) -> Step:
    """A message: ``step.message GET`` for one the agent receives (a user's message is the
    trusted content `value_provenance` reads), ``POST`` for one it sends (to `to`)."""
    if verb not in ("GET", "POST"):
        raise ValueError(f"a message step's verb is GET (received) or POST (sent), not {verb!r}")
    _check_role(role)
    data: dict[str, Any] = {}
    encoding: dict[str, str] = {}
    for key, value in (("content", content), ("to", to)):
        if key == "content" or value is not None:
            data[key], notes = capture_noted(value)
            encoding.update(_noted(f"input.{key}", notes))
    props: dict[str, Any] = {"message": {"role": role}, "framework": _framework(framework, ids)}
    if encoding:
        props["capture"] = {"encoding": encoding}
    return Step("step.message", verb, name, data, props)


def _noted(prefix: str, notes: Mapping[str, str]) -> dict[str, str]:
    """Capture notes (paths relative to a value) under `prefix`, the value's own path."""
    return {prefix + ("." if k and k[0] != "[" else "") + k: v for k, v in notes.items()}


def node_step(
    framework: str,
    node: str,
    input: Any,
    *,
    kind: str = "step.unknown",
    verb: str | None = None,
    properties: Mapping[str, Any] | None = None,
    ids: Mapping[str, Any] | None = None,
) -> Step:
    """A graph node (or a crew's task): `kind` as mapped by the integration's table,
    ``step.unknown`` when nothing says what the node does. Refuses (ValueError) an invalid
    kind/verb pair, naming the pairs the kind takes."""
    action = ActionKind(kind)
    allowed = verbs_for(action)
    if (verb is None and allowed) or (verb is not None and Verb(verb) not in allowed):
        takes = ", ".join(v.value for v in allowed) or "no verb"
        raise ValueError(f"{kind} takes {takes}, not {verb!r}")
    props = dict(properties or {})
    props["framework"] = _framework(framework, {"node": node, **(ids or {})})
    data, notes = capture_noted(input)
    if not isinstance(data, dict):
        data, notes = {"input": data}, _noted("input", notes)
    if notes:
        encoding = _noted("input", notes)
        props["capture"] = {"encoding": encoding}
    return Step(kind, verb, node, data, props)
