"""What an operator needs: open an audit store, verify its hash chains, read what broke.

``open_store(location)`` opens (creating if needed) a ``sqlite:///``, ``jsonl:///`` or
``stdout`` store; ``verify(location_or_store)`` checks every chain and returns a
``VerifyReport`` whose ``breaks`` are ``ChainBreak``s and whose ``gaps`` are ``Gap``s
(records dropped before they were stored, each with its cause; a chain declares them in
``meta["charter.gap"]`` of the record after the hole). ``entry_hash`` and ``canonical_json``
recompute a record's hash the way the stores do.
"""

from __future__ import annotations

from charter._audit.base import AuditStore, ChainBreak, Gap, StoreError, VerifyReport
from charter._audit.chain import ChainHead, canonical_json, entry_hash
from charter._audit.location import open_store, verify

__all__ = [
    "AuditStore",
    "ChainBreak",
    "ChainHead",
    "Gap",
    "StoreError",
    "VerifyReport",
    "canonical_json",
    "entry_hash",
    "open_store",
    "verify",
]
