"""Capture notes every bytes value it read as text under the path where it was found."""

from __future__ import annotations

from charter._model.capture import capture_noted


def test_each_bytes_value_is_noted_at_its_own_path() -> None:
    value = {"a": [{"b": b"x"}], "c": {"d": [b"y", [b"z"]]}, 5: b"w", "e": "plain"}
    captured, notes = capture_noted(value)
    assert captured == {"a": [{"b": "x"}], "c": {"d": ["y", ["z"]]}, "5": "w", "e": "plain"}
    assert notes == {
        "a[0].b": "bytes as utf-8",
        "c.d[0]": "bytes as utf-8",
        "c.d[1][0]": "bytes as utf-8",
        "5": "bytes as utf-8",
    }


def test_bytes_at_the_top_and_in_a_top_level_list() -> None:
    assert capture_noted(b"ls") == ("ls", {"": "bytes as utf-8"})
    assert capture_noted([b"a", "b"]) == (["a", "b"], {"[0]": "bytes as utf-8"})


def test_plain_values_keep_their_exact_json_form() -> None:
    value = {"n": 2**60, "f": float("nan"), "ok": True, "none": None, "x": 1.5, "s": "t"}
    captured, notes = capture_noted(value)
    assert captured == {"n": str(2**60), "f": "nan", "ok": True, "none": None, "x": 1.5, "s": "t"}
    assert notes == {}
