"""Shared limit counters: the SQLite and PostgreSQL counters keep the same contract as the
in-memory ones, and eight processes racing one SQLite file or one PostgreSQL database for a
counter's last units take exactly the limit."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from charter._audit.base import StoreError
from charter._audit.counters import (
    Claim,
    CounterStore,
    MemoryCounters,
    Reservation,
    SharesCounters,
    Unit,
)
from charter._audit.location import open_store
from charter._audit.postgresql import PostgresStore
from charter._audit.sqlite import SQLiteStore
from hypothesis import given, settings
from hypothesis import strategies as st

HOLD = 1_000


def _unit(r: Reservation, amount: float | None = None) -> Unit:
    return Unit(r.claim, r.at_us, r.claim.amount if amount is None else amount)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def counters(request: pytest.FixtureRequest, tmp_path: Path) -> CounterStore:
    if request.param == "memory":
        return MemoryCounters()
    if request.param == "postgresql":
        url = request.getfixturevalue("postgresql_url")
        store: SQLiteStore | PostgresStore = PostgresStore(url)
    else:
        store = SQLiteStore(tmp_path / "audit.db")
    request.addfinalizer(store.close)
    return store.counters()


def test_a_unit_counts_while_held_and_after_commit_and_not_after_release(
    counters: CounterStore,
) -> None:
    a, b = counters.reserve([Claim("a", "k", 2), Claim("b", "k", 3)], now_us=10, hold_until_us=HOLD)
    assert (a.before, b.before) == (0, 2)  # one call's claims see each other
    counters.commit([_unit(a, 5)])  # the outcome carried 5
    counters.release(["b", "b", "unknown"])  # repeatable, unknown ids ignored
    assert counters.read([Claim("", "k", 1)], now_us=20) == [5]
    counters.release(["a"])  # a committed unit is not released
    assert counters.read([Claim("", "k", 1)], now_us=20) == [5]
    assert counters.read([Claim("", "other", 1)], now_us=20) == [0]


def test_a_held_unit_stops_counting_when_its_hold_expires_but_a_late_commit_counts(
    counters: CounterStore,
) -> None:
    (r,) = counters.reserve([Claim("a", "k", 1)], now_us=10, hold_until_us=100)
    assert counters.reserve([Claim("b", "k", 1)], now_us=99, hold_until_us=1_000)[0].before == 1
    # At 100 the first hold is over (a crashed process does not hold the counter forever).
    assert counters.reserve([Claim("c", "k", 1)], now_us=100, hold_until_us=1_000)[0].before == 1
    counters.commit([_unit(r)])  # the step did happen after all
    assert counters.read([Claim("", "k", 1)], now_us=200) == [3]


def test_a_windowed_unit_counts_only_inside_its_window(counters: CounterStore) -> None:
    def claim(i: str) -> Claim:
        return Claim(i, "w", 1, window_us=50)

    (first,) = counters.reserve([claim("a")], now_us=100, hold_until_us=HOLD)
    counters.commit([_unit(first)])
    assert counters.reserve([claim("b")], now_us=149, hold_until_us=HOLD)[0].before == 1
    # A unit stamped exactly one window earlier is outside it.
    assert counters.reserve([claim("c")], now_us=150, hold_until_us=HOLD)[0].before == 1
    assert counters.read([claim("")], now_us=300) == [0]


def test_a_claim_id_in_use_is_refused_and_nothing_is_reserved(counters: CounterStore) -> None:
    counters.reserve([Claim("a", "k", 1)], now_us=1, hold_until_us=HOLD)
    with pytest.raises(StoreError, match="nothing"):
        counters.reserve([Claim("b", "k", 1), Claim("a", "k", 1)], now_us=2, hold_until_us=HOLD)
    assert counters.read([Claim("", "k", 1)], now_us=3) == [1]


def test_only_stores_that_share_counters_between_processes_offer_them(
    tmp_path: Path, postgresql_url: str
) -> None:
    sqlite = open_store(f"sqlite:///{tmp_path}/a.db")
    pg = open_store(postgresql_url)
    jsonl = open_store(f"jsonl:///{tmp_path}/a.jsonl")
    stdout = open_store("stdout")
    assert isinstance(sqlite, SharesCounters) and isinstance(pg, SharesCounters)
    assert not isinstance(jsonl, SharesCounters)
    assert not isinstance(stdout, SharesCounters)
    for shared in (sqlite, pg):
        shared.close()
        with pytest.raises(StoreError, match="closed"):
            shared.counters().reserve([Claim("a", "k", 1)], now_us=1, hold_until_us=HOLD)
    jsonl.close()


def test_counters_do_not_touch_the_chains_or_their_verification(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    store.append(
        [
            {
                "agent_id": "a",
                "task_id": "t",
                "action_id": None,
                "timestamp": "2026-11-30T05:49:05.123456Z",
                "kind": "task.start",
                "verb": None,
                "step_name": "job",
                "input": None,
                "output": None,
                "properties": None,
                "meta": None,
            }
        ]
    )
    store.counters().reserve([Claim("a", "k", 1)], now_us=1, hold_until_us=HOLD)
    store.close()
    reopened = SQLiteStore(tmp_path / "a.db", create=False)
    assert reopened.verify().ok
    assert reopened.counters().read([Claim("", "k", 1)], now_us=2) == [1]
    reopened.close()


# -- the same contract, operation by operation ------------------------------------------------

# A counter's key names its window (the rules put it in the key), so each key has one.
_WINDOW = {"k1": None, "k2": 40}
_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("reserve"),
            st.sampled_from(sorted(_WINDOW)),
            st.integers(0, 5),
            st.integers(5, 200),
        ),
        st.tuples(st.just("commit"), st.integers(0, 30), st.integers(0, 5)),
        st.tuples(st.just("release"), st.integers(0, 30)),
        st.tuples(st.just("tick"), st.integers(1, 60)),
    ),
    max_size=40,
)


@pytest.fixture(scope="module")
def pg_counters(postgresql_server: Any) -> Iterator[PostgresStore]:
    """One PostgreSQL store for every example (a database per example would be slow)."""
    store = PostgresStore(postgresql_server.create_database("counters"))
    yield store
    store.close()


@settings(max_examples=60, deadline=None)
@given(ops=_OPS)
def test_sqlite_counters_agree_with_memory_counters(ops: list[tuple[Any, ...]]) -> None:
    # In memory: the same SQL, without an fsync per transaction.
    store = SQLiteStore(":memory:")
    try:
        _agree(store.counters(), ops, "")
    finally:
        store.close()


@settings(max_examples=40, deadline=None)
@given(ops=_OPS)
def test_postgresql_counters_agree_with_memory_counters(
    pg_counters: PostgresStore, ops: list[tuple[Any, ...]]
) -> None:
    # Each example's keys and ids are its own, so examples sharing the database never meet.
    _agree(pg_counters.counters(), ops, uuid.uuid4().hex)


def _agree(real: CounterStore, ops: list[tuple[Any, ...]], prefix: str) -> None:
    model = MemoryCounters()
    windows = {prefix + k: w for k, w in _WINDOW.items()}
    held: list[Reservation] = []
    settled: set[str] = set()
    now = 1_000
    for op in ops:
        if op[0] == "reserve":
            _, key, amount, hold = op
            claim = Claim(f"{prefix}c{len(held)}", prefix + key, amount, windows[prefix + key])
            got = real.reserve([claim], now_us=now, hold_until_us=now + hold)
            want = model.reserve([claim], now_us=now, hold_until_us=now + hold)
            assert got == want
            held.append(got[0])
        elif op[0] == "commit" and op[1] < len(held) and held[op[1]].claim.id not in settled:
            unit = _unit(held[op[1]], op[2])
            settled.add(unit.claim.id)
            real.commit([unit])
            model.commit([unit])
        elif op[0] == "release" and op[1] < len(held):
            real.release([held[op[1]].claim.id])
            model.release([held[op[1]].claim.id])
        elif op[0] == "tick":
            now += op[1]
        probes = [Claim("", k, 1, w) for k, w in windows.items()]
        assert real.read(probes, now_us=now) == model.read(probes, now_us=now)


# -- eight processes, one file -------------------------------------------------------------------

# argv: location key limit attempts. Each attempt reserves a unit; it keeps it only when the
# counter held less than the limit before it (what the rule judges), else releases it.
RACE_CHILD = """
import sys, time, uuid
from charter._audit.counters import Claim, Unit
from charter._audit.location import open_store

