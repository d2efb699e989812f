"""The record of one error Charter swallowed (see `charter._runtime.internal`).

A module of its own so that the class is created with the first swallowed error: a process
that swallows none (a hook call, whose lifetime is the user's wait) does not pay for it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["InternalError"]


@dataclass(frozen=True, slots=True)
class InternalError:
    """One swallowed error: where it happened, its type and message, and a serial number."""

    serial: int
    where: str
    type: str
    message: str
    traceback: str
