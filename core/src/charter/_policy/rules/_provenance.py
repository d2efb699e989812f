"""The provenance index and the `value_provenance` check, loaded when first used.

`ProvenanceIndex` keeps the normalised candidate values of recorded content, each at the
highest trust level it was seen at; `check` (the body of the `value_provenance` rule) and
`value_trust` look values up in it. The rule itself (its description, schema and prepared
params) is registered by `charter._policy.rules.history`, which still exports `value_trust`.
This was the largest part of history and its indexes, and imports `charter._policy.extract`:
a policy set that names the rule but judges no step it matches (the Claude Code hook's
example set asks it of WebFetch only, and the hook loads the history rules for every tool
call) never loads it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator

from charter._model.behavior import TASK_BOUNDARY_KINDS, ActionKind, Behavior, Outcome, Verb
from charter._model.trust import ALL, OutputPath, Trust, parse_output_path, trust_level
from charter._policy.extract import (
    MAX_SCAN,
    extract,
    iban_checksum_ok,
    json_number_key,
    nfkc,
    norm_email,
    norm_host,
    norm_iban,
    norm_phone,
    norm_url,
    number_key,
    scan,
)
from charter._policy.regex import compile_re2, re2_text
from charter._policy.registry import Violation
from charter._policy.rules._indexes import _dict, _int, _list, _str, index_key

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from charter._model.context import RuleContext

__all__ = [
    "ProvenanceIndex",
    "candidates",
    "check",
    "field_levels",
    "leveled",
    "number_keys",
    "provenance_keys",
    "trusted_candidates",
    "value_trust",
]

Verdict = bool | Violation


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


def norm_text(s: str) -> str:
    """NFKC, whitespace runs collapsed, stripped, case-folded: how text values are compared."""
    return " ".join(nfkc(s).split()).casefold()


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
        m = _rx(_ANGLE_EMAIL).fullmatch(re2_text(nfkc(value)))
        if m is not None:
            return (("e", norm_email(m.group(1))), ("t", norm_text(m.group(1))))
    if mode in ("auto", "email") and "@" in value:
        if _rx(_EMAIL_VALUE).fullmatch(re2_text(nfkc(value.strip()))) is not None:
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
    raw = re2_text(nfkc(text[:MAX_INDEXED_CHARS]))
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
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
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


# -- value_provenance --------------------------------------------------------------------------

_KIND_KEYS = {"urls": "u", "hosts": "h", "emails": "e", "ibans": "i", "phones": "p"}
_KIND_NAMES = {
    "urls": "link",
    "hosts": "host",
    "emails": "address",
    "ibans": "IBAN",
    "phones": "phone number",
}


@functools.lru_cache(maxsize=64)
def _context_candidates(values: tuple[str, ...]) -> frozenset[tuple[str, str]]:
    return trusted_candidates(values)


def _values(found: list[Any]) -> Iterator[str | int | float]:
    """Strings and numbers at a field, lists and objects searched; booleans are not values."""
    for v in found:
        if isinstance(v, str):
            if v.strip():
                yield v
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield v
        elif isinstance(v, list):
            yield from _values(v)
        elif isinstance(v, dict):
            yield from _values(list(v.values()))


def _keys(value: str | int | float, mode: str) -> tuple[tuple[str, str], ...]:
    if isinstance(value, str):
        return provenance_keys(value, mode)
    return number_keys(value)


def value_trust(ctx: RuleContext, value: Any, normalise: str = "auto") -> Trust:
    """The highest trust level `value` (a string or a number) was seen at in the task so far:
    recorded content as `value_provenance` reads it, and the context's trusted values
    (``operator``); ``external`` when it was seen in no content at ``internal`` or above.
    `normalise` is one of value_provenance's modes. Pure: reads the task's index only."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return Trust.EXTERNAL
    keys = _keys(value, normalise)
    index = ctx.history.index(ProvenanceIndex.KEY, ProvenanceIndex)
    found = index.level_of(keys)
    level = found[0] if found is not None else Trust.EXTERNAL
    trusted_ctx = _context_candidates(ctx.context.trusted_values)
    if level < Trust.OPERATOR and any(k in trusted_ctx for k in keys):
        level = Trust.OPERATOR
    return level


class _Lookup:
    """The task's provenance index and the context's trusted values, fetched on first use."""

    __slots__ = (
        "ctx",
        "index",
        "trusted",
    )

    def __init__(self, ctx: RuleContext) -> None:
        self.ctx = ctx
        self.index: ProvenanceIndex | None = None
        self.trusted: frozenset[tuple[str, str]] = frozenset()

    def check(self, keys: tuple[tuple[str, str], ...], needs: Trust) -> str | None:
        """None when one of `keys` was seen at `needs` or above, else why not."""
        if self.index is None:
            self.index = self.ctx.history.index(ProvenanceIndex.KEY, ProvenanceIndex)
            self.trusted = _context_candidates(self.ctx.context.trusted_values)
        found = self.index.level_of(keys)
        if found is not None and found[0] >= needs:
            return None
        if needs <= Trust.OPERATOR and any(k in self.trusted for k in keys):
            return None
        wanted = "trusted content" if needs is Trust.INTERNAL else f"{needs.word} content"
        base = f"did not appear in {wanted} earlier in the task ({_SOURCES[needs]})"
        if found is not None:
            return f"{base}; it came only from {found[0].word} content (seq {found[1]})"
        return base


_SOURCES = {
    Trust.USER: "the user's messages",
    Trust.OPERATOR: "the user's messages, trusted values",
    Trust.INTERNAL: "user messages, trusted values, outputs marked trusted or internal",
}


def check(view: Behavior, p: Any, ctx: RuleContext) -> Verdict:
    """`value_provenance`'s check of `p`, its prepared params (`_Provenance` in
    `charter._policy.rules.history`, not imported: history imports this module)."""
    lookup = _Lookup(ctx)
    any_value = False
    for f in p.fields:
        for value in _values(f.path.resolve(view)):
            any_value = True
            if f.extract:
                why = _check_text(value, f, lookup)
                if why is not None:
                    return Violation(why)
                continue
            keys = _keys(value, f.mode)
            why = lookup.check(keys, f.needs)
            if why is not None:
                shown = keys[0][1] if f.mode == "host" and keys else value
                what = "host " if f.mode == "host" else ""
                return Violation(f"{f.path.text} {what}{shown!r:.80} {why}")
    if not any_value and not p.comply_if_missing:
        return Violation(
            "none of " + ", ".join(f.path.text for f in p.fields) + " has a value to check"
        )
    return True


def _check_text(value: str | int | float, f: Any, lookup: _Lookup) -> str | None:
    if not isinstance(value, str):
        return None  # a number holds no link, address or account
    if len(value) > MAX_SCAN:
        return (
            f"{f.path.text} is {len(value)} characters long, more than the {MAX_SCAN} that "
            "can be searched for links and addresses"
        )
    for kind, found in extract(value, f.extract):
        keys: tuple[tuple[str, str], ...] = ((_KIND_KEYS[kind], found),)
        if kind == "emails":
            keys += (("t", found),)
        why = lookup.check(keys, f.needs)
        if why is not None:
            return f"{f.path.text} holds the {_KIND_NAMES[kind]} {found!r:.80}, which {why}"
    return None
