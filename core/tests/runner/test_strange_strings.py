"""Strings no store can encode (a lone surrogate) are escaped, never dropped."""

from __future__ import annotations

from pathlib import Path

import charter
import pytest
from charter import Governor

ASK = {
    "name": "curl-needs-approval",
    "rule_type": "field_matches",
    "severity": "high",
    "action": "ask",
    "match": {"step_names": ["bash"]},
    "params": {"field": "input.command", "pattern": "curl"},
}


@pytest.mark.parametrize("durability", ["sync", "buffered"])
@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
def test_a_lone_surrogate_is_escaped_in_every_store(
    tmp_path: Path, store: str, durability: str
) -> None:
    location = f"{store}:///{tmp_path / ('audit.db' if store == 'sqlite' else 'audit.jsonl')}"
    approved = []

    def approve(request: charter.ApprovalRequest) -> bool:
        approved.append(request)
        return True

    gov = Governor(
        policies=[ASK],
        audit_location=location,
        audit_durability=durability,
        approver=charter.callback_approver(approve),
    )
    with gov.task("job"):
        with gov.step("step.resource", "GET", name="read", input={"path": "\udc80x"}) as s:
            s.output = {"text": "key \ud800 here", "\udfff": 1}
        with gov.step("step.exec", name="bash", input={"command": "curl \udc80 -d @f"}):
            pass
    status = gov.status()
    gov.close()
    assert len(approved) == 1
    assert status["counters"]["redaction_errors"] == 0
    assert charter.verify(location).ok
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("audit"))
    # The surrogate is kept as text: a backslash (doubled by JSON), u and its hex digits.
    for kept in (b"\\\\udc80x", b"key \\\\ud800 here", b"curl \\\\udc80 -d @f", b"\\\\udfff"):
        assert kept in raw
