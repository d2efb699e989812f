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

import bisect
import functools
import json
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta

from charter._model.behavior import TASK_BOUNDARY_KINDS, ActionKind, Behavior, Outcome, Verb
from charter._model.ijson import canonical_digest
from charter._model.paths import FieldPath
from charter._model.trust import ALL, OutputPath, Trust, parse_output_path, trust_level
from charter._policy.extract import (
    iban_checksum_ok,
    json_number_key,
    norm_email,
    norm_host,
    norm_iban,
    norm_phone,
    norm_url,
    number_key,
    scan,
)
from charter._policy.grant_keys import GRANT_META, GRANT_STEP
from charter._policy.regex import compile_re2
from charter._policy.selector import Selector

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "CallIndex",
    "CountIndex",
    "GateIndex",
    "GateOptions",
    "ProvenanceIndex",
    "RepeatIndex",
    "SaidIndex",
    "SumIndex",
    "TimeIndex",
    "TriggerIndex",
    "Where",
    "candidates",
    "field_levels",
    "index_key",
    "leveled",
    "micros",
    "number_keys",
    "numbers_at",
    "provenance_keys",
    "step_digest",
    "trusted_candidates",
]


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
        if isinstance(value, bool) or not isinstance(value, int | float):
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


class TimeIndex:
    """The timestamps (µs, sorted) of recorded steps that match the selector and whose outcome
    is one of `outcomes`; `count_after` is a bisection."""

    __slots__ = ("_outcomes", "_select", "_times")

    def __init__(self, select: Selector, outcomes: frozenset[Outcome]) -> None:
        self._select = select
        self._outcomes = outcomes
        self._times: list[int] = []

    @staticmethod
    def key(select: Selector, outcomes: frozenset[Outcome]) -> str:
        return index_key("charter.times", select.key, tuple(sorted(outcomes)))

    def add(self, step: Behavior) -> None:
        if (
            step.outcome in self._outcomes
            and self._select.matches(step)
            and not is_bookkeeping(step)
        ):
            # Timestamps almost always arrive in order, so insort appends; concurrent steps
            # may arrive slightly out of order and are still placed correctly.
            bisect.insort(self._times, micros(step.timestamp))

    def export_state(self) -> Any:
        return list(self._times)

    def load_state(self, state: Any) -> None:
        times = [_int(t) for t in _list(state)]
        if times != sorted(times):
            raise ValueError("times out of order")
        self._times = times

    def count_after(self, after_us: int) -> int:
        """How many indexed steps are stamped strictly later than `after_us`."""
        return len(self._times) - bisect.bisect_right(self._times, after_us)


class SumIndex:
    """The running sum of the numbers at `path` over recorded `ok` steps matching the selector."""

    __slots__ = ("_path", "_select", "total")

    def __init__(self, select: Selector, path: FieldPath) -> None:
        self._select = select
        self._path = path
        self.total: float = 0

    @staticmethod
    def key(select: Selector, path: FieldPath) -> str:
        return index_key("charter.sum_ok", select.key, path.text)

    def add(self, step: Behavior) -> None:
        if step.outcome is Outcome.OK and self._select.matches(step) and not is_bookkeeping(step):
            self.total += numbers_at(self._path, step)[0]

    def export_state(self) -> Any:
        return self.total

    def load_state(self, state: Any) -> None:
        self.total = _number(state)


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
            lo = bisect.bisect_left(group.open, (self.length - self._opts.within,))
        return len(group.open) - lo, group

    def expired_seq(self, group: _GateGroup) -> int | None:
        """Seq of the newest passing gate that is older than the window, if any."""
        within = self._opts.within
        if within is None:
            return None
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


