"""The runner's side of limits kept outside the task: reserve before judging, settle after.

For a step that policies count outside its task (``scope: agent`` or ``scope: {per: ...}``),
the runner asks the engine for the step's demands (pure), reserves one unit per counter in
the store's counters (`charter._audit.counters`) at the runner's clock, and hands the counts
it read to the engine. What was read is recorded in the step's ``meta["charter.shared"]``::

    {"at_us": <reservation time, µs since the epoch>,
     "counts": [{"key", "scope", "policies", "before", "amount", "window_us", "id", "keeps",
                 "field"}, ...]}

so `charter replay` judges with the same numbers and can say they came from outside the
task, and so whichever process records the outcome can settle the units (keep or release,
see `SharedDemand`). A step whose counts cannot be read or reserved is never judged on
anything else: the runner blocks it, naming the store and the cause.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from charter._audit.base import SHARED_KEY, AuditStore
from charter._model.behavior import Behavior
from charter._model.paths import parse_path
from charter._model.shared import SharedDemand
from charter._policy.rules._indexes import numbers_at
from charter._runtime.internal import report_internal_error

# The counters load with the first shared limit: most processes (a hook call among them)
# never reserve one.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from charter._audit.counters import CounterStore, Reservation

__all__ = ["SHARED_KEY", "Demands", "SharedCounts", "SharedLimits", "shared_counts"]


Demands = Sequence[tuple[SharedDemand, tuple[str, ...]]]


class SharedCounts:
    """The counts read for one step: `counts` for the engine, `meta` for its record."""

    __slots__ = ("counts", "meta")

    def __init__(self, counts: dict[str, float], meta: dict[str, Any]) -> None:
        self.counts = counts
        self.meta = meta


def _num(x: float) -> int | float:
    # Integral floats are stored as integers: the same JSON number, and the chain's fast
    # encoder takes no trailing ".0".
    return int(x) if isinstance(x, float) and x.is_integer() else x


def shared_counts(meta: Mapping[str, Any]) -> dict[str, float]:
    """The counts a recorded step was judged with (key -> count before it), for replay;
    empty when it carries none or they are malformed."""
    found = meta.get(SHARED_KEY)
    counts = found.get("counts") if isinstance(found, Mapping) else None
    out: dict[str, float] = {}
    for c in counts if isinstance(counts, list) else ():
        if isinstance(c, Mapping) and isinstance(c.get("key"), str):
            before = c.get("before")
            if isinstance(before, (int, float)) and not isinstance(before, bool):
                out[c["key"]] = before
    return out


class SharedLimits:
    """Reservations of one runner. `store` gives the audit store (opening it if needed) or
    None when auditing is off; `counters` replaces the store's own (tests, custom stores)."""

    def __init__(
        self,
        store: Callable[[], AuditStore | None],
        hold_seconds: float,
        counters: CounterStore | None = None,
    ) -> None:
        self._store = store
        self._hold_us = round(hold_seconds * 1_000_000)
        self._given = counters
        self.reserved = 0
        self.refused = 0
        self.settle_errors = 0

    def counters(self) -> CounterStore | str:
        """The counters to use, or why there are none (a sentence for the block reason)."""
        if self._given is not None:
            return self._given
        try:
            store = self._store()
        except Exception as exc:
            return f"the audit store cannot be opened ({exc})"
        if store is None:
            return "auditing is off (audit_location none), and the counts live in the audit store"
        from charter._audit.counters import SharesCounters

        if isinstance(store, SharesCounters):
            return store.counters()
        return (
            f"audit store {store.location} keeps no shared counters (a JSONL file or stdout "
            "cannot share counts between processes); use a sqlite:/// store, or a "
            "postgresql:// one for a fleet"
        )

    def reserve(self, demands: Demands) -> SharedCounts | str:
        """Reserve one unit per demand; the counts and their record, or why it failed."""
        counters = self.counters()
        if isinstance(counters, str):
            self.refused += 1
            return counters
        import uuid

        from charter._audit.counters import Claim

        claims = [Claim(uuid.uuid4().hex, d.key, d.amount, d.window_us) for d, _ in demands]
        now_us = time.time_ns() // 1000
        try:
            got = counters.reserve(claims, now_us=now_us, hold_until_us=now_us + self._hold_us)
        except Exception as exc:
            self.refused += 1
            report_internal_error(exc, "shared.reserve")
            return f"the shared limit counters in {counters.location} could not be reserved ({exc})"
        self.reserved += 1
        return _counts(demands, got, now_us, with_ids=True)

    def read(self, demands: Demands) -> SharedCounts | str:
        """The counts now, taking nothing (previews); or why they cannot be read."""
        counters = self.counters()
        if isinstance(counters, str):
            return counters
        from charter._audit.counters import Claim, Reservation

        claims = [Claim("", d.key, d.amount, d.window_us) for d, _ in demands]
        now_us = time.time_ns() // 1000
        try:
            found = counters.read(claims, now_us=now_us)
        except Exception as exc:
            return f"the shared limit counters in {counters.location} could not be read ({exc})"
        got = [Reservation(c, now_us, before) for c, before in zip(claims, found, strict=True)]
        return _counts(demands, got, now_us, with_ids=False)

    def release(self, meta: Mapping[str, Any] | None) -> None:
        """Release the units a step's ``charter.shared`` meta reserved; never raises."""
        self.settle(meta, None)

    def settle(self, meta: Mapping[str, Any] | None, outcome: Behavior | None) -> None:
        """Keep or release the units of `meta` for the recorded `outcome` (None: the step never
        ran). Never raises: a failure is reported and counted, and the units stay held until
        their hold expires (they go on counting, the safe side)."""
        entries = _entries(meta)
        if not entries:
            return
        from charter._audit.counters import Claim, Unit

        keep: list[Unit] = []
        drop: list[str] = []
        at_us = meta.get("at_us") if meta is not None else None
        for e in entries:
            claim = Claim(e["id"], e["key"], e["amount"], e.get("window_us"))
            if outcome is None or outcome.outcome.value not in e.get("keeps", ()):
                drop.append(claim.id)
                continue
            amount: float = claim.amount
            field = e.get("field")
            if isinstance(field, str):
                amount = numbers_at(parse_path(field), outcome)[0]
            keep.append(Unit(claim, at_us if type(at_us) is int else 0, amount))
        counters = self.counters()
        if isinstance(counters, str):
            self.settle_errors += 1
            return
        try:
            counters.release(drop)
            counters.commit(keep)
        except Exception as exc:
            self.settle_errors += 1
            report_internal_error(exc, "shared.settle")


def _counts(
    demands: Demands, got: Sequence[Reservation], now_us: int, *, with_ids: bool
) -> SharedCounts:
    counts: dict[str, float] = {}
    entries: list[dict[str, Any]] = []
    for (d, names), r in zip(demands, got, strict=True):
        counts[d.key] = r.before
        entry: dict[str, Any] = {
            "key": d.key,
            "scope": d.scope,
            "policies": list(names),
            "before": _num(r.before),
            "amount": _num(d.amount),
            "window_us": d.window_us,
            "keeps": list(d.keeps),
            "field": d.field,
        }
        if with_ids:
            entry["id"] = r.claim.id
        entries.append(entry)
    return SharedCounts(counts, {"at_us": now_us, "counts": entries})


def _entries(meta: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The well-formed, reserved entries of a ``charter.shared`` meta."""
    if not isinstance(meta, Mapping):
        return []
    counts = meta.get("counts")
    out: list[dict[str, Any]] = []
    for e in counts if isinstance(counts, list) else ():
        if (
            isinstance(e, dict)
            and isinstance(e.get("id"), str)
            and isinstance(e.get("key"), str)
            and isinstance(e.get("amount"), (int, float))
        ):
            out.append(e)
    return out
