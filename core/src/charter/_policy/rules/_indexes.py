"""History indexes for the built-in history rules.

Each index is fed every recorded step exactly once, in seq order (see `TaskHistory.index`), and
keeps only what its rules look up: a count, a running sum, sorted timestamps, approval queues, a
set of normalised values. A lookup then costs O(1) or O(log n) whatever the length of the task.

Every index is stored under a key naming the index and everything its `add` depends on (the
selector's key, the field path, the options), so policies with equal params share one index
and no index ever reads params it was not keyed by. An index never reads the clock and never
looks at anything but the steps it is given, so replaying the same steps into a fresh history
builds an identical index.
"""

from __future__ import annotations

# bisect (a module and a C extension) is imported where GateIndex bisects: a process whose
# policies wait for no approval within a window (a hook call's) never loads it.
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta

from charter._model.behavior import TASK_BOUNDARY_KINDS, ActionKind, Behavior, Outcome, Verb
from charter._model.ijson import canonical_digest
from charter._model.paths import FieldPath
from charter._model.trust import trust_level
from charter._policy.selector import Selector

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


__all__ = [
    "CallIndex",
    "CountIndex",
    "GateIndex",
    "GateOptions",
    "SaidIndex",
    "TriggerIndex",
    "Where",
    "index_key",
    "micros",
    "numbers_at",
    "step_digest",
]


# The provenance index and its candidate values are in `charter._policy.rules._provenance`,
# the indexes of the quota rules in `charter._policy.rules.quotas`: they are defined with the
# rules that read them, so a policy set naming none of those rules never loads them.


def index_key(*parts: Any) -> str:
    """An index key as a string: its hash is computed once and cached, where a tuple of enum
    members would be hashed again on every lookup."""
    return repr(parts)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def micros(ts: datetime) -> int:
    """Microseconds since the epoch; integers, so a window boundary is compared exactly."""
    return (ts - _EPOCH) // _MICROSECOND


_last_digest: tuple[Behavior | None, str] = (None, "")


def step_digest(step: Behavior) -> str:
    """`canonical_digest` of the step's input (``{}`` when it has none).

    Several indexes and rules need the digest of the same step in a row (the engine feeds one
    step to every index; one evaluation runs several rules), so the last one is remembered by
    identity. Behaviors are immutable, so identity is enough; the tuple swap is atomic.
    """
    global _last_digest
    last, digest = _last_digest
    if last is step:
        return digest
    digest = canonical_digest(step.input or {})
    _last_digest = (step, digest)
    return digest


