"""capture, step_name_from and task_id_from: the helpers integrations lean on."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import math
import uuid
from typing import Any

from charter import Behavior, capture, step_name_from, task_id_from
from charter._model.ijson import checked_copy
from hypothesis import given, settings
from hypothesis import strategies as st


@dataclasses.dataclass
class Point:
    x: int
    y: float


class Obj:
    def __init__(self) -> None:
        self.visible = 1
        self._hidden = 2


def test_capture_maps_common_python_values_faithfully() -> None:
    value = {
        "when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "amount": decimal.Decimal("12.50"),
        "id": uuid.UUID(int=1),
        "raw": b"\x00\x01",
        "big": 2**70,
        "nan": math.nan,
        "set": {3, 1, 2},
        "tuple": (1, "a"),
        "point": Point(1, 2.5),
        "obj": Obj(),
        7: "int key",
    }
    out = capture(value)
    assert out["when"] == "2026-01-02T03:04:05+00:00"
    assert out["amount"] == "12.50"
    assert out["id"] == "00000000-0000-0000-0000-000000000001"
    assert out["raw"] == "\x00\x01"  # bytes read as the text a tool would act on
    assert out["big"] == str(2**70)
    assert out["nan"] == "nan"
    assert out["set"] == [1, 2, 3]
    assert out["tuple"] == [1, "a"]
    assert out["point"] == {"x": 1, "y": 2.5}
    assert out["obj"] == {"visible": 1}
    assert out["7"] == "int key"
    checked_copy(out, "out")


def test_capture_truncates_visibly() -> None:
    out = capture({"s": "x" * 50, "l": list(range(10))}, max_string=10, max_items=3)
    assert out["s"] == "x" * 10 + "…[truncated 40 chars]"
    assert out["l"] == [0, 1, 2, "…[7 more items]"]
    deep: Any = "leaf"
    for _ in range(10):
        deep = [deep]
    cut = capture(deep, max_depth=3)
    assert cut == [[["…[max depth]"]]]
    assert capture({str(i): i for i in range(5)}, max_items=2) == {
        "0": 0,
        "1": 1,
        "…": "…[3 more items]",
    }


def test_capture_survives_cycles_and_hostile_objects() -> None:
    cyc: list[Any] = [1]
    cyc.append(cyc)
    assert capture(cyc) == [1, "…[cycle]"]

    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no repr for you")

        @property
        def __dict__(self) -> Any:  # type: ignore[override]
            raise RuntimeError("nope")

    assert capture(Hostile()).startswith("…[uncapturable")


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=5) | st.integers(), children, max_size=4)
        | st.tuples(children, children)
        | st.frozensets(st.integers(), max_size=3)
    ),
    max_leaves=20,
)


@given(json_like)
@settings(max_examples=200, deadline=None)
def test_capture_never_raises_and_always_yields_i_json(value: Any) -> None:
    out = capture(value, max_string=20, max_items=3)
    assert checked_copy(out, "v") == out
    # and a behavior accepts it
    Behavior(agent_id="a", task_id="t", kind="step.exec", step_name="s", input={"v": out})


@given(st.text(max_size=300) | st.integers() | st.none() | st.uuids())
@settings(max_examples=300, deadline=None)
def test_task_id_from_is_deterministic_and_always_valid(raw: Any) -> None:
    tid = task_id_from(raw)
    assert tid == task_id_from(raw)
    Behavior(agent_id="a", task_id=tid, kind="task.start", step_name="s")
    text = str(raw)
    if tid != text:
        assert tid.startswith("x-") and len(tid) == 34


def test_task_id_from_keeps_valid_ids_and_maps_thread_ids() -> None:
    assert task_id_from("run-42") == "run-42"
    mapped = task_id_from("user/42/thread")
    assert mapped.startswith("x-") and mapped == task_id_from("user/42/thread")
    assert mapped != task_id_from("user/42/thread2")


@given(st.text(max_size=400) | st.none() | st.integers())
@settings(max_examples=300, deadline=None)
def test_step_name_from_always_gives_a_valid_step_name(value: Any) -> None:
    from charter._model.identifiers import _map_name

    name = step_name_from(value)
    assert name == step_name_from(value) == _map_name(value)  # remembered as first mapped
    Behavior(agent_id="a", task_id="t", kind="step.exec", step_name=name)


def test_step_name_from_framework_objects() -> None:
    assert step_name_from(Point) == "Point"
    assert step_name_from(test_step_name_from_framework_objects).endswith(
        "test_step_name_from_framework_objects"
    )
    assert step_name_from("  tool\n\tname  ") == "tool name"
    assert step_name_from("") == "unnamed"
    assert len(step_name_from("x" * 1000)) == 255


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)


@given(st.recursive(scalars, lambda c: st.lists(c) | st.dictionaries(st.text(max_size=3), c)))
@settings(max_examples=300, deadline=None)
def test_i_json_checker_accepts_exactly_the_i_json_values(value: Any) -> None:
    def is_ijson(v: Any) -> bool:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return True
        if isinstance(v, int):
            return abs(v) <= 2**53 - 1
        if isinstance(v, float):
            return math.isfinite(v)
        if isinstance(v, list):
            return all(is_ijson(x) for x in v)
        return all(is_ijson(x) for x in v.values())

    try:
        copy = checked_copy(value, "v")
    except ValueError as exc:
        assert not is_ijson(value)
        assert str(exc).startswith("v")
    else:
        assert is_ijson(value) and copy == value


def test_bytes_in_a_node_or_message_step_are_judged_as_text_and_noted() -> None:
    from charter.integration import message_step, node_step

    node = node_step("toy", "fetch", {"cmd": b"rm -rf /tmp/x"})
    assert node.input == {"cmd": "rm -rf /tmp/x"}
    assert node.properties["capture"] == {"encoding": {"input.cmd": "bytes as utf-8"}}
    wrapped = node_step("toy", "fetch", b"ls")
    assert wrapped.input == {"input": "ls"}
    assert wrapped.properties["capture"] == {"encoding": {"input.input": "bytes as utf-8"}}
    sent = message_step("toy", "POST", "assistant", b"hi", to=[b"bob@example.com"])
    assert sent.input == {"content": "hi", "to": ["bob@example.com"]}
    assert sent.properties["capture"] == {
        "encoding": {"input.content": "bytes as utf-8", "input.to[0]": "bytes as utf-8"}
    }
    assert "capture" not in node_step("toy", "fetch", {"cmd": "ls"}).properties


plain_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**54), 2**54),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.text(max_size=3), inner, max_size=5),
    ),
    max_leaves=25,
)


@given(
    plain_values,
    st.none() | st.integers(0, 10),
    st.none() | st.integers(0, 4),
    st.integers(0, 4),
)
@settings(max_examples=400, deadline=None)
def test_plain_values_are_captured_as_the_general_walk_captures_them(
    value: Any, max_string: int | None, max_items: int | None, max_depth: int
) -> None:
    from charter._model.capture import _Capture

    general = _Capture(max_string, max_items, max_depth, {})
    expected = general.run(value, 0, set(), "")
    got = capture(value, max_string=max_string, max_items=max_items, max_depth=max_depth)
    assert repr(got) == repr(expected)  # repr: NaN is kept as its text by both
