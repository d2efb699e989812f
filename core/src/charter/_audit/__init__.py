"""Audit stores and chain verification (internal; the public API re-exports what it needs)."""

from __future__ import annotations

from charter._audit.base import (
    AuditStore,
    BreakReason,
    ChainBreak,
    StoreError,
    TaskSummary,
    VerifyReport,
)
from charter._audit.chain import (
    CLOSING_KINDS,
    ChainHead,
    canonical_bytes,
    canonical_json,
    entry_hash,
    is_closing,
)
from charter._audit.jsonl import JsonlStore
from charter._audit.location import open_existing_store, open_store, parse_location
from charter._audit.sqlite import SQLiteStore
from charter._audit.stdout import StdoutStore
from charter._audit.verify import verify

__all__ = [
    "CLOSING_KINDS",
    "AuditStore",
    "BreakReason",
    "ChainBreak",
    "ChainHead",
    "JsonlStore",
    "SQLiteStore",
    "StdoutStore",
    "StoreError",
    "TaskSummary",
    "VerifyReport",
    "canonical_bytes",
    "canonical_json",
    "entry_hash",
    "is_closing",
    "open_existing_store",
    "open_store",
    "parse_location",
    "verify",
]
