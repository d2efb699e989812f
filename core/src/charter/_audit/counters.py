"""Shared limit counters: the contract a store keeps so limits hold across tasks and processes.

A counter is a key (`charter._model.shared.counter_key`) and the units taken from it. A unit
is one step's claim: an amount (1 for a step count, the number a budget step carries), the
time it was taken (the runner's clock, in microseconds since the epoch) and, for a windowed
counter, the window after which it stops counting. What a counter holds at a time `now` is the
sum of its units that are committed, or held and not expired, and (windowed counters) were
taken later than ``now - window``.

The life of a unit, and why:

1. `reserve` (before the step is judged). In one atomic operation per call, for each claim:
   read what the counter holds now, then add the claim's unit to it, *held* until
   `hold_until_us`. The reader is given what the counter held before (`Reservation.before`),
   and the policy judges ``before + amount`` against its limit. Because the read and the
   add happen under one write lock (SQLite ``BEGIN IMMEDIATE``; a row lock or advisory lock
   elsewhere), two processes racing for the last unit are ordered: the second sees the
   first's unit and is refused. Every claim is added, whether or not it fits: a step over a
   warn-only limit still runs and must count, and a refused step releases its unit (3).
2. `commit` (the step's outcome kept it: it happened, or for attempt counters it ran and
   failed or was abandoned). The unit stops being held and counts for good (until its
   window passes), with the amount the outcome carries. Committing a unit whose hold expired
   and was purged adds it again: it did happen.
3. `release` (the step was blocked, by this limit or another policy; its intent could not be
   recorded; or its outcome does not count). The unit is removed; releasing an unknown id
   does nothing, so a release can be repeated safely.
4. A process that dies between 1 and 2 leaves its units held; they keep counting (the step
   may have run) until `hold_until_us`, then stop: a crashed replica cannot hold a budget
   forever. Choose the hold longer than any step runs.

Failures raise `StoreError` naming the store; nothing was reserved by a failing `reserve`.
The runner treats that as "cannot judge": the step is blocked with the reason, never judged
on a count it could not read.

`MemoryCounters` keeps the same contract in one process's memory (tests, and stores that are
honestly single-process); the stores that can share counters between processes (SQLite on one
machine, PostgreSQL for a fleet) return theirs from ``store.counters()``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from charter._audit.base import StoreError

__all__ = ["Claim", "CounterStore", "MemoryCounters", "Reservation", "SharesCounters", "Unit"]


@dataclass(frozen=True, slots=True)
class Claim:
    """One unit to take: `id` (chosen by the caller, unique: it names the unit later), the
    counter `key`, the `amount`, and the counter's `window_us` (None: no window)."""

    id: str
    key: str
    amount: float
    window_us: int | None = None


@dataclass(frozen=True, slots=True)
class Reservation:
    """A unit taken by `reserve`: its claim, when (`at_us`), and what the counter held
    before it (`before`), counting every other committed or live held unit."""

    claim: Claim
    at_us: int
    before: float


@dataclass(frozen=True, slots=True)
class Unit:
    """A reserved unit to commit: its claim, when it was taken and the amount it keeps."""

    claim: Claim
    at_us: int
    amount: float


@runtime_checkable
class CounterStore(Protocol):
    """Counters shared by every process that opens the same store (see the module doc)."""

    location: str

    def reserve(
        self, claims: Sequence[Claim], *, now_us: int, hold_until_us: int
    ) -> list[Reservation]:
        """Atomically read each claim's counter at `now_us` and add the claim to it, held
        until `hold_until_us`; returns one Reservation per claim, in order. Claims of one call
        on the same key see each other (the later one's `before` includes the earlier). Raises
        StoreError (nothing reserved) on failure and on a claim id already in use."""
        ...

    def read(self, claims: Sequence[Claim], *, now_us: int) -> list[float]:
        """What each claim's counter holds at `now_us`, taking nothing (a preview; the count
        may have moved by the time a step is judged for real). Raises StoreError on failure."""
        ...

    def commit(self, units: Sequence[Unit]) -> None:
        """Make reserved units count for good with their final amounts (see the module doc);
        commit each unit once. Raises StoreError (nothing committed) on failure."""
        ...

    def release(self, ids: Sequence[str]) -> None:
        """Remove held units; unknown ids are ignored. Raises StoreError on failure."""
        ...


@runtime_checkable
class SharesCounters(Protocol):
    """An audit store that keeps shared limit counters next to its chains."""

    def counters(self) -> CounterStore:
        """The store's counters (same file or database, same lifetime as the store)."""
        ...


class _Held:
    __slots__ = ("amount", "at_us", "held_until_us", "key", "window_us")

    def __init__(
        self, key: str, amount: float, at_us: int, window_us: int | None, held_until: int | None
    ) -> None:
        self.key = key
        self.amount = amount
        self.at_us = at_us
        self.window_us = window_us
        self.held_until_us = held_until


class MemoryCounters:
    """`CounterStore` in this process's memory: one lock, nothing shared with other processes.

    For tests and for single-process use only; limits kept here do not hold across replicas.
    """

    def __init__(self, location: str = "memory") -> None:
        self.location = location
        self._lock = threading.Lock()
        self._units: dict[str, _Held] = {}
        self._totals: dict[str, float] = {}
        self.failing: str | None = None  # tests: every call raises StoreError with this text

    def _check(self) -> None:
        if self.failing is not None:
            raise StoreError(f"shared counters {self.location} failed: {self.failing}")

    def _held(self, key: str, now_us: int, window_us: int | None) -> float:
        total = 0.0 if window_us is not None else self._totals.get(key, 0.0)
        for u in self._units.values():
            if u.key != key:
                continue
            if u.held_until_us is not None and u.held_until_us <= now_us:
                continue
            if window_us is not None and u.at_us <= now_us - window_us:
                continue
            total += u.amount
        return total

    def reserve(
        self, claims: Sequence[Claim], *, now_us: int, hold_until_us: int
    ) -> list[Reservation]:
        with self._lock:
            self._check()
            ids = [c.id for c in claims]
            if len(set(ids)) != len(ids) or any(i in self._units for i in ids):
                raise StoreError(
                    f"shared counters {self.location} refused a claim id already in use; "
                    "nothing was reserved"
                )
            out: list[Reservation] = []
            for c in claims:
                out.append(Reservation(c, now_us, self._held(c.key, now_us, c.window_us)))
                self._units[c.id] = _Held(c.key, c.amount, now_us, c.window_us, hold_until_us)
            return out

    def read(self, claims: Sequence[Claim], *, now_us: int) -> list[float]:
        with self._lock:
            self._check()
            return [self._held(c.key, now_us, c.window_us) for c in claims]

    def commit(self, units: Sequence[Unit]) -> None:
        with self._lock:
            self._check()
            for unit in units:
                c = unit.claim
                self._units.pop(c.id, None)
                if c.window_us is None:
                    self._totals[c.key] = self._totals.get(c.key, 0.0) + unit.amount
                else:
                    self._units[c.id] = _Held(c.key, unit.amount, unit.at_us, c.window_us, None)

    def release(self, ids: Sequence[str]) -> None:
        with self._lock:
            self._check()
            for i in ids:
                held = self._units.get(i)
                if held is not None and held.held_until_us is not None:
                    del self._units[i]
