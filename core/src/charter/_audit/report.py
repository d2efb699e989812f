"""What a store reports when it lists or verifies its chains, and the gaps a writer holds.

Apart from the store contract (`charter._audit.base`) because only those reports make
them: a process that records steps and reads one task back (a hook call, whose lifetime is
the user's wait on every tool call) does not pay for creating their classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["BREAK_REASONS", "BreakReason", "ChainBreak", "Gap", "TaskSummary", "VerifyReport"]


BreakReason = Literal[
    "edited", "deleted", "inserted", "reordered", "truncated", "malformed", "forged", "unsigned"
]

#: ``forged`` and ``unsigned`` come only from checking signed checkpoints (verify with a
#: key): a checkpoint whose signature does not verify, is by another key or cannot be read,
#: and a checkpoint without a signature, or a store with records that no checkpoint vouches for.
BREAK_REASONS: tuple[BreakReason, ...] = (
    "edited",
    "deleted",
    "inserted",
    "reordered",
    "truncated",
    "malformed",
    "forged",
    "unsigned",
)


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """One chain as `list_tasks` sees it.

    `steps` is the number of stored records, `closed` is True once the task's end marker
    (task.end / task.error / task.idle) is stored, and `last_kind` is the kind of the record
    with the highest seq.
    """

    agent_id: str
    task_id: str
    steps: int
    first_timestamp: str
    last_timestamp: str
    closed: bool
    last_kind: str


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first place a chain stops being trustworthy.

    `seq` is the sequence number where the break happens (for a deleted or truncated range,
    the first missing seq). A line that cannot be attributed to any chain (JSONL garbage)
    has empty `agent_id`/`task_id` and seq 0; its `detail` names the line.
    """

    agent_id: str
    task_id: str
    seq: int
    reason: BreakReason
    detail: str

    def __str__(self) -> str:
        if not self.task_id and not self.agent_id:
            return f"{self.reason}: {self.detail}"
        return f"task {self.task_id} seq {self.seq} {self.reason}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Gap:
    """Records of one chain that were dropped, never stored: seqs `first` to `last`.

    Every seq is assigned when its step is recorded, so a dropped record leaves a hole in its
    chain. The writer declares it in ``meta["charter.gap"]`` of the next record it stores in
    that chain, a list of ``{"first", "last", "cause", "detail"}``; `verify` reports a hole
    declared that way, with the links around it intact, as a Gap and not as a break. `cause`
    is ``queue_full`` (the buffered queue had no room), ``refused`` (the store refused the
    record, `detail` says why) or ``closed`` (the runner closed before it was written).
    `declared_at` is the seq of the record that declares the gap (0 for a gap the writer
    still holds, which no stored record declares yet).
    """

    agent_id: str
    task_id: str
    first: int
    last: int
    cause: str
    detail: str = ""
    declared_at: int = 0

    @property
    def count(self) -> int:
        """How many records the gap stands for."""
        return self.last - self.first + 1

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: agent_id, task_id, first, last, count, cause, detail, declared_at."""
        return {
            "agent_id": self.agent_id,
            "task_id": self.task_id,
            "first": self.first,
            "last": self.last,
            "count": self.count,
            "cause": self.cause,
            "detail": self.detail,
            "declared_at": self.declared_at,
        }

    def __str__(self) -> str:
        span = f"seq {self.first}" if self.first == self.last else f"seqs {self.first}-{self.last}"
        why = f"{self.cause}: {self.detail}" if self.detail else self.cause
        return f"task {self.task_id} {span} dropped ({why})"


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The outcome of verifying a store (or one task of it).

    `ok` is True exactly when `breaks` is empty. `warnings` lists things worth a look that do
    not make the trail untrustworthy, such as a torn last line left by a crash mid-write.
    `gaps` lists the declared holes: records dropped before they were stored, with the cause
    (see `Gap`); they do not make a chain untrustworthy, but the trail is incomplete there.
    `checkpoints` counts the signed checkpoints whose signature verified and against which
    the chains were checked (0 when verified without a key); `key_ids` names the keys given.
    """

    ok: bool
    chains_checked: int
    steps_checked: int
    breaks: list[ChainBreak] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    checkpoints: int = 0
    key_ids: tuple[str, ...] = ()

    @property
    def dropped(self) -> int:
        """How many records the declared gaps stand for."""
        return sum(g.count for g in self.gaps)

    @property
    def first_break(self) -> ChainBreak | None:
        """The first break found, or None when the store verified."""
        return self.breaks[0] if self.breaks else None

    def __str__(self) -> str:
        if self.ok:
            chains = "chain" if self.chains_checked == 1 else "chains"
            steps = "step" if self.steps_checked == 1 else "steps"
            text = f"ok: {self.chains_checked} {chains}, {self.steps_checked} {steps} verified"
            if self.key_ids:
                noun = "checkpoint" if self.checkpoints == 1 else "checkpoints"
                text += f" against {self.checkpoints} signed {noun}"
            if self.gaps:
                causes = ", ".join(sorted({g.cause for g in self.gaps}))
                noun = "gap" if len(self.gaps) == 1 else "gaps"
                text += f", {self.dropped} dropped in {len(self.gaps)} {noun} ({causes})"
            if self.warnings:
                noun = "warning" if len(self.warnings) == 1 else "warnings"
                text += f" ({len(self.warnings)} {noun}: {self.warnings[0]})"
            return text
        text = f"broken: {self.breaks[0]}"
        if len(self.breaks) > 1:
            others = len(self.breaks) - 1
            text += f" (and {others} more {'break' if others == 1 else 'breaks'})"
        return text
