"""Limits kept outside one task: what a step asks of a shared counter, and what it was told.

A history rule with ``scope: agent`` (or ``scope: {per: <path>}``) does not count the task's
history: it counts units kept in the audit store, shared by every task and every process of
the agent. The engine stays pure: for a step it says which counters the step would take from
(`SharedDemand`, computed from the policies and the step alone), the runner reserves them in
the store, and the rule judges the number the runner hands back (`RuleContext.shared`, keyed
by `SharedDemand.key`): what the counter held before this step, not counting it.
"""

from __future__ import annotations

from charter._model.behavior import Behavior
from charter._model.ijson import canonical_digest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple, Protocol
else:
    from charter._model.structural import NamedTuple, Protocol

__all__ = ["SharedDemand", "SharedLimit", "counter_key"]


class SharedDemand(NamedTuple):
    """What a step would take from one shared counter.

    `key` names the counter (a digest: the agent, the rule and everything its count depends
    on, and the per-key value; the value itself is never stored), `amount` is what the step
    takes (1 for a step count, the number it carries for a budget), `window_us` is the
    sliding window in microseconds (None: all time), `scope` says in words what is counted
    across (``agent`` or ``agent per input.recipient``), for reasons and replay.

    How the runner settles the reservation when the step's outcome is recorded: an outcome
    in `keeps` (``ok``, ``failed``, ``abandoned``) keeps it, any other (and a step that never
    ran) releases it; `field`, when set, is measured again on the outcome and the kept amount
    is what the outcome carries there (a model call's token usage is known only then).
    """

    key: str
    amount: float
    window_us: int | None
    scope: str
    keeps: tuple[str, ...]
    field: str | None


class SharedLimit(Protocol):
    """The prepared params of a rule that can count outside the task (see the module doc)."""

    def shared_demand(self, view: Behavior, agent_id: str) -> SharedDemand | None:
        """The step's demand; None when the policy counts in the task, when its selector does
        not match the step, or when the step gives no usable per-key value (the rule then
        says why when it judges the step)."""
        ...


def counter_key(agent_id: str, counter: str, per: str | int | float | None) -> str:
    """The key of one shared counter: a digest, so a per-key value (a recipient, an account)
    never reaches the counters table in clear."""
    return canonical_digest([agent_id, counter, per])
