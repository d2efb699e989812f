"""Canonical bytes and hashing of audit records, and how a record joins its chain.

A record's `hash` is the lowercase hex SHA-256 of the RFC 8785 (JCS) canonical JSON of the
whole record except the `hash` key itself, so `seq` and `prev_hash` are covered and the
records of one (agent_id, task_id) form a chain anyone can re-check with any JCS library.
The encoding itself is `charter._model.ijson.canonical_json` (one for records, approval
digests and everything else that is hashed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from charter._model import fastjson, stdjson
from charter._model.behavior import CLOSING_KINDS
from charter._model.frozen import Frozen
from charter._model.ijson import MAX_SAFE_INT, canonical_json, checked_copy
from charter._model.sha256 import sha256_hex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "CHAIN_FIELDS",
    "CLOSING_KINDS",
    "ChainHead",
    "PreparedEntry",
    "SealedEntry",
    "canonical_bytes",
    "canonical_json",
    "check_seq",
    "decode_ijson",
    "decode_json",
    "entry_hash",
    "is_closing",
    "prepare_entry",
    "seal",
    "seal_after",
]

CHAIN_FIELDS = ("seq", "prev_hash", "hash")


class ChainHead(Frozen):
    """The committed end of one chain: its last seq (0 when empty) and that record's hash."""

    __slots__ = ("hash", "seq")
    seq: int
    hash: str | None

    def __init__(
        self,
        seq: int = 0,
        hash: str | None = None,
    ) -> None:
        put = object.__setattr__
        put(self, "seq", seq)
        put(self, "hash", hash)


def _number(text: str) -> int | float:
    value = int(text)
    # JSON numbers are IEEE doubles: JCS writes 2e20 as 200000000000000000000, which must
    # come back as that double, not as an integer outside the I-JSON range.
    return value if -MAX_SAFE_INT <= value <= MAX_SAFE_INT else float(value)


# A JSON integer beyond 2**53-1 has 16 digits or more (a 15-digit one is at most
# 999,999,999,999,999 < 2**53), and as a token it follows the start of the text, ":", "," or
# "[" (whitespace between), with an optional "-". In the text translated by `_NUMBERS`
# (digits to "0"; those three, whitespace and the start to ":"; "-" kept; everything else to
# "x") it therefore shows as ":" or ":-" then sixteen "0". A string can only add matches,
# which read the text the slower way.
_NUMBERS = bytes(
    48 if 48 <= b <= 57 else 58 if b in b":,[ \t\n\r" else 45 if b == 45 else 120
    for b in range(256)
)
_LONG_INT = (b":" + b"0" * 16, b":-" + b"0" * 16)


def decode_json(data: str | bytes) -> Any:
    """Parse stored JSON so that re-canonicalising it gives back the stored bytes.

    Integer literals beyond 2**53-1 are read as floats (what they denote in I-JSON). Raises
    ValueError on invalid JSON.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    # orjson gives the same values as the standard library for every text it accepts and
    # in which no integer needs `_number` (see `_NUMBERS`); it refuses NaN, Infinity, a
    # number that overflows to infinity and a lone surrogate escape, which the standard
    # library reads as before (tests/audit/test_chain.py compares the two).
    shape = b":" + raw.translate(_NUMBERS)
    if _LONG_INT[0] not in shape and _LONG_INT[1] not in shape:
        try:
            return fastjson.loads(raw)
        except ValueError:
            pass
    return stdjson.loads(data, parse_int=_number)


def decode_ijson(data: str | bytes) -> Any:
    """`decode_json`, refusing (ValueError) a text whose value is not I-JSON (NaN, Infinity):
    what it returns can be adopted without another walk (`Behavior._adopt`)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    shape = b":" + raw.translate(_NUMBERS)
    if _LONG_INT[0] not in shape and _LONG_INT[1] not in shape:
        try:
            # orjson reads only I-JSON: object keys are text, no float is NaN or infinite,
            # and without a 16-digit integer no integer is beyond 2**53-1.
            return fastjson.loads(raw)
        except ValueError:
            pass
    return checked_copy(stdjson.loads(data, parse_int=_number), "record")


def canonical_bytes(entry: Mapping[str, Any]) -> bytes:
    """RFC 8785 canonical JSON of `entry` without its "hash" key: the bytes a hash covers.

    Raises ValueError when the entry is not I-JSON.
    """
    return canonical_json({k: v for k, v in entry.items() if k != "hash"})


def entry_hash(entry: Mapping[str, Any]) -> str:
    """Lowercase hex SHA-256 of `canonical_bytes(entry)`. Raises ValueError when not I-JSON."""
    return sha256_hex(canonical_bytes(entry))


