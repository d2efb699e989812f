"""What `verify` detects at each level of evidence, case by case, in SQLite and JSONL stores.

Three levels: the hash chains alone (no key); with the public key, against the signed
checkpoints kept in the store; with the key and a checkpoint file kept outside the store.
The adversary can write the store (every file of it) but cannot read the signing key and
cannot rewrite the outside checkpoint file (whose lines are still only trusted once their
signatures verify).

Layout: chain (agent-a, t1) has seqs 1-6 and is closed by a task.end at seq 6, checkpointed
when it ended; chain (agent-a, t2) has seqs 1-6, open, checkpointed when the runner closed.
A copy of the store was taken while t2 had only seqs 1-4 (the "older copy").

Each case lists, for no key / key / key + checkpoint file, the break reason verify reports
(None: the trail verifies, the tampering goes unseen; "warn": it verifies with a warning
about checkpoints). Every case is detected with the key and the checkpoint file, except two
that leave every record the checkpoint file vouches for intact: checkpoints deleted from the
store, and (JSONL) a record appended after the last checkpoint; both come with a warning.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from charter._audit.chain import entry_hash
from charter._audit.checkpoint import CHECKPOINT_KEY, JsonlCheckpointFile
from charter._audit.location import open_store, verify
from charter._audit.signing import create_key_pair, load_signing_key
from charter._runtime.checkpoints import Checkpointer

EntryFactory = Callable[..., dict[str, Any]]


@dataclass
class Trail:
    """A populated store of one kind, with the handles a tampering needs."""

    kind: str
    path: Path
    older: Path
    outside: Path
    public: Path
    other_key: Path
    records: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)

    # -- reading and writing the raw files -------------------------------------------------

    def sql(self, statement: str, *params: Any) -> None:
        conn = sqlite3.connect(self.path)
        try:
            conn.execute(statement, params)
            conn.commit()
        finally:
            conn.close()

    def lines(self, path: Path | None = None) -> list[bytes]:
        return (path or self.path).read_bytes().splitlines(keepends=True)

    def write_lines(self, lines: list[bytes], path: Path | None = None) -> None:
        (path or self.path).write_bytes(b"".join(lines))

    # -- tamperings, each the same in both kinds -------------------------------------------

    def delete_records(self, task: str, seqs: list[int]) -> None:
        if self.kind == "sqlite":
            marks = ", ".join("?" * len(seqs))
            self.sql(f"DELETE FROM steps WHERE task_id = ? AND seq IN ({marks})", task, *seqs)
            return
        gone = {rfc8785.dumps(self.records[(task, s)]) + b"\n" for s in seqs}
        self.write_lines([line for line in self.lines() if line not in gone])

    def set_head(self, task: str, seq: int, digest: str | None) -> None:
        """Move the recorded head (SQLite chains table, JSONL head file) to `seq`."""
        if self.kind == "sqlite":
            self.sql(
                "UPDATE chains SET head_seq = ?, head_hash = ? WHERE task_id = ?", seq, digest, task
            )
            return
        heads = Path(f"{self.path}.heads")
        kept = [line for line in self.lines(heads) if f'"task_id":"{task}"'.encode() not in line]
        if seq:
            note = {"agent_id": "agent-a", "task_id": task, "seq": seq, "hash": digest}
            kept.append(rfc8785.dumps({**note, "closed": False}) + b"\n")
        self.write_lines(kept, heads)

    def rewrite_tail(self, task: str, first: int, make_entry: EntryFactory) -> None:
        """Replace seqs first.. of `task` by other, correctly chained records, head moved."""
        last = max(s for t, s in self.records if t == task)
        self.delete_records(task, list(range(first, last + 1)))
        prev = self.records[(task, first - 1)]["hash"]
        for seq in range(first, last + 1):
            record = make_entry(task, n=900 + seq, input={"query": "nothing happened"})
            record.update(seq=seq, prev_hash=prev)
            record["hash"] = prev = entry_hash(record)
            self.insert(record)
        self.set_head(task, last, prev)

    def insert(self, record: dict[str, Any]) -> None:
        if self.kind == "jsonl":
            self.write_lines([*self.lines(), rfc8785.dumps(record) + b"\n"])
            return
        self.sql(
            "INSERT INTO steps (agent_id, task_id, seq, hash, prev_hash, kind, timestamp, body) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            *(record[k] for k in ("agent_id", "task_id", "seq", "hash", "prev_hash", "kind")),
            record["timestamp"],
            rfc8785.dumps(record).decode(),
        )

    def delete_task(self, task: str) -> None:
        if self.kind == "sqlite":
            self.sql("DELETE FROM steps WHERE task_id = ?", task)
            self.sql("DELETE FROM chains WHERE task_id = ?", task)
            return
        seqs = [s for t, s in self.records if t == task]
        self.delete_records(task, seqs)
        self.set_head(task, 0, None)

    def checkpoints(self) -> list[dict[str, Any]]:
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.path)
            try:
                rows = conn.execute("SELECT body FROM checkpoints ORDER BY id").fetchall()
            finally:
                conn.close()
            return [json.loads(body) for (body,) in rows]
        return [
            json.loads(line)
            for line in self.lines()
            if line.startswith(b'{"' + CHECKPOINT_KEY.encode())
        ]

    def set_checkpoints(self, kept: list[dict[str, Any]]) -> None:
        """Replace every checkpoint in the store by `kept` (wire forms)."""
        if self.kind == "sqlite":
            self.sql("DELETE FROM checkpoints")
            for wire in kept:
                body = wire[CHECKPOINT_KEY]
                self.sql(
                    "INSERT INTO checkpoints (agent_id, task_id, seq, body) VALUES (?, ?, ?, ?)",
                    body["agent_id"],
                    body["task_id"],
                    body["seq"],
                    rfc8785.dumps(wire).decode(),
                )
            return
        prefix = b'{"' + CHECKPOINT_KEY.encode()
        lines = [line for line in self.lines() if not line.startswith(prefix)]
        self.write_lines(lines + [rfc8785.dumps(w) + b"\n" for w in kept])

    def replace_with(self, source: Path) -> None:
        shutil.copyfile(source, self.path)
        if self.kind == "jsonl":
            shutil.copyfile(f"{source}.heads", f"{self.path}.heads")


def _build(kind: str, directory: Path, make_entry: EntryFactory) -> Trail:
    keys = directory / "keys"
    keys.mkdir(mode=0o700)
    pair = create_key_pair(keys / "signing")
    other = create_key_pair(keys / "attacker")
    suffix = ".db" if kind == "sqlite" else ".jsonl"
    trail = Trail(
        kind,
        directory / f"audit{suffix}",
        directory / f"older{suffix}",
        directory / "outside" / "checkpoints.jsonl",
        Path(pair.public_path),
        Path(other.private_path),
    )
    trail.outside.parent.mkdir()
    location = f"{kind}:///{trail.path}"
    checkpointer = Checkpointer(
        load_signing_key(pair.private_path), 1000, [JsonlCheckpointFile(trail.outside)]
    )
    store = open_store(location)

    def add(*entries: dict[str, Any]) -> None:
        chained = store.append(list(entries))
        checkpointer.committed(chained, store)
        trail.records.update({(r["task_id"], r["seq"]): r for r in chained})

    add(make_entry("t1", "task.start", n=0), make_entry("t2", n=100))
    for n in range(1, 4):
        add(make_entry("t1", n=n), make_entry("t2", n=100 + n))
    add(make_entry("t1", n=4), make_entry("t1", "task.end", n=5))  # t1 ends: checkpointed
    store.close()
    shutil.copyfile(trail.path, trail.older)
    if kind == "jsonl":
        shutil.copyfile(f"{trail.path}.heads", f"{trail.older}.heads")
    store = open_store(location)
    add(make_entry("t2", n=104))
    add(make_entry("t2", n=105))
    checkpointer.flush(store)  # what the runner does when it closes: t2 at seq 6
    store.close()
    assert checkpointer.written == 2 and checkpointer.failed == 0
    return trail


def _fresh_store(trail: Trail, make_entry: EntryFactory) -> None:
    """The attacker's own store in place of the real one: same task ids, no checkpoints."""
    trail.path.unlink()
    Path(f"{trail.path}.heads").unlink(missing_ok=True)
    store = open_store(f"{trail.kind}:///{trail.path}")
    try:
        store.append([make_entry("t1", "task.start", n=0), make_entry("t1", "task.end", n=1)])
        store.append([make_entry("t2", n=100)])
    finally:
        store.close()


