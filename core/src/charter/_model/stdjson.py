"""The standard library's JSON codec, without importing `json`.

`import json` costs a fresh process about 2.5 ms: its decoder, scanner and encoder modules
compile six regular expressions at import, for the pure-Python paths that CPython never
takes. A hook call's whole process is the user's wait on every tool call, so the modules it
loads read and write JSON here instead. The work is done by `_json`, the C accelerator that
`json` itself hands its common forms to; everything else (an indent, ``check_circular=False``,
a custom encoder class, bytes in UTF-16 or with a byte-order mark, no `_json` at all) is
passed to `json`, imported then.

`loads` and `dumps` return what `json.loads` and `json.dumps` return for the same arguments
and raise what they raise: on any error the call is repeated by `json`, so its exception (type
and message) is the one seen. The property tests compare both on generated values and texts.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_json: Any
try:
    import _json
except ImportError:  # an interpreter without the accelerator: json's pure-Python paths
    _json = None

__all__ = ["dumps", "escape", "loads"]

# json.decoder's WHITESPACE, which str.strip takes character for character.
_SPACE = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Decoding:
    """What the C scanner reads from a `json.JSONDecoder`: its hooks and parsers."""

    __slots__ = (
        "array_hook",
        "object_hook",
        "object_pairs_hook",
        "parse_constant",
        "parse_float",
        "parse_int",
        "strict",
    )

    def __init__(self, parse_int: Callable[[str], Any] | None) -> None:
        self.strict = True
        self.array_hook = None  # read from Python 3.15 on
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int if parse_int is None else parse_int
        self.parse_constant = _CONSTANTS.__getitem__


_SCAN = None if _json is None else _json.make_scanner(_Decoding(None))


def loads(text: str | bytes | bytearray, *, parse_int: Callable[[str], Any] | None = None) -> Any:
    """`json.loads(text, parse_int=parse_int)`: the value, or json's own ValueError
    (a `json.JSONDecodeError`) or TypeError."""
    if _SCAN is None:
        return _json_module().loads(text, parse_int=parse_int)
    if not isinstance(text, str):
        if type(text) not in (bytes, bytearray) or not _plain_utf8(text):
            return _json_module().loads(text, parse_int=parse_int)
        try:
            text = bytes(text).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return _json_module().loads(text, parse_int=parse_int)
    if text.startswith("\ufeff"):  # json refuses it, with its own message
        return _json_module().loads(text, parse_int=parse_int)
    scan = _SCAN if parse_int is None else _json.make_scanner(_Decoding(parse_int))
    start = len(text) - len(text.lstrip(_SPACE))
    try:
        value, end = scan(text, start)
    # SystemError: the scanner's first error in a process that has not imported json.decoder
    # (where its exception class lives) comes out as "returned NULL without setting an
    # exception" (CPython 3.11).
    except (StopIteration, ValueError, RecursionError, SystemError):
        return _json_module().loads(text, parse_int=parse_int)
    if end != len(text) and text[end:].strip(_SPACE):
        return _json_module().loads(text, parse_int=parse_int)
    return value


def _plain_utf8(data: bytes | bytearray) -> bool:
    """Whether json.detect_encoding would say UTF-8 without a byte-order mark: no BOM and
    no zero byte among the first four (json reads those as UTF-16 or UTF-32)."""
    return not data.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")) and (0 not in data[:4])


def _escape_without_accelerator(text: str) -> str:
    return str(_json_module().encoder.encode_basestring(text))


# `json.encoder.encode_basestring`: a string as JSON text, non-ASCII kept (the C function
# itself where there is one: canonical encoding calls it for every key).
escape: Callable[[str], str] = (
    _escape_without_accelerator if _json is None else _json.encode_basestring
)


def _not_serializable(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def dumps(
    value: Any,
    *,
    ensure_ascii: bool = True,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
    allow_nan: bool = True,
    default: Callable[[Any], Any] | None = None,
    **other: Any,
) -> str:
    """`json.dumps(value, ...)` with the same keywords: the text, or json's own TypeError,
    ValueError or RecursionError."""
    keywords: dict[str, Any] = {
        "ensure_ascii": ensure_ascii,
        "separators": separators,
        "sort_keys": sort_keys,
        "allow_nan": allow_nan,
    }
    if other or _json is None:
        return str(_json_module().dumps(value, default=default, **keywords, **other))
    escape = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
    if isinstance(value, str):
        return str(escape(value))
    item_separator, key_separator = separators if separators is not None else (", ", ": ")
    encode = _json.make_encoder(
        {},
        _not_serializable if default is None else default,
        escape,
        None,
        key_separator,
        item_separator,
        sort_keys,
        False,
        allow_nan,
    )
    try:
        return "".join(encode(value, 0))
    except (TypeError, ValueError, RecursionError):
        if default is not None:  # a default with effects must not run twice
            raise
        return str(_json_module().dumps(value, **keywords))


def _json_module() -> Any:
    import json

    return json