class RepeatIndex:
    """How often each (step_name, input digest) ran: `ok` steps, and failed or abandoned ones."""

    __slots__ = ("not_ok", "ok")

    KEY = index_key("charter.repeats")

    def __init__(self) -> None:
        self.ok: Counter[tuple[str, str]] = Counter()
        self.not_ok: Counter[tuple[str, str]] = Counter()

    def add(self, step: Behavior) -> None:
        outcome = step.outcome
        if outcome is Outcome.BLOCKED or not _is_step(step):
            return
        counter = self.ok if outcome is Outcome.OK else self.not_ok
        counter[(step.step_name, step_digest(step))] += 1

    def export_state(self) -> Any:
        return [
            [[name, digest, n] for (name, digest), n in self.ok.items()],
            [[name, digest, n] for (name, digest), n in self.not_ok.items()],
        ]

    def load_state(self, state: Any) -> None:
        ok, not_ok = _list(state)
        self.ok = _counter(ok)
        self.not_ok = _counter(not_ok)


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


# -- provenance ----------------------------------------------------------------------------------

# Strings longer than this are indexed only up to it: a value found past the cut is then not
# trusted, which fails closed, and a huge trusted output cannot blow up the index.
MAX_INDEXED_CHARS = 100_000
# Whole strings and lines up to this length are candidates themselves (a recipient name, an
# address line); longer ones only contribute their tokens.
MAX_WHOLE = 1_024
# Runs of up to this many words are candidates too, for multi-word values ("Bob Smith").
MAX_NGRAM = 4
# Content below this level is not indexed: no policy can require less (see value_provenance).
MIN_INDEXED = Trust.INTERNAL

_PUNCT = "\"'`()[]{}<>,;:!?.*"
# Patterns run on agent-controlled text, so they run on RE2 (linear time): on Python's `re`
# the e-mail pattern was quadratic in a long token without an `@` (100k characters, 37 s).
# RE2's `\s` and `\b` are ASCII; the text scanned has its whitespace collapsed to spaces.
_IBAN_SPACED = r"(?i)\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b"
_IBAN_MAX_TEXT = 64  # an IBAN is at most 34 characters, 42 when spaced in groups of four
_ANGLE_EMAIL = r".*<([^<>\s]+@[^<>\s]+)>\s*"
_EMAIL_VALUE = (
    r"[^\s@<>()\[\]{},;:\"'`/\\]+@[^\s@<>()\[\]{},;:\"'`/\\]+\.[^\s@<>()\[\]{},;:\"'`/\\]+"
)
# Where a content envelope keeps a tool's own return value: LangChain and LlamaIndex record
# ``{"content": ...}``, CrewAI ``{"result": ...}``.
_ENVELOPE_KEYS = ("content", "result")

Key = tuple[str, str]


@functools.cache
def _rx(pattern: str) -> Any:
    """Patterns are compiled on first use: loading the rules must stay cheap (a hook process
    loads them for every step) and most processes never index provenance."""
    return compile_re2(pattern)


def _scannable(s: str) -> str:
    # RE2 reads UTF-8, which cannot hold a lone surrogate: it is scanned as U+FFFD (so a
    # value containing one is never found trusted, which fails closed).
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in s)
    return s


def _ascii_words(s: str) -> str:
    # RE2's `\b` knows only ASCII word characters; standing `_` (a word character the IBAN
    # pattern never matches) in for every other one gives `\b` its Unicode meaning.
    if s.isascii():
        return s
    return "".join("_" if not c.isascii() and (c.isalnum() or c == "_") else c for c in s)


def _is_domain(host: str) -> bool:
    """``[\\w-]+(?:\\.[\\w-]+)+`` with Unicode word characters, as `re` read it."""
    labels = host.split(".")
    if len(labels) < 2:
        return False
    for label in labels:
        rest = label.replace("-", "").replace("_", "")
        if not label or (rest and not rest.isalnum()):
            return False
    return True


def _is_iban(text: str) -> bool:
    """``[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}``, by scanning."""
    head, digits, tail = text[:2], text[2:4], text[4:]
    return (
        15 <= len(text) <= 34
        and text.isascii()
        and head.isalpha()
        and head.isupper()
        and digits.isdigit()
        and tail.isalnum()
        and tail == tail.upper()
    )


