"""Charter: run-time governance for AI agents.

Every step an agent is about to take becomes a typed `Behavior`, is judged against YAML
policies before it runs (allow, warn, ask, block) and is recorded after it runs into a
tamper-evident audit trail. The public API is exactly ``__all__``.
"""

from charter._approval import (
    Approval,
    ApprovalRequest,
    Approver,
    callback_approver,
    console_approver,
    deny_all,
)
from charter._audit import AuditStore, StoreError, VerifyReport, open_store, verify
from charter._behavior import TASK_BOUNDARY_KINDS, ActionKind, Behavior, Outcome, Verb, verbs_for
from charter._capture import capture
from charter._context import EvalContext, RuleContext
from charter._engine import Decision, EvalResult, LoadReport, PolicyEngine, PolicyResult
from charter._errors import (
    AgentBindingError,
    AuditError,
    BlockedError,
    CharterError,
    PolicyLoadError,
    PolicyWarning,
    TaskClosedError,
)
from charter._governor import Governor, StepHandle, TaskHandle
from charter._history import HistoryIndex, TaskHistory
from charter._identifiers import step_name_from, task_id_from
from charter._ijson import canonical_digest
from charter._manifest import ManifestResult, load_manifest_policies, parse_manifest
from charter._policy import EnforcementPoint, Policy, PolicyProblem, Severity
from charter._registry import RuleSpec, Violation, get_rule, registered_rules, rule
from charter._runner import Runner
from charter._schema import manifest_schema
from charter._selector import Selector
from charter._settings import Settings
from charter._writer import Exporter

__all__ = [
    "TASK_BOUNDARY_KINDS",
    "ActionKind",
    "AgentBindingError",
    "Approval",
    "ApprovalRequest",
    "Approver",
    "AuditError",
    "AuditStore",
    "Behavior",
    "BlockedError",
    "CharterError",
    "Decision",
    "EnforcementPoint",
    "EvalContext",
    "EvalResult",
    "Exporter",
    "Governor",
    "HistoryIndex",
    "LoadReport",
    "ManifestResult",
    "Outcome",
    "Policy",
    "PolicyEngine",
    "PolicyLoadError",
    "PolicyProblem",
    "PolicyResult",
    "PolicyWarning",
    "RuleContext",
    "RuleSpec",
    "Runner",
    "Selector",
    "Settings",
    "Severity",
    "StepHandle",
    "StoreError",
    "TaskClosedError",
    "TaskHandle",
    "TaskHistory",
    "Verb",
    "VerifyReport",
    "Violation",
    "callback_approver",
    "canonical_digest",
    "capture",
    "console_approver",
    "deny_all",
    "get_rule",
    "load_manifest_policies",
    "manifest_schema",
    "open_store",
    "parse_manifest",
    "registered_rules",
    "rule",
    "step_name_from",
    "task_id_from",
    "verbs_for",
    "verify",
]