def _forge_checkpoint(trail: Trail, change: Callable[[dict[str, Any]], None]) -> None:
    kept = trail.checkpoints()
    change(kept[-1][CHECKPOINT_KEY])
    trail.set_checkpoints(kept)


def _resign_with_attacker_key(trail: Trail, make_entry: EntryFactory) -> None:
    """Rewrite t2's tail and sign new checkpoints for it with a key the attacker holds."""
    trail.rewrite_tail("t2", 5, make_entry)
    attacker = Checkpointer(load_signing_key(trail.other_key), 1000)
    store = open_store(f"{trail.kind}:///{trail.path}")
    try:
        attacker.committed(store.read_task("t2"), store)
        attacker.flush(store)
    finally:
        store.close()


def _forge_outside_line(trail: Trail) -> None:
    lines = trail.lines(trail.outside)
    wire = json.loads(lines[-1])
    wire[CHECKPOINT_KEY]["seq"] = 2
    trail.write_lines([*lines, rfc8785.dumps(wire) + b"\n"], trail.outside)


def _swap_records(trail: Trail, make_entry: EntryFactory) -> None:
    if trail.kind == "jsonl":
        lines = trail.lines()
        a = lines.index(rfc8785.dumps(trail.records[("t1", 3)]) + b"\n")
        b = lines.index(rfc8785.dumps(trail.records[("t1", 4)]) + b"\n")
        lines[a], lines[b] = lines[b], lines[a]
        trail.write_lines(lines)
        return
    trail.delete_records("t1", [3])
    trail.insert(trail.records[("t1", 3)])