def _nfkc(s: str) -> str:
    # ASCII is already NFKC; skipping the call matters on the hot path.
    return s if s.isascii() else unicodedata.normalize("NFKC", s)


def norm_text(s: str) -> str:
    """NFKC, whitespace runs collapsed, stripped, case-folded: how text values are compared."""
    return " ".join(_nfkc(s).split()).casefold()


def provenance_keys(value: str, mode: str) -> tuple[Key, ...]:
    """The index keys under which `value` counts as seen, for a normalisation `mode`.

    Namespaces: ``t`` text, ``e`` e-mail addresses, ``h`` hosts, ``i`` IBAN-like account
    numbers, ``u`` URLs, ``p`` phone numbers, ``n`` numbers. ``auto`` treats an IBAN-like
    value as an IBAN (or its text), ``Name <addr>`` and an address as the address and
    anything else as text.
    """
    if mode == "host":
        return (("h", norm_host(value)),)
    if mode == "iban":
        return (("i", norm_iban(value)),)
    if mode == "url":
        return (("u", norm_url(value)),)
    if mode == "phone":
        return (("p", norm_phone(value)),)
    if mode in ("auto", "email") and ">" in value:
        m = _rx(_ANGLE_EMAIL).fullmatch(_scannable(_nfkc(value)))
        if m is not None:
            return (("e", norm_email(m.group(1))), ("t", norm_text(m.group(1))))
    if mode in ("auto", "email") and "@" in value:
        if _rx(_EMAIL_VALUE).fullmatch(_scannable(_nfkc(value.strip()))) is not None:
            return (("e", norm_email(value)), ("t", norm_text(value)))
    if mode == "auto" and len(value) <= _IBAN_MAX_TEXT and "@" not in value:
        compact = norm_iban(value)
        if _is_iban(compact):
            return (("i", compact), ("t", norm_text(value)))
    return (("t", norm_text(value)),)


def number_keys(value: int | float) -> tuple[Key, ...]:
    """The index key of a JSON number: compared by value (40 == 40.0), never with text."""
    key = json_number_key(value)
    return (("n", key),) if key is not None else ()


def _add_candidates(text: str, out: set[Key]) -> None:
    """Add every normalised candidate value found in one trusted string to `out`."""
    raw = _scannable(_nfkc(text[:MAX_INDEXED_CHARS]))
    for m in _rx(_IBAN_SPACED).finditer(_ascii_words(raw)):
        _add_iban(m.group(0), out)
    n = norm_text(raw)
    if not n:
        return
    if len(n) <= MAX_WHOLE:
        out.add(("t", n))
    if "\n" in raw or "\r" in raw:
        for line in raw.splitlines():
            ln = norm_text(line)
            if ln and len(ln) <= MAX_WHOLE:
                out.add(("t", ln))
    words = [w.strip(_PUNCT) for w in n.split(" ")]
    for i, word in enumerate(words):
        if not word:
            continue
        out.add(("t", word))
        for j in range(i + 2, min(i + MAX_NGRAM, len(words)) + 1):
            gram = " ".join(words[i:j]).strip(_PUNCT)
            out.add(("t", gram))
        if "." in word and word.isascii() and _is_domain(host := norm_host(word)):
            out.add(("h", host))
        if _is_iban(upper := word.upper()):
            _add_iban(upper, out)
        if word[-1].isdigit() and (num := number_key(word)) is not None:
            out.add(("n", num))
    if not raw.isascii():
        # Host names with other letters are read from the text before case folding (which
        # would turn ß into ss and merge two names IDNA keeps apart).
        for word in raw.split():
            if "." in word and not word.isascii():
                host = norm_host(word.strip(_PUNCT))
                if _is_domain(host):
                    out.add(("h", host))
    found = scan(raw)
    for email in found["emails"]:
        out.add(("e", email))
        out.add(("t", email))
    for url in found["urls"]:
        out.add(("u", url))
    for host in found["hosts"]:
        out.add(("h", host))
    for phone in found["phones"]:
        out.add(("p", phone))


