"""What an operator needs: open an audit store, verify its hash chains, read what broke.

``open_store(location)`` opens (creating if needed) a ``sqlite:///``, ``jsonl:///``,
``postgresql://`` (the ``charter[postgresql]`` extra) or ``stdout`` store;
``verify(location_or_store)`` checks every chain and returns a
``VerifyReport`` whose ``breaks`` are ``ChainBreak``s and whose ``gaps`` are ``Gap``s
(records dropped before they were stored, each with its cause; a chain declares them in
``meta["charter.gap"]`` of the record after the hole). ``entry_hash`` and ``canonical_json``
recompute a record's hash the way the stores do. ``is_intent_record`` tells a write-ahead
intent (sync durability: an allowed step's intent, stored before the step ran) from the
step's outcome, which follows it with the same action_id. ``OtlpExporter`` sends every
governed step as OpenTelemetry spans in the GenAI conventions (the ``otlp`` extra); pass it to
``Governor(exporters=...)`` or set ``otlp_endpoint``; with a signing key it sends each signed
checkpoint too, as a ``charter.checkpoint`` span that ``checkpoints_from_spans`` rebuilds.
``task_trace_ids(agent_id, task_id)`` gives the trace and root span ids of a task's trace.

Signed checkpoints: ``create_key_pair(path)`` writes an Ed25519 key (mode 0600) and its
public key beside it; a runner with ``signing_key=`` signs chain heads into ``Checkpoint``s
kept in the store and sent to every ``CheckpointExporter`` (``JsonlCheckpointFile`` is one);
``verify(location, keys=[public key file], checkpoints=[checkpoint file])`` then also checks
the chains against every checkpoint whose signature verifies. ``KeyFileError`` names a key
file that cannot be used or trusted.
"""

from __future__ import annotations

from charter._audit.base import AuditStore, StoreError, is_intent_record
from charter._audit.chain import ChainHead, canonical_json, entry_hash
from charter._audit.checkpoint import Checkpoint, CheckpointExporter, JsonlCheckpointFile
from charter._audit.location import open_store, verify
from charter._audit.report import ChainBreak, Gap, VerifyReport
from charter._audit.signing import KeyFileError, PublicKey, create_key_pair, load_public_key
from charter._runtime.otlp import OtlpExporter, checkpoints_from_spans, task_trace_ids

__all__ = [
    "AuditStore",
    "ChainBreak",
    "ChainHead",
    "Checkpoint",
    "CheckpointExporter",
    "Gap",
    "JsonlCheckpointFile",
    "KeyFileError",
    "OtlpExporter",
    "PublicKey",
    "StoreError",
    "VerifyReport",
    "canonical_json",
    "checkpoints_from_spans",
    "create_key_pair",
    "entry_hash",
    "is_intent_record",
    "load_public_key",
    "open_store",
    "task_trace_ids",
    "verify",
]
