"""Canonical bytes, hashing and sealing: the fast path must equal rfc8785 byte for byte."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import pytest
import rfc8785
from charter._audit.chain import (
    ChainHead,
    canonical_bytes,
    canonical_json,
    decode_json,
    entry_hash,
    is_closing,
    prepare_entry,
    seal,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# Every test twice: through orjson, and as a young process encodes before it loads orjson.
pytestmark = pytest.mark.usefixtures("json_codec")

_MAX = 2**53 - 1

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-_MAX, max_value=_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)

EDGE_FLOATS = [
    0.0,
    -0.0,
    1.0,
    -3.0,
    0.1,
    0.30000000000000004,
    1e-6,
    1e-7,
    1.5e-7,
    123456789.0,
    1e15,
    1e16,
    1.5e16,
    1e20,
    1e21,
    2e20,
    1.7976931348623157e308,
    5e-324,
    -2.5e-300,
    float(2**53),
    9007199254740993.0,
]


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_canonical_json_equals_rfc8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("number", EDGE_FLOATS)
def test_edge_floats_equal_rfc8785_and_round_trip(number: float) -> None:
    for value in (number, [number], {"k": number}):
        text = canonical_json(value)
        assert text == rfc8785.dumps(value)
        # The stored text re-canonicalises to itself (2e20 is written without a fraction).
        assert canonical_json(decode_json(text)) == text


def test_every_code_point_escapes_like_rfc8785() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert canonical_json({"s": text}) == rfc8785.dumps({"s": text})


def test_keys_sort_in_utf16_order() -> None:
    # U+FB01 sorts after U+1F600 in UTF-16 (surrogates D83D...) but before it by code point.
    value = {"\ufb01": 1, "\U0001f600": 2, "a": 3, "é": 4}
    assert canonical_json(value) == rfc8785.dumps(value)
    assert canonical_json(value).index("\U0001f600".encode()) < canonical_json(value).index(
        "\ufb01".encode()
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"n": math.nan},
        {"n": math.inf},
        {"n": 2**53},
        {"n": -(2**53)},
        {1: "int key"},
        {"s": "\ud800"},
        {"x": {1, 2}},
        {"x": b"bytes"},
    ],
)
def test_non_ijson_is_refused(bad: dict[Any, Any]) -> None:
    with pytest.raises(ValueError):
        canonical_json(bad)


def test_self_containing_value_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="nested too deeply"):
        canonical_json({"loop": loop})


def test_entry_hash_covers_everything_but_hash() -> None:
    entry = {"seq": 1, "prev_hash": None, "kind": "task.start", "hash": "ignored"}
    expected = rfc8785.dumps({"seq": 1, "prev_hash": None, "kind": "task.start"})
    assert canonical_bytes(entry) == expected
    assert entry_hash(entry) == hashlib.sha256(expected).hexdigest()
    assert entry_hash(entry) == entry_hash({**entry, "hash": "other"})
    assert entry_hash(entry) != entry_hash({**entry, "seq": 2})


@settings(max_examples=60, deadline=None)
@given(
    extra=st.dictionaries(st.text(max_size=10), json_values, max_size=6),
    head_seq=st.integers(min_value=0, max_value=10**6),
    head_hash=st.none() | st.text("0123456789abcdef", min_size=64, max_size=64),
)
def test_seal_matches_canonical_form(
    extra: dict[str, Any], head_seq: int, head_hash: str | None
) -> None:
    entry = {k: v for k, v in extra.items() if k not in ("seq", "prev_hash", "hash")}
    entry.update(agent_id="a", task_id="t", kind="step.exec", timestamp="2026-11-30T05:49:05Z")
    sealed = seal(prepare_entry(entry), ChainHead(head_seq, head_hash))
    record = sealed.entry
    assert record["seq"] == head_seq + 1
    assert record["prev_hash"] == head_hash
    assert record["hash"] == sealed.hash == entry_hash(record)
    assert sealed.body == rfc8785.dumps(record)
    assert decode_json(sealed.body) == record


def test_a_record_holding_the_encoder_stand_ins_still_seals_to_its_canonical_form() -> None:
    # The chain keys are held by per-process stand-ins while a record is encoded once; a
    # record that somehow holds them (only code in this process can know them) is encoded
    # member by member instead, to the same bytes.
    from charter._audit import chain

    entry = {
        "agent_id": "a",
        "task_id": "t",
        "kind": "step.exec",
        "timestamp": "2026-11-30T05:49:05Z",
        "input": {"hash": chain._NONCE + "h", "seq": chain._NONCE + "s"},
    }
    sealed = seal(prepare_entry(entry), ChainHead(4, "ab" * 32))
    assert sealed.body == rfc8785.dumps(sealed.entry)
    assert sealed.entry["input"] == entry["input"]
    assert sealed.hash == entry_hash(sealed.entry)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"agent_id": "a", "task_id": "t", "kind": "k", "timestamp": "x", "seq": 0}, "seq must"),
        ({"agent_id": "a", "task_id": "t", "kind": "k", "timestamp": "x", "seq": "1"}, "seq must"),
        (
            {"agent_id": "a", "task_id": "t", "kind": "k", "timestamp": "x", "prev_hash": None},
            "'prev_hash'",
        ),
        ({"agent_id": "a", "task_id": "t", "kind": "k", "timestamp": "x", "hash": ""}, "'hash'"),
        ({"agent_id": 3, "task_id": "t", "kind": "k", "timestamp": "x"}, "agent_id"),
        ({"agent_id": "a", "task_id": "", "kind": "k", "timestamp": "x"}, "task_id"),
        ({"agent_id": "a", "task_id": "t", "timestamp": "x"}, "'kind'"),
        ({"agent_id": "a", "task_id": "t", "kind": "k"}, "'timestamp'"),
        ({"agent_id": "a", "task_id": "t", "kind": "k", "timestamp": "x", "n": math.nan}, "I-JSON"),
    ],
)
def test_prepare_refuses_bad_entries(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        prepare_entry(entry)


def test_closing_records() -> None:
    assert is_closing({"kind": "task.end"})
    assert is_closing({"kind": "task.error"})
    assert is_closing({"kind": "task.idle"})
    assert is_closing({"kind": "step.exec", "meta": {"charter.chain": {"final": True}}})
    assert not is_closing({"kind": "step.exec", "meta": {"charter.chain": {"final": False}}})
    assert not is_closing({"kind": "task.start", "meta": None})


def test_nesting_past_orjsons_limit_still_equals_rfc8785() -> None:
    deep: Any = {"leaf": 1.5}
    for _ in range(300):
        deep = {"k": [deep]}
    assert canonical_json(deep) == rfc8785.dumps(deep)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=8))
def test_records_canonicalise_like_rfc8785_key_by_key(value: dict[str, Any]) -> None:
    # Every top-level split a record is sealed in joins back into rfc8785's bytes.
    assert canonical_bytes(value) == rfc8785.dumps({k: v for k, v in value.items() if k != "hash"})


def _stdlib_decode(data: str | bytes) -> Any:
    """What `decode_json` returned before it read through orjson: the reference."""
    import json

    def number(text: str) -> int | float:
        value = int(text)
        return value if -_MAX <= value <= _MAX else float(value)

    return json.loads(data, parse_int=number)


def _outcome(decode: Any, data: str | bytes) -> tuple[str, Any]:
    try:
        value = decode(data)
    except ValueError:
        return ("refused", None)
    # repr tells -0.0 from 0.0 and 1 from 1.0, which == does not.
    return ("value", repr(value))


# Texts a store can hold, and the ones orjson refuses that the standard library reads.
any_integers = st.recursive(
    st.integers() | st.text(alphabet="0123456789-: ,[", max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children),
    max_leaves=10,
)
json_texts = (
    json_values.map(lambda v: __import__("json").dumps(v, ensure_ascii=False))
    | any_integers.map(lambda v: __import__("json").dumps(v, indent=2))
    | any_integers.map(__import__("json").dumps)
    | json_values.map(lambda v: __import__("json").dumps(v, indent=1))
    | st.sampled_from(
        [
            "NaN",
            '{"a": Infinity}',
            "[-Infinity]",
            "1e400",
            '"\\ud800"',
            '{"k": "\\udc00x"}',
            "9007199254740991",
            "[ 9007199254740993]",
            '{"a" :\n -9007199254740993}',
            "[1,\t12345678901234567]",
            '["x", 12345678901234567]',
            "9007199254740992",
            "-9007199254740993",
            "123456789012345678901234567890",
            '{"a": 1, "a": 2}',
            "-0",
            "-0.0",
            "1E5",
            '"1234567890123456"',
            "\ufeff{}",
            " {} ",
            "{} x",
            "",
        ]
    )
)


@settings(max_examples=300, deadline=None)
@given(json_texts, st.booleans())
def test_decode_json_reads_every_text_as_the_standard_library_does(
    text: str, as_bytes: bool
) -> None:
    data: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
    assert _outcome(decode_json, data) == _outcome(_stdlib_decode, data)


@pytest.mark.parametrize(
    "text", ["[9007199254740993]", '{"n": -123456789012345678}', "[1152921504606846976]"]
)
def test_decode_json_reads_large_integers_as_the_doubles_they_denote(text: str) -> None:
    value = decode_json(text)
    assert all(type(n) is float for n in (value if isinstance(value, list) else value.values()))


@pytest.mark.parametrize(
    "record",
    [
        {"agent_id": "a", "task_id": "t"},
        {"agent_id": "a", "input": {"x": 1}, "meta": {}, "properties": {}, "verb": None},
        {"action_id": None, "kind": "k", "properties": [1.5], "step_name": "s", "z": True},
        {"zz": "only after seq"},
        {},
    ],
)
def test_member_by_member_cuts_match_the_one_encoding_cuts(record: dict[str, Any]) -> None:
    from charter._audit import chain

    assert chain._groups_apart(record) == chain._groups(record)
