"""The I-JSON payload rule (RFC 7493), RFC 8785 canonical JSON and canonical digests.

Payloads are hashed, exported and replayed; a value that would change in a JSON round trip
(NaN, a 2**60 integer, a tuple, bytes) could not be audited faithfully, so it is refused at the
boundary with the path that holds it.

Everything Charter hashes (audit records, approval digests, redaction digests, policy pins) is
RFC 8785 (JCS), so any JCS library re-computes it. The `rfc8785` package is the reference. It
is pure Python and costs 150-200 us per 1 KB record on a slow CPU, which alone would cap a
store at about 5,000 records/s, so values for which faster encoders provably emit the same
bytes take their path (orjson, and the standard library's C encoder where orjson refuses, e.g.
beyond its 255 levels of nesting): every object key free of UTF-16 surrogate-range characters
(then code-point order equals RFC 8785's UTF-16 order), integers within 2**53-1, and floats
whose shortest repr has neither an exponent nor a trailing ".0" (exactly the digits rfc8785
itself derives from `str(float)`). String escaping is identical in all three, and property
tests compare them. Anything else goes through `rfc8785`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from charter._model import fastjson, stdjson
from charter._model.sha256 import sha256_hex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["MAX_SAFE_INT", "canonical_digest", "canonical_json", "checked_copy"]

MAX_SAFE_INT = 2**53 - 1


class _NotIJson(Exception):
    """Raised by `_copy` at the first value that is not I-JSON; `_named_copy` names it."""


def checked_copy(value: Any, path: str) -> Any:
    """Return a deep copy of `value` made only of I-JSON types.

    Raises ValueError naming the first offending path, e.g.
    ``input.items[2]: float NaN is not I-JSON``. The copy is defensive: later mutation of the
    caller's object cannot change what was judged or recorded.
    """
    try:
        return _copy(value)
    except _NotIJson:
        pass
    # Walked again, naming each path on the way, only to say where the problem is: building
    # every path's text as the copy descends costs more than the copy.
    return _named_copy(value, path)


def _copy(value: Any) -> Any:
    """`checked_copy` without paths: raises _NotIJson instead of naming the problem."""
    t = type(value)
    if t is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _NotIJson
            tv = type(v)
            # Leaves inline: most values in a payload are strings, numbers and flags.
            if (
                tv is str
                or tv is bool
                or v is None
                or (tv is int and -MAX_SAFE_INT <= v <= MAX_SAFE_INT)
            ):
                out[k] = v
            else:
                out[k] = _copy(v)
        return out
    if t is list:
        return [v if type(v) is str or type(v) is bool or v is None else _copy(v) for v in value]
    if t is str or value is None or t is bool:
        return value
    if t is int:
        if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            return value
        raise _NotIJson
    if t is float:
        if math.isfinite(value):
            return value
        raise _NotIJson
    raise _NotIJson


def _named_copy(value: Any, path: str) -> Any:
    """`checked_copy`, naming the path of the first value that is not I-JSON."""
    t = type(value)
    if t is str or value is None or t is bool:
        return value
    if t is int:
        if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            return value
        raise ValueError(
            f"{path}: integer {value} is not I-JSON (magnitude above 2**53-1); pass it as a string"
        )
    if t is float:
        if math.isfinite(value):
            return value
        raise ValueError(f"{path}: float {_float_name(value)} is not I-JSON; use null or a string")
    if t is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise ValueError(
                    f"{path}: key {k!r} ({type(k).__name__}) is not I-JSON; keys must be strings"
                )
            out[k] = _named_copy(v, f"{path}.{k}")
        return out
    if t is list:
        return [_named_copy(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise ValueError(
        f"{path}: {t.__name__} is not I-JSON; use dict, list, str, int, float, bool or None "
        "(charter.capture converts any value)"
    )


def _float_name(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _unreachable_default(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON (checked_copy refuses it first)")


def _make_encoder() -> Callable[[Any], str]:
    """The stdlib encoder with RFC 8785's separators, sorted keys and no NaN.

    The C encoder object is built once and reused (json.JSONEncoder.encode rebuilds it on
    every call, which costs as much as encoding a small record). No circular-reference
    markers are needed: values reach it only after `_safe_values` has walked them.
    """

    def fallback(value: Any) -> str:
        return stdjson.dumps(
            value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
        )

    try:
        import _json  # json's C accelerator, which json itself builds this encoder from
    except ImportError:
        return fallback
    try:
        encode = _json.make_encoder(
            None, _unreachable_default, _json.encode_basestring, None, ":", ",", True, False, False
        )

        def fast(value: Any) -> str:
            return "".join(encode(value, 0))

        if fast({"b": [1.5, "\n"], "a": None}) != '{"a":null,"b":[1.5,"\\n"]}':
            return fallback
    except Exception:
        return fallback
    return fast


_encode = _make_encoder()
_encode_str: Callable[[str], str] = stdjson.escape


def _safe_values(values: Iterable[Any]) -> bool:
    """True when the stdlib encoder writes every value exactly as RFC 8785 does.

    That needs plain JSON types only (exact types: subclasses take the rfc8785 path), keys
    free of characters from U+D800 up (below that, code-point order is UTF-16 order),
    integers within 2**53-1, and finite floats whose repr has no exponent and no trailing
    ".0". One loop per container with leaves checked inline: this runs for every record
    written or verified, and per-value calls would double its cost.
    """
    for value in values:
        kind = type(value)
        if kind is str:
            continue
        if kind is dict:
            try:
                keys = "".join(value)
            except TypeError:
                return False
            if not (keys.isascii() or max(keys) < "\ud800") or not _safe_values(value.values()):
                return False
        elif kind is float:
            text = repr(value)
            # "n" catches nan and inf.
            if "e" in text or "n" in text or text.endswith(".0"):
                return False
        elif kind is int:
            if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
                return False
        elif kind is list:
            if not _safe_values(value):
                return False
        elif value is not None and kind is not bool:
            return False
    return True


def _stdlib_json(value: Any) -> str:
    """The stdlib encoding of a value `_safe_values` accepted: exactly RFC 8785's."""
    return _encode_str(value) if type(value) is str else _encode(value)