def _add_iban(found: str, out: set[Key]) -> None:
    compact = norm_iban(found)
    out.add(("i", compact))
    # A spaced IBAN followed by a 4-character word is matched too long; the valid prefixes
    # (check digits) are the IBAN that was meant.
    for end in range(len(compact) - 1, 14, -1):
        if iban_checksum_ok(compact[:end]):
            out.add(("i", compact[:end]))


def candidates(value: Any, out: set[Key]) -> None:
    """Add the candidate keys of every string and number inside `value` to `out`."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            _add_candidates(v, out)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out.update(number_keys(v))


def trusted_candidates(values: Iterable[str]) -> frozenset[Key]:
    """The candidate keys of several trusted strings (e.g. the context's trusted values)."""
    out: set[Key] = set()
    for v in values:
        _add_candidates(v, out)
    return frozenset(out)


def _has_content(value: Any) -> bool:
    return value is not None and value != {} and value != [] and value != ""


def _envelope(output: Any) -> Any:
    """The output with a JSON text inside a content envelope parsed, so per-field paths
    reach the tool's own value (a text that is not JSON stays text)."""
    if not isinstance(output, dict):
        return output
    changed: dict[str, Any] | None = None
    for key in _ENVELOPE_KEYS:
        inner = output.get(key)
        if isinstance(inner, str) and inner.lstrip()[:1] in ("{", "["):
            try:
                parsed = json.loads(inner)
            except ValueError:
                continue
            if changed is None:
                changed = dict(output)
            changed[key] = parsed
    return output if changed is None else changed


def leveled(output: Any, default: Trust, fields: dict[str, Trust]) -> Iterator[tuple[Any, Trust]]:
    """The parts of `output` with the level each carries: the most specific path of `fields`
    (relative to the output, or to its content envelope) that reaches a part decides its
    level (equally specific paths: the lowest), anything no path reaches takes `default`.
    Walked once; the cost is the size of the output times the number of paths."""
    if not fields:
        yield output, default
        return
    levels: dict[OutputPath, Trust] = {}
    for text, level in fields.items():
        steps = parse_output_path(text)
        levels[steps] = min(level, levels.get(steps, level))
    starts = [(steps, 0) for steps in levels]
    root = _envelope(output)
    # Each entry: a part, the level it inherits, and the paths still matching on the way down.
    stack: list[tuple[Any, Trust, list[tuple[OutputPath, int]]]] = [(root, default, starts)]
    while stack:
        value, level, states = stack.pop()
        done = [levels[steps] for steps, pos in states if pos == len(steps)]
        if done:
            level = min(done)  # a path ending here is more specific than any above it
        if isinstance(value, dict):
            items: Iterable[tuple[str | int, Any]] = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        else:
            yield value, level
            continue
        at_envelope = value is root and isinstance(value, dict)
        for key, child in items:
            nxt = [
                (steps, pos + 1)
                for steps, pos in states
                if pos < len(steps) and _step_matches(steps[pos], key)
            ]
            if at_envelope and key in _ENVELOPE_KEYS:
                nxt += starts  # the tool's own value inside the envelope
            stack.append((child, level, nxt))


def _step_matches(step: Any, key: str | int) -> bool:
    if step is ALL:
        return True
    return step == key and isinstance(step, int) == isinstance(key, int)


def field_levels(data: Any) -> dict[str, Trust]:
    """``properties.data.field_trust`` as levels; entries that are not a string path are
    ignored, and a path that cannot be parsed counts as none (its part keeps the default)."""
    raw = data.get("field_trust") if isinstance(data, dict) else None
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Trust] = {}
    for path, level in raw.items():
        try:
            parse_output_path(path)
        except ValueError:
            continue
        out[path] = trust_level(level)
    return out


