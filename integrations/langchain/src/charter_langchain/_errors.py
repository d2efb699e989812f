"""The error a blocked LangChain step raises."""

from __future__ import annotations

from typing import Any

import charter


class BlockedStepError(charter.BlockedError):
    """A LangChain step (model call, tool call, retriever, chain) was blocked and did not run.

    A `charter.BlockedError`, hence a PermissionError: retry machinery that retries plain
    exceptions never retries it. `reason` is the one-line refusal, `result` the evaluation
    (None when Charter could not evaluate at all), `step_name` and `kind` name the step.
    """

    def __init__(
        self,
        reason: str,
        result: charter.EvalResult | None = None,
        *,
        step_name: str = "",
        kind: str = "",
    ) -> None:
        super().__init__(reason, result)
        self.step_name = step_name
        self.kind = kind

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions cross process and thread-pool boundaries in LangGraph; keep the fields.
        return (_rebuild, (self.reason, self.result, self.step_name, self.kind))


def _rebuild(
    reason: str, result: charter.EvalResult | None, step_name: str, kind: str
) -> BlockedStepError:
    return BlockedStepError(reason, result, step_name=step_name, kind=kind)