def is_closing(entry: Mapping[str, Any]) -> bool:
    """True when `entry` is its chain's end marker.

    That is a record of kind task.end / task.error / task.idle, or any record whose
    meta["charter.chain"]["final"] is true (the caller writes that on closing records).
    """
    if entry.get("kind") in CLOSING_KINDS:
        return True
    meta = entry.get("meta")
    if type(meta) is dict or isinstance(meta, Mapping):
        marker = meta.get("charter.chain")
        if marker is not None and isinstance(marker, Mapping) and marker.get("final") is True:
            return True
    return False


class PreparedEntry:
    """An entry checked and canonicalised up to its chain fields (which only the store knows).

    The canonical object is cut where the values of "hash", "prev_hash" and "seq" go
    (`groups`: the bytes before "hash", between it and "prev_hash", between that and "seq",
    and after it, with their commas and braces), so that sealing inside a store's write lock
    is two byte formats and one SHA-256. A plain slotted class (one is built per record
    written); treat it as read-only.
    """

    __slots__ = ("agent_id", "closing", "entry", "groups", "seq", "task_id")

    def __init__(
        self,
        entry: dict[str, Any],
        agent_id: str,
        task_id: str,
        closing: bool,
        groups: tuple[bytes, bytes, bytes, bytes],
        seq: int | None = None,
    ) -> None:
        self.entry = entry
        self.agent_id = agent_id
        self.task_id = task_id
        self.closing = closing
        self.groups = groups
        self.seq = seq


class SealedEntry:
    """A chained record: the dict returned to the caller and its canonical line/body bytes.

    A plain slotted class (one is built per record written); treat it as read-only.
    """

    __slots__ = ("body", "entry", "hash", "seq")

    def __init__(self, entry: dict[str, Any], body: bytes, hash: str, seq: int) -> None:
        self.entry = entry
        self.body = body
        self.hash = hash
        self.seq = seq


def _groups_apart(record: dict[str, Any]) -> tuple[bytes, bytes, bytes, bytes]:
    """The canonical members of `record` in four runs cut where the chain keys go (see
    `PreparedEntry`)."""
    parts: tuple[dict[str, Any], ...] = ({}, {}, {}, {})
    for key, value in record.items():
        # Comparing with ASCII constants gives RFC 8785 (UTF-16) order for any key.
        if key < "hash":
            parts[0][key] = value
        elif key < "prev_hash":
            parts[1][key] = value
        else:
            parts[2 if key < "seq" else 3][key] = value
    # Canonical objects minus their braces, so the runs join into one object.
    low, mid, high, top = (canonical_json(part)[1:-1] for part in parts)
    return (
        b"{" + low + b"," if low else b"{",
        mid + b"," if mid else b"",
        b"," + high + b"," if high else b",",
        b"," + top + b"}" if top else b"}",
    )


# Stand-ins for the chain fields while a record is encoded once: random per process, never
# written anywhere, so no recorded value can hold them (each must occur exactly once, which
# `_groups` checks before trusting the split).
_NONCE = os.urandom(16).hex()  # secrets.token_hex(16), without importing random
_STAND_INS = {"hash": _NONCE + "h", "prev_hash": _NONCE + "p", "seq": _NONCE + "s"}
_NONCE_BYTES = _NONCE.encode("ascii")
_AT_HASH = b'"hash":"' + _NONCE_BYTES + b'h"'
_AT_PREV = b'"prev_hash":"' + _NONCE_BYTES + b'p"'
_AT_SEQ = b'"seq":"' + _NONCE_BYTES + b's"'


_STR_ONLY = frozenset((str,))


def _groups(record: dict[str, Any], checked: bool = False) -> tuple[bytes, bytes, bytes, bytes]:
    """`_groups_apart`, from one canonical encoding of the record with the chain keys held
    by stand-ins: the object is cut at them (members keep their sorted order).

    `checked`: the caller's own walk found every value to be one orjson writes exactly as
    RFC 8785 does (see `prepare_entry`), so `canonical_json`'s walk is skipped."""
    whole = None
    if checked:
        try:
            whole = fastjson.dumps_sorted(record | _STAND_INS)
        except TypeError:  # nesting or text orjson refuses: the checked path decides
            whole = None
    if whole is None:
        whole = canonical_json(record | _STAND_INS)
    if whole.count(_NONCE_BYTES) != 3:
        return _groups_apart(record)
    # {low,"hash":H,mid,"prev_hash":P,high,"seq":S,top}: each stand-in is cut out with the
    # comma after "hash" (which the sealed body writes itself).
    at_hash = whole.index(_AT_HASH)
    at_prev = whole.index(_AT_PREV, at_hash)
    at_seq = whole.index(_AT_SEQ, at_prev)
    return (
        whole[:at_hash],
        whole[at_hash + len(_AT_HASH) + 1 : at_prev],
        whole[at_prev + len(_AT_PREV) : at_seq],
        whole[at_seq + len(_AT_SEQ) :],
    )


