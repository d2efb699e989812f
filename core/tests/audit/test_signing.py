"""Key files: created safely, refused clearly when they cannot be used or trusted."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from charter._audit.checkpoint import Checkpoint, sign_head
from charter._audit.signing import (
    KeyFileError,
    create_key_pair,
    load_public_key,
    load_signing_key,
)
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700)
    return folder


def test_a_new_key_pair_is_private_and_never_overwritten(keys: Path) -> None:
    old = os.umask(0)  # a permissive umask must not loosen the private key
    try:
        pair = create_key_pair(keys / "signing")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(pair.private_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(pair.public_path).st_mode) == 0o644
    assert pair.public_path == pair.private_path + ".pub"
    assert len(pair.key_id) == 16 and pair.fingerprint.startswith(pair.key_id)
    assert load_signing_key(pair.private_path).key_id == pair.key_id
    assert load_public_key(pair.public_path).fingerprint == pair.fingerprint
    before = Path(pair.private_path).read_bytes()
    with pytest.raises(KeyFileError, match="already exists; a key is never overwritten"):
        create_key_pair(keys / "signing")
    assert Path(pair.private_path).read_bytes() == before
    (keys / "lonely.pub").write_text("x")
    with pytest.raises(KeyFileError, match=r"lonely\.pub already exists"):
        create_key_pair(keys / "lonely")
    assert not (keys / "lonely").exists()  # nothing half-made
    with pytest.raises(KeyFileError, match=r"directory .* is missing"):
        create_key_pair(keys / "nowhere" / "key")


def test_a_signature_verifies_only_for_the_signed_head(keys: Path) -> None:
    pair = create_key_pair(keys / "signing")
    signer, checker = load_signing_key(pair.private_path), load_public_key(pair.public_path)
    made = sign_head(signer, "agent-a", "t1", 6, "a" * 64, datetime(2026, 12, 1, tzinfo=UTC))
    assert made.time == "2026-12-01T00:00:00.000000Z"
    assert checker.verifies(made.signature, made.signed_bytes())
    moved = Checkpoint(made.agent_id, made.task_id, 5, made.hash, made.time, made.key_id)
    assert not checker.verifies(made.signature, moved.signed_bytes())
    assert not checker.verifies(made.signature.upper(), made.signed_bytes())
    assert not checker.verifies("00", made.signed_bytes())
    assert Checkpoint.from_wire(made.to_wire()) == made


def test_a_signing_key_others_can_read_is_refused(keys: Path) -> None:
    pair = create_key_pair(keys / "signing")
    os.chmod(pair.private_path, 0o640)
    with pytest.raises(KeyFileError, match=r"has mode 0640: other users may read .* chmod 600"):
        load_signing_key(pair.private_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        (b"not a key\n", "is not a PEM private key"),
        ("public", "is a public key; signing needs the private key"),
        ("ec", "not an Ed25519 key"),
    ],
)
def test_what_is_not_a_usable_signing_key_is_named(
    keys: Path, content: bytes | str | None, message: str
) -> None:
    target = keys / "candidate"
    pair = create_key_pair(keys / "signing")
    if content == "public":
        target.write_bytes(Path(pair.public_path).read_bytes())
    elif content == "ec":
        other = ec.generate_private_key(ec.SECP256R1())
        target.write_bytes(
            other.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    elif isinstance(content, bytes):
        target.write_bytes(content)
    if target.exists():
        os.chmod(target, 0o600)
    with pytest.raises(KeyFileError, match=message) as caught:
        load_signing_key(target)
    assert str(target) in str(caught.value)


def test_a_directory_is_not_a_key(keys: Path) -> None:
    with pytest.raises(KeyFileError, match="is not a regular file"):
        load_public_key(keys)


def test_a_public_key_others_could_replace_is_refused(keys: Path, tmp_path: Path) -> None:
    pair = create_key_pair(keys / "signing")
    os.chmod(pair.public_path, 0o666)
    with pytest.raises(KeyFileError, match=r"mode 0666: other users may replace it"):
        load_public_key(pair.public_path)
    os.chmod(pair.public_path, 0o644)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    copy = shared / "signing.pub"
    copy.write_bytes(Path(pair.public_path).read_bytes())
    os.chmod(copy, 0o644)
    with pytest.raises(KeyFileError, match=r"directory .*, which other users may write"):
        load_public_key(copy)
    os.chmod(shared, 0o1777)  # sticky, like /tmp: only the owner may replace the file
    assert load_public_key(copy).key_id == pair.key_id


def test_a_private_key_given_as_the_public_key_is_refused(keys: Path) -> None:
    pair = create_key_pair(keys / "signing")
    with pytest.raises(KeyFileError, match=r"is a private key; verify with its public key"):
        load_public_key(pair.private_path)
    junk = keys / "junk.pub"
    junk.write_text("ssh-ed25519 AAAA\n")
    with pytest.raises(KeyFileError, match="is not a PEM public key"):
        load_public_key(junk)
