"""`charter keys`, a signed `charter demo` and `charter verify --key / --checkpoint`, run as a
real command on real files: exit codes and what they say."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def signed(signed_demo: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    """A private copy of the signed demo trail (to tamper with); the keys are shared."""
    paths = dict(signed_demo)
    for name in ("store", "checkpoints"):
        paths[name] = tmp_path / signed_demo[name].name
        shutil.copy(signed_demo[name], paths[name])
    return paths


def test_keys_create_writes_a_private_key_and_never_overwrites_it(cli: Any, tmp_path: Path) -> None:
    target = tmp_path / "signing"
    made = cli("keys", "create", str(target))
    assert made.code == 0, made
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert f"public key   {target}.pub" in made.out
    key_id = next(line.split()[-1] for line in made.out.splitlines() if line.startswith("key id"))
    again, shown = cli.all(("keys", "create", str(target)), ("keys", "show", str(target), "--json"))
    assert again.code == 2 and "already exists; a key is never overwritten" in again.err
    assert json.loads(shown.out)["key_id"] == key_id
    assert json.loads(shown.out)["kind"] == "signing key"


def test_verify_with_the_key_and_the_checkpoint_file(cli: Any, signed: dict[str, Path]) -> None:
    both, as_json = cli.all(
        (
            "verify",
            str(signed["store"]),
            "--key",
            str(signed["public"]),
            "--checkpoint",
            str(signed["checkpoints"]),
        ),
        ("verify", str(signed["store"]), "--key", str(signed["public"]), "--json"),
    )
    assert both.code == 0, both
    assert "verified 2 chains" in both.out and "against 2 signed checkpoints (key " in both.out
    report = json.loads(as_json.out)
    assert report["ok"] and report["checkpoints"] == 2 and len(report["keys"]) == 1


def test_a_truncation_with_the_head_rewritten_needs_the_key(
    cli: Any, signed: dict[str, Path]
) -> None:
    conn = sqlite3.connect(signed["store"])
    agent, task, head = conn.execute("SELECT agent_id, task_id, head_seq FROM chains").fetchone()
    keep = head - 3
    (digest,) = conn.execute(
        "SELECT hash FROM steps WHERE task_id = ? AND seq = ?", (task, keep)
    ).fetchone()
    conn.execute("DELETE FROM steps WHERE task_id = ? AND seq > ?", (task, keep))
    conn.execute(
        "UPDATE chains SET head_seq = ?, head_hash = ?, closed = 0 WHERE task_id = ?",
        (keep, digest, task),
    )
    conn.commit()
    conn.close()
    plain, keyed = cli.all(
        ("verify", str(signed["store"])),
        ("verify", str(signed["store"]), "--key", str(signed["public"])),
    )
    assert plain.code == 0, plain  # the chain itself is consistent: no key, no evidence
    assert keyed.code == 1, keyed
    assert f"task {task} (agent {agent}) seq {keep + 1}: truncated: the records stop at seq" in (
        keyed.out
    )
    assert f"signed seq {head}" in keyed.out


def test_a_task_deleted_with_its_checkpoints_needs_the_checkpoint_file(
    cli: Any, signed: dict[str, Path]
) -> None:
    conn = sqlite3.connect(signed["store"])
    (task,) = conn.execute("SELECT task_id FROM chains ORDER BY id LIMIT 1").fetchone()
    for table in ("steps", "chains", "checkpoints"):
        conn.execute(f"DELETE FROM {table} WHERE task_id = ?", (task,))
    conn.commit()
    conn.close()
    plain, keyed, both = cli.all(
        ("verify", str(signed["store"])),
        ("verify", str(signed["store"]), "--key", str(signed["public"])),
        (
            "verify",
            str(signed["store"]),
            "--key",
            str(signed["public"]),
            "--checkpoint",
            str(signed["checkpoints"]),
        ),
    )
    assert plain.code == 0 and keyed.code == 0, keyed  # what is left is consistent
    assert both.code == 1, both
    assert f"task {task} (agent demo-coder) seq 1: deleted: the task is missing" in both.out
    assert "warning 1 signed checkpoint of" in both.out


def test_verify_refuses_keys_it_cannot_trust(
    cli: Any, signed: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "keys").mkdir(mode=0o700)
    other = tmp_path / "keys" / "other"
    assert cli("keys", "create", str(other)).code == 0
    os.chmod(tmp_path / "keys" / "other.pub", 0o666)
    loose, no_key = cli.all(
        ("verify", str(signed["store"]), "--key", f"{other}.pub"),
        ("verify", str(signed["store"]), "--checkpoint", str(signed["checkpoints"])),
    )
    assert loose.code == 2 and "mode 0666: other users may replace it" in loose.err
    assert no_key.code == 2 and "--checkpoint needs --key" in no_key.err
    os.chmod(tmp_path / "keys" / "other.pub", 0o644)
    by_other = cli("verify", str(signed["store"]), "--key", f"{other}.pub")
    assert by_other.code == 1, by_other
    assert "forged: checkpoint #1 in sqlite:///" in by_other.out
    assert "not by the key given" in by_other.out


def test_status_and_demo_name_an_unusable_signing_key(
    cli: Any, signed: dict[str, Path], policy_file: Path
) -> None:
    good = cli("status", "--policy", str(policy_file), "--signing-key", str(signed["key"]))
    assert good.code == 0, good
    assert "Signed checkpoints" in good.out and "every 1000 records" in good.out
    loose = Path(str(signed["store"]) + ".key")  # a copy: the shared key stays private
    shutil.copy(signed["key"], loose)
    os.chmod(loose, 0o644)
    status, demo = cli.all(
        ("status", "--policy", str(policy_file), "--signing-key", str(loose)),
        ("demo", "--store", str(signed["store"]), "--signing-key", str(loose)),
    )
    assert status.code == 1 and "has mode 0644: other users may read or change it" in status.out
    assert demo.code == 2 and "run chmod 600" in demo.out