def _fast_bytes(value: Any) -> bytes:
    """orjson's encoding of a value `_safe_values` accepted (exactly RFC 8785's, property
    tested), or the stdlib's where orjson refuses it (nesting, lone surrogates: those raise
    UnicodeEncodeError here)."""
    try:
        return fastjson.dumps_sorted(value)
    except TypeError:
        return _stdlib_json(value).encode("utf-8")


class _Refused(Exception):
    """`rfc8785` refused a value (its CanonicalizationError), with its reason."""


def _jcs(value: Any) -> bytes:
    """`rfc8785.dumps(value)`, its refusal raised as _Refused.

    Imported on first use: it imports `typing` and `enum`, which a short-lived process whose
    values all take the fast path never needs.
    """
    import rfc8785

    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        raise _Refused(str(exc)) from None


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 canonical JSON of an I-JSON value, as UTF-8 bytes.

    Raises ValueError when `value` is not I-JSON (non-str keys, NaN/infinite floats, integers
    beyond 2**53-1, lone surrogates, unsupported types, objects nested too deeply).
    """
    try:
        if _safe_values((value,)):
            return _fast_bytes(value)
        return _jcs(value)
    except RecursionError:
        raise ValueError("value is nested too deeply (or contains itself)") from None
    except UnicodeEncodeError:
        raise ValueError("value contains a string that is not valid Unicode text") from None
    except _Refused as exc:
        raise ValueError(f"value is not I-JSON: {exc}") from None


def canonical_digest(value: Any) -> str:
    """Lowercase hex SHA-256 of `value`'s RFC 8785 canonical JSON (`canonical_json`).

    Binds approvals and loop detection to "the same input": two values digest equal exactly
    when they are equal as JSON (``{"amount": 40.0}`` digests as ``{"amount": 40}``), and a
    client in any language computes the same digest with a JCS library. A value JCS cannot
    encode still digests, distinctly, so it can be compared: a lone surrogate is hashed as its
    surrogate code unit, an integer beyond 2**53-1 as its decimal digits, NaN and infinities as
    the tokens ``NaN`` / ``Infinity`` / ``-Infinity``. Raises TypeError for a type JSON has no
    form for.
    """
    try:
        try:
            if _safe_values((value,)):
                try:
                    return sha256_hex(fastjson.dumps_sorted(value))
                except TypeError:
                    text = _stdlib_json(value)
                return sha256_hex(text.encode("utf-8", "surrogatepass"))
            return sha256_hex(_jcs(value))
        except (_Refused, UnicodeEncodeError, ValueError):
            pass
        text = "".join(_lenient(value, []))
    except RecursionError:
        raise ValueError("value is nested too deeply (or contains itself)") from None
    return sha256_hex(text.encode("utf-8", "surrogatepass"))


def _lenient(value: Any, out: list[str]) -> list[str]:
    """RFC 8785's layout for values it refuses (see `canonical_digest`), as text pieces."""
    if value is None or value is True or value is False:
        out.append("null" if value is None else "true" if value else "false")
    elif isinstance(value, str):
        out.append(_encode_str(value))
    elif isinstance(value, int):
        out.append(str(int(value)))
    elif isinstance(value, float):
        if math.isfinite(value):
            out.append(_jcs(float(value)).decode("ascii"))
        else:
            out.append(_float_name(value))
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _lenient(item, out)
        out.append("]")
    elif isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("object keys must be strings to be digested")
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16be", "surrogatepass"))
        out.append("{")
        for index, (key, item) in enumerate(items):
            out.append("," if index else "")
            out.append(_encode_str(key))
            out.append(":")
            _lenient(item, out)
        out.append("}")
    else:
        raise TypeError(f"{type(value).__name__} has no JSON form to digest")
    return out
