"""The behavior: one agent step, typed, before (intent) or after (outcome) it runs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum

from charter._model.frozen import Frozen
from charter._model.identifiers import check_identifier, check_step_name
from charter._model.ijson import checked_copy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "CLOSING_KINDS",
    "TASK_BOUNDARY_KINDS",
    "ActionKind",
    "Behavior",
    "Outcome",
    "Verb",
    "verbs_for",
]


class ActionKind(StrEnum):
    """The 12 kinds of behavior: four task boundaries and eight kinds of step."""

    TASK_START = "task.start"
    TASK_END = "task.end"
    TASK_ERROR = "task.error"
    TASK_IDLE = "task.idle"
    STEP_MODEL = "step.model"
    STEP_EXEC = "step.exec"
    STEP_RESOURCE = "step.resource"
    STEP_MESSAGE = "step.message"
    STEP_CREDENTIAL = "step.credential"
    STEP_SELF = "step.self"
    STEP_GATE = "step.gate"
    STEP_UNKNOWN = "step.unknown"


class Verb(StrEnum):
    """What a step does to its target."""

    GET = "GET"
    POST = "POST"
    PATCH = "PATCH"
    DELETE = "DELETE"


class Outcome(StrEnum):
    """How a recorded step ended; kept in ``meta["charter.outcome"]``.

    Only `ok` steps happened: history rules ignore blocked, failed and abandoned steps.
    """

    OK = "ok"
    FAILED = "failed"
    BLOCKED = "blocked"
    ABANDONED = "abandoned"


# Read by value on every recorded step: calling the enum class costs several dict lookups.
_OUTCOME_BY_VALUE = {o.value: o for o in Outcome}
TASK_BOUNDARY_KINDS = frozenset(
    {ActionKind.TASK_START, ActionKind.TASK_END, ActionKind.TASK_ERROR, ActionKind.TASK_IDLE}
)
CLOSING_KINDS = frozenset({ActionKind.TASK_END, ActionKind.TASK_ERROR, ActionKind.TASK_IDLE})

_ALL_VERBS = frozenset(Verb)
_VERBS: dict[ActionKind, frozenset[Verb]] = {
    ActionKind.STEP_RESOURCE: _ALL_VERBS,
    ActionKind.STEP_CREDENTIAL: _ALL_VERBS,
    ActionKind.STEP_SELF: _ALL_VERBS,
    ActionKind.STEP_MESSAGE: frozenset({Verb.GET, Verb.POST}),
}
_VERB_ORDER = list(Verb)
_VERB_BY_VALUE = {v.value: v for v in Verb}


def verbs_for(kind: ActionKind | str) -> tuple[Verb, ...]:
    """The verbs `kind` takes, in GET/POST/PATCH/DELETE order; empty when it takes none."""
    allowed = _VERBS.get(ActionKind(kind), frozenset())
    return tuple(v for v in _VERB_ORDER if v in allowed)


def _check_verb(kind: ActionKind, verb: object) -> Verb | None:
    allowed = _VERBS.get(kind)
    if allowed is None:
        if verb is None:
            return None
        raise ValueError(f"verb {verb!r}: {kind.value} takes no verb; pass verb=None")
    v = _VERB_BY_VALUE.get(verb) if type(verb) is str else verb
    if type(v) is Verb and v in allowed:
        return v
    # Only a refusal pays for its message.
    names = "/".join(v.value for v in verbs_for(kind))
    if verb is None:
        raise ValueError(f"verb is missing: {kind.value} takes one of {names}")
    try:
        v = Verb(str(verb))
    except ValueError:
        raise ValueError(f"verb {verb!r}: not a verb; {kind.value} takes one of {names}") from None
    if v not in allowed:
        raise ValueError(f"verb {v.value!r}: {kind.value} takes only {names}")
    return v


_KIND_BY_VALUE = {k.value: k for k in ActionKind}


def _check_kind(kind: object) -> ActionKind:
    if type(kind) is ActionKind:
        return kind
    found = _KIND_BY_VALUE.get(kind) if type(kind) is str else None
    if found is not None:
        return found
    try:
        return ActionKind(str(kind))
    except ValueError:
        names = ", ".join(k.value for k in ActionKind)
        raise ValueError(f"kind {kind!r}: not a behavior kind; use one of {names}") from None


def _check_timestamp(ts: object) -> datetime:
    if not isinstance(ts, datetime):
        raise ValueError(f"timestamp must be a datetime, not {type(ts).__name__}")
    if ts.tzinfo is None or ts.utcoffset() is None:
        raise ValueError(
            "timestamp has no time zone: pass an aware datetime, e.g. datetime.now(timezone.utc)"
        )
    return ts if ts.tzinfo is UTC else ts.astimezone(UTC)


def _now() -> datetime:
    return datetime.now(UTC)


class _Default:
    """The default of a field computed per behavior (the current time, a new dict); its repr
    is what the constructor's signature shows."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text


