"""Where a project keeps its private files outside it: the decision server's socket, lock
and secrets, and the history snapshots' key.

Everything lives in one directory per project, ``~/.charter/serve/<key>/`` (mode 0700),
where ``<key>`` is derived from the project's real path: outside the project, so that tools
the agent runs over the project (Grep, Glob, a recursive copy) never reach the secrets, and
short, so that the socket path fits the 104-108 bytes a unix socket address allows however
deep the project lies. Without a home directory the project's own ``.charter/serve/`` is used.

- ``charter.sock``: the unix socket (0600).
- ``serve.lock``: held (flock) by the running server; a second server refuses to start.
- ``server.json``: pid, project and HTTP address of the running server.
- ``key``: the server's identity key (0600, 64 hex digits). The server proves it holds it by
  signing each answer over the client's nonce (`proof`); a client that pinned the key's
  digest (the Claude Code hook's ``--serve sha256:...``) trusts no other key.
- ``token``: the bearer token HTTP clients send (0600).
- ``snapshot.key`` and ``history/``: the key and the files of the history snapshots a one-shot
  process restores a task from (see `charter._runtime.snapshot`).

Paths are plain strings and nothing is imported at load time beyond a SHA-256: hook
processes load this module on every call (json loads only for `canonical_result`, which
the server calls).
"""

from __future__ import annotations

import os

from charter._model.sha256 import hmac_sha256_hex, sha256_hex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "PROTOCOL",
    "canonical_result",
    "ensure_secret",
    "key_digest",
    "private_dir",
    "proof",
    "read_secret",
    "serve_dir",
    "sign",
    "socket_address",
]

PROTOCOL = 1
_SECRET_BYTES = 32


def serve_dir(root: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> str:
    """The server directory of the project at `root` (see the module docstring)."""
    env = os.environ if environ is None else environ
    real = os.path.realpath(os.fspath(root))
    home = env.get("HOME") or ""
    if not home or not os.path.isabs(home):
        return os.path.join(real, ".charter", "serve")
    key = sha256_hex(real.encode("utf-8", "surrogatepass"))[:16]
    return os.path.join(home, ".charter", "serve", key)


# sun_path holds 108 bytes on Linux (104 on macOS), the final NUL included.
_MAX_ADDRESS = 100


def socket_address(path: str | os.PathLike[str]) -> tuple[str, int | None]:
    """(the address to bind or connect `path` with, a folder fd to close after). A path too
    long for a socket address goes through ``/proc/self/fd/<folder fd>/<name>`` on Linux
    (the kernel resolves it like any path); elsewhere it is returned as it is."""
    text = os.fspath(path)
    if len(os.fsencode(text)) <= _MAX_ADDRESS or not os.path.isdir("/proc/self/fd"):
        return text, None
    folder, name = os.path.split(text)
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    return f"/proc/self/fd/{fd}/{name}", fd


def private_dir(folder: str | os.PathLike[str]) -> None:
    """Create `folder` (and its parents) and make it 0700."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)


def read_secret(path: str | os.PathLike[str]) -> str | None:
    """The secret stored at `path` (stripped), or None when it is missing or malformed."""
    try:
        # Bytes, not text: an ASCII text file would load its codec module in every hook.
        with open(path, "rb") as handle:
            data = handle.read(4 * _SECRET_BYTES).strip()
    except OSError:
        return None
    if len(data) != 2 * _SECRET_BYTES or data.strip(b"0123456789abcdef"):
        return None
    return data.decode()


def ensure_secret(path: str | os.PathLike[str]) -> str:
    """The secret at `path`, created (random, mode 0600, its folder 0700) when missing."""
    found = read_secret(path)
    if found is not None:
        return found
    target = os.fspath(path)
    private_dir(os.path.dirname(target))
    from charter._runtime.atomic import write_atomically  # a served hook call only reads

    secret = os.urandom(_SECRET_BYTES).hex()
    write_atomically(target, secret.encode("ascii"), mode=0o600)
    return secret


def key_digest(secret: str) -> str:
    """``sha256:`` and the hex digest of a key: what a client pins."""
    return "sha256:" + sha256_hex(secret.encode("ascii"))


def canonical_result(result: Any) -> bytes:
    """The bytes a proof signs: the result as compact, key-sorted, ASCII-only JSON."""
    import json

    return json.dumps(result, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def proof(secret: str, nonce: str, result: Any) -> str:
    """HMAC-SHA256 under the key `secret` of ``nonce + "\\n" + canonical_result(result)``."""
    return sign(secret, nonce, canonical_result(result))


def sign(secret: str, nonce: str, signed: bytes) -> str:
    """HMAC-SHA256 (hex) under the key `secret` of ``nonce + "\\n" + signed``: the proof of
    an answer whose canonical result is `signed`. A client that knows those bytes without
    decoding them (a result of ASCII text it can read as it is) checks a proof without a
    JSON library."""
    return hmac_sha256_hex(
        secret.encode("ascii"), nonce.encode("ascii", "replace") + b"\n" + signed
    )
