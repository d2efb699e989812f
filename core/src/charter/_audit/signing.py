"""Ed25519 key files: creating a key pair, loading a signing key, loading a public key.

A signing key is a PEM (PKCS #8, unencrypted) Ed25519 private key in a file only its owner
may read or write (mode 0600, like an SSH key); its public key is a PEM SubjectPublicKeyInfo
beside it, ``<file>.pub``. A key is named by its id, the first 16 hex digits of the SHA-256 of
its 32 raw public bytes; its fingerprint is all 64.

What the permission checks guard against: a signing key other users can read lets them sign
forged checkpoints; a public key file (or its directory) others can write lets them swap in
their own public key, so `verify --key` would accept their forgeries. Neither is refused
silently: every refusal is a `KeyFileError` naming the file, what is wrong and the fix. A key
the governed agent's own account can read protects nothing against that agent: keep it
readable only by the account that runs Charter (see the README).

The `cryptography` package is imported only here and only when a key is used (it is the
``signing`` extra); without it every call raises KeyFileError naming the install command.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from charter._model.errors import CharterError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "PUBLIC_SUFFIX",
    "KeyFileError",
    "KeyPair",
    "PublicKey",
    "SigningKey",
    "create_key_pair",
    "load_public_key",
    "load_signing_key",
]

PUBLIC_SUFFIX = ".pub"
_INSTALL = "pip install 'charter[signing]'"
_MAX_KEY_FILE = 16_384


class KeyFileError(CharterError, ValueError):
    """A key file is missing, unreadable, not the right kind of key, or exposed to others."""


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        raise KeyFileError(
            f"signed checkpoints need the cryptography package: {_INSTALL}"
        ) from None
    return serialization


def _key_id(raw: bytes) -> tuple[str, str]:
    fingerprint = hashlib.sha256(raw).hexdigest()
    return fingerprint[:16], fingerprint


@dataclass(frozen=True, slots=True, eq=False)
class PublicKey:
    """An Ed25519 public key that checks signatures; `key_id` names it, `path` is its file."""

    key_id: str
    fingerprint: str
    path: str
    _key: Ed25519PublicKey

    def verifies(self, signature: str, message: bytes) -> bool:
        """True when `signature` (lowercase hex) is this key's signature of `message`."""
        from cryptography.exceptions import InvalidSignature

        try:
            raw = bytes.fromhex(signature)
        except ValueError:
            return False
        if len(raw) != 64 or raw.hex() != signature:
            return False
        try:
            self._key.verify(raw, message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True, slots=True, eq=False)
class SigningKey:
    """An Ed25519 private key loaded from a file that only its owner can read."""

    key_id: str
    fingerprint: str
    path: str
    _key: Ed25519PrivateKey

    def sign(self, message: bytes) -> str:
        """The signature of `message`, as 128 lowercase hex digits."""
        return self._key.sign(message).hex()


@dataclass(frozen=True, slots=True)
class KeyPair:
    """What `create_key_pair` wrote: the two files and the key's id and fingerprint."""

    private_path: str
    public_path: str
    key_id: str
    fingerprint: str


def create_key_pair(path: str | os.PathLike[str]) -> KeyPair:
    """Write a new Ed25519 key to `path` (mode 0600) and its public key to `path`.pub.

    Refuses (KeyFileError, nothing written) when either file exists, when `path` names a
    directory or its directory does not exist, and without the cryptography package.
    """
    serialization = _crypto()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private_path = os.path.abspath(os.fspath(path))
    public_path = private_path + PUBLIC_SUFFIX
    for target in (private_path, public_path):
        if os.path.lexists(target):
            raise KeyFileError(
                f"{target} already exists; a key is never overwritten (move it away first, "
                "or choose another path)"
            )
    directory = os.path.dirname(private_path)
    if not os.path.isdir(directory):
        raise KeyFileError(f"cannot create key {private_path}: directory {directory} is missing")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key()
    public_pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    _write_new(private_path, private_pem, 0o600)
    try:
        _write_new(public_path, public_pem, 0o644)
    except KeyFileError:
        os.remove(private_path)
        raise
    key_id, fingerprint = _key_id(raw)
    return KeyPair(private_path, public_path, key_id, fingerprint)


