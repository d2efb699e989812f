"""A Governor with a signing key checkpoints its chains' heads: when, where, and what fails."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import charter
import pytest
from charter import Governor
from charter.audit import Checkpoint, create_key_pair, verify


@pytest.fixture
def key(tmp_path: Path) -> charter.audit.PublicKey:
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700)
    pair = create_key_pair(folder / "signing")
    return charter.audit.load_public_key(pair.public_path)


def _signing(key: Any) -> str:
    return key.path.removesuffix(".pub")


def _steps(gov: Governor, count: int) -> None:
    for n in range(count):
        with gov.step("step.exec", name="bash", input={"command": f"echo {n}"}) as step:
            step.complete({"exit_code": 0})


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line)["charter.checkpoint"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("durability", ["buffered", "sync"])
def test_heads_are_signed_at_task_end_every_n_records_and_at_close(
    tmp_path: Path, key: Any, durability: str
) -> None:
    outside = tmp_path / "outside.jsonl"
    gov = Governor(
        policies=[],
        audit_location=f"sqlite:///{tmp_path / 'audit.db'}",
        audit_durability=durability,
        signing_key=_signing(key),
        checkpoint_file=str(outside),
        checkpoint_every=20,
    )
    with gov.task("short"):
        _steps(gov, 2)
    gov.runner.flush(5)
    records = 4 if durability == "buffered" else 6  # sync: every step's intent comes first
    assert [(c["task_id"], c["seq"]) for c in _lines(outside)] == [("short", records)]
    with gov.task("long"):
        _steps(gov, 16)  # 20 records since the last checkpoint: 'long' is signed mid-task
        gov.runner.flush(5)
        assert [c["task_id"] for c in _lines(outside)] == ["short", "long"]
    gov.start_task("open")
    _steps_in(gov, "open", 1)
    status = gov.status()["checkpoints"]
    assert status["key_id"] == key.key_id and status["failed"] == 0
    gov.close()
    signed = _lines(outside)
    assert [c["task_id"] for c in signed] == ["short", "long", "long", "open"]
    assert all(c["key_id"] == key.key_id for c in signed)
    store = charter.open_store(tmp_path / "audit.db")
    try:
        heads = {t.task_id: t.steps for t in store.list_tasks()}
    finally:
        store.close()
    assert (signed[2]["seq"], signed[3]["seq"]) == (heads["long"], heads["open"])
    report = verify(tmp_path / "audit.db", keys=[key], checkpoints=[outside])
    assert report.ok and report.warnings == [], str(report)
    assert report.checkpoints == len(signed)


def _steps_in(gov: Governor, task_id: str, count: int) -> None:
    for n in range(count):
        with gov.step(
            "step.exec", name="bash", input={"command": f"echo {n}"}, task_id=task_id
        ) as step:
            step.complete({"exit_code": 0})


class Collector:
    """A checkpoint exporter of one's own (an OTLP or database exporter has this shape)."""

    def __init__(self) -> None:
        self.got: list[Checkpoint] = []

    def export_checkpoints(self, checkpoints: Sequence[Checkpoint]) -> None:
        self.got.extend(checkpoints)


class Broken:
    def export_checkpoints(self, checkpoints: Sequence[Checkpoint]) -> None:
        raise OSError("collector unreachable")


@pytest.mark.allow_internal_errors
def test_exporters_get_checkpoints_and_their_failures_are_counted_not_raised(
    tmp_path: Path, key: Any
) -> None:
    mine, broken = Collector(), Broken()
    gov = Governor(
        policies=[],
        audit_location=f"jsonl:///{tmp_path / 'audit.jsonl'}",
        signing_key=_signing(key),
        exporters=(mine, broken),
    )
    with gov.task("t1"):
        _steps(gov, 3)
    gov.runner.flush(5)
    status = gov.status()["checkpoints"]
    gov.close()
    assert [(c.task_id, c.seq) for c in mine.got] == [("t1", 5)]
    assert status["export_failed"] == 1 and status["written"] == 1
    assert key.verifies(mine.got[0].signature, mine.got[0].signed_bytes())
    assert verify(tmp_path / "audit.jsonl", keys=[key]).ok


@pytest.mark.allow_internal_errors
def test_a_store_that_refuses_checkpoints_never_reaches_the_agent(
    tmp_path: Path, key: Any, flaky_store: Any
) -> None:
    store = flaky_store(failing=False)
    outside = tmp_path / "outside.jsonl"
    gov = Governor(
        charter.Runner(
            charter.Settings.from_sources(
                policies=[], signing_key=_signing(key), checkpoint_file=str(outside)
            ),
            store=store,
        )
    )
    original = store.inner.add_checkpoints

    def refuse(checkpoints: Any) -> None:
        raise charter.StoreError("store refuses checkpoints")

    store.inner.add_checkpoints = refuse
    with gov.task("t1"):
        _steps(gov, 1)
    gov.runner.flush(5)
    assert gov.status()["checkpoints"]["failed"] == 1
    store.inner.add_checkpoints = original  # it recovers: the head is offered again at close
    gov.runner.close()
    assert [c["task_id"] for c in _lines(outside)] == ["t1", "t1"]
    report = verify(store, keys=[key], checkpoints=[outside])  # read_task, chain by chain
    assert report.ok, str(report)
    assert "1 signed checkpoint of" in report.warnings[0]  # the one the store refused


def test_an_unusable_key_stops_the_runner_before_anything_runs(tmp_path: Path, key: Any) -> None:
    private = _signing(key)
    os.chmod(private, 0o644)
    with pytest.raises(
        ValueError, match=r"signing_key= / CHARTER_SIGNING_KEY: signing key .* 0644"
    ):
        Governor(policies=[], audit_location=f"sqlite:///{tmp_path / 'a.db'}", signing_key=private)
    with pytest.raises(ValueError, match=r"CHARTER_SIGNING_KEY: signing key .* does not exist"):
        Governor(policies=[], audit_location="stdout", signing_key=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="checkpoint_file= / CHARTER_CHECKPOINT_FILE needs"):
        charter.Settings.from_sources(policies=[], checkpoint_file=str(tmp_path / "c.jsonl"))
    with pytest.raises(ValueError, match="needs an audit store"):
        charter.Settings.from_sources(policies=[], audit_location="none", signing_key=private)


def test_the_key_comes_from_the_environment_too(
    tmp_path: Path, key: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHARTER_SIGNING_KEY", _signing(key))
    monkeypatch.setenv("CHARTER_CHECKPOINT_EVERY", "7")
    settings = charter.Settings.from_sources(policies=[])
    assert (settings.signing_key, settings.checkpoint_every) == (_signing(key), 7)
    assert settings.origin("signing_key") == "env"
