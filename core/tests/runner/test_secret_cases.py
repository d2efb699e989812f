"""Secrets that reached storage in a fault audit: each one is masked in the stored bytes.

Shapes alone miss them: a value under a key that names a secret, the value beside a
name/value pair, the argument after ``--password``, a token inside base64, percent-escapes
or invisible characters, an Entra ID client secret, a task id holding a token.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from charter import Governor

GH = "ghp_" + "FakeToken0" * 3 + "FakeTo"  # 36 characters after the prefix
AZURE = "Fak8Q~" + "Fake.Secret_0~" * 2 + "Fake.S"
WORDS = "sk-test-fake-correct-horse-battery"
PLAIN = "plainfakevaluewithoutdigits"
AWS = "FakeAwsSecretAccessKeyFakeAwsSecretAcces"

CASES: dict[str, tuple[dict[str, Any], str]] = {
    "azure_ad_client_secret": (
        {"command": f"az login --service-principal -u app -p {AZURE} --tenant t"},
        AZURE,
    ),
    "base64_token": ({"blob": base64.b64encode(f"token: {GH}".encode()).decode()}, GH[4:16]),
    "base64url_token": ({"blob": base64.urlsafe_b64encode(GH.encode()).decode()}, GH[4:16]),
    "password_key": ({"password": WORDS}, WORDS),
    "api_key_key": ({"config": {"api_key": PLAIN}}, PLAIN),
    "client_secret_key": ({"client_secret": PLAIN}, PLAIN),
    "aws_secret_access_key_key": ({"aws_secret_access_key": AWS}, AWS),
    "x_api_key_header": ({"headers": {"X-Api-Key": PLAIN}}, PLAIN),
    "password_flag": ({"args": ["mysql", "--password", PLAIN, "db"]}, PLAIN),
    "password_flag_equals": ({"args": ["mysql", f"--password={PLAIN}"]}, PLAIN),
    "name_value_pair": ({"headers": [{"name": "Authorization", "value": PLAIN}]}, PLAIN),
    "key_value_pair": ({"key": "client_secret", "value": PLAIN}, PLAIN),
    "percent_encoded_token": (
        {"url": "https://x.example/?q=" + urllib.parse.quote(f"token={GH}")},
        GH[4:16],
    ),
    "percent_encoded_assignment": (
        {"body": urllib.parse.quote(f"password={WORDS}1!")},
        "correct-horse",
    ),
    "zero_width_inside": ({"text": f"use {GH[:8]}\u200b{GH[8:]} now"}, GH[8:20]),
    "soft_hyphen_inside": ({"text": f"use {GH[:8]}\u00ad{GH[8:]} now"}, GH[8:20]),
}


def _stored(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("audit"))


@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_secret_never_reaches_the_store(tmp_path: Path, store: str, case: str) -> None:
    payload, needle = CASES[case]
    location = f"{store}:///{tmp_path / ('audit.db' if store == 'sqlite' else 'audit.jsonl')}"
    gov = Governor(policies=[], audit_location=location, audit_durability="sync")
    with gov.task("job"), gov.step("step.exec", name="tool", input=payload) as s:
        s.output = {"echo": payload}
    gov.close()
    raw = _stored(tmp_path)
    assert needle.encode() not in raw
    assert b"[REDACTED:" in raw


def test_a_task_id_holding_a_secret_is_stored_as_its_digest(tmp_path: Path) -> None:
    gov = Governor(policies=[], audit_location=f"jsonl:///{tmp_path / 'audit.jsonl'}")
    with gov.task(GH), gov.step("step.exec", name="tool", input={"command": "ls"}):
        pass
    gov.close()
    raw = _stored(tmp_path)
    assert GH[4:].encode() not in raw
    ids = {json.loads(line)["task_id"] for line in raw.decode().splitlines() if line}
    assert len(ids) == 1 and next(iter(ids)).startswith("x-")


def test_ordinary_keys_and_flags_are_kept(tmp_path: Path) -> None:
    gov = Governor(policies=[], audit_location=f"jsonl:///{tmp_path / 'audit.jsonl'}")
    payload = {"args": ["ls", "--color", "auto"], "token_type": "bearer", "max_tokens": 100}
    with gov.task("job"), gov.step("step.exec", name="tool", input=payload):
        pass
    gov.close()
    records = [json.loads(line) for line in _stored(tmp_path).decode().splitlines() if line]
    assert any(r.get("input") == payload for r in records)
