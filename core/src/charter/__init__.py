"""Charter: run-time governance for AI agents.

Every step an agent is about to take becomes a typed `Behavior`, is judged against YAML
policies before it runs (allow, warn, ask, block) and is recorded after it runs into a
tamper-evident audit trail. The public API is exactly ``__all__``.
"""

from charter._behavior import TASK_BOUNDARY_KINDS, ActionKind, Behavior, Outcome, Verb, verbs_for
from charter._capture import capture
from charter._context import EvalContext, RuleContext
from charter._engine import Decision, EvalResult, LoadReport, PolicyEngine, PolicyResult
from charter._errors import (
    AgentBindingError,
    BlockedError,
    CharterError,
    PolicyLoadError,
    TaskClosedError,
)
from charter._history import HistoryIndex, TaskHistory
from charter._identifiers import step_name_from, task_id_from
from charter._ijson import canonical_digest
from charter._manifest import ManifestResult, load_manifest_policies, parse_manifest
from charter._policy import EnforcementPoint, Policy, PolicyProblem, Severity
from charter._registry import RuleSpec, Violation, get_rule, registered_rules, rule
from charter._schema import manifest_schema
from charter._selector import Selector

__all__ = [
    "TASK_BOUNDARY_KINDS",
    "ActionKind",
    "AgentBindingError",
    "Behavior",
    "BlockedError",
    "CharterError",
    "Decision",
    "EnforcementPoint",
    "EvalContext",
    "EvalResult",
    "HistoryIndex",
    "LoadReport",
    "ManifestResult",
    "Outcome",
    "Policy",
    "PolicyEngine",
    "PolicyLoadError",
    "PolicyProblem",
    "PolicyResult",
    "RuleContext",
    "RuleSpec",
    "Selector",
    "Severity",
    "TaskClosedError",
    "TaskHistory",
    "Verb",
    "Violation",
    "canonical_digest",
    "capture",
    "get_rule",
    "load_manifest_policies",
    "manifest_schema",
    "parse_manifest",
    "registered_rules",
    "rule",
    "step_name_from",
    "task_id_from",
    "verbs_for",
]
