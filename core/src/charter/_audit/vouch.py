"""Verifying a store against signed checkpoints: what the hash chains alone cannot show.

A hash chain proves its records belong together, not that nothing was cut off or rewritten
consistently by someone who can write the store (they can re-hash a tail and move the head).
A checkpoint signed with a key the store's writer cannot reach pins a chain's head at a seq.
`vouch` checks every checkpoint it is given, from the store itself and from checkpoint files,
with the public keys given, and then, for each chain a valid checkpoint names:

- deleted: the chain is gone from the store (a deleted task, or a replaced store);
- truncated: the chain stops below a signed seq (with or without its recorded head moved);
- edited: the record at a signed seq is not the one that was signed (a rewritten tail);
- deleted: a signed seq is missing while later seqs exist.

Problems with the checkpoints themselves: forged (a signature that does not verify, a key
that is not one of those given, a checkpoint that cannot be read) and unsigned (a checkpoint
without a signature; and records in the store that no valid checkpoint vouches for at all, as
in a store replaced by one its attacker made). Records written after a chain's last
checkpoint are vouched for only by their chain: they are counted in a warning.

What a checkpoint kept only in the store cannot show: whoever can write the store can delete
checkpoints (never forge them), rolling the evidence back to an older checkpoint or to none.
A checkpoint file the store's writer cannot rewrite closes that gap; its lines are trusted
only after the same signature check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from charter._audit.base import AuditStore, StoreError
from charter._audit.checkpoint import Checkpoint
from charter._audit.report import ChainBreak, VerifyReport
from charter._audit.signing import PublicKey

__all__ = ["CheckpointSource", "stored_hashes", "vouch"]


@dataclass(frozen=True, slots=True)
class CheckpointSource:
    """Checkpoints from one place: `name` says where (for messages), `values` are the decoded
    wire forms in order, each with where it was found (``line 3 of FILE``, ``#2``)."""

    name: str
    values: Sequence[tuple[str, object]]


@dataclass(slots=True)
class _Signed:
    checkpoint: Checkpoint
    where: str


def _valid(
    source: CheckpointSource,
    keys: dict[str, PublicKey],
    breaks: list[ChainBreak],
    known: set[Checkpoint] | None = None,
) -> list[_Signed]:
    """The checkpoints of `source` whose signature verifies; breaks for the others. A
    checkpoint equal to one in `known` (already verified) is not verified again."""
    found: list[_Signed] = []
    given = ", ".join(keys)
    for where, value in source.values:
        label = f"checkpoint {where} in {source.name}" if where.startswith("#") else where
        try:
            checkpoint = Checkpoint.from_wire(value)
        except ValueError as exc:
            breaks.append(ChainBreak("", "", 0, "forged", f"{label} is not readable: {exc}"))
            continue
        agent, task, seq = checkpoint.agent_id, checkpoint.task_id, checkpoint.seq
        if known is not None and checkpoint in known:
            found.append(_Signed(checkpoint, label))
            continue
        if not checkpoint.signature:
            detail = f"{label} carries no signature"
            breaks.append(ChainBreak(agent, task, seq, "unsigned", detail))
            continue
        key = keys.get(checkpoint.key_id)
        if key is None:
            detail = f"{label} is signed by key {checkpoint.key_id}, not by the key given ({given})"
            breaks.append(ChainBreak(agent, task, seq, "forged", detail))
            continue
        if not key.verifies(checkpoint.signature, checkpoint.signed_bytes()):
            detail = f"{label} has a signature that key {key.key_id} did not make"
            breaks.append(ChainBreak(agent, task, seq, "forged", detail))
            continue
        found.append(_Signed(checkpoint, label))
    return found


def stored_hashes(
    store: AuditStore, keys: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], dict[int, object]]:
    """seq -> stored hash of every record of the chains `keys` (a chain not stored is left out).

    A store may answer this in one pass with a ``chain_hashes(keys)`` method of the same
    contract (the JSONL store does: reading each task would scan its file once per chain);
    otherwise each chain is read with `read_task`.
    """
    wanted = sorted(set(keys))
    scan = getattr(store, "chain_hashes", None)
    if scan is not None:
        found: dict[tuple[str, str], dict[int, object]] = scan(wanted)
        return found
    out: dict[tuple[str, str], dict[int, object]] = {}
    for agent_id, task_id in wanted:
        try:
            records = store.read_task(task_id, agent_id)
        except StoreError:
            continue
        hashes: dict[int, object] = {}
        for record in records:
            seq = record.get("seq")
            if type(seq) is int and record.get("agent_id") == agent_id:
                hashes.setdefault(seq, record.get("hash"))
        if hashes:
            out[(agent_id, task_id)] = hashes
    return out


