"""Charter: run-time governance for AI agents.

Every step an agent is about to take becomes a typed `Behavior`, is judged against YAML
policies before it runs (allow, warn, ask, block) and is recorded after it runs into a
tamper-evident audit trail. The public API is exactly ``__all__``.
"""

# Submodules load on first use (PEP 562): a hook process that needs only the engine
# must not pay for the runner, the audit stores and asyncio at import time.
from __future__ import annotations

import sys as _sys

# Not typing.TYPE_CHECKING: importing typing costs every hook process milliseconds, and a
# hook answered by the decision server (charter.serve) needs nothing else from it.
_TYPE_CHECKING = False
if _TYPE_CHECKING:
    from typing import Any as _Any

    from charter._audit.base import AuditStore, StoreError
    from charter._audit.location import open_store, verify
    from charter._audit.report import VerifyReport
    from charter._engine.engine import Decision, EvalResult, LoadReport, PolicyEngine, PolicyResult
    from charter._model.behavior import (
        CLOSING_KINDS,
        TASK_BOUNDARY_KINDS,
        ActionKind,
        Behavior,
        Outcome,
        Verb,
        verbs_for,
    )
    from charter._model.capture import capture
    from charter._model.context import EvalContext, RuleContext
    from charter._model.errors import (
        AgentBindingError,
        AuditError,
        BlockedError,
        CharterError,
        PolicyLoadError,
        PolicyWarning,
        TaskClosedError,
    )
    from charter._model.history import HistoryIndex, TaskHistory
    from charter._model.identifiers import step_name_from, task_id_from
    from charter._model.ijson import canonical_digest
    from charter._policy.capabilities import Grant, GrantError, GrantLayer
    from charter._policy.manifest import ManifestResult, load_manifest_policies, parse_manifest
    from charter._policy.policy import EnforcementPoint, Policy, PolicyProblem, Severity
    from charter._policy.registry import RuleSpec, Violation
    from charter._policy.schema import manifest_schema
    from charter._policy.selector import Selector
    from charter._runtime.approval import (
        Approval,
        ApprovalRequest,
        Approver,
        callback_approver,
        console_approver,
        deny_all,
    )
    from charter._runtime.governor import Governor, StepHandle, TaskHandle
    from charter._runtime.internal import report_internal_error
    from charter._runtime.runner import Runner
    from charter._runtime.settings import Settings
    from charter._runtime.writer import Exporter
    from charter.rules import get_rule, registered_rules, rule

# The rule look-ups go through charter.rules, which registers the built-in rules first.
_LAZY: dict[str, str] = {
    "report_internal_error": "charter._runtime.internal",
    "ActionKind": "charter._model.behavior",
    "AgentBindingError": "charter._model.errors",
    "Approval": "charter._runtime.approval",
    "ApprovalRequest": "charter._runtime.approval",
    "Approver": "charter._runtime.approval",
    "AuditError": "charter._model.errors",
    "AuditStore": "charter._audit.base",
    "Behavior": "charter._model.behavior",
    "BlockedError": "charter._model.errors",
    "CharterError": "charter._model.errors",
    "Decision": "charter._engine.engine",
    "EnforcementPoint": "charter._policy.policy",
    "EvalContext": "charter._model.context",
    "EvalResult": "charter._engine.engine",
    "Exporter": "charter._runtime.writer",
    "Governor": "charter._runtime.governor",
    "Grant": "charter._policy.capabilities",
    "GrantError": "charter._policy.capabilities",
    "GrantLayer": "charter._policy.capabilities",
    "HistoryIndex": "charter._model.history",
    "LoadReport": "charter._engine.engine",
    "ManifestResult": "charter._policy.manifest",
    "Outcome": "charter._model.behavior",
    "Policy": "charter._policy.policy",
    "PolicyEngine": "charter._engine.engine",
    "PolicyLoadError": "charter._model.errors",
    "PolicyProblem": "charter._policy.policy",
    "PolicyResult": "charter._engine.engine",
    "PolicyWarning": "charter._model.errors",
    "RuleContext": "charter._model.context",
    "RuleSpec": "charter._policy.registry",
    "Runner": "charter._runtime.runner",
    "Selector": "charter._policy.selector",
    "Settings": "charter._runtime.settings",
    "Severity": "charter._policy.policy",
    "StepHandle": "charter._runtime.governor",
    "StoreError": "charter._audit.base",
    "TASK_BOUNDARY_KINDS": "charter._model.behavior",
    "CLOSING_KINDS": "charter._model.behavior",
    "TaskClosedError": "charter._model.errors",
    "TaskHandle": "charter._runtime.governor",
    "TaskHistory": "charter._model.history",
    "Verb": "charter._model.behavior",
    "VerifyReport": "charter._audit.report",
    "Violation": "charter._policy.registry",
    "callback_approver": "charter._runtime.approval",
    "canonical_digest": "charter._model.ijson",
    "capture": "charter._model.capture",
    "console_approver": "charter._runtime.approval",
    "deny_all": "charter._runtime.approval",
    "get_rule": "charter.rules",
    "load_manifest_policies": "charter._policy.manifest",
    "manifest_schema": "charter._policy.schema",
    "open_store": "charter._audit.location",
    "parse_manifest": "charter._policy.manifest",
    "registered_rules": "charter.rules",
    "rule": "charter.rules",
    "step_name_from": "charter._model.identifiers",
    "task_id_from": "charter._model.identifiers",
    "verbs_for": "charter._model.behavior",
    "verify": "charter._audit.location",
}

__all__ = [
    "CLOSING_KINDS",
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
    "Grant",
    "GrantError",
    "GrantLayer",
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
    "report_internal_error",
    "rule",
    "step_name_from",
    "task_id_from",
    "verbs_for",
    "verify",
]


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'charter' has no attribute {name!r}")
    # __import__, not importlib.import_module: importlib (and the warnings module it loads)
    # would cost every hook process that imports charter without using these names.
    __import__(module)
    value = getattr(_sys.modules[module], name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
