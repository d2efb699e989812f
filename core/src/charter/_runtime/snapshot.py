"""Saved task histories: restoring a long task without reading and replaying its whole trail.

A one-shot process (the Claude Code hook) restores its task from the audit store on every
call, which costs more the longer the task. After it has recorded, it can save the task's
history indexes (`PolicyEngine.export_task`) in a snapshot file keyed by the chain head the
store holds then; the next process loads them when the store's head is still that one, and
reads the steps only if a rule asks for an index that was not saved.

The agent may be able to write where snapshots lie, so a snapshot is trusted only when its
HMAC-SHA256 under a key kept outside the project verifies: the project's decision server
folder (``~/.charter/serve/<key>/``, see `charter._runtime.project_files`), which the Claude Code
hook protects against reading and writing. Without a home directory that folder would be
inside the project, and there are no snapshots. A snapshot that does not verify, was saved
for another head, agent, task or format, or does not load is ignored: the task is then
rebuilt from the store, as without snapshots.

File: one line with the hex HMAC of the body, then the body (JSON). Bump `FORMAT` whenever
what an index's state means changes, so that no process loads a state another version saved.
"""

from __future__ import annotations

import os

from charter._model import stdjson
from charter._model.sha256 import compare_digest, hmac_sha256_hex, sha256_hex
from charter._runtime.atomic import write_atomically
from charter._runtime.project_files import ensure_secret, private_dir, read_secret, serve_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["FORMAT", "HistorySnapshots", "project_snapshots"]

FORMAT = 1
# A snapshot larger than this is not read (nor written): reading it would cost more than it
# saves, and a huge file in the folder is not ours.
_MAX_BYTES = 64 * 1024 * 1024


class HistorySnapshots:
    """Snapshot files in `folder`, authenticated with `key` (text, the HMAC key)."""

    __slots__ = ("_key", "folder")

    def __init__(self, folder: str, key: str) -> None:
        self.folder = folder
        self._key = key.encode("ascii")

    def path(self, agent_id: str, task_id: str) -> str:
        name = sha256_hex(f"{agent_id}\0{task_id}".encode("utf-8", "surrogatepass"))
        return os.path.join(self.folder, name[:32] + ".snapshot")

    def _sign(self, body: bytes) -> str:
        return hmac_sha256_hex(self._key, body)

    def load(
        self, agent_id: str, task_id: str, head_seq: int, head_hash: str | None
    ) -> dict[str, Any] | None:
        """The snapshot saved for this agent, task and chain head, or None (missing,
        unreadable, not authentic, or saved for anything else)."""
        try:
            with open(self.path(agent_id, task_id), "rb") as handle:
                data = handle.read(_MAX_BYTES + 1)
        except OSError:
            return None
        if len(data) > _MAX_BYTES:
            return None
        mac, sep, body = data.partition(b"\n")
        if not sep or not compare_digest(mac, self._sign(body).encode("ascii")):
            return None
        try:
            found = stdjson.loads(body)
        except ValueError:
            return None
        if not (
            type(found) is dict
            and found.get("format") == FORMAT
            and found.get("agent_id") == agent_id
            and found.get("task_id") == task_id
            and type(found.get("head_seq")) is int
            and found["head_seq"] == head_seq
            and found.get("head_hash") == head_hash
            and type(found.get("reserved")) is int
            and type(found.get("history")) is dict
        ):
            return None
        return found

    def save(
        self,
        agent_id: str,
        task_id: str,
        head_seq: int,
        head_hash: str | None,
        reserved: int,
        history: Mapping[str, Any],
    ) -> bool:
        """Write the snapshot of `history` (`PolicyEngine.export_task`) for this chain head,
        replacing the task's previous one; returns whether it was written (never raises)."""
        try:
            body = stdjson.dumps(
                {
                    "format": FORMAT,
                    "agent_id": agent_id,
                    "task_id": task_id,
                    "head_seq": head_seq,
                    "head_hash": head_hash,
                    "reserved": reserved,
                    "history": history,
                },
                separators=(",", ":"),
                ensure_ascii=True,
                allow_nan=False,
            ).encode("ascii")
        except ValueError:  # a sum that overflowed to infinity: no snapshot
            return False
        if len(body) > _MAX_BYTES:
            return False
        signed = self._sign(body).encode("ascii") + b"\n" + body
        try:
            private_dir(self.folder)
            write_atomically(self.path(agent_id, task_id), signed, mode=0o600)
        except OSError:
            pass
            return False
        return True


def project_snapshots(
    root: str | os.PathLike[str], environ: Mapping[str, str] | None = None, *, create: bool
) -> HistorySnapshots | None:
    """The snapshots of the project at `root`, under its decision server folder's
    ``snapshot.key`` (created when `create` and missing); None without a key, or when that
    folder would lie inside the project (no home directory)."""
    folder = serve_dir(root, environ)
    real_root = os.path.realpath(os.fspath(root))
    if os.path.commonpath([real_root, os.path.realpath(folder)]) == real_root:
        return None
    key_path = os.path.join(folder, "snapshot.key")
    try:
        key = ensure_secret(key_path) if create else read_secret(key_path)
    except OSError:
        return None
    if key is None:
        return None
    return HistorySnapshots(os.path.join(folder, "history"), key)
