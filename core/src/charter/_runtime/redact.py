"""Redaction of wire records: nothing reaches a store or an exporter before passing here.

Two steps, in this order:

1. Secret shapes (``charter._policy.secrets``) are masked in every string: values and object keys of
   input, output, properties and meta (including the verdict in ``meta["charter.eval"]``),
   and the step name. A verdict detail that quotes a value cut short (so the secret lost its
   shape) is caught too: the beginnings of the secrets found in the record are masked in meta.
   A value under a key that names a secret (``password``, ``api_key``, ``X-Api-Key``,
   ``client_secret``, ...), the value beside a ``{"name": "password", "value": ...}`` pair
   and the argument after a ``--password`` flag in an argument list are masked whole,
   whatever they look like. Identifiers (agent_id, action_id) follow a narrow grammar that
   keys the hash chain and are kept as they are; a task_id holding a secret is stored as
   ``x-`` plus the first 32 hex digits of its SHA-256 (the form `charter.task_id_from` gives
   ids it cannot keep), the same for every record of the task.
2. The payload mode shapes `input` and `output`: ``full`` keeps them, ``metadata_only`` keeps
   each top-level key with its JSON type and size (``{"command": {"type": "string", "size":
   12}}``), ``sha256`` keeps each top-level key with the SHA-256 of its value's canonical JSON
   (``charter.canonical_digest``), so a holder of the original payload can prove it. Masking
   comes first so that a digest never encodes a (possibly guessable) secret; a value without
   secrets digests exactly as the original. The output of a ``step.gate`` record is Charter's
   own approval verdict, not agent data, and is always kept.

Strings no store can encode (a lone surrogate) are escaped, never dropped: the surrogate is
written as the six characters backslash, ``u`` and its four hex digits.

Redaction never raises: a field that cannot be redacted is replaced by a marker naming the
error, and the failure is counted and reported as an internal error.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from charter._model.ijson import canonical_digest
from charter._model.sha256 import sha256_hex
from charter._policy.secrets import (
    contains_secret,
    contains_secret_in_any,
    find_secrets,
    mask_secrets,
    names_secret,
)
from charter._runtime.internal import report_internal_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["PAYLOAD_MODES", "Redactor"]

PAYLOAD_MODES = ("full", "metadata_only", "sha256")
_MASKED_FIELDS = ("input", "output", "properties", "meta")
# Shorter cut-off beginnings of a secret are too common as ordinary text to mask.
_MIN_FRAGMENT = 8
_HIDDEN = "[REDACTED:secret_field]"
# {"name": "password", "value": "..."}: the field that names and the field that holds.
_NAMING = ("name", "key", "header", "field", "param", "parameter")
_HOLDING = ("value", "val", "data", "content", "secret")


def _flag(s: str) -> str | None:
    """The name of a command-line flag (``--password`` -> ``password``), or None."""
    if s.startswith("-") and len(s) > 2:
        return s.lstrip("-").split("=", 1)[0]
    return None


def _holder(d: dict[str, Any]) -> str | None:
    """The key of the field holding a secret that a sibling field names, if any."""
    for k in _NAMING:
        named = d.get(k)
        if type(named) is str and names_secret(named):
            return next((h for h in _HOLDING if h in d), None)
    return None


def _lone_surrogate(c: str) -> bool:
    return "\ud800" <= c <= "\udfff"


def _escape_text(s: str) -> str:
    return "".join(f"\\u{ord(c):04x}" if _lone_surrogate(c) else c for c in s)


def _escaped(value: Any) -> Any:
    """`value` with every lone surrogate in its strings (keys too) written out as text."""
    t = type(value)
    if t is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return _escape_text(value)
        return value
    if t is dict:
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if t is list:
        return [_escaped(v) for v in value]
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _metadata(value: Any) -> dict[str, Any]:
    kind = _json_type(value)
    if kind in ("string", "array", "object"):
        return {"type": kind, "size": len(value)}
    return {"type": kind}


_NAMING_KEYS = frozenset(_NAMING)
_HOLDING_KEYS = frozenset(_HOLDING)
# Keys seen to name no secret: a dict whose keys are all here needs no per-key check (one
# C-level subset test), and only a dict that also has a naming and a holding key has its
# pair looked at (`_holder`). Bounded like the cache of `names_secret`; a key past the bound
# is simply checked each time.
_PLAIN_KEYS: set[str] = set()
_PLAIN_MAX = 4096
# Texts a scan of every secret shape found clean (short, ASCII, no "%"). Most texts of a record
# repeat on every record (keys, framework and model names, verdict reasons), and the shapes
# are fixed for the process, so a text found clean once is clean again: the walk leaves them
# out of the texts it gathers for the scan. Only a scan that found nothing adds to it; cleared
# when full.
_CLEAN: set[str] = set()
_CLEAN_MAX = 8192
_CLEAN_LEN = 256
_MAX_SAFE_INT = 2**53 - 1


def _dict_names(d: dict[Any, Any]) -> bool:
    """Whether a key of `d`, or a name/value pair in it (`_holder`), names a secret; keys
    found plain are remembered in `_PLAIN_KEYS`."""
    naming = holding = False
    for k, x in d.items():
        if names_secret(k):
            return True
        if k in _NAMING_KEYS:
            naming = naming or (type(x) is str and names_secret(x))
        elif k in _HOLDING_KEYS:
            holding = True
        if type(k) is str and len(k) <= 64 and len(_PLAIN_KEYS) < _PLAIN_MAX:
            _PLAIN_KEYS.add(k)
    return naming and holding


def _scan(value: Any, out: list[str]) -> tuple[bool, bool]:
    """`_scan_all` of the one value `value`."""
    return _scan_all([value], out)


def _scan_all(values: list[Any], out: list[str]) -> tuple[bool, bool]:
    """Add every string in `values` (object keys too) but those remembered clean (`_CLEAN`)
    to `out`, and say whether any key, name/value pair (`_holder`) or flag in an argument
    list names a secret, and whether every value that is not a string, object or array is
    one RFC 8785 writes as the fast encoders do (`charter._model.ijson._safe_values`; object
    keys are left to the caller, which sees them in `out`: a key left out is ASCII).

    One walk for all three: this runs for every record written, and separate walks cost more
    than the secret scan itself. The order of `out` is not document order; the strings are
    joined with a separator no secret shape crosses, so it does not matter.
    """
    named = False
    safe = True
    stack = values
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict:
            if not _CLEAN.issuperset(v):  # nearly always: keys repeat
                out.extend(v.keys() - _CLEAN)
            if not named:
                if not _PLAIN_KEYS.issuperset(v):
                    named = _dict_names(v)
                elif not _NAMING_KEYS.isdisjoint(v) and not _HOLDING_KEYS.isdisjoint(v):
                    named = _holder(v) is not None
            items: Any = v.values()
        elif t is list:
            items = v
            if not named:
                for x in v:
                    if type(x) is str and x.startswith("-"):
                        name = _flag(x)
                        if name is not None and names_secret(name):
                            named = True
                            break
        elif t is str:
            if v not in _CLEAN:
                out.append(v)
            continue
        else:
            items = (v,)
        for x in items:
            tx = type(x)
            if tx is str:
                if x not in _CLEAN:
                    out.append(x)
            elif tx is dict or tx is list:
                stack.append(x)
            elif tx is int:
                if not -_MAX_SAFE_INT <= x <= _MAX_SAFE_INT:
                    safe = False
            elif tx is float:
                text = repr(x)
                # "n" catches nan and inf.
                if "e" in text or "n" in text or text.endswith(".0"):
                    safe = False
            elif x is not None and tx is not bool:
                safe = False
    return named, safe


# The fields of a wire record (`charter._runtime.wire.wire_form`): ASCII keys.
_TEXT_FIELDS = ("agent_id", "task_id", "action_id", "timestamp", "kind", "verb", "step_name")
_WIRE_KEYS = frozenset((*_TEXT_FIELDS, "seq", *_MASKED_FIELDS))
_TEXT_TYPES = frozenset((str, type(None), bool))


def _found_clean(texts: list[str]) -> None:
    """Remember `texts`, which a scan of every shape found clean, for `_scan_all` to skip."""
    if len(_CLEAN) >= _CLEAN_MAX:
        _CLEAN.clear()
    _CLEAN.update(t for t in texts if len(t) <= _CLEAN_LEN and "%" not in t and t.isascii())


def _plain_top(out: dict[str, Any]) -> bool:
    """Whether the top level of a record whose `_MASKED_FIELDS` `_scan_all` walked holds only
    wire fields and values the fast encoders write as RFC 8785 does (C-level set checks:
    a loop here would cost as much as the walk)."""
    if not _WIRE_KEYS.issuperset(out):
        return False
    seq = out.get("seq")
    if seq is not None and not (type(seq) is int and -_MAX_SAFE_INT <= seq <= _MAX_SAFE_INT):
        return False
    return _TEXT_TYPES.issuperset(map(type, map(out.get, _TEXT_FIELDS)))


def _utf8(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Scanned:
    """A record between the scan and the finish of `Redactor.redact_batch`."""

    __slots__ = ("checked", "found", "out", "task_id", "texts", "unreadable")

    def __init__(self, out: dict[str, Any]) -> None:
        self.out = out
        self.texts: list[str] = []
        self.task_id: Any = None
        self.checked = False
        # None: not known yet (the batch scan decides); True: mask field by field.
        self.found: bool | None = None
        self.unreadable = False


class _Masker:
    """Masks secrets and remembers the secret texts it removed (for fragment scrubbing)."""

    __slots__ = ("count", "found")

    def __init__(self) -> None:
        self.count = 0
        self.found: set[str] = set()

    def text(self, s: str) -> str:
        findings = find_secrets(s)
        if not findings:
            return s
        self.found.update(s[f.start : f.end] for f in findings)
        masked, n = mask_secrets(s)
        self.count += n
        return masked

    def hide(self, s: str) -> str:
        """`s` replaced whole: it sits where a secret is named (a key, a flag)."""
        if not s or s.startswith("[REDACTED:"):
            return s
        self.count += 1
        if len(s) >= _MIN_FRAGMENT:
            self.found.add(s)
        return _HIDDEN

    def value(self, value: Any, hidden: bool = False) -> Any:
        t = type(value)
        if t is str:
            return self.hide(value) if hidden else self.text(value)
        if t is dict:
            holder = None if hidden else _holder(value)
            out: dict[str, Any] = {}
            for k, v in value.items():
                key = self.text(k)
                while key in out:  # two keys masked to one marker must not overwrite each other
                    key += "'"
                out[key] = self.value(v, hidden or k == holder or names_secret(k))
            return out
        if t is list:
            items: list[Any] = []
            after_flag = False
            for v in value:
                if type(v) is str and not hidden:
                    name = _flag(v)
                    if name is not None and names_secret(name) and "=" in v:
                        flag, given = v.split("=", 1)
                        items.append(f"{flag}={self.hide(given)}")
                        after_flag = False
                        continue
                    items.append(self.hide(v) if after_flag else self.text(v))
                    after_flag = name is not None and names_secret(name)
                    continue
                items.append(self.value(v, hidden or after_flag))
                after_flag = False
            return items
        if hidden and (t is int or t is float):
            self.count += 1
            return _HIDDEN
        return value

    def scrub(self, value: Any) -> Any:
        """Mask cut-off beginnings of the secrets found, which no shape recognises any more.

        Verdict details quote the step's values cut to a length (``value 'ghp_abc…'``); a
        token cut short no longer has its shape, so it is matched against what was found.
        """
        t = type(value)
        if t is str:
            for secret in self.found:
                for k in range(len(secret), _MIN_FRAGMENT - 1, -1):
                    if secret[:k] in value:
                        value = value.replace(secret[:k], "[REDACTED:fragment]")
                        break
            return value
        if t is dict:
            return {k: self.scrub(v) for k, v in value.items()}
        if t is list:
            return [self.scrub(v) for v in value]
        return value


class Redactor:
    """Applies secret masking and a payload mode to wire records; thread-safe, never raises.

    `masked` counts secrets replaced so far and `errors` the fields replaced by a failure
    marker. Refuses (ValueError) an unknown payload mode at construction.
    """

    def __init__(self, payload_mode: str = "full") -> None:
        if payload_mode not in PAYLOAD_MODES:
            raise ValueError(
                f"payload_mode {payload_mode!r}: use {', '.join(PAYLOAD_MODES[:-1])} or "
                f"{PAYLOAD_MODES[-1]}"
            )
        self.payload_mode = payload_mode
        self._lock = threading.Lock()
        self.masked = 0
        self.errors = 0
        # Records stored otherwise than they were recorded (masked, escaped, renamed, shaped).
        self.altered = 0
        # The last task id judged and what is stored for it when it holds a secret (replaced
        # as one tuple, so threads sharing the redactor never see a mismatched pair).
        self._last_task: tuple[str | None, str | None] = (None, None)

    def redact(self, record: dict[str, Any]) -> dict[str, Any]:
        """A redacted copy of a wire record (the behavior fields; chain fields untouched).

        Only the redacted fields are copied; the rest is shared with `record`, which is never
        modified.
        """
        return self.redact_checked(record)[0]

    def redact_checked(self, record: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """`redact`, and whether the walk that looked for secrets also found the copy to be
        made only of values RFC 8785 writes as the fast encoders do (what
        ``charter._model.ijson`` checks before taking them): plain JSON types, ASCII keys,
        integers within 2**53-1, floats without exponent or trailing ".0". False says
        nothing (not checked, or not so); a store then checks for itself.
        """
        return self.redact_batch((record,))[0]

    def redact_batch(self, records: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], bool]]:
        """`redact_checked` of each record, in order, with the same results and counters.

        The writer redacts a batch at a time: the texts of all its records are scanned for
        secrets at once, and only when that scan finds something is each record asked alone.
        """
        scanned = [self._scanned(record) for record in records]
        pending = [s for s in scanned if s.found is None]
        if len(pending) == 1:
            pending[0].found = self._contains_secret(pending[0])  # the batch is the record
        elif pending:
            try:
                # Each distinct text once: a tool's output is recorded twice in a batch, as
                # the tool step's output and in the next model call's messages.
                texts = list(dict.fromkeys(t for s in pending for t in s.texts))
                batch_found = contains_secret_in_any(texts)
            except Exception:
                batch_found = True  # each record is asked alone, and reports its own failure
            for s in pending:
                s.found = batch_found and self._contains_secret(s)
        for s in pending:
            if s.found is False and not s.unreadable:
                _found_clean(s.texts)
        return [self._finished(s) for s in scanned]

    def _scanned(self, record: dict[str, Any]) -> _Scanned:
        """A copy of `record` with its task id judged, its strings gathered, and whether
        a key, pair or flag names a secret (then `found` is already True)."""
        s = _Scanned(dict(record))
        out = s.out
        step_name = out.get("step_name")
        if isinstance(step_name, str) and (type(step_name) is not str or step_name not in _CLEAN):
            s.texts.append(step_name)
        task_id = s.task_id = out.get("task_id")
        try:
            named, s.checked = _scan_all(list(map(out.get, _MASKED_FIELDS)), s.texts)
            if named:
                s.found = True
            if isinstance(task_id, str):
                # A task's records come in runs: its id is judged once per run.
                last, stored = self._last_task
                if type(task_id) is not str or task_id != last:
                    stored = None
                    if contains_secret(task_id):
                        digest = sha256_hex(task_id.encode("utf-8", "surrogatepass"))
                        stored = "x-" + digest[:32]
                    self._last_task = (task_id, stored)
                if stored is not None:
                    out["task_id"] = stored
        except Exception as exc:
            self._unreadable(s, exc)
        return s

    def _contains_secret(self, s: _Scanned) -> bool:
        try:
            return bool(s.texts) and contains_secret_in_any(s.texts)
        except Exception as exc:
            self._unreadable(s, exc)
            return True

    def _unreadable(self, s: _Scanned, exc: Exception) -> None:
        self._failed(exc)
        s.checked = False
        s.found = True  # cannot tell: mask field by field, which reports its own failures
        s.unreadable = True  # and escape field by field

    def _finished(self, s: _Scanned) -> tuple[dict[str, Any], bool]:
        out, found = s.out, bool(s.found)
        if found:
            self._mask(out)
        altered = found or self.payload_mode != "full" or out.get("task_id") != s.task_id
        # Masking and escaping build new values the walk did not see; every key the walk saw
        # is in `texts`, so ASCII texts mean ASCII keys.
        joined = "".join(s.texts)
        ascii_texts = not s.unreadable and joined.isascii()
        checked = s.checked and not found and ascii_texts and _plain_top(out)
        if not ascii_texts and (s.unreadable or not _utf8(joined)):
            altered = True
            for name in ("step_name", *_MASKED_FIELDS):
                if out.get(name) is not None:
                    out[name] = _escaped(out[name])
        if altered:
            with self._lock:
                self.altered += 1
        if self.payload_mode != "full":
            # The shapes are made of the payload's own (checked) keys, text and integers.
            gate = out.get("kind") == "step.gate"
            for name in ("input", "output"):
                value = out.get(name)
                if isinstance(value, dict) and not (gate and name == "output"):
                    out[name] = self._shaped(value)
        return out, checked

    def _mask(self, out: dict[str, Any]) -> None:
        masker = _Masker()
        step_name = out.get("step_name")
        if isinstance(step_name, str):
            try:
                out["step_name"] = masker.text(step_name) or "redacted"
            except Exception as exc:
                self._failed(exc)
                out["step_name"] = "redacted"
        for name in _MASKED_FIELDS:
            value = out.get(name)
            if value is None:
                continue
            try:
                out[name] = masker.value(value)
            except Exception as exc:
                self._failed(exc)
                out[name] = _marker(exc, value if name == "meta" else None)
        meta = out.get("meta")
        if masker.found and isinstance(meta, dict):
            try:
                out["meta"] = masker.scrub(meta)
            except Exception as exc:
                self._failed(exc)
                out["meta"] = _marker(exc, meta)
        with self._lock:
            self.masked += masker.count

    def _shaped(self, value: dict[str, Any]) -> dict[str, Any]:
        try:
            if self.payload_mode == "metadata_only":
                return {k: _metadata(v) for k, v in value.items()}
            return {k: {"sha256": canonical_digest(v)} for k, v in value.items()}
        except Exception as exc:
            self._failed(exc)
            return _marker(exc, None)

    def _failed(self, exc: Exception) -> None:
        with self._lock:
            self.errors += 1
        report_internal_error(exc, "redaction")


def _marker(exc: Exception, meta: Any) -> dict[str, Any]:
    marker: dict[str, Any] = {"charter.redaction_failed": type(exc).__name__}
    if isinstance(meta, dict):
        # The chain markers carry no payload and the store needs them to recognise the end.
        for key in ("charter.chain", "charter.outcome"):
            if key in meta:
                marker[key] = meta[key]
    return marker
