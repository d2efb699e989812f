"""Redaction decides to mask a record in one walk; it must decide as the two walks did.

The reference below is the definition the single walk replaced: one walk collecting every
string, another asking whether any key, name/value pair or flag names a secret.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from charter._model.ijson import _safe_values
from charter._policy.secrets import find_secrets, names_secret
from charter._runtime import redact
from charter._runtime.redact import _HOLDING, _NAMING, Redactor, _flag, _scan
from hypothesis import given, settings
from hypothesis import strategies as st


def reference_strings(value: Any, out: list[str]) -> None:
    t = type(value)
    if t is str:
        out.append(value)
    elif t is dict:
        for k, v in value.items():
            out.append(k)
            reference_strings(v, out)
    elif t is list:
        for v in value:
            reference_strings(v, out)


def reference_holder(d: dict[str, Any]) -> str | None:
    for k in _NAMING:
        named = d.get(k)
        if type(named) is str and names_secret(named):
            return next((h for h in _HOLDING if h in d), None)
    return None


def reference_names(value: Any) -> bool:
    t = type(value)
    if t is dict:
        if reference_holder(value) is not None:
            return True
        return any(names_secret(k) or reference_names(v) for k, v in value.items())
    if t is list:
        for v in value:
            if type(v) is str:
                name = _flag(v)
                if name is not None and names_secret(name):
                    return True
            elif reference_names(v):
                return True
    return False


words = st.sampled_from(
    [
        "command",
        "password",
        "api_key",
        "name",
        "key",
        "value",
        "data",
        "x",
        "--token=abc",
        "--password",
        "-v",
        "Authorization",
        "header",
        "secret",
        "notes",
        "",
        "ghp_",
    ]
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), words, st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(words, st.text(max_size=6)), inner, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_one_walk_finds_the_strings_and_names_the_two_walks_found(value: Any) -> None:
    redact._CLEAN.clear()  # other tests' scans remembered clean texts (see below)
    strings: list[str] = []
    named, _ = _scan(value, strings)
    expected: list[str] = []
    reference_strings(value, expected)
    assert Counter(strings) == Counter(expected)
    assert named == reference_names(value)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    words,
    st.sampled_from([(), b"x", 1j, frozenset()]),
)


def nested(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.one_of(words, st.text(max_size=6)), inner, max_size=4),
        ),
        max_leaves=20,
    )


any_values = nested(scalars)
# What a record may hold without redaction failing (a digest needs a JSON form).
json_like = nested(scalars.filter(lambda v: type(v) not in (tuple, bytes, complex, frozenset)))


@settings(max_examples=400, deadline=None)
@given(any_values)
def test_the_walk_says_safe_exactly_when_the_encoding_check_would(value: Any) -> None:
    # Keys are the caller's to check (they are in the collected strings); with ASCII keys
    # the walk's verdict is the encoder's own check.
    strings: list[str] = []
    _, safe = _scan(value, strings)
    if all(s.isascii() for s in strings):
        assert safe == _safe_values((value,))
    elif _safe_values((value,)):
        assert safe


@settings(max_examples=300, deadline=None)
@given(json_like, json_like, st.sampled_from(["full", "metadata_only", "sha256"]))
def test_a_record_marked_checked_is_one_the_encoding_check_accepts(
    payload: Any, meta: Any, mode: str
) -> None:
    record = {
        "agent_id": "a",
        "task_id": "t",
        "seq": 3,
        "kind": "step.exec",
        "timestamp": "2026-01-01T00:00:00.000000Z",
        "step_name": "call",
        "input": payload,
        "meta": meta,
    }
    out, checked = Redactor(mode).redact_checked(record)
    assert out == Redactor(mode).redact(record)
    if checked:
        assert _safe_values((out,))


def test_a_value_named_by_its_sibling_is_masked_whole() -> None:
    record = {
        "agent_id": "a",
        "task_id": "t",
        "kind": "step.exec",
        "step_name": "call",
        "input": {"headers": [{"name": "X-Api-Key", "value": "plain-looking-value"}]},
    }
    redacted = Redactor().redact(record)
    assert redacted["input"]["headers"][0]["value"] == "[REDACTED:secret_field]"
    assert record["input"]["headers"][0]["value"] == "plain-looking-value"


secret_texts = st.sampled_from(
    [
        "export GITHUB_TOKEN=ghp_" + "a1B2" * 9,
        "curl -u admin:s3cr3t-pass https://example.com",
        "cGFzc3dvcmQ9aHVudGVyMmh1bnRlcjI=",  # password=hunter2hunter2, base64
        "token%3Dghp_" + "a1B2" * 9,
        "caf\u00e9 password=hunter2hunter2",
    ]
)
payloads = st.one_of(
    json_like, secret_texts.map(lambda t: {"command": t}), secret_texts.map(lambda t: [t])
)
records = st.lists(
    st.fixed_dictionaries(
        {
            "agent_id": st.just("a"),
            "task_id": st.sampled_from(["t1", "t2", "ghp_" + "a1B2" * 9]),
            "seq": st.integers(1, 9),
            "kind": st.sampled_from(["step.exec", "step.gate"]),
            "timestamp": st.just("2026-01-01T00:00:00.000000Z"),
            "step_name": st.one_of(words, st.text(max_size=8), secret_texts),
            "input": payloads,
            "output": json_like,
            "meta": json_like,
        }
    ),
    max_size=6,
)


@contextmanager
def forgetting_clean_texts() -> Iterator[None]:
    remember = redact._found_clean
    redact._CLEAN.clear()
    redact._found_clean = lambda texts: None
    try:
        yield
    finally:
        redact._found_clean = remember


@settings(max_examples=300, deadline=None)
@given(records, st.sampled_from(["full", "metadata_only", "sha256"]))
def test_a_batch_is_redacted_as_its_records_are_one_by_one(
    batch: list[dict[str, Any]], mode: str
) -> None:
    # The batch scan answers for clean records at once; records with secrets (in plain
    # text, base64, percent-escapes or beside non-ASCII text) are asked again one by one.
    # Without the memory of clean texts, which changes what is scanned together (see
    # test_texts_remembered_clean_change_no_redaction).
    together, alone = Redactor(mode), Redactor(mode)
    with forgetting_clean_texts():
        redacted = together.redact_batch(batch)
        assert redacted == [alone.redact_checked(r) for r in batch]
    for out, _ in redacted:
        strings: list[str] = [out["step_name"], out["task_id"]]
        for name in ("input", "output", "meta"):
            reference_strings(out[name], strings)
        assert not [s for s in strings if find_secrets(s)]
    assert (together.masked, together.altered, together.errors) == (
        alone.masked,
        alone.altered,
        alone.errors,
    )


@settings(max_examples=300, deadline=None)
@given(json_values, st.lists(st.one_of(words, st.text(max_size=8)), max_size=6))
def test_the_walk_leaves_out_exactly_the_texts_found_clean(value: Any, clean: list[str]) -> None:
    redact._CLEAN.clear()
    redact._CLEAN.update(clean)
    strings: list[str] = []
    named, _ = _scan(value, strings)
    expected: list[str] = []
    reference_strings(value, expected)
    assert Counter(strings) == Counter(s for s in expected if s not in set(clean))
    assert named == reference_names(value)


@settings(max_examples=200, deadline=None)
@given(records, st.sampled_from(["full", "metadata_only", "sha256"]))
def test_texts_remembered_clean_change_no_redaction(batch: list[dict[str, Any]], mode: str) -> None:
    # Cold, then with every clean text of the same records remembered: the same records come
    # out with the same secrets masked, and no text holding a secret is ever remembered. A
    # record's texts scanned together can look closer at a record with no secret (base64 runs
    # of two texts decode next to each other), which only counts it as altered and unchecked;
    # with other texts joined the warm pass may do so for other records, so those two are not
    # compared, but a record marked checked is still one the encoding check accepts.
    redact._CLEAN.clear()
    cold = Redactor(mode)
    first = cold.redact_batch(batch)
    warm = Redactor(mode)
    for again in (warm.redact_batch(batch), [warm.redact_checked(r) for r in batch]):
        assert [out for out, _ in again] == [out for out, _ in first]
        for out, checked in again:
            if checked:
                assert _safe_values((out,))
    assert (warm.masked, warm.errors) == (2 * cold.masked, 0)
    assert not [t for t in redact._CLEAN if find_secrets(t)]


def test_a_secret_is_masked_after_its_record_s_other_texts_were_remembered_clean() -> None:
    redact._CLEAN.clear()
    token = "ghp_" + "a1B2" * 9
    clean = {"agent_id": "a", "task_id": "t", "kind": "step.exec", "step_name": "call"}
    r = Redactor()
    r.redact_batch([{**clean, "input": {"command": "ls", "note": "fine"}}] * 2)
    assert {"command", "ls", "note", "fine", "call"} <= redact._CLEAN
    out = r.redact({**clean, "input": {"command": f"export T={token}", "note": "fine"}})
    assert token not in str(out)
    assert f"export T={token}" not in redact._CLEAN


def test_a_text_two_records_of_a_batch_share_is_masked_in_both() -> None:
    # A tool's output comes twice in a batch: as the tool step's output and inside the next
    # model call's messages. The batch scan reads each distinct text once; both copies are
    # still masked, as they are record by record.
    redact._CLEAN.clear()
    token = "ghp_" + "c3D4" * 9
    shared = f"the deploy key is {token}"
    base = {"agent_id": "a", "task_id": "t", "step_name": "call"}
    message = {"role": "tool", "content": shared}
    batch = [
        {**base, "kind": "step.resource", "output": {"result": shared}},
        {**base, "kind": "step.model", "input": {"messages": [message]}},
        {**base, "kind": "step.resource", "output": {"result": "sunny"}},
    ]
    together, alone = Redactor(), Redactor()
    redacted = together.redact_batch(batch)
    assert redacted == [alone.redact_checked(r) for r in batch]
    assert token not in str(redacted[0][0]) and token not in str(redacted[1][0])
    assert redacted[2][0]["output"] == {"result": "sunny"}
    assert together.masked == alone.masked == 2
