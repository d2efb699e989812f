"""What a rule may know besides the step: the agent, its environment and the task so far."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from charter._model.frozen import Frozen
from charter._model.identifiers import check_identifier

TYPE_CHECKING = False
if TYPE_CHECKING:
    from charter._model.history import TaskHistory

__all__ = ["EvalContext", "RuleContext"]


class EvalContext(Frozen):
    """The agent and its setting, supplied by the caller; the engine fetches nothing itself.

    `declared_tools` feeds `allow_only` when it lists no tools; `project_root` feeds path rules;
    `trusted_values` are values an operator declared trusted (allowlisted recipients, hosts)
    for provenance rules. There is deliberately no "now": time rules read the step's timestamp.
    """

    __slots__ = (
        "agent_id",
        "agent_name",
        "agent_owner",
        "agent_purpose",
        "declared_tools",
        "environment",
        "project_root",
        "risk_classification",
        "task_id",
        "trusted_values",
    )
    agent_id: str
    task_id: str
    environment: str | None
    risk_classification: str | None
    agent_name: str | None
    agent_purpose: str | None
    agent_owner: str | None
    declared_tools: tuple[str, ...] | None
    project_root: str | None
    trusted_values: tuple[str, ...]

    def __init__(
        self,
        *,
        agent_id: str,
        task_id: str,
        environment: str | None = None,
        risk_classification: str | None = None,
        agent_name: str | None = None,
        agent_purpose: str | None = None,
        agent_owner: str | None = None,
        declared_tools: tuple[str, ...] | None = None,
        project_root: str | None = None,
        trusted_values: tuple[str, ...] = (),
    ) -> None:
        check_identifier("agent_id", agent_id)
        check_identifier("task_id", task_id)
        put = object.__setattr__
        put(self, "agent_id", agent_id)
        put(self, "task_id", task_id)
        put(self, "environment", environment)
        put(self, "risk_classification", risk_classification)
        put(self, "agent_name", agent_name)
        put(self, "agent_purpose", agent_purpose)
        put(self, "agent_owner", agent_owner)
        put(self, "declared_tools", None if declared_tools is None else tuple(declared_tools))
        put(self, "project_root", project_root)
        put(self, "trusted_values", tuple(trusted_values))


_NO_SHARED: Mapping[str, float] = MappingProxyType({})


class RuleContext:
    """Handed to every rule call: the evaluation context, the task's history (read only) and
    the shared counts the caller read for this step.

    `shared` maps a `SharedDemand.key` to what that counter held before this step (the
    runner reserved it in the store; replay reads it from the step's record). A rule that
    counts outside the task and finds no count for its key must not judge on anything else.

    A plain slotted class rather than a dataclass: one is built per evaluation, on the hot path.
    """

    __slots__ = ("context", "history", "shared")

    def __init__(
        self,
        context: EvalContext,
        history: TaskHistory,
        shared: Mapping[str, float] | None = None,
    ) -> None:
        self.context = context
        self.history = history
        self.shared = _NO_SHARED if shared is None else shared

    @property
    def project_root(self) -> str | None:
        return self.context.project_root

    @property
    def declared_tools(self) -> tuple[str, ...] | None:
        return self.context.declared_tools

    @property
    def environment(self) -> str | None:
        return self.context.environment