location, key, limit, attempts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = open_store(location)
counters = store.counters()
kept = 0
for _ in range(attempts):
    now = time.time_ns() // 1000
    claim = Claim(uuid.uuid4().hex, key, 1)
    (r,) = counters.reserve([claim], now_us=now, hold_until_us=now + 10**9)
    if r.before + 1 <= limit:
        counters.commit([Unit(r.claim, r.at_us, 1)])
        kept += 1
    else:
        counters.release([r.claim.id])
print(kept)
store.close()
"""


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_eight_processes_racing_for_the_last_units_take_exactly_the_limit(
    spawn: Callable[..., subprocess.Popen[str]],
    tmp_path: Path,
    kind: str,
    request: pytest.FixtureRequest,
) -> None:
    if kind == "postgresql":
        location = str(request.getfixturevalue("postgresql_url"))
    else:
        location = f"sqlite:///{tmp_path}/race.db"
    open_store(location).close()
    limit = 37
    children = [spawn(RACE_CHILD, location, "agent-wide", str(limit), "10") for _ in range(8)]
    kept = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        kept.append(int(out))
    assert sum(kept) == limit  # 80 attempts, never one more than the limit
    store = open_store(location)
    assert isinstance(store, SharesCounters)
    assert store.counters().read([Claim("", "agent-wide", 1)], now_us=0) == [limit]
    store.close()
