"""Chain verification shared by every readable store (`verify()` of a location is in location).

Stores load their records into `StoredRow`s (one per stored record, in physical order:
SQLite rowid or JSONL line number) and call `check_chain` once per chain. The rules, applied
walking the chain in seq order and reporting only the first break:

- malformed: the record cannot be read as a chained record (bad JSON, a missing or ill-typed
  seq/hash/prev_hash, content that is not I-JSON). A JSONL line that cannot even be
  attributed to a chain is a break with empty agent/task ids and seq 0, except a torn write
  (the file's last line, or a line the next writer fenced): that is only a warning.
- inserted: two records carry the same seq; or a record follows the chain's end marker; or
  the last record's prev_hash does not link and its seq is beyond the recorded head; or (when
  the store's recorded head is exact, as in SQLite) records go beyond the recorded head.
- gap (not a break): the seq jumps, the link is intact and the record after the hole
  declares exactly the missing seqs in ``meta["charter.gap"]`` (records its writer dropped
  before storing them, with the cause); reported in `VerifyReport.gaps`.
- edited: a record's recomputed hash differs from its stored hash; or a link breaks and the
  next record still commits to the breaking record (so the record before it was changed and
  re-hashed: reported at that earlier seq); or a record links to neither neighbour (it was
  replaced); or the record at the recorded head does not carry the recorded head hash; or
  the seq jumps although the link is intact (renumbered); or a store's index columns
  disagree with the stored body.
- deleted: the seq jumps and the next record's prev_hash does not match the previous hash;
  reported at the first missing seq.
- truncated: the recorded head (SQLite `chains` table, JSONL head file) is beyond the last
  stored record; reported at the first missing seq.
- reordered: every link is intact in seq order, but the physical order is not seq order;
  reported at the lowest seq stored after a higher one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from charter._audit.base import GAP_KEY, StoreError
from charter._audit.chain import decode_json, entry_hash, is_closing
from charter._audit.report import BreakReason, ChainBreak, Gap, VerifyReport

__all__ = [
    "RecordedHead",
    "StoredRow",
    "build_report",
    "chains_of",
    "check_chain",
    "check_stored_chain",
    "check_stored_chains",
    "declared_gaps",
    "row_from_entry",
    "stored_row",
]


@dataclass(frozen=True, slots=True)
class RecordedHead:
    """A chain head the store recorded apart from the records themselves.

    `exact` is True when the head is committed together with the records (SQLite), so records
    beyond it are foreign; False when it may lag behind them (the JSONL head file is written
    after the records, so a crash in between leaves it one batch behind).
    """

    seq: int
    hash: str | None
    closed: bool
    exact: bool


@dataclass(frozen=True, slots=True)
class StoredRow:
    """What verification needs to know about one stored record."""

    position: int
    seq: int
    hash: str | None
    prev_hash: str | None
    intact: bool
    closing: bool
    problem: tuple[BreakReason, str] | None = None
    declared: tuple[tuple[int, int, str, str], ...] = ()


def row_from_entry(position: int, entry: Mapping[str, Any]) -> StoredRow:
    """Check one decoded record's chain fields and recompute its hash.

    A record whose seq/hash/prev_hash are missing or ill-typed, or that is not I-JSON, comes
    back with a "malformed" problem (seq 0 when its seq is unusable).
    """
    seq = entry.get("seq")
    stored = entry.get("hash")
    prev = entry.get("prev_hash")
    if type(seq) is not int or seq < 1:
        return StoredRow(position, 0, None, None, False, False, ("malformed", "seq is missing"))
    if not isinstance(stored, str) or not (prev is None or isinstance(prev, str)):
        detail = "hash or prev_hash is missing or not a string"
        return StoredRow(position, seq, None, None, False, False, ("malformed", detail))
    try:
        intact = entry_hash(entry) == stored
    except ValueError as exc:
        return StoredRow(position, seq, stored, prev, False, False, ("malformed", str(exc)))
    return StoredRow(
        position, seq, stored, prev, intact, is_closing(entry), None, declared_gaps(entry)
    )


def declared_gaps(entry: Mapping[str, Any]) -> tuple[tuple[int, int, str, str], ...]:
    """The (first, last, cause, detail) ranges `entry` declares in meta["charter.gap"];
    entries that are not well-formed are ignored (they cannot excuse a hole)."""
    meta = entry.get("meta")
    found = meta.get(GAP_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(found, list):
        return ()
    ranges = []
    for item in found:
        if not isinstance(item, Mapping):
            continue
        first, last = item.get("first"), item.get("last")
        cause, detail = item.get("cause"), item.get("detail", "")
        if type(first) is int and type(last) is int and 1 <= first <= last:
            if isinstance(cause, str) and isinstance(detail, str):
                ranges.append((first, last, cause, detail))
    return tuple(sorted(ranges))


def _covers(row: StoredRow, first: int, last: int) -> bool:
    """True when `row` declares exactly the seqs first..last as dropped."""
    expected = first
    for lo, hi, _, _ in row.declared:
        if lo != expected:
            return False
        expected = hi + 1
    return bool(row.declared) and expected == last + 1


def _span(first: int, last: int) -> str:
    return f"seq {first}" if first == last else f"seqs {first}-{last}"


def check_chain(
    agent_id: str,
    task_id: str,
    rows: list[StoredRow],
    recorded: RecordedHead | None = None,
    gaps: list[Gap] | None = None,
) -> ChainBreak | None:
    """The first break of one chain, or None when every record is where it belongs.

    Declared gaps met on the way (up to the first break) are appended to `gaps`.
    """

    def broken(seq: int, reason: BreakReason, detail: str) -> ChainBreak:
        return ChainBreak(agent_id, task_id, seq, reason, detail)

    ordered = sorted(rows, key=lambda r: (r.seq, r.position))
    copies = Counter(r.seq for r in ordered)
    expected_seq = 1
    expected_prev: str | None = None
    closed_at: int | None = None
    for index, row in enumerate(ordered):
        seq = row.seq
        if row.problem is not None:
            return broken(seq, *row.problem)
        if copies[seq] > 1:
            return broken(seq, "inserted", f"{copies[seq]} records carry seq {seq}")
        if not row.intact:
            return broken(seq, "edited", "stored hash does not match its content")
        if closed_at is not None:
            return broken(seq, "inserted", f"record follows the end marker at seq {closed_at}")
        if (
            seq > expected_seq
            and row.prev_hash == expected_prev
            and _covers(row, expected_seq, seq - 1)
        ):
            if gaps is not None:
                gaps.extend(
                    Gap(agent_id, task_id, lo, hi, cause, detail, seq)
                    for lo, hi, cause, detail in row.declared
                )
        elif seq > expected_seq:
            if expected_seq == 1:
                if row.prev_hash is None:
                    return broken(seq, "edited", f"the first record carries seq {seq}, not 1")
                return broken(
                    1, "deleted", f"{_span(1, seq - 1)} missing: the chain starts at seq {seq}"
                )
            if row.prev_hash == expected_prev:
                return broken(
                    seq,
                    "edited",
                    f"seq jumps from {expected_seq - 1} to {seq} although the link is intact "
                    "(renumbered)",
                )
            return broken(
                expected_seq,
                "deleted",
                f"{_span(expected_seq, seq - 1)} missing: seq {seq} does not link to "
                f"seq {expected_seq - 1}",
            )
        if row.prev_hash != expected_prev:
            following = ordered[index + 1] if index + 1 < len(ordered) else None
            if following is not None and following.seq == seq + 1:
                if following.prev_hash == row.hash:
                    if seq == 1:
                        return broken(1, "edited", "seq 1 does not start with a null prev_hash")
                    return broken(
                        seq - 1,
                        "edited",
                        f"its hash is not the one seq {seq} committed to (changed and re-hashed)",
                    )
                return broken(seq, "edited", "record links to neither neighbour (replaced)")
            if following is None and (recorded is None or recorded.seq < seq):
                return broken(
                    seq, "inserted", f"prev_hash does not link to seq {seq - 1} (forged record)"
                )
            return broken(seq, "edited", f"prev_hash does not link to seq {seq - 1} (replaced)")
        if row.closing:
            closed_at = seq
        expected_seq = seq + 1
        expected_prev = row.hash

    last_seq = expected_seq - 1
    if recorded is not None:
        if recorded.seq > last_seq:
            stop = f"stop at seq {last_seq}" if last_seq else "are missing"
            return broken(
                last_seq + 1,
                "truncated",
                f"the recorded head is seq {recorded.seq} but the records {stop}",
            )
        if recorded.seq == last_seq and recorded.hash != expected_prev:
            return broken(last_seq, "edited", "hash differs from the recorded head (re-hashed)")
        if recorded.seq < last_seq:
            if recorded.exact:
                return broken(
                    recorded.seq + 1,
                    "inserted",
                    f"records go beyond the recorded head at seq {recorded.seq}",
                )
            at_head = {r.seq: r.hash for r in ordered}.get(recorded.seq, recorded.hash)
            if at_head != recorded.hash:
                return broken(
                    recorded.seq, "edited", "hash differs from the recorded head (re-hashed)"
                )

    physical = [r.seq for r in sorted(rows, key=lambda r: r.position)]
    for index, (stored_seq, wanted_seq) in enumerate(zip(physical, sorted(physical), strict=True)):
        if stored_seq != wanted_seq:
            where = physical.index(wanted_seq)
            return broken(
                wanted_seq,
                "reordered",
                f"stored after seq {max(physical[index:where])} although every link is intact",
            )
    return None


def build_report(
    chains_checked: int,
    steps_checked: int,
    breaks: Iterable[ChainBreak],
    warnings: Iterable[str] = (),
    gaps: Iterable[Gap] = (),
) -> VerifyReport:
    """Assemble a VerifyReport; ok exactly when there are no breaks."""
    found = list(breaks)
    return VerifyReport(not found, chains_checked, steps_checked, found, list(warnings), list(gaps))


def stored_row(values: Sequence[Any], columns: Sequence[str]) -> StoredRow:
    """The StoredRow of one database row: (position, *index columns, body).

    `columns` names the index columns (agent_id, task_id, seq, hash, prev_hash, kind,
    timestamp); a body that is not a JSON object is malformed, and an index column that
    disagrees with the body makes the record "edited".
    """
    position, *indexed, body = values
    try:
        entry = decode_json(body)
    except (TypeError, ValueError):
        entry = None
    if not isinstance(entry, dict):
        seq = indexed[2] if type(indexed[2]) is int else 0
        return StoredRow(position, seq, None, None, False, False, ("malformed", "body is not JSON"))
    row = row_from_entry(position, entry)
    if row.problem is not None:
        return row
    differ = [
        name for name, value in zip(columns, indexed, strict=True) if entry.get(name) != value
    ]
    if differ:
        detail = f"its {', '.join(differ)} column disagrees with the stored body"
        return StoredRow(
            row.position, row.seq, row.hash, row.prev_hash, False, False, ("edited", detail)
        )
    return row


def chains_of(
    rows: Iterable[Sequence[Any]], columns: Sequence[str]
) -> Iterator[tuple[tuple[str, str], list[StoredRow]]]:
    """Group database rows ordered by (agent_id, task_id, seq) into one StoredRow list per
    chain (rows as `stored_row` takes them), holding one chain in memory at a time."""
    key: tuple[str, str] | None = None
    chain: list[StoredRow] = []
    for values in rows:
        current = (values[1], values[2])
        if current != key:
            if key is not None:
                yield key, chain
            key, chain = current, []
        chain.append(stored_row(values, columns))
    if key is not None:
        yield key, chain


def check_stored_chain(
    key: tuple[str, str],
    rows: list[StoredRow],
    recorded: tuple[int, RecordedHead] | None,
    gaps: list[Gap],
    heads_table: str,
) -> tuple[tuple[int, int], ChainBreak] | None:
    """`check_chain` for a database store whose heads live in `heads_table`: the break (with
    its sort key: recorded heads in head order, then headless chains in record order) or
    None. A chain with records but no recorded head is reported as inserted."""
    if recorded is None:
        first = min(rows, key=lambda r: r.seq)
        return (1, first.position), ChainBreak(
            key[0],
            key[1],
            first.seq,
            "inserted",
            f"the chain has records but no head in the {heads_table} table",
        )
    found = check_chain(key[0], key[1], rows, recorded[1], gaps)
    return None if found is None else ((0, recorded[0]), found)


def check_stored_chains(
    rows: Iterable[Sequence[Any]],
    columns: Sequence[str],
    recorded: Mapping[tuple[str, str], tuple[int, RecordedHead]],
    heads_table: str,
    task_id: str | None,
    location: str,
) -> VerifyReport:
    """The report of a database store: `rows` (ordered by agent_id, task_id, seq, as
    `chains_of` takes them) checked chain by chain against the heads `recorded` in
    `heads_table` (id order, head), and every recorded head without records.

    Raises StoreError when `task_id` is given and neither its records nor its head exist.
    """
    breaks: list[tuple[tuple[int, int], ChainBreak]] = []
    gaps: list[Gap] = []
    steps = 0
    seen: set[tuple[str, str]] = set()
    for key, chain in chains_of(rows, columns):
        seen.add(key)
        steps += len(chain)
        found = check_stored_chain(key, chain, recorded.get(key), gaps, heads_table)
        if found is not None:
            breaks.append(found)
    for key, (order, head) in recorded.items():
        if key not in seen:
            problem = check_chain(key[0], key[1], [], head)
            if problem is not None:
                breaks.append(((0, order), problem))
    chains = len(seen | recorded.keys())
    if task_id is not None and not chains:
        raise StoreError(f"task {task_id!r} is not in {location}")
    breaks.sort(key=lambda item: item[0])
    return build_report(chains, steps, [b for _, b in breaks], (), gaps)