_NOW: Any = _Default("<now, UTC>")
_EMPTY: Any = _Default("{}")

# Identifiers and step names already found valid: they repeat on every step of a task (the
# agent, the task, the tool), and a lookup costs a fraction of the checks. Bounded (cleared
# when full): agents choose step names.
_VALID_MEMORY = 4096
_valid_agents: dict[str, None] = {}
_valid_tasks: dict[str, None] = {}
_valid_names: dict[str, None] = {}


def _remember(valid: dict[str, None], value: str) -> None:
    # Plain strings only: a subclass could compare equal to anything.
    if type(value) is str:
        if len(valid) >= _VALID_MEMORY:
            valid.clear()
        valid[value] = None


class Behavior(Frozen):
    """One agent step, as an intent (``output is None``) or an outcome.

    Construction validates everything and refuses with a ValueError naming the field and the
    fix: identifiers follow the grammar (letters, digits, ``. _ : -``), `verb` is one the kind
    takes, the timestamp is aware (stored in UTC), and the payloads (`input`, `output`,
    `properties`, `meta`) are I-JSON; payloads are copied, so the caller's objects can change
    afterwards without changing what was judged.
    """

    __slots__ = (
        "action_id",
        "agent_id",
        "input",
        "kind",
        "meta",
        "output",
        "properties",
        "seq",
        "step_name",
        "task_id",
        "timestamp",
        "verb",
    )
    agent_id: str
    task_id: str
    kind: ActionKind
    step_name: str
    verb: Verb | None
    action_id: str | None
    seq: int | None
    timestamp: datetime
    input: dict[str, Any] | None
    output: dict[str, Any] | None
    properties: dict[str, Any]
    meta: dict[str, Any]

    def __init__(
        self,
        *,
        agent_id: str,
        task_id: str,
        kind: ActionKind,
        step_name: str,
        verb: Verb | None = None,
        action_id: str | None = None,
        seq: int | None = None,
        timestamp: datetime = _NOW,
        input: dict[str, Any] | None = None,
        output: dict[str, Any] | None = None,
        properties: dict[str, Any] = _EMPTY,
        meta: dict[str, Any] = _EMPTY,
    ) -> None:
        # Checked into locals, then each slot set once through its own descriptor (cheaper
        # than object.__setattr__): a step is built on every gate.
        if type(agent_id) is not str or agent_id not in _valid_agents:
            _remember(_valid_agents, check_identifier("agent_id", agent_id))
        if type(task_id) is not str or task_id not in _valid_tasks:
            _remember(_valid_tasks, check_identifier("task_id", task_id))
        if action_id is not None:
            check_identifier("action_id", action_id)
        kind = _check_kind(kind)
        verb = _check_verb(kind, verb)
        if type(step_name) is not str or step_name not in _valid_names:
            _remember(_valid_names, check_step_name(step_name))
        if seq is not None and (type(seq) is not int or seq < 1):
            raise ValueError(f"seq {seq!r}: must be a positive integer or None")
        timestamp = _now() if timestamp is _NOW else _check_timestamp(timestamp)
        if input is not None:
            input = _checked_object(input, "input")
        if output is not None:
            output = _checked_object(output, "output")
        properties = {} if properties is _EMPTY else _checked_object(properties, "properties")
        meta = {} if meta is _EMPTY else _checked_object(meta, "meta")
        _put_agent_id(self, agent_id)
        _put_task_id(self, task_id)
        _put_kind(self, kind)
        _put_step_name(self, step_name)
        _put_verb(self, verb)
        _put_action_id(self, action_id)
        _put_seq(self, seq)
        _put_timestamp(self, timestamp)
        _put_input(self, input)
        _put_output(self, output)
        _put_properties(self, properties)
        _put_meta(self, meta)

    def _check_adopted(self) -> None:
        """The constructor's checks on fields already set, payloads taken as they are."""
        set_ = object.__setattr__
        check_identifier("agent_id", self.agent_id)
        check_identifier("task_id", self.task_id)
        if self.action_id is not None:
            check_identifier("action_id", self.action_id)
        kind = _check_kind(self.kind)
        set_(self, "kind", kind)
        set_(self, "verb", _check_verb(kind, self.verb))
        check_step_name(self.step_name)
        if self.seq is not None and (type(self.seq) is not int or self.seq < 1):
            raise ValueError(f"seq {self.seq!r}: must be a positive integer or None")
        set_(self, "timestamp", _check_timestamp(self.timestamp))
        for name in ("input", "output", "properties", "meta"):
            value = getattr(self, name)
            if value is None and name in ("input", "output"):
                continue
            if type(value) is not dict:
                raise ValueError(
                    f"{name}: must be a dict (an I-JSON object), not {type(value).__name__}"
                )

    @property
    def is_intent(self) -> bool:
        """True for a step not yet run: a step with no output and no outcome marker."""
        return self.output is None and "charter.outcome" not in self.meta

    @property
    def outcome(self) -> Outcome:
        """How the step ended: ``meta["charter.outcome"]``, else `ok`."""
        value = self.meta.get("charter.outcome")
        found = _OUTCOME_BY_VALUE.get(value) if isinstance(value, str) else None
        return Outcome.OK if found is None else found

    def completed(
        self, output: dict[str, Any] | None, *, outcome: Outcome | str = Outcome.OK
    ) -> Behavior:
        """The outcome of this intent: same identity, with `output` and the outcome marker."""
        meta = dict(self.meta)
        meta["charter.outcome"] = Outcome(outcome).value
        return self.replace(output=output if output is not None else {}, meta=meta)

    def to_dict(self) -> dict[str, Any]:
        """The wire form's behavior fields (timestamps in UTC with microseconds and ``Z``)."""
        return {
            "agent_id": self.agent_id,
            "task_id": self.task_id,
            "action_id": self.action_id,
            "seq": self.seq,
            "timestamp": format_timestamp(self.timestamp),
            "kind": self.kind.value,
            "verb": self.verb.value if self.verb is not None else None,
            "step_name": self.step_name,
            "input": self.input,
            "output": self.output,
            "properties": self.properties,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Behavior:
        """Rebuild a behavior from its wire form; chain fields (hash, prev_hash) are ignored.

        Raises ValueError, naming the field, for anything the wire form cannot hold: not an
        object, a missing task_id, kind or step_name, a timestamp that is not ISO 8601 text,
        and whatever the constructor refuses.
        """
        return cls(**_fields(data))

    @classmethod
    def _adopt(cls, data: dict[str, Any]) -> Behavior:
        """`from_dict` for a record the caller owns and whose payloads are already I-JSON
        (decoded by `charter._audit.chain.decode_ijson` and handed over): the same checks
        and refusals, except that the payloads are taken as they are instead of being
        walked and copied, which is most of the cost of restoring a long task."""
        fields = _fields(data)
        b = object.__new__(cls)
        set_ = object.__setattr__
        for name in _FIELD_NAMES:
            set_(b, name, fields.get(name))
        b._check_adopted()
        return b


_FIELD_NAMES = (
    "agent_id",
    "task_id",
    "kind",
    "step_name",
    "verb",
    "action_id",
    "seq",
    "timestamp",
    "input",
    "output",
    "properties",
    "meta",
)
# For the membership test `derived` makes per change (a tuple compares name by name).
_FIELDS = frozenset(_FIELD_NAMES)


class _Draft(Frozen):
    """A Behavior being derived: the same base and slots, plainly assignable (see
    `derived`)."""

    __slots__ = Behavior.__slots__
    # object's own: plain slot assignment, in C (Frozen's refuses). Both, because one type
    # slot serves assignment and deletion: with Frozen's __delattr__ kept, every assignment
    # went through a Python-level lookup of __setattr__ (about 2.5x a plain slot's cost).
    __setattr__ = object.__setattr__  # type: ignore[assignment]
    __delattr__ = object.__delattr__


def derived(b: Behavior, changes: dict[str, Any]) -> Behavior:
    """A copy of `b` with `changes` (field name -> value), not validated: only for values
    Charter made itself (see the runner's `derive`).

    The copy is filled as a `_Draft` and then given Behavior's class, which CPython allows
    between classes with the same slots: slot assignment costs a fraction of the slot
    descriptors' setters, and the runner derives several behaviors per step.
    """
    d: Any = _Draft()
    d.agent_id = b.agent_id
    d.task_id = b.task_id
    d.kind = b.kind
    d.step_name = b.step_name
    d.verb = b.verb
    d.action_id = b.action_id
    d.seq = b.seq
    d.timestamp = b.timestamp
    d.input = b.input
    d.output = b.output
    d.properties = b.properties
    d.meta = b.meta
    for name, value in changes.items():
        if name not in _FIELDS:
            raise TypeError(f"Behavior has no field {name!r}")
        setattr(d, name, value)
    d.__class__ = Behavior
    out: Behavior = d
    return out


# Each field's slot setter, which the frozen class's own __setattr__ would refuse.
def _setter(name: str) -> Callable[[Behavior, Any], None]:
    setter: Callable[[Behavior, Any], None] = vars(Behavior)[name].__set__
    return setter


_put_agent_id = _setter("agent_id")
_put_task_id = _setter("task_id")
_put_kind = _setter("kind")
_put_step_name = _setter("step_name")
_put_verb = _setter("verb")
_put_action_id = _setter("action_id")
_put_seq = _setter("seq")
_put_timestamp = _setter("timestamp")
_put_input = _setter("input")
_put_output = _setter("output")
_put_properties = _setter("properties")
_put_meta = _setter("meta")


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    """The constructor's arguments from a behavior's wire form (see `Behavior.from_dict`)."""
    if not isinstance(data, dict):
        raise ValueError(f"a behavior must be a JSON object, not {type(data).__name__}")
    missing = [k for k in ("task_id", "kind", "step_name") if k not in data]
    if missing:
        raise ValueError(
            f"behavior: missing {', '.join(missing)} (required: task_id, kind, step_name)"
        )
    ts = data.get("timestamp")
    if ts is not None and not isinstance(ts, str):
        raise ValueError(f"timestamp must be ISO 8601 text, not {type(ts).__name__}")
    return {
        "agent_id": data.get("agent_id", ""),
        "task_id": data["task_id"],
        "kind": data["kind"],
        "step_name": data["step_name"],
        "verb": data.get("verb"),
        "action_id": data.get("action_id"),
        "seq": data.get("seq"),
        "timestamp": parse_timestamp(ts) if isinstance(ts, str) else _now(),
        "input": data.get("input"),
        "output": data.get("output"),
        "properties": data.get("properties") or {},
        "meta": data.get("meta") or {},
    }


def _checked_object(value: Any, path: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise ValueError(f"{path}: must be a dict (an I-JSON object), not {type(value).__name__}")
    out: dict[str, Any] = checked_copy(value, path)
    return out


def format_timestamp(ts: datetime) -> str:
    """UTC, microseconds, ``Z``: the one timestamp format of the audit trail."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: str) -> datetime:
    """Parse an ISO 8601 timestamp with an offset (``Z`` accepted) into an aware UTC datetime."""
    ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return _check_timestamp(ts)