def numbers_at(path: FieldPath, step: Behavior) -> tuple[float, list[Any]]:
    """The sum of the numbers at `path` in `step` and the values there that are not numbers.

    Lists are summed item by item. A negative number counts as 0: a budget only grows, so a
    step cannot hand budget back by claiming a negative cost.
    """
    total: float = 0
    bad: list[Any] = []
    for value in _flatten(path.resolve(step)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            bad.append(value)
        elif value > 0:
            total += value
    return total, bad


def _flatten(values: Iterable[Any]) -> Iterator[Any]:
    for v in values:
        if isinstance(v, list):
            yield from _flatten(v)
        elif v is not None:
            yield v


def _is_step(step: Behavior) -> bool:
    return step.kind not in TASK_BOUNDARY_KINDS


# Where a record carries a capability grant: the two names the indexes look for, kept here
# and not in `charter._policy.capabilities` (which exports them) so that code which only
# recognises those records (the step counts skip them) loads neither the grant model nor a
# module of its own: a policy set without capabilities never needs one, and a short-lived
# process (a hook call) pays for every import.
GRANT_META = "charter.grant"
"""The meta key of a record that carries grant layers (the task.start, or a narrowing)."""
GRANT_STEP = "charter.capabilities"
"""The step name of the record that narrows a running task's grant (``step.self PATCH``)."""


def is_bookkeeping(step: Behavior) -> bool:
    """Whether `step` is Charter's own record, not an agent's action: the ``step.self PATCH
    charter.capabilities`` record of a task's grant. Step counts, rate limits and budgets
    never count it."""
    return (
        step.kind is ActionKind.STEP_SELF
        and step.step_name == GRANT_STEP
        and GRANT_META in step.meta
    )


class CountIndex:
    """How many recorded `ok` steps match the selector."""

    __slots__ = ("_select", "count")

    def __init__(self, select: Selector) -> None:
        self._select = select
        self.count = 0

    @staticmethod
    def key(select: Selector) -> str:
        return index_key("charter.count_ok", select.key)

    def add(self, step: Behavior) -> None:
        if step.outcome is Outcome.OK and self._select.matches(step) and not is_bookkeeping(step):
            self.count += 1

    def export_state(self) -> Any:
        return self.count

    def load_state(self, state: Any) -> None:
        self.count = _int(state)


# -- approvals ---------------------------------------------------------------------------------


class GateOptions:
    """What makes a recorded step.gate approve a step (the params of `requires_gate`)."""

    __slots__ = ("bind_input", "gate_kind", "key", "same_step", "select", "single_use", "within")

    def __init__(
        self,
        gate_kind: str | None,
        same_step: bool,
        bind_input: bool,
        within: int | None,
        single_use: bool,
        select: Selector,
    ) -> None:
        self.gate_kind = gate_kind
        self.same_step = same_step
        self.bind_input = bind_input
        self.within = within
        self.single_use = single_use
        self.select = select
        self.key = index_key(
            "charter.gates", gate_kind, same_step, bind_input, within, single_use, select.key
        )

    def binding(self, step: Behavior) -> tuple[str | None, str | None]:
        """The (step_name, input digest) an approval for `step` must carry; None = not bound."""
        return (
            step.step_name if self.same_step else None,
            step_digest(step) if self.bind_input else None,
        )

    def consumes(self, step: Behavior) -> bool:
        return step.kind is not ActionKind.STEP_GATE and self.select.matches(step)


class _GateGroup:
    """The approvals for one binding: passing gates not yet used, and what happened last."""

    __slots__ = ("last_refused", "last_used", "open", "pruned")

    def __init__(self) -> None:
        # (position in the history, seq) of passing gates not yet used, in position order.
        self.open: list[tuple[int, int]] = []
        self.last_used: tuple[int, int] | None = None  # (gate seq, seq of the step that used it)
        self.last_refused: tuple[int, str] | None = None  # (gate seq, decision)
        self.pruned: int | None = None  # seq of the newest gate that fell out of the window


class GateIndex:
    """Recorded approvals (step.gate) grouped by what they bind, with single-use bookkeeping.

    A passing gate joins its group's queue; when `single_use`, the first later `ok` step that
    the gate would have authorised (same binding, within the window) uses it up, oldest
    eligible gate first. A later `deny` for the same binding revokes the open approvals.
    Gates of another `gate_kind`, gates whose own outcome was not ok and gates missing the
    step_name or digest the options bind are ignored.
    """

    __slots__ = ("_groups", "_opts", "length")

    def __init__(self, opts: GateOptions) -> None:
        self._opts = opts
        self._groups: dict[tuple[str | None, str | None], _GateGroup] = {}
        self.length = 0

    def add(self, step: Behavior) -> None:
        pos = self.length
        self.length += 1
        opts = self._opts
        if step.kind is ActionKind.STEP_GATE:
            if step.outcome is Outcome.OK:
                self._add_gate(step, pos)
            return
        if not opts.single_use or step.outcome is not Outcome.OK or not opts.consumes(step):
            return
        group = self._groups.get(opts.binding(step))
        if group is None:
            return
        self._drop_expired(group, pos)
        if group.open:
            gate_seq = group.open.pop(0)[1]
            group.last_used = (gate_seq, step.seq or 0)

    def export_state(self) -> Any:
        return {
            "length": self.length,
            "groups": [
                [
                    name,
                    digest,
                    [list(g) for g in group.open],
                    None if group.last_used is None else list(group.last_used),
                    None if group.last_refused is None else list(group.last_refused),
                    group.pruned,
                ]
                for (name, digest), group in self._groups.items()
            ],
        }

    def load_state(self, state: Any) -> None:
        state = _map(state)
        groups: dict[tuple[str | None, str | None], _GateGroup] = {}
        for row in _list(state["groups"]):
            name, digest, opened, used, refused, pruned = _list(row)
            group = _GateGroup()
            group.open = [(_int(pos), _int(seq)) for pos, seq in map(_list, _list(opened))]
            if used is not None:
                gate_seq, by = _list(used)
                group.last_used = (_int(gate_seq), _int(by))
            if refused is not None:
                gate_seq, decision = _list(refused)
                group.last_refused = (_int(gate_seq), _str(decision))
            group.pruned = None if pruned is None else _int(pruned)
            groups[(_opt_str(name), _opt_str(digest))] = group
        self._groups = groups
        self.length = _int(state["length"])

    def _add_gate(self, step: Behavior, pos: int) -> None:
        gate = _dict(step.properties.get("gate"))
        opts = self._opts
        if opts.gate_kind is not None and gate.get("kind") != opts.gate_kind:
            return
        name = gate.get("step_name") if opts.same_step else None
        digest = gate.get("digest") if opts.bind_input else None
        if (opts.same_step and not isinstance(name, str)) or (
            opts.bind_input and not isinstance(digest, str)
        ):
            return
        group = self._groups.setdefault((name, digest), _GateGroup())
        decision = _dict(step.output).get("decision")
        if decision == "pass":
            group.open.append((pos, step.seq or 0))
            return
        if decision == "deny":
            # A reviewer who denies what they approved earlier has changed their mind.
            group.open.clear()
        group.last_refused = (step.seq or 0, str(decision))

    def _drop_expired(self, group: _GateGroup, pos: int) -> None:
        """Drop the open gates outside the window of a step at history position `pos`: they
        have expired for good (positions only grow), and the queue stays short."""
        within = self._opts.within
        if within is not None:
            import bisect  # see the imports at the top

            i = bisect.bisect_left(group.open, (pos - within,))
            if i:
                group.pruned = group.open[i - 1][1]
                del group.open[:i]

    def lookup(self, binding: tuple[str | None, str | None]) -> tuple[int, _GateGroup | None]:
        """How many approvals are open for a step judged now (used-up and expired ones left
        out), and the group, for the details."""
        group = self._groups.get(binding)
        if group is None:
            return 0, None
        lo = 0
        if self._opts.within is not None:
            import bisect  # see the imports at the top

            lo = bisect.bisect_left(group.open, (self.length - self._opts.within,))
        return len(group.open) - lo, group

    def expired_seq(self, group: _GateGroup) -> int | None:
        """Seq of the newest passing gate that is older than the window, if any."""
        within = self._opts.within
        if within is None:
            return None
        import bisect  # see the imports at the top

        lo = bisect.bisect_left(group.open, (self.length - within,))
        return group.open[lo - 1][1] if lo else group.pruned


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# -- flow ----------------------------------------------------------------------------------------


class Where:
    """Conditions on a step's fields (`forbid_after`'s ``after.where``); all must hold.

    Each condition holds when some value at its field equals `equals`, is one of `in`, or (a
    string) contains a match of `pattern`; on ``properties.data.trust`` trust words compare
    as levels (`untrusted` is `external`).
    """

    __slots__ = ("_conds", "key")

    def __init__(self, conds: Iterable[tuple[FieldPath, str, Any]], key: tuple[Any, ...]) -> None:
        self._conds = tuple(conds)
        self.key = key

    def matches(self, step: Behavior) -> bool:
        return all(_holds(path, op, arg, step) for path, op, arg in self._conds)


def _holds(path: FieldPath, op: str, arg: Any, step: Behavior) -> bool:
    for value in _flatten(path.resolve(step)):
        if op == "equals":
            if _same_scalar(value, arg):
                return True
        elif op == "in":
            if any(_same_scalar(value, a) for a in arg):
                return True
        elif op == "level":
            if trust_level(value) in arg:
                return True
        elif isinstance(value, str) and arg.search(value) is not None:
            return True
    return False


def _same_scalar(a: Any, b: Any) -> bool:
    # JSON true is not 1: compare booleans only with booleans.
    return (isinstance(a, bool) == isinstance(b, bool)) and a == b


class TriggerIndex:
    """The latest recorded `ok` step matching `after` (+ `where`), and how many `ok` steps
    (task boundaries excluded) have happened since it."""

    __slots__ = ("_select", "_where", "last", "ok_steps")

    def __init__(self, select: Selector, where: Where) -> None:
        self._select = select
        self._where = where
        self.ok_steps = 0
        self.last: tuple[int, int, str] | None = None  # (ok_steps after it, seq, step_name)

    @staticmethod
    def key(select: Selector, where: Where) -> str:
        return index_key("charter.trigger", select.key, where.key)

    def add(self, step: Behavior) -> None:
        if step.outcome is not Outcome.OK:
            return
        if _is_step(step):
            self.ok_steps += 1
        if self._select.matches(step) and self._where.matches(step):
            self.last = (self.ok_steps, step.seq or 0, step.step_name)

    def export_state(self) -> Any:
        return [self.ok_steps, None if self.last is None else list(self.last)]

    def load_state(self, state: Any) -> None:
        ok_steps, last = _list(state)
        self.ok_steps = _int(ok_steps)
        if last is None:
            self.last = None
        else:
            after, seq, name = _list(last)
            self.last = (_int(after), _int(seq), _str(name))

    def since(self) -> int:
        """`ok` steps that happened after the latest trigger (call only when `last` is set)."""
        assert self.last is not None
        return self.ok_steps - self.last[0]


class CallIndex:
    """The seq of the latest recorded step of each tool call id (``properties.tool.call_id``,
    as `Gate.tool_step` sets it): how an integration finds whether a call was recorded."""

    __slots__ = ("seqs",)

    KEY = index_key("charter.calls")

    def __init__(self) -> None:
        self.seqs: dict[str, int] = {}

    def add(self, step: Behavior) -> None:
        tool = step.properties.get("tool")
        if type(tool) is dict:
            call_id = tool.get("call_id")
            if type(call_id) is str:
                self.seqs[call_id] = step.seq or 0

    def export_state(self) -> Any:
        return dict(self.seqs)

    def load_state(self, state: Any) -> None:
        seqs = {_str(k): _int(v) for k, v in _map(state).items()}
        self.seqs = seqs


class SaidIndex:
    """The canonical digests of what the task's recorded user messages said (a step.message
    GET with ``properties.message.role`` user: its ``input.content``), whatever their outcome:
    how a message already recorded is told from a new one."""

    __slots__ = ("digests",)

    KEY = index_key("charter.said")

    def __init__(self) -> None:
        self.digests: set[str] = set()

    def add(self, step: Behavior) -> None:
        if step.kind is not ActionKind.STEP_MESSAGE or step.verb is not Verb.GET:
            return
        message = step.properties.get("message")
        if isinstance(message, dict) and message.get("role") == "user":
            if isinstance(step.input, dict):
                self.digests.add(canonical_digest(step.input.get("content")))

    def export_state(self) -> Any:
        return sorted(self.digests)

    def load_state(self, state: Any) -> None:
        self.digests = {_str(d) for d in _list(state)}


# -- saved state -----------------------------------------------------------------------------
# An index's `export_state` is plain JSON (lists, strings, numbers, null) and its `load_state`
# takes back exactly what `export_state` gave: the state of an index fed the same steps. The
# checks below make a malformed state raise (ValueError, TypeError), never load a wrong index.


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _number(value: Any) -> float:
    if type(value) is not int and type(value) is not float:
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return value


def _str(value: Any) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else _str(value)


def _list(value: Any) -> list[Any]:
    if type(value) is not list:
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _map(value: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def _counter(rows: Any) -> Counter[tuple[str, str]]:
    out: Counter[tuple[str, str]] = Counter()
    for row in _list(rows):
        name, digest, n = _list(row)
        out[(_str(name), _str(digest))] = _int(n)
    return out
