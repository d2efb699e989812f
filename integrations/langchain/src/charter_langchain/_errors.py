"""The error a blocked LangChain step raises."""

from __future__ import annotations

import charter


class BlockedStepError(charter.BlockedError):
    """A LangChain step (model call, tool call, retriever, chain) was blocked and did not run.

    A `charter.BlockedError`, hence a PermissionError: retry machinery that retries plain
    exceptions never retries it. `reason` is the one-line refusal, `result` the evaluation
    (None when Charter could not evaluate at all), `step_name` and `kind` name the step.
    """
