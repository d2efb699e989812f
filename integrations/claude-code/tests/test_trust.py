"""The trusted record: its pin binds the exact bytes kept, not just the value as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import charter
import pytest
from charter._model.ijson import canonical_json
from charter.integration import sha256_hex
from charter_claude_code._trust import (
    build_record,
    first_format_pin,
    older_record,
    pin_of,
    read_record,
    record_bytes,
    trusted_dir,
    write_record,
)

from .conftest import POLICY


@pytest.fixture
def record() -> dict:
    return build_record([str(POLICY)], ["policies.yaml"], None, None)


def _kept(state: Path) -> Path:
    (path,) = Path(trusted_dir(state)).glob("*.json")
    return path


def test_the_kept_copy_reads_back_as_the_record(tmp_path, record):
    pin = write_record(tmp_path, record)
    assert pin == pin_of(record) == "sha256:" + _kept(tmp_path).stem
    assert _kept(tmp_path).read_bytes() == record_bytes(record)
    assert read_record(tmp_path, pin) == json.loads(json.dumps(record))


def _reordered(data: dict) -> dict:
    for _, documents in data["templates"]["documents"]:
        for document in documents:
            if "verbs" in document:
                document["verbs"] = dict(reversed(list(document["verbs"].items())))
    return data


def _retyped(data: dict) -> dict:
    # An integer param written as a float: 200 and 200.0 are equal as JSON.
    for policy in data["policies"]:
        for key, value in policy["params"].items():
            if type(value) is int:
                policy["params"][key] = float(value)
                return data
    raise AssertionError("the example policies hold no integer param")


@pytest.mark.parametrize("change", [_reordered, _retyped])
def test_a_copy_equal_as_json_but_not_alike_is_not_read(tmp_path, record, change):
    pin = write_record(tmp_path, record)
    forged = change(json.loads(_kept(tmp_path).read_text()))
    # The canonical digest cannot tell them apart; the pin can.
    assert charter.canonical_digest(forged) == charter.canonical_digest(
        json.loads(json.dumps(record))
    )
    _kept(tmp_path).write_text(json.dumps(forged, separators=(",", ":")))
    assert read_record(tmp_path, pin) is None


def test_a_first_format_copy_is_never_read(tmp_path, record):
    older = {**json.loads(json.dumps(record)), "format": 1}
    pin = first_format_pin(record)
    assert pin == pin_of(older) == "sha256:" + charter.canonical_digest(older)
    path = Path(trusted_dir(tmp_path)) / f"{pin.removeprefix('sha256:')}.json"
    path.parent.mkdir(parents=True)
    # Not as the first format kept it, nor as its canonical bytes (which hash to its pin).
    assert "sha256:" + sha256_hex(canonical_json(older)) == pin
    for data in (json.dumps(older).encode(), canonical_json(older)):
        path.write_bytes(data)
        assert older_record(tmp_path, pin)
        assert read_record(tmp_path, pin) is None