def _check_chain(
    key: tuple[str, str], signed: list[_Signed], hashes: dict[int, object] | None
) -> tuple[ChainBreak | None, int]:
    """The first contradiction between a chain and its valid checkpoints, and the highest
    signed seq."""
    agent_id, task_id = key
    top = max(signed, key=lambda s: s.checkpoint.seq)
    if not hashes:
        detail = (
            f"the task is missing from the store, but {top.where} signed its head at seq "
            f"{top.checkpoint.seq} ({top.checkpoint.time})"
        )
        return ChainBreak(agent_id, task_id, 1, "deleted", detail), top.checkpoint.seq
    last = max(hashes, default=0)
    for item in sorted(signed, key=lambda s: s.checkpoint.seq):
        point = item.checkpoint
        if point.seq > last:
            detail = (
                f"the records stop at seq {last}, but {item.where} signed seq {point.seq} "
                f"({point.time})"
            )
            return ChainBreak(agent_id, task_id, last + 1, "truncated", detail), top.checkpoint.seq
        stored = hashes.get(point.seq)
        if stored is None:
            detail = f"seq {point.seq} is missing, but {item.where} signed it ({point.time})"
            return ChainBreak(agent_id, task_id, point.seq, "deleted", detail), top.checkpoint.seq
        if stored != point.hash:
            detail = (
                f"the record is not the one {item.where} signed ({point.time}): the chain was "
                "rewritten from here on"
            )
            return ChainBreak(agent_id, task_id, point.seq, "edited", detail), top.checkpoint.seq
    return None, top.checkpoint.seq


def vouch(
    store: AuditStore,
    report: VerifyReport,
    keys: Iterable[PublicKey],
    kept: CheckpointSource,
    files: Iterable[CheckpointSource] = (),
    task_id: str | None = None,
) -> VerifyReport:
    """`report` (the store's own verification) extended by checking the checkpoints `kept`
    in the store and those of checkpoint `files` with `keys`.

    Only checkpoints of `task_id` are compared when it is given. Every source is checked
    whole: a forged checkpoint is a break whichever task it names. A valid checkpoint of a
    file that the store does not hold is a warning (deleted from the store, or refused by it
    when it was made). Raises StoreError when the store cannot be read.
    """
    by_id = {key.key_id: key for key in keys}
    breaks: list[ChainBreak] = []
    signed = _valid(kept, by_id, breaks)
    inside = {item.checkpoint for item in signed}
    warnings = list(report.warnings)
    for source in files:
        outside = _valid(source, by_id, breaks, inside)
        missing = {item.checkpoint for item in outside} - inside
        if missing:
            noun = "checkpoint" if len(missing) == 1 else "checkpoints"
            warnings.append(
                f"{len(missing)} signed {noun} of {source.name} are not in the store: deleted "
                "from it, or refused by it when they were made (charter status counts those)"
            )
        signed.extend(outside)
    chains: dict[tuple[str, str], list[_Signed]] = {}
    for item in signed:
        point = item.checkpoint
        if task_id is None or point.task_id == task_id:
            chains.setdefault((point.agent_id, point.task_id), []).append(item)
    tops: dict[tuple[str, str], int] = {}
    stored = stored_hashes(store, chains)
    for key in sorted(chains):
        found, tops[key] = _check_chain(key, chains[key], stored.get(key))
        if found is not None:
            breaks.append(found)
    summaries = [s for s in store.list_tasks() if task_id is None or s.task_id == task_id]
    newer = [
        (s, s.steps - tops.get((s.agent_id, s.task_id), 0))
        for s in summaries
        if s.steps > tops.get((s.agent_id, s.task_id), 0)
    ]
    if summaries and not chains:
        names = ", ".join(by_id)
        where = f"task {task_id!r}" if task_id is not None else "the store"
        breaks.append(
            ChainBreak(
                "",
                "",
                0,
                "unsigned",
                f"no valid checkpoint signed by key {names} vouches for {where}: it holds "
                f"{sum(s.steps for s in summaries)} records, but none was checkpointed (a "
                "store replaced by another, or one whose checkpoints were deleted, looks so)",
            )
        )
    elif newer:
        count = sum(n for _, n in newer)
        noun = "chain" if len(newer) == 1 else "chains"
        warnings.append(
            f"{count} records in {len(newer)} {noun} are newer than their last checkpoint; "
            "only their hash chains vouch for them"
        )
    return dataclasses.replace(
        report,
        ok=report.ok and not breaks,
        breaks=[*report.breaks, *breaks],
        warnings=warnings,
        checkpoints=len({item.checkpoint for item in signed}),
        key_ids=tuple(by_id),
    )
