"""Fixtures for the runner, Governor and audit-trail tests: real SQLite files under tmp_path."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import charter
import pytest
from charter import Runner, Settings, StoreError, VerifyReport
from charter._audit.chain import ChainHead
from charter._audit.sqlite import SQLiteStore

POLICIES: list[dict[str, Any]] = [
    {
        "name": "no-rm",
        "rule_type": "field_matches",
        "severity": "critical",
        "params": {"field": "input.command", "pattern": "rm -rf"},
    },
    {
        "name": "warn-curl",
        "rule_type": "field_matches",
        "severity": "medium",
        "params": {"field": "input.command", "pattern": "curl"},
    },
    {
        "name": "ask-delete",
        "rule_type": "deny",
        "severity": "high",
        "action": "ask",
        "match": {"step_names": ["delete_*"]},
        "params": {"reason": "deleting needs a human"},
    },
]

MANIFEST = """\
name: test
version: 1
policies:
  - name: no-rm
    rule_type: field_matches
    severity: critical
    params: {field: input.command, pattern: "rm -rf"}
"""


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # No CHARTER_* variable of the machine may leak in, and the default audit location
    # (relative to the working directory) must land in tmp_path, never in the repository.
    for name in list(os.environ):
        if name.startswith("CHARTER_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def policies() -> list[dict[str, Any]]:
    return [dict(p) for p in POLICIES]


@pytest.fixture
def manifest_text() -> str:
    return MANIFEST


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'audit.db'}"


@pytest.fixture
def make_runner(db: str) -> Iterator[Callable[..., Runner]]:
    """Runner factory: inline POLICIES and the tmp SQLite store unless told otherwise."""
    made: list[Runner] = []

    def make(**kwargs: Any) -> Runner:
        store = kwargs.pop("store", None)
        exporters = kwargs.pop("exporters", ())
        if not {"policies", "policy_file", "policy_cache_path"} & set(kwargs):
            kwargs["policies"] = POLICIES
        kwargs.setdefault("audit_location", db)
        runner = Runner(Settings.from_sources(**kwargs), store=store, exporters=exporters)
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.close(timeout=5)


@pytest.fixture
def read_chain(db: str) -> Callable[..., list[dict[str, Any]]]:
    """The stored records of one task (agent "default" unless given)."""

    def read(
        task_id: str, agent_id: str = "default", location: str | None = None
    ) -> list[dict[str, Any]]:
        store = charter.open_store(location or db)
        try:
            return store.read_task(task_id, agent_id)
        finally:
            store.close()

    return read


def _fill(alphabet: str, n: int) -> str:
    return (alphabet * (n // len(alphabet) + 1))[:n]


def secret_corpus() -> list[tuple[str, str]]:
    """At least 25 fake secrets of distinct shapes, assembled at run time (no real ones).

    Each item is (text holding the secret, a distinctive part that must never be stored).
    """
    hexs = _fill("0123456789abcdef", 40)
    b62 = _fill("AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", 60)
    pem_line = _fill("FakeKeyMaterial0", 64)
    pem_body = "\n".join([pem_line] * 3)
    jwt = ".".join(
        [
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
            "eyJzdWIiOiJmYWtlLXVzZXIifQ",
            _fill("FakeSignature0_-", 43),
        ]
    )
    tokens = [
        "ghp_" + b62[:36],
        "github_pat_" + _fill("A1b2C3d4E5", 22) + "_" + _fill("Z9y8X7w6V5", 59),
        "gho_" + b62[1:37],
        "AKIA" + _fill("ABCDEFGHIJKLMNOP234567", 16),
        "xoxb-" + "1234567890" + "-" + "1234567890123" + "-" + _fill("AbCdEf123456", 24),
        "xoxp-" + "1234567890" + "-" + "1234567890" + "-" + "1234567890123" + "-" + hexs[:32],
        "sk-" + "proj-" + _fill("AbCd1234EfGh5678", 48),
        "sk-" + "ant-" + "api03-" + _fill("AbCd1234_-EfGh", 93) + "AA",
        "glpat-" + _fill("AbCd1234Ef", 20),
        "AIza" + _fill("AbCd1234EfGh_-", 35),
        "sk_" + "live_" + _fill("AbCd1234EfGh", 24),
        "rk_" + "live_" + _fill("QwEr5678TyUi", 24),
        jwt,
        "npm_" + _fill("AbCd1234Ef", 36),
        "pypi-" + "AgEIcHlwaS5vcmc" + _fill("AbCd1234EfGh", 60),
        "SG." + _fill("AbCd1234Ef", 22) + "." + _fill("GhIj5678Kl", 43),
        "hf_" + _fill("AbCdEfGhIj", 34),
        "dop_v1_" + hexs + _fill("0123456789abcdef", 24),
        "shpat_" + _fill("0123456789abcdef", 32),
    ]
    items = [(t, t) for t in tokens]
    items += [
        (
            "-----BEGIN RSA " + "PRIVATE KEY-----\n" + pem_body + "\n-----END RSA PRIVATE KEY-----",
            pem_line,
        ),
        (
            "-----BEGIN OPENSSH "
            + "PRIVATE KEY-----\n"
            + pem_body.lower()
            + "\n-----END OPENSSH PRIVATE KEY-----",
            pem_line.lower(),
        ),
        ("password=" + "Hunter2!xyz", "Hunter2!xyz"),
        ('api_key = "' + _fill("q1w2e3r4t5", 24) + '"', _fill("q1w2e3r4t5", 24)),
        ("Authorization: Bearer " + _fill("MnOp9876QrSt", 40), _fill("MnOp9876QrSt", 40)),
        ("postgres://admin:" + "S3cr3tP4ss" + "@db.example.com:5432/app", "S3cr3tP4ss"),
        ("DB_PASSWORD=" + "correcthorsebattery", "correcthorsebattery"),
        ("SECRET_TOKEN=" + _fill("Zx9Yw8", 30), _fill("Zx9Yw8", 30)),
    ]
    return items


@pytest.fixture
def secrets_corpus() -> list[str]:
    return secret_corpus()


class FlakyStore:
    """An AuditStore whose append fails while `failing` is set (and can be slowed down)."""

    location = "memory://flaky"

    def __init__(self, failing: bool = True, delay: float = 0.0) -> None:
        self.failing = failing
        self.delay = delay
        self.inner = SQLiteStore(":memory:")
        self.calls = 0

    def append(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        if self.failing:
            raise StoreError("flaky store is down")
        return self.inner.append(entries)

    def head(self, agent_id: str, task_id: str) -> ChainHead:
        return self.inner.head(agent_id, task_id)

    def list_tasks(self, agent_id: str | None = None) -> list[Any]:
        return self.inner.list_tasks(agent_id)

    def read_task(self, task_id: str, agent_id: str | None = None) -> list[dict[str, Any]]:
        return self.inner.read_task(task_id, agent_id)

    def verify(self, task_id: str | None = None) -> VerifyReport:
        return self.inner.verify(task_id)

    def add_checkpoints(self, checkpoints: Sequence[Mapping[str, Any]]) -> None:
        if self.failing:
            raise StoreError("flaky store is down")
        self.inner.add_checkpoints(checkpoints)

    def read_checkpoints(self) -> list[object]:
        return self.inner.read_checkpoints()

    def health(self) -> dict[str, Any]:
        return {"ok": not self.failing, "location": self.location, "detail": "fake"}

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def flaky_store() -> Iterator[Callable[..., FlakyStore]]:
    """Factory of in-memory stores that fail (or are slow) on demand."""
    made: list[FlakyStore] = []

    def make(failing: bool = True, delay: float = 0.0) -> FlakyStore:
        store = FlakyStore(failing, delay)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