Tamper = Callable[[Trail, EntryFactory], None]
Expected = tuple[str | None, str | None, str | None]

CASES: dict[str, tuple[Tamper, Expected | dict[str, Expected]]] = {
    "untouched": (lambda t, m: None, (None, None, None)),
    "a record edited": (lambda t, m: _edit_body(t), ("edited",) * 3),
    "a record deleted": (lambda t, m: t.delete_records("t1", [3]), ("deleted",) * 3),
    "a record inserted beyond the head": (
        lambda t, m: t.insert(
            _forged(t.records[("t2", 6)], seq=7, prev_hash=t.records[("t2", 6)]["hash"])
        ),
        # A JSONL head file may lag its records (it is written after them), so a record
        # appended with a valid link looks like a write the head file missed; only records
        # newer than the last checkpoint are pointed out.
        {"sqlite": ("inserted",) * 3, "jsonl": (None, "warn", "warn")},
    ),
    "records reordered": (_swap_records, ("reordered",) * 3),
    "tail cut, head left": (lambda t, m: t.delete_records("t2", [5, 6]), ("truncated",) * 3),
    "tail cut, head rewritten": (
        lambda t, m: (
            t.delete_records("t2", [5, 6]),
            t.set_head("t2", 4, t.records[("t2", 4)]["hash"]),
        ),
        (None, "truncated", "truncated"),
    ),
    "tail cut, head rewritten, checkpoints of it deleted": (
        lambda t, m: (
            t.delete_records("t2", [5, 6]),
            t.set_head("t2", 4, t.records[("t2", 4)]["hash"]),
            t.set_checkpoints([c for c in t.checkpoints() if c[CHECKPOINT_KEY]["task_id"] != "t2"]),
        ),
        (None, "warn", "truncated"),
    ),
    "tail rewritten consistently": (
        lambda t, m: t.rewrite_tail("t2", 5, m),
        (None, "edited", "edited"),
    ),
    "whole task deleted": (lambda t, m: t.delete_task("t1"), (None, "deleted", "deleted")),
    "whole task deleted with its checkpoints": (
        lambda t, m: (
            t.delete_task("t1"),
            t.set_checkpoints([c for c in t.checkpoints() if c[CHECKPOINT_KEY]["task_id"] != "t1"]),
        ),
        (None, None, "deleted"),
    ),
    "store replaced by another": (_fresh_store, (None, "unsigned", "truncated")),
    "store replaced by an older copy of itself": (
        lambda t, m: t.replace_with(t.older),
        (None, "warn", "truncated"),
    ),
    "every checkpoint deleted from the store": (
        lambda t, m: t.set_checkpoints([]),
        (None, "unsigned", "warn"),
    ),
    "checkpoint's hash changed": (
        lambda t, m: _forge_checkpoint(t, lambda c: c.update(hash="0" * 64)),
        (None, "forged", "forged"),
    ),
    "checkpoint's signature removed": (
        lambda t, m: _forge_checkpoint(t, lambda c: c.pop("signature")),
        (None, "unsigned", "unsigned"),
    ),
    "tail rewritten and re-signed with another key": (
        _resign_with_attacker_key,
        (None, "forged", "forged"),
    ),
    "forged line in the checkpoint file": (
        lambda t, m: _forge_outside_line(t),
        (None, None, "forged"),
    ),
}


