"""Where a record carries a capability grant: the two names history indexes look for.

Apart from `charter._policy.capabilities` so that code which only recognises those records
(the step counts skip them) does not load the grant model with its classes: a policy set
without capabilities never needs it, and a short-lived process pays for every import.
"""

from __future__ import annotations

__all__ = ["GRANT_META", "GRANT_STEP"]

GRANT_META = "charter.grant"
"""The meta key of a record that carries grant layers (the task.start, or a narrowing)."""
GRANT_STEP = "charter.capabilities"
"""The step name of the record that narrows a running task's grant (``step.self PATCH``)."""
