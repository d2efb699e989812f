"""Recorded Ollama traffic (cassettes made by record.py) replayed with the network blocked."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import charter
import pytest
from charter.testing import charter_internal_errors  # noqa: F401  (autouse)

CASSETTES = Path(__file__).parent / "cassettes"


@pytest.fixture(scope="module")
def vcr_cassette_dir() -> str:
    return str(CASSETTES)


@pytest.fixture(scope="module")
def vcr_config() -> dict[str, Any]:
    return {
        "record_mode": "none",
        "filter_headers": ["authorization", "cookie"],
        "allow_playback_repeats": False,
    }


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith(("CHARTER_", "OLLAMA_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def governor(tmp_path: Path) -> Iterator[Callable[..., charter.Governor]]:
    built: list[charter.Governor] = []

    def make(*policies: dict[str, Any], **settings: Any) -> charter.Governor:
        settings.setdefault("audit_location", f"sqlite:///{tmp_path / 'audit.db'}")
        settings.setdefault("audit_durability", "sync")
        gov = charter.Governor(policies=list(policies), agent_id="ollama-bot", **settings)
        built.append(gov)
        return gov

    yield make
    for gov in built:
        gov.close(5.0)