def _edit_body(trail: Trail) -> None:
    if trail.kind == "sqlite":
        trail.sql(
            "UPDATE steps SET body = replace(body, '\"q3\"', '\"qX\"') "
            "WHERE task_id = 't1' AND seq = 4"
        )
        return
    lines = trail.lines()
    at = lines.index(rfc8785.dumps(trail.records[("t1", 4)]) + b"\n")
    lines[at] = lines[at].replace(b'"q3"', b'"qX"')
    trail.write_lines(lines)


def _forged(record: dict[str, Any], **changes: Any) -> dict[str, Any]:
    forged = {**record, **changes}
    forged["hash"] = entry_hash(forged)
    return forged


def _outcome(report: Any) -> str | None:
    if not report.ok:
        return "|".join(sorted({b.reason for b in report.breaks}))
    checkpoint_warning = any("checkpoint" in w for w in report.warnings)
    return "warn" if checkpoint_warning else None


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Trail]:
    """Each kind's trail, built once; every test tampers with its own copy."""
    from .conftest import _entry

    return {kind: _build(kind, tmp_path_factory.mktemp(kind), _entry) for kind in KINDS}


def _copy(trail: Trail, directory: Path) -> Trail:
    origin = trail.path.parent
    shutil.copytree(origin, directory, dirs_exist_ok=True)
    moved = {
        name: directory / getattr(trail, name).relative_to(origin)
        for name in ("path", "older", "outside", "public", "other_key")
    }
    return Trail(trail.kind, **moved, records=dict(trail.records))


KINDS = ("sqlite", "jsonl")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(CASES))
def test_what_each_level_of_evidence_detects(
    case: str, kind: str, tmp_path: Path, make_entry: EntryFactory, built: dict[str, Trail]
) -> None:
    trail = _copy(built[kind], tmp_path / "trail")
    tamper, expected = CASES[case]
    if isinstance(expected, dict):
        expected = expected[kind]
    tamper(trail, make_entry)
    seen = (
        verify(trail.path),
        verify(trail.path, keys=[trail.public]),
        verify(trail.path, keys=[trail.public], checkpoints=[trail.outside]),
    )
    for level, report, wanted in zip(("no key", "key", "key + file"), seen, expected, strict=True):
        found = _outcome(report)
        if wanted is None or wanted == "warn":
            assert found == wanted, f"{case} / {level}: {report} {report.warnings}"
        else:
            assert found is not None and wanted in found.split("|"), f"{case} / {level}: {report}"
    if case != "untouched" and expected[2] != "warn":
        assert not seen[2].ok  # every case is detected with the key and the checkpoint file
