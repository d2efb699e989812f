"""`charter._model.stdjson` reads and writes exactly what `json` does, and fails as it does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from charter._model import stdjson
from hypothesis import given, settings
from hypothesis import strategies as st

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and the infinities included: json writes them by default
    | st.text()  # lone surrogates included
)
_KEYS = st.text() | st.integers() | st.floats(allow_nan=False) | st.booleans() | st.none()
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(), inner, max_size=4)
        | st.dictionaries(_KEYS, inner, max_size=3)
    ),
    max_leaves=25,
)
# The keyword sets the hook's modules pass, and a few beyond them.
_DUMPS_KEYWORDS = [
    {},
    {"sort_keys": True},
    {"separators": (",", ":")},
    {"ensure_ascii": False, "separators": (",", ":")},
    {"ensure_ascii": False, "sort_keys": True, "separators": (",", ":")},
    {"separators": (",", ":"), "ensure_ascii": True, "allow_nan": False},
    {"indent": 1, "sort_keys": True},
    {"check_circular": False},
]


def _outcome(call, *args, **kwargs):  # type: ignore[no-untyped-def]
    """What a call returns, or the type and text of what it raises."""
    try:
        return ("value", call(*args, **kwargs))
    except Exception as exc:
        return ("raised", type(exc), str(exc))


def _same(a: object, b: object) -> bool:
    # NaN is not equal to itself; its JSON text is.
    return json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False) and type(a) is type(b)


@settings(max_examples=300, deadline=None)
@given(value=_VALUES, keywords=st.sampled_from(_DUMPS_KEYWORDS))
def test_dumps_writes_what_json_writes(value: object, keywords: dict[str, object]) -> None:
    assert _outcome(stdjson.dumps, value, **keywords) == _outcome(json.dumps, value, **keywords)


@settings(max_examples=300, deadline=None)
@given(
    value=_VALUES,
    spaces=st.tuples(*[st.text(alphabet=" \t\n\r", max_size=3)] * 2),
    compact=st.booleans(),
)
def test_loads_reads_what_json_reads(value: object, spaces: tuple[str, str], compact: bool) -> None:
    text = spaces[0] + json.dumps(value, separators=(",", ":") if compact else None) + spaces[1]
    for given_text in (text, text.encode("utf-8", "surrogatepass")):
        ours, theirs = _outcome(stdjson.loads, given_text), _outcome(json.loads, given_text)
        assert ours[0] == theirs[0] == "value"
        assert _same(ours[1], theirs[1])


@settings(max_examples=500, deadline=None)
# JSON's punctuation, digits and words, its four spaces and the spaces it does not allow.
@given(
    text=st.text(alphabet='{}[]",:0123456789.eE+-tfnulrsaINfiyN \t\n\r\x0b\x0c\xa0\u2028\ufeff\\x')
)
def test_loads_fails_where_json_fails_and_says_the_same(text: str) -> None:
    ours, theirs = _outcome(stdjson.loads, text), _outcome(json.loads, text)
    if ours[0] == "value":
        assert theirs[0] == "value" and _same(ours[1], theirs[1])
    else:
        assert ours == theirs


@pytest.mark.parametrize(
    "data",
    [
        b'\xef\xbb\xbf{"a": 1}',  # UTF-8 with a byte-order mark
        '{"a": 1}'.encode("utf-16"),
        '{"a": 1}'.encode("utf-16-le"),
        '{"a": 1}'.encode("utf-32"),
        b'{"a": "\xff"}',  # not UTF-8
        b"",
        bytearray(b'[1, 2.5, "x"]'),
    ],
    ids=["utf8-bom", "utf16", "utf16le", "utf32", "bad-utf8", "empty", "bytearray"],
)
def test_loads_reads_bytes_the_way_json_does(data: bytes) -> None:
    assert _outcome(stdjson.loads, data) == _outcome(json.loads, data)


def test_parse_int_is_applied_to_every_integer_as_json_applies_it() -> None:
    text = '{"a": 12, "b": [3, -4, 5.5], "c": 9007199254740993}'
    seen: list[str] = []

    def number(digits: str) -> object:
        seen.append(digits)
        return ("int", digits)

    assert stdjson.loads(text, parse_int=number) == json.loads(text, parse_int=number)
    assert seen == ["12", "3", "-4", "9007199254740993"] * 2


def test_an_unserializable_value_gets_jsons_error_and_a_default_runs_once() -> None:
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        stdjson.dumps({"a": {1}})
    calls: list[object] = []

    def default(value: object) -> object:
        calls.append(value)
        return sorted(value)  # type: ignore[call-overload]

    assert stdjson.dumps({"a": {2, 1}}, default=default) == '{"a": [1, 2]}'
    assert len(calls) == 1
    circular: list[object] = []
    circular.append(circular)
    assert _outcome(stdjson.dumps, circular) == _outcome(json.dumps, circular)


def _in_a_fresh_process(code: str) -> str:
    """What `code` prints, run by a new interpreter (which has imported nothing yet)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout


def test_the_first_error_in_a_fresh_process_is_jsons_own() -> None:
    # The C scanner finds its exception class in json.decoder, which nothing has imported yet.
    code = (
        "from charter._model import stdjson\n"
        "for text in ('{bad', '[1,', '\"abc'):\n"
        "    try:\n"
        "        stdjson.loads(text)\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__, exc)\n"
    )
    out = _in_a_fresh_process(code)
    expected = []
    for text in ("{bad", "[1,", '"abc'):
        with pytest.raises(json.JSONDecodeError) as caught:
            json.loads(text)
        expected.append(f"JSONDecodeError {caught.value}")
    assert out.splitlines() == expected


def test_reading_and_writing_does_not_import_json() -> None:
    code = (
        "import sys\n"
        "from charter._model import stdjson\n"
        "text = stdjson.dumps({'b': [1, 2.5, None, True], 'a': 'é'}, sort_keys=True)\n"
        "back = stdjson.loads(text.encode())\n"
        "print(text, back == {'a': 'é', 'b': [1, 2.5, None, True]}, 'json' in sys.modules)\n"
    )
    out = _in_a_fresh_process(code)
    text, same, imported = out.rsplit(" ", 2)
    assert text == json.dumps({"b": [1, 2.5, None, True], "a": "é"}, sort_keys=True)
    assert (same, imported) == ("True", "False\n")
