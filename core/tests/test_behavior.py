"""The behavior model: kinds, verbs, identifiers, timestamps and the I-JSON payload rule."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from charter import ActionKind, Behavior, Outcome, Verb, verbs_for
from hypothesis import given, settings
from hypothesis import strategies as st


def make(**kw: object) -> Behavior:
    base: dict[str, object] = {
        "agent_id": "agent-1",
        "task_id": "task-1",
        "kind": "step.exec",
        "step_name": "Bash",
    }
    base.update(kw)
    return Behavior(**base)  # type: ignore[arg-type]


def test_twelve_kinds_and_their_verbs() -> None:
    assert len(ActionKind) == 12
    assert verbs_for("step.resource") == (Verb.GET, Verb.POST, Verb.PATCH, Verb.DELETE)
    assert verbs_for("step.credential") == verbs_for("step.self") == verbs_for("step.resource")
    assert verbs_for("step.message") == (Verb.GET, Verb.POST)
    for kind in ("task.start", "step.model", "step.exec", "step.gate", "step.unknown"):
        assert verbs_for(kind) == ()


@pytest.mark.parametrize(
    ("kind", "verb", "expected"),
    [
        ("step.message", "DELETE", "step.message takes only GET/POST"),
        ("step.exec", "GET", "step.exec takes no verb; pass verb=None"),
        (
            "step.resource",
            None,
            "verb is missing: step.resource takes one of GET/POST/PATCH/DELETE",
        ),
        ("step.resource", "PUT", "not a verb; step.resource takes one of GET/POST/PATCH/DELETE"),
        ("task.start", "POST", "task.start takes no verb"),
    ],
)
def test_wrong_verb_is_refused_naming_the_verbs_the_kind_takes(
    kind: str, verb: str | None, expected: str
) -> None:
    with pytest.raises(ValueError, match=expected.replace(".", r"\.").replace("/", "/")):
        make(kind=kind, verb=verb)


def test_unknown_kind_names_the_kinds() -> None:
    with pytest.raises(ValueError, match=r"kind 'step\.shell': not a behavior kind; use one of"):
        make(kind="step.shell")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("task_id", "run/42", r"task_id 'run/42': use letters, digits and \. _ : - only \(1-100"),
        ("task_id", "", r"task_id '': use letters"),
        ("task_id", "x" * 101, r"\(1-100 characters\)"),
        ("agent_id", "a b", r"agent_id 'a b': use letters"),
        ("action_id", "id#1", r"action_id 'id#1': use letters"),
    ],
)
def test_identifier_grammar(field: str, value: str, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        make(**{field: value})


def test_task_id_refusal_points_at_the_mapping_helper() -> None:
    with pytest.raises(ValueError, match="task_id_from"):
        make(task_id="thread/1")


@pytest.mark.parametrize(
    ("name", "expected"),
    [("", "must be 1-255 characters"), ("a" * 256, "must be 1-255"), ("a\nb", "control character")],
)
def test_step_name_rules(name: str, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        make(step_name=name)


def test_step_name_allows_any_other_text() -> None:
    assert make(step_name="chat gpt-4o · résumé/東京").step_name == "chat gpt-4o · résumé/東京"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("input", {"items": [1, 2, float("nan")]}, r"input\.items\[2\]: float NaN is not I-JSON"),
        ("output", {"n": 2**60}, r"output\.n: integer 1152921504606846976 is not I-JSON"),
        ("properties", {"t": (1, 2)}, r"properties\.t: tuple is not I-JSON"),
        ("meta", {"b": b"x"}, r"meta\.b: bytes is not I-JSON"),
        ("input", {"a": {1: "x"}}, r"input\.a: key 1 \(int\) is not I-JSON"),
        ("input", {"f": float("-inf")}, r"input\.f: float -Infinity is not I-JSON"),
        ("input", {"d": datetime.now(UTC)}, r"input\.d: datetime is not I-JSON"),
        ("input", ["not", "an", "object"], r"input: must be a dict"),
    ],
)
def test_payloads_must_be_i_json_and_the_error_names_the_path(
    field: str, value: object, expected: str
) -> None:
    with pytest.raises(ValueError, match=expected):
        make(**{field: value})


def test_integers_at_the_i_json_limit_are_accepted() -> None:
    b = make(input={"max": 2**53 - 1, "min": -(2**53 - 1), "f": 1.5, "n": None, "t": True})
    assert b.input == {"max": 2**53 - 1, "min": -(2**53 - 1), "f": 1.5, "n": None, "t": True}


def test_payloads_are_copied_so_later_mutation_changes_nothing() -> None:
    payload = {"command": "ls", "args": ["-l"]}
    b = make(input=payload)
    payload["command"] = "rm -rf /"
    payload["args"].append("/")  # type: ignore[attr-defined]
    assert b.input == {"command": "ls", "args": ["-l"]}


def test_timestamp_defaults_to_now_in_utc_and_must_be_aware() -> None:
    before = datetime.now(UTC)
    b = make()
    assert b.timestamp.tzinfo is UTC and before <= b.timestamp <= datetime.now(UTC)
    with pytest.raises(ValueError, match="timestamp has no time zone"):
        make(timestamp=datetime(2026, 1, 1, 12, 0))
    local = datetime(2026, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    assert make(timestamp=local).timestamp == datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


def test_seq_must_be_positive() -> None:
    with pytest.raises(ValueError, match="seq 0: must be a positive integer"):
        make(seq=0)


def test_intent_outcome_and_wire_round_trip() -> None:
    intent = make(action_id="a1", input={"command": "ls"})
    assert intent.is_intent and intent.outcome is Outcome.OK
    done = intent.completed({"stdout": "x"})
    assert not done.is_intent and done.output == {"stdout": "x"}
    assert done.meta["charter.outcome"] == "ok"
    failed = intent.completed(None, outcome="failed")
    assert failed.outcome is Outcome.FAILED and failed.output == {}
    wire = done.to_dict()
    assert wire["timestamp"].endswith("Z") and len(wire["timestamp"]) == 27
    assert Behavior.from_dict(wire) == done


def test_behavior_is_immutable() -> None:
    b = make()
    with pytest.raises(AttributeError):
        b.step_name = "other"  # type: ignore[misc]


_GOOD_WIRE: dict[str, Any] = {
    "agent_id": "a",
    "task_id": "t",
    "kind": "step.resource",
    "verb": "GET",
    "step_name": "fetch",
    "action_id": "x1",
    "seq": 3,
    "timestamp": "2024-06-03T08:00:00.000001Z",
    "input": {"url": "https://example.com", "n": [1, 2.5, None, True]},
    "output": {"text": "ok"},
    "properties": {"data": {"trust": "untrusted"}},
    "meta": {"charter.outcome": "ok"},
}


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"kind": "step.nope"},
        {"verb": "PUT"},
        {"verb": None},
        {"verb": ["GET"]},
        {"kind": "step.exec", "verb": "GET"},
        {"kind": "step.message", "verb": "DELETE"},
        {"task_id": "a/b"},
        {"agent_id": 7},
        {"action_id": ""},
        {"step_name": "x\n"},
        {"seq": 0},
        {"seq": "3"},
        {"timestamp": 5},
        {"timestamp": "2024-06-03T08:00:00"},
        {"input": []},
        {"output": "text"},
        {"properties": ["x"]},
        {"meta": 1},
        {"input": None, "output": None, "properties": None, "meta": None},
        {"timestamp": None},
    ],
)
def test_a_stored_record_is_adopted_with_the_checks_of_from_dict(change: dict[str, Any]) -> None:
    """What a restore adopts from the store is refused, and built, exactly as from_dict."""
    wire = {k: v for k, v in (_GOOD_WIRE | change).items() if v is not None or k == "verb"}

    def outcome(build: Any) -> Any:
        try:
            b = build(dict(wire))
        except ValueError as exc:
            return ("refused", str(exc))
        return ("built", b.to_dict() | {"timestamp": "now" if "timestamp" not in wire else 0})

    assert outcome(Behavior._adopt) == outcome(Behavior.from_dict)


def test_an_adopted_record_keeps_the_enum_members() -> None:
    b = Behavior._adopt(dict(_GOOD_WIRE))
    assert type(b.kind) is ActionKind and type(b.verb) is Verb
    assert b == Behavior.from_dict(_GOOD_WIRE)


def test_defaults_are_made_per_behavior_and_none_is_no_default() -> None:
    a, b = make(), make()
    assert a.properties == {} and a.meta == {}
    assert a.properties is not b.properties and a.meta is not b.meta
    assert a.input is None and a.output is None and a.verb is None and a.seq is None
    for name in ("properties", "meta", "timestamp"):
        with pytest.raises(ValueError, match=name):
            make(**{name: None})
    assert dataclasses.replace(a, seq=3) == dataclasses.replace(a, seq=3)
    assert dataclasses.replace(a, seq=3).timestamp == a.timestamp


def test_a_name_checked_once_is_still_refused_when_it_is_not_the_same_text() -> None:
    class Lying(str):
        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return hash("bad\nname")

    make(step_name=Lying("fine"), task_id=Lying("fine"))
    with pytest.raises(ValueError, match="control character"):
        make(step_name="bad\nname")
    with pytest.raises(ValueError, match="task_id"):
        make(task_id="bad\nname")


def test_copies_pickles_and_derives_like_the_dataclass_it_is() -> None:
    import copy
    import pickle

    from charter._model.behavior import derived

    b = make(input={"command": "ls", "n": [1, {"x": None}]}, action_id="a1", seq=2)
    assert pickle.loads(pickle.dumps(b)) == b
    assert copy.copy(b) == b and copy.deepcopy(b) == b
    changed = derived(b, {"meta": {"charter.outcome": "ok"}, "output": {}})
    assert type(changed) is Behavior
    assert changed == dataclasses.replace(b, meta={"charter.outcome": "ok"}, output={})
    assert changed.input is b.input  # not validated nor copied: only for Charter's own values
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.seq = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match="no field 'sequence'"):
        derived(b, {"sequence": 3})


json_like = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**60), 2**60),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=5),
        st.binary(max_size=2),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 2)), inner, max_size=3),
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(json_like)
def test_the_payload_copy_gives_what_the_path_naming_copy_gives(value: Any) -> None:
    from charter._model.ijson import _named_copy, checked_copy

    def outcome(copy: Any) -> Any:
        try:
            return ("copied", copy(value, "input"))
        except ValueError as exc:
            return ("refused", str(exc))

    assert outcome(checked_copy) == outcome(_named_copy)
