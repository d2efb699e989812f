"""A recorded `Behavior` as the wire record the audit writer redacts, chains and stores.

The same fields and timestamp text as `Behavior.to_dict` (seq included: the store keeps it),
built without it: strftime is the slowest part of to_dict, and a recorded behavior is always
UTC, so isoformat gives the same text. In buffered durability the writer builds it on its own
thread, from the behavior the runner recorded (immutable, and its payloads are Charter's own
copies).
"""

from __future__ import annotations

from datetime import UTC, datetime

from charter._model.behavior import ActionKind, Behavior, Verb, format_timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["wire_form"]


# Reading an enum member's `.value` goes through the enum's descriptor, which costs more
# than a dict lookup; the writer pays it for every record.
_WIRE_VALUES: dict[Any, str] = {m: m.value for m in (*ActionKind, *Verb)}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The text of each whole second seen lately (steps come many to a second): formatting the
# date and time costs more than the rest of the wire form.
_SECOND_TEXTS: dict[int, str] = {}
_SECOND_TEXTS_MAX = 1024


def _wire_timestamp(ts: datetime) -> str:
    """``ts.isoformat(timespec="microseconds")`` with ``Z`` for its UTC offset (`ts` is UTC)."""
    since = ts - _EPOCH
    second = since.days * 86400 + since.seconds
    text = _SECOND_TEXTS.get(second)
    if text is None:
        if len(_SECOND_TEXTS) >= _SECOND_TEXTS_MAX:
            _SECOND_TEXTS.clear()
        text = _SECOND_TEXTS[second] = ts.isoformat(timespec="seconds")[:-6]
    return f"{text}.{ts.microsecond:06d}Z"


def wire_form(b: Behavior) -> dict[str, Any]:
    """`b.to_dict()`, before redaction (see the module docstring)."""
    ts = b.timestamp
    verb = b.verb
    return {
        "agent_id": b.agent_id,
        "task_id": b.task_id,
        "seq": b.seq,
        "action_id": b.action_id,
        "timestamp": _wire_timestamp(ts) if ts.tzinfo is UTC else format_timestamp(ts),
        "kind": _WIRE_VALUES.get(b.kind) or b.kind.value,
        "verb": None if verb is None else _WIRE_VALUES.get(verb) or verb.value,
        "step_name": b.step_name,
        "input": b.input,
        "output": b.output,
        "properties": b.properties,
        "meta": b.meta,
    }