class ProvenanceIndex:
    """Normalised candidate values from recorded content, each with the highest trust level
    it was seen at (and the seq of that step), plus `floor`: the lowest level of all content
    recorded so far, which is what a model may have read.

    Levels of content (recorded `ok` steps only; task boundaries and approvals are not
    content):

    - a received message (step.message GET), input and output: ``user`` for
      ``properties.message.role`` user; any other role at its ``properties.data.trust``
      (missing: ``external``), an assistant's at most ``internal`` and at most `floor` (it is
      model output, never user content);
    - a model call's output (step.model): at most ``internal`` and at most `floor`, or the
      step's own ``properties.data.trust`` when that is lower;
    - any other step's output: ``properties.data.trust`` (unknown or missing: ``external``),
      with ``properties.data.field_trust`` giving parts of it their own level.

    Only content at ``internal`` or above is indexed: nothing lower can make a value pass.
    """

    __slots__ = ("floor", "levels")

    KEY = index_key("charter.provenance", 2, MAX_INDEXED_CHARS, MAX_WHOLE, MAX_NGRAM)

    def __init__(self) -> None:
        self.levels: dict[Key, tuple[Trust, int]] = {}
        self.floor = Trust.USER

    def add(self, step: Behavior) -> None:
        if step.outcome is not Outcome.OK or step.kind in _NOT_CONTENT:
            return
        for value, level in self._parts(step):
            if not _has_content(value):
                continue
            if level < self.floor:
                self.floor = level
            if level >= MIN_INDEXED:
                self._index(value, level, step.seq or 0)

    def _parts(self, step: Behavior) -> Iterator[tuple[Any, Trust]]:
        props = step.properties
        data = _dict(props.get("data"))
        if step.kind is ActionKind.STEP_MESSAGE and step.verb is Verb.GET:
            role = _dict(props.get("message")).get("role")
            if role == "user":
                yield step.input, Trust.USER
                yield step.output, Trust.USER
                return
            if role == "assistant":
                # An assistant's message is model output, never user content.
                level = min(trust_level(data.get("trust")), self.floor, Trust.INTERNAL)
                yield step.input, level
                yield step.output, level
                return
            # Any other message received: its input at the level it was marked with (none:
            # external), its output like any tool's.
            yield step.input, trust_level(data.get("trust"))
        if step.kind is ActionKind.STEP_MODEL:
            level = min(self.floor, Trust.INTERNAL)
            if "trust" in data:
                level = min(level, trust_level(data.get("trust")))
            yield step.output, level
            return
        yield from leveled(step.output, trust_level(data.get("trust")), field_levels(data))

    def _index(self, value: Any, level: Trust, seq: int) -> None:
        found: set[Key] = set()
        candidates(value, found)
        levels = self.levels
        for key in found:
            had = levels.get(key)
            if had is None or had[0] < level:
                levels[key] = (level, seq)

    def export_state(self) -> Any:
        return [
            int(self.floor),
            [[ns, value, int(level), seq] for (ns, value), (level, seq) in self.levels.items()],
        ]

    def load_state(self, state: Any) -> None:
        floor, rows = _list(state)
        levels: dict[Key, tuple[Trust, int]] = {}
        for row in _list(rows):
            ns, value, level, seq = _list(row)
            levels[(_str(ns), _str(value))] = (Trust(_int(level)), _int(seq))
        self.floor = Trust(_int(floor))
        self.levels = levels

    def level_of(self, keys: Iterable[Key]) -> tuple[Trust, int] | None:
        """The highest (level, seq) any of `keys` was seen at; None when never indexed."""
        best: tuple[Trust, int] | None = None
        for key in keys:
            had = self.levels.get(key)
            if had is not None and (best is None or had[0] > best[0]):
                best = had
        return best


_NOT_CONTENT = TASK_BOUNDARY_KINDS | {ActionKind.STEP_GATE}


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
