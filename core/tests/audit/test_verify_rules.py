"""check_chain on synthetic rows: one test per rule that decides a break's reason and seq."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from charter._audit.report import ChainBreak, VerifyReport
from charter._audit.verify import RecordedHead, StoredRow, check_chain


def _chain(length: int, *, closing_last: bool = False) -> list[StoredRow]:
    return [
        StoredRow(
            position=seq,
            seq=seq,
            hash=f"h{seq}",
            prev_hash=None if seq == 1 else f"h{seq - 1}",
            intact=True,
            closing=closing_last and seq == length,
        )
        for seq in range(1, length + 1)
    ]


def _check(rows: list[StoredRow], recorded: RecordedHead | None = None) -> tuple[int, str, str]:
    found = check_chain("agent", "task", rows, recorded)
    assert found is not None
    return found.seq, found.reason, found.detail


def _without(rows: list[StoredRow], *seqs: int) -> list[StoredRow]:
    return [r for r in rows if r.seq not in seqs]


def _swap(rows: list[StoredRow], index: int, **changes: Any) -> list[StoredRow]:
    changed = list(rows)
    changed[index] = replace(changed[index], **changes)
    return changed


def test_intact_chain_has_no_break() -> None:
    assert check_chain("agent", "task", _chain(5)) is None
    assert check_chain("agent", "task", []) is None
    exact = RecordedHead(5, "h5", closed=True, exact=True)
    assert check_chain("agent", "task", _chain(5, closing_last=True), exact) is None


def test_problem_rows_report_their_own_reason() -> None:
    rows = _swap(_chain(4), 2, problem=("malformed", "body is not JSON"))
    assert _check(rows) == (3, "malformed", "body is not JSON")


def test_self_hash_mismatch_is_edited() -> None:
    assert _check(_swap(_chain(4), 1, intact=False))[:2] == (2, "edited")


def test_duplicate_seq_is_inserted() -> None:
    rows = [*_chain(4), replace(_chain(4)[2], position=9, hash="forged")]
    assert _check(rows) == (3, "inserted", "2 records carry seq 3")


@pytest.mark.parametrize(
    ("missing", "seq", "detail"),
    [
        ((3,), 3, "seq 3 missing: seq 4 does not link to seq 2"),
        ((2, 3), 2, "seqs 2-3 missing: seq 4 does not link to seq 1"),
        ((1,), 1, "seq 1 missing: the chain starts at seq 2"),
        ((1, 2), 1, "seqs 1-2 missing: the chain starts at seq 3"),
    ],
)
def test_gap_with_broken_link_is_deleted(missing: tuple[int, ...], seq: int, detail: str) -> None:
    assert _check(_without(_chain(5), *missing)) == (seq, "deleted", detail)


def test_gap_with_intact_link_is_renumbered() -> None:
    rows = _swap(_without(_chain(5), 3), 2, prev_hash="h2")
    assert _check(rows)[:2] == (4, "edited")
    first = [replace(_chain(3)[0], seq=2)]
    assert _check(first)[:2] == (2, "edited")


def test_break_where_the_next_record_still_commits_is_the_earlier_edit() -> None:
    # Seq 2 was changed and re-hashed: seq 3 no longer links, seq 4 still links to seq 3.
    rows = _swap(_chain(5), 2, prev_hash="h2-original")
    seq, reason, detail = _check(rows)
    assert (seq, reason) == (2, "edited")
    assert "re-hashed" in detail
    assert _check(_swap(_chain(3), 0, prev_hash="x"))[:2] == (1, "edited")


def test_record_linking_to_neither_neighbour_was_replaced() -> None:
    rows = _swap(_swap(_chain(5), 2, prev_hash="x"), 3, prev_hash="y")
    assert _check(rows) == (3, "edited", "record links to neither neighbour (replaced)")


def test_unlinked_last_record_is_inserted_unless_the_head_covers_it() -> None:
    rows = _swap(_chain(4), 3, prev_hash="x")
    assert _check(rows)[:2] == (4, "inserted")
    lagging = RecordedHead(4, "h4", closed=False, exact=False)
    assert _check(rows, lagging)[:2] == (4, "edited")


def test_record_after_end_marker_is_inserted() -> None:
    rows = [*_chain(3, closing_last=True), _chain(4)[3]]
    assert _check(rows) == (4, "inserted", "record follows the end marker at seq 3")


def test_recorded_head_beyond_records_is_truncated() -> None:
    head = RecordedHead(6, "h6", closed=True, exact=True)
    assert _check(_chain(4), head) == (
        5,
        "truncated",
        "the recorded head is seq 6 but the records stop at seq 4",
    )
    assert _check([], head)[:2] == (1, "truncated")


def test_recorded_head_hash_mismatch_is_edited() -> None:
    assert _check(_chain(4), RecordedHead(4, "other", closed=False, exact=True))[:2] == (
        4,
        "edited",
    )
    lagging = RecordedHead(2, "other", closed=False, exact=False)
    assert _check(_chain(4), lagging)[:2] == (2, "edited")


def test_records_beyond_an_exact_head_are_inserted_but_a_lagging_head_is_fine() -> None:
    assert _check(_chain(5), RecordedHead(3, "h3", closed=False, exact=True))[:2] == (
        4,
        "inserted",
    )
    assert check_chain("agent", "task", _chain(5), RecordedHead(3, "h3", False, False)) is None


def test_physical_order_against_seq_order_is_reordered() -> None:
    rows = _chain(5)
    rows[2], rows[3] = replace(rows[2], position=4), replace(rows[3], position=3)
    assert _check(rows) == (3, "reordered", "stored after seq 4 although every link is intact")
    moved = [replace(r, position=r.seq if r.seq != 5 else 0) for r in _chain(5)]
    assert _check(moved)[:2] == (1, "reordered")


def test_first_break_in_seq_order_wins() -> None:
    rows = _without(_swap(_chain(6), 4, intact=False), 2)
    assert _check(rows)[:2] == (2, "deleted")


def test_report_text() -> None:
    one = ChainBreak("a", "t1", 4, "edited", "stored hash does not match its content")
    two = ChainBreak("a", "t2", 1, "deleted", "seq 1 missing: the chain starts at seq 2")
    assert str(VerifyReport(True, 1, 1)) == "ok: 1 chain, 1 step verified"
    broken = VerifyReport(False, 2, 9, [one, two])
    assert broken.first_break == one
    assert str(broken) == (
        "broken: task t1 seq 4 edited: stored hash does not match its content (and 1 more break)"
    )
    assert VerifyReport(True, 0, 0).first_break is None