def prepare_entry(entry: Mapping[str, Any], checked: bool = False) -> PreparedEntry:
    """Check an unchained entry and canonicalise everything but seq/prev_hash/hash.

    An entry may carry the `seq` its writer assigned when the step was recorded (an int from
    1); the store then keeps it, so records the writer dropped leave a gap. Raises ValueError
    (one sentence) when the entry is not a mapping, already carries prev_hash or hash, has a
    seq that is not an int from 1, lacks a str agent_id / non-empty str task_id / str kind /
    str timestamp, or is not I-JSON.

    `checked` is a promise by Charter's own writer that a walk it just made over this very
    dict found only values ``charter._model.ijson`` would send to orjson (exact JSON types,
    ASCII keys, integers within 2**53-1, floats without exponent or trailing ".0"); it skips
    the encoder's repeat of that walk and nothing else. Never pass it for a value that was
    not so walked.
    """
    if type(entry) is not dict and not isinstance(entry, Mapping):
        raise ValueError(f"an audit entry must be a mapping, not {type(entry).__name__}")
    # Written out rather than looped over: this runs for every record stored.
    if "prev_hash" in entry or "hash" in entry:
        name = "prev_hash" if "prev_hash" in entry else "hash"
        raise ValueError(
            f"entry already carries {name!r}; the store assigns prev_hash and hash "
            "(was an already chained record appended again?)"
        )
    record = dict(entry)
    seq = record.pop("seq", None)
    if "seq" in entry and (type(seq) is not int or not 1 <= seq <= MAX_SAFE_INT):
        raise ValueError(f"entry seq must be an int from 1, not {seq!r}")
    agent_id = record.get("agent_id")
    task_id = record.get("task_id")
    if not isinstance(agent_id, str):
        raise ValueError("entry needs a str 'agent_id' (it may be empty)")
    if not isinstance(task_id, str) or not task_id:
        raise ValueError("entry needs a non-empty str 'task_id'")
    if not isinstance(record.get("kind"), str):
        raise ValueError("entry needs a str 'kind'")
    if not isinstance(record.get("timestamp"), str):
        raise ValueError("entry needs a str 'timestamp'")
    if not _STR_ONLY.issuperset(map(type, record)):
        for key in record:
            if not isinstance(key, str):
                raise ValueError(f"entry key {key!r} is not a str")
    return PreparedEntry(
        record, agent_id, task_id, is_closing(record), _groups(record, checked), seq
    )


def check_seq(prepared: PreparedEntry, head: ChainHead) -> str | None:
    """Why `prepared` cannot follow `head` (its own seq is not above the head), else None."""
    if prepared.seq is None or prepared.seq > head.seq:
        return None
    return (
        f"the entry's seq {prepared.seq} is not above the chain's head seq {head.seq} (seq is "
        "assigned once, when a step is recorded, and never renumbered; one writer at a time "
        "per chain)"
    )


def seal(prepared: PreparedEntry, head: ChainHead) -> SealedEntry:
    """Chain a prepared entry onto `head`: seq = the entry's own seq (the caller checked it
    with `check_seq`), else head.seq + 1; prev_hash = head.hash.

    Returns the chained record and its canonical bytes (the stored line/body). Never raises:
    everything that can be refused was refused by prepare_entry.
    """
    return seal_after(prepared, head.seq, head.hash)


def seal_after(prepared: PreparedEntry, head_seq: int, head_hash: str | None) -> SealedEntry:
    """`seal` onto the head (`head_seq`, `head_hash`), for a store that keeps its heads as
    plain values while it seals a batch (one `ChainHead` per record costs as much as the
    formatting)."""
    seq = prepared.seq if prepared.seq is not None else head_seq + 1
    before, mid, high, top = prepared.groups
    prev = b"null" if head_hash is None else b'"%s"' % head_hash.encode("ascii")
    after = b'%s"prev_hash":%s%s"seq":%d%s' % (mid, prev, high, seq, top)
    digest = sha256_hex(before + after)
    body = b'%s"hash":"%s",%s' % (before, digest.encode("ascii"), after)
    record = prepared.entry.copy()
    record["seq"] = seq
    record["prev_hash"] = head_hash
    record["hash"] = digest
    return SealedEntry(record, body, digest, seq)
