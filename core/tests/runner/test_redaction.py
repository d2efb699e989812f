"""Redaction: no secret reaches the stored bytes in any payload mode; the modes' shapes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import charter
import pytest
from charter import BlockedError, Governor, Runner, canonical_digest

_QUOTING = [
    {
        "name": "bash-must-be-safe",
        "rule_type": "field_matches",
        "severity": "info",
        "match": {"step_names": ["bash"]},
        "params": {"field": "input.command", "pattern": "^safe", "mode": "require"},
    },
    {
        "name": "danger-must-be-safe",
        "rule_type": "field_matches",
        "severity": "critical",
        "match": {"step_names": ["danger"]},
        "params": {"field": "input.command", "pattern": "^safe", "mode": "require"},
    },
]


@pytest.mark.parametrize("mode", ["full", "metadata_only", "sha256"])
@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
def test_no_secret_reaches_the_stored_bytes(
    tmp_path: Path, mode: str, store: str, secrets_corpus: list[tuple[str, str]]
) -> None:
    assert len(secrets_corpus) >= 25
    location = f"{store}:///{tmp_path / ('audit.db' if store == 'sqlite' else 'audit.jsonl')}"
    gov = Governor(
        policies=_QUOTING, audit_location=location, payload_mode=mode, audit_durability="sync"
    )
    with gov.task("secrets", name="job", input={"prompt": secrets_corpus[0][0]}):
        for text, _ in secrets_corpus:
            with gov.step(
                "step.exec",
                name="bash",
                input={"command": text, "nested": {"list": [f"x {text} y"]}},
                properties={"target": {"url": text}, "deep": [{"x": text}]},
            ) as s:
                s.output = {"stdout": f"got {text}", text: "as a key"}
            with pytest.raises(BlockedError):
                gov.begin_step("step.exec", name="danger", input={"command": text})
            with pytest.raises(RuntimeError), gov.step("step.exec", name="bash"):
                raise RuntimeError(f"failed with {text}")
    status = gov.status()
    gov.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("audit"))
    assert b"[REDACTED:" in raw
    leaked = [needle for _, needle in secrets_corpus if needle.encode() in raw]
    assert leaked == []
    assert status["counters"]["redaction_errors"] == 0
    assert status["counters"]["secrets_masked"] >= len(secrets_corpus) * 5
    assert charter.verify(location).ok


def test_verdict_details_are_masked_even_when_cut_short(
    make_runner: Callable[..., Runner], read_chain: Callable[..., Any]
) -> None:
    token = "sk-" + "ant-" + "api03-" + ("AbCd1234_-EfGh" * 7)[:93] + "AA"
    gov = Governor(make_runner(policies=_QUOTING))
    with gov.task("t1"), pytest.raises(BlockedError) as info:
        gov.begin_step("step.exec", name="danger", input={"command": token})
    assert token[:60] in info.value.reason  # the agent sees its own input, the trail does not
    detail = read_chain("t1")[1]["meta"]["charter.eval"]["violations"][0]["details"]
    assert token[:20] not in detail
    assert "[REDACTED:" in detail


def test_payload_mode_shapes(
    make_runner: Callable[..., Runner], read_chain: Callable[..., Any], db: str
) -> None:
    payload = {"command": "echo hello!!", "n": 3, "flags": ["a", "b"], "env": {"A": "1"}}
    for mode, task in (("metadata_only", "m"), ("sha256", "h")):
        gov = Governor(make_runner(payload_mode=mode))
        with gov.task(task), gov.step("step.exec", name="bash", input=payload) as s:
            s.output = {"stdout": "hello"}
        gov.flush(5)
    meta_rec = read_chain("m")[1]
    assert meta_rec["input"] == {
        "command": {"type": "string", "size": 12},
        "n": {"type": "number"},
        "flags": {"type": "array", "size": 2},
        "env": {"type": "object", "size": 1},
    }
    assert meta_rec["output"] == {"stdout": {"type": "string", "size": 5}}
    sha_rec = read_chain("h")[1]
    assert sha_rec["input"]["command"] == {"sha256": canonical_digest("echo hello!!")}
    assert sha_rec["input"]["env"] == {"sha256": canonical_digest({"A": "1"})}
    assert sha_rec["output"] == {"stdout": {"sha256": canonical_digest("hello")}}


def test_gate_verdicts_are_kept_in_every_mode(
    make_runner: Callable[..., Runner], read_chain: Callable[..., Any]
) -> None:
    gov = Governor(
        make_runner(payload_mode="metadata_only"), approver=charter.callback_approver(bool)
    )
    with gov.task("t1"), gov.step("step.resource", "DELETE", name="delete_x", input={"id": 1}):
        pass
    gov.flush(5)
    gate = read_chain("t1")[1]
    assert gate["output"]["decision"] == "pass"


@pytest.mark.allow_internal_errors
def test_a_redaction_failure_replaces_the_payload_by_a_marker(
    make_runner: Callable[..., Runner],
    read_chain: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(text: str) -> tuple[str, int]:
        raise RuntimeError("scanner broke")

    monkeypatch.setattr("charter._runtime.redact.mask_secrets", broken)
    runner = make_runner()
    gov = Governor(runner)
    secret = "ghp_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    with gov.task("t1"), gov.step("step.exec", name="bash", input={"command": secret}) as s:
        s.output = {"ok": True}
    runner.flush(5)
    step, end = read_chain("t1")[1:]
    assert step["input"] == {"charter.redaction_failed": "RuntimeError"}
    assert end["meta"]["charter.chain"]["final"] is True
    assert runner.status()["counters"]["redaction_errors"] >= 1