def _write_new(path: str, data: bytes, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError:
        raise KeyFileError(f"{path} already exists; a key is never overwritten") from None
    except OSError as exc:
        raise KeyFileError(f"cannot create key file {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, mode)  # the umask must not loosen (or tighten) what was asked for
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        os.remove(path)
        raise KeyFileError(f"cannot write key file {path}: {exc.strerror or exc}") from None
    os.close(fd)


def _read(path: str, what: str) -> tuple[bytes, os.stat_result]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise KeyFileError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"{what} {path} is not a regular file")
        data = os.read(fd, _MAX_KEY_FILE + 1)
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > _MAX_KEY_FILE:
        raise KeyFileError(f"{what} {path} is too large to be a key file")
    return data, info


def load_signing_key(path: str | os.PathLike[str]) -> SigningKey:
    """The Ed25519 private key in `path`.

    Refuses (KeyFileError naming the file) a missing or unreadable file, a file that group or
    other users may read or write (they could sign in its name: ``chmod 600``), anything
    but an unencrypted PEM Ed25519 private key (a public key included), and runs without
    the cryptography package.
    """
    serialization = _crypto()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    where = os.path.abspath(os.fspath(path))
    data, info = _read(where, "signing key")
    loose = stat.S_IMODE(info.st_mode) & 0o077
    if loose:
        raise KeyFileError(
            f"signing key {where} has mode {stat.S_IMODE(info.st_mode):04o}: other users may "
            f"read or change it and sign in its name; run chmod 600 {where}"
        )
    if b"PUBLIC KEY" in data and b"PRIVATE KEY" not in data:
        raise KeyFileError(
            f"{where} is a public key; signing needs the private key (the file without "
            f"{PUBLIC_SUFFIX})"
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise KeyFileError(
            f"signing key {where} is encrypted; Charter needs an unencrypted key file that "
            "only its owner can read (create one with charter keys create)"
        ) from None
    except ValueError:
        raise KeyFileError(
            f"{where} is not a PEM private key (create one with charter keys create)"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(
            f"signing key {where} is a {type(key).__name__.removeprefix('_')}, not an Ed25519 "
            "key (create one with charter keys create)"
        )
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    key_id, fingerprint = _key_id(raw)
    return SigningKey(key_id, fingerprint, where, key)


def load_public_key(path: str | os.PathLike[str]) -> PublicKey:
    """The Ed25519 public key in `path`, for checking checkpoint signatures.

    Refuses (KeyFileError naming the file) a missing or unreadable file, a file or directory
    that group or other users may write (whoever can swap the public key can make forged
    checkpoints pass; a directory with the sticky bit is fine when the file is yours or
    root's), a private key (pass the ``.pub`` file), anything but a PEM Ed25519 public key,
    and runs without the cryptography package.
    """
    serialization = _crypto()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    where = os.path.abspath(os.fspath(path))
    data, info = _read(where, "public key")
    if stat.S_IMODE(info.st_mode) & 0o022:
        raise KeyFileError(
            f"public key {where} has mode {stat.S_IMODE(info.st_mode):04o}: other users may "
            f"replace it with their own key; run chmod 644 {where}"
        )
    directory = os.path.dirname(where)
    try:
        folder = os.stat(directory)
    except OSError as exc:
        raise KeyFileError(f"cannot check directory {directory}: {exc.strerror or exc}") from None
    shielded = folder.st_mode & stat.S_ISVTX and info.st_uid in (0, os.getuid())
    if stat.S_IMODE(folder.st_mode) & 0o022 and not shielded:
        raise KeyFileError(
            f"public key {where} is in directory {directory}, which other users may write, so "
            "they could replace the key; keep it in a directory only you can write"
        )
    if b"PRIVATE KEY" in data:
        raise KeyFileError(
            f"{where} is a private key; verify with its public key ({where}{PUBLIC_SUFFIX} "
            "beside it), which needs no secret"
        )
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        raise KeyFileError(
            f"{where} is not a PEM public key (charter keys create writes one beside the key, "
            f"ending in {PUBLIC_SUFFIX})"
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(
            f"public key {where} is a {type(key).__name__.removeprefix('_')}, not an Ed25519 key"
        )
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    key_id, fingerprint = _key_id(raw)
    return PublicKey(key_id, fingerprint, where, key)
