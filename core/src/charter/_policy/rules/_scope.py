"""The `scope` param of the limit rules: count in the task, across the agent, or per key.

``scope: task`` (the default) counts the task's own history. ``scope: agent`` counts every
task of the agent, in every process that shares its audit store; ``scope: {per: <path>}``
does the same separately for each value found at that field of the judged step (one counter
per recipient, per account). Counts outside the task live in the store: the runner reserves
them and hands the rule the count it read (see `charter._model.shared`).
"""

from __future__ import annotations

from charter._model.behavior import Behavior
from charter._model.paths import FieldPath, parse_path
from charter._policy.registry import Violation

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from charter._model.shared import SharedDemand

# charter._model.shared (the demand and its counter key) is imported where a scoped limit
# asks for a counter: a policy set without one (a hook call's) never loads it.

__all__ = ["SCOPE_SCHEMA", "Scope", "parse_scope"]

SCOPE_SCHEMA: dict[str, Any] = {
    "type": ["string", "object"],
    "description": (
        "Where the limit counts: task (default, this task's history), agent (every task of "
        "the agent in every process, counted in the audit store), or {per: <field path>} "
        "(the agent, separately for each value at that field, e.g. {per: input.recipient})."
    ),
    "required": ["per"],
    "properties": {
        "per": {
            "type": "string",
            "format": "path",
            "description": "The field whose value picks the counter, e.g. input.recipient.",
        }
    },
}

_SCOPES = "'task', 'agent' or {per: <field path>}"


class Scope:
    """A scope beyond the task: the agent (`per` None) or the agent and one field's value."""

    __slots__ = ("per", "text")

    def __init__(self, per: FieldPath | None) -> None:
        self.per = per
        self.text = "agent" if per is None else f"agent per {per.text}"

    def value(self, view: Behavior) -> str | int | float | Violation:
        """The per-key value of the step (None for agent scope), or why there is none.

        A per-key scope needs exactly one string or number at its field: with none the step
        cannot say which counter it takes from, and with several it would take from each;
        both are refused rather than guessed."""
        assert self.per is not None
        found = _flatten(self.per.resolve(view))
        if len(found) != 1:
            what = "no value" if not found else f"{len(found)} values"
            return Violation(
                f"the limit counts per {self.per.text}, and the step has {what} there; it needs "
                "exactly one string or number to choose its counter"
            )
        (value,) = found
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) or value == "":
            return Violation(
                f"the limit counts per {self.per.text}, and {value!r:.60} there is not a "
                "non-empty string or a number"
            )
        return value

    def key(self, view: Behavior, agent_id: str, counter: str) -> str | Violation:
        """The counter's key for this step (see `counter_key`), or why there is none."""
        from charter._model.shared import counter_key

        if self.per is None:
            return counter_key(agent_id, counter, None)
        value = self.value(view)
        if isinstance(value, Violation):
            return value
        return counter_key(agent_id, counter, value)

    def demand(
        self,
        view: Behavior,
        agent_id: str,
        counter: str,
        amount: float,
        window_us: int | None,
        keeps: tuple[str, ...],
        field: str | None,
    ) -> SharedDemand | None:
        from charter._model.shared import SharedDemand

        key = self.key(view, agent_id, counter)
        if isinstance(key, Violation):
            return None
        return SharedDemand(key, amount, window_us, self.text, keeps, field)

    def missing(self, key: str) -> Violation:
        """The verdict when no count was handed in for `key`: never judge on a partial one."""
        return Violation(
            f"no count across the {self.text} was supplied for this limit (key {key[:12]}), "
            "so it cannot be judged; Charter blocks what it cannot judge"
        )


def _flatten(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if isinstance(v, list):
            out.extend(_flatten(v))
        elif v is not None:
            out.append(v)
    return out


def parse_scope(value: Any) -> Scope | None:
    """The scope a policy's ``scope`` param names; None for the task (the default).

    Raises ValueError naming the accepted forms for anything else."""
    if value is None or value == "task":
        return None
    if value == "agent":
        return Scope(None)
    if isinstance(value, dict) and set(value) == {"per"} and isinstance(value["per"], str):
        return Scope(parse_path(value["per"]))
    if isinstance(value, dict):
        raise ValueError(f"scope takes {{per: <field path>}}, got {value!r:.80}")
    raise ValueError(f"scope {value!r:.60} is not one of {_SCOPES}")
