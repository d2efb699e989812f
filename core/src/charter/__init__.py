"""Charter: run-time governance for AI agents.

Every step an agent is about to take becomes a typed `Behavior`, is judged against YAML
policies before it runs (allow, warn, ask, block) and is recorded after it runs into a
tamper-evident audit trail. The public API is exactly ``__all__``.
"""

# Submodules load on first use (PEP 562): a hook process that needs only the engine
# must not pay for the runner, the audit stores and asyncio at import time.
from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

if _TYPE_CHECKING:
    from charter._approval import (
        Approval,
        ApprovalRequest,
        Approver,
        callback_approver,
        console_approver,
        deny_all,
    )
    from charter._audit import AuditStore, StoreError, VerifyReport, open_store
    from charter._audit.verify import verify
    from charter._behavior import (
        TASK_BOUNDARY_KINDS,
        ActionKind,
        Behavior,
        Outcome,
        Verb,
        verbs_for,
    )
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
    from charter._internal import report_internal_error
    from charter._manifest import ManifestResult, load_manifest_policies, parse_manifest
    from charter._policy import EnforcementPoint, Policy, PolicyProblem, Severity
    from charter._registry import RuleSpec, Violation, get_rule, registered_rules, rule
    from charter._runner import Runner
    from charter._schema import manifest_schema
    from charter._selector import Selector
    from charter._settings import Settings
    from charter._writer import Exporter

_LAZY: dict[str, str] = {
    "report_internal_error": "charter._internal",
    "ActionKind": "charter._behavior",
    "AgentBindingError": "charter._errors",
    "Approval": "charter._approval",
    "ApprovalRequest": "charter._approval",
    "Approver": "charter._approval",
    "AuditError": "charter._errors",
    "AuditStore": "charter._audit",
    "Behavior": "charter._behavior",
    "BlockedError": "charter._errors",
    "CharterError": "charter._errors",
    "Decision": "charter._engine",
    "EnforcementPoint": "charter._policy",
    "EvalContext": "charter._context",
    "EvalResult": "charter._engine",
    "Exporter": "charter._writer",
    "Governor": "charter._governor",
    "HistoryIndex": "charter._history",
    "LoadReport": "charter._engine",
    "ManifestResult": "charter._manifest",
    "Outcome": "charter._behavior",
    "Policy": "charter._policy",
    "PolicyEngine": "charter._engine",
    "PolicyLoadError": "charter._errors",
    "PolicyProblem": "charter._policy",
    "PolicyResult": "charter._engine",
    "PolicyWarning": "charter._errors",
    "RuleContext": "charter._context",
    "RuleSpec": "charter._registry",
    "Runner": "charter._runner",
    "Selector": "charter._selector",
    "Settings": "charter._settings",
    "Severity": "charter._policy",
    "StepHandle": "charter._governor",
    "StoreError": "charter._audit",
    "TASK_BOUNDARY_KINDS": "charter._behavior",
    "TaskClosedError": "charter._errors",
    "TaskHandle": "charter._governor",
    "TaskHistory": "charter._history",
    "Verb": "charter._behavior",
    "VerifyReport": "charter._audit",
    "Violation": "charter._registry",
    "callback_approver": "charter._approval",
    "canonical_digest": "charter._ijson",
    "capture": "charter._capture",
    "console_approver": "charter._approval",
    "deny_all": "charter._approval",
    "get_rule": "charter._registry",
    "load_manifest_policies": "charter._manifest",
    "manifest_schema": "charter._schema",
    "open_store": "charter._audit",
    "parse_manifest": "charter._manifest",
    "registered_rules": "charter._registry",
    "rule": "charter._registry",
    "step_name_from": "charter._identifiers",
    "task_id_from": "charter._identifiers",
    "verbs_for": "charter._behavior",
    "verify": "charter._audit.verify",
}

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
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
