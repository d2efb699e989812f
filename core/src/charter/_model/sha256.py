"""SHA-256 and HMAC-SHA256 digests without loading OpenSSL for short inputs.

Importing hashlib (or hmac) loads OpenSSL's libcrypto, about 2 ms: a process that lives for
one decision (a hook call, whose lifetime is the user's wait) would pay that on every call
for digests of a few hundred bytes. The interpreter's built-in SHA-256 computes the same
digests, but two to six times slower (0.7 against 0.3 us for 100 bytes, 7 against 1.4 us for
2 KB), and every audit record is hashed: so it serves the first `YOUNG` digests of a process
and inputs up to `LARGE` bytes, and OpenSSL's serves everything once the process has made
that many (it is long-lived: an agent, a server) or hashlib is loaded anyway.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hashlib import sha256 as _builtin
    from typing import Any
else:
    try:
        if sys.version_info >= (3, 12):
            from _sha2 import sha256 as _builtin
        else:
            from _sha256 import sha256 as _builtin
    except ImportError:  # pragma: no cover - a Python built without them
        from hashlib import sha256 as _builtin

__all__ = ["LARGE", "YOUNG", "compare_digest", "hmac_sha256_hex", "sha256_hex"]

#: Inputs longer than this are hashed by OpenSSL (hashlib).
LARGE = 1 << 16
#: Digests a process makes before it is taken to be long-lived (a hook call makes tens).
YOUNG = 256
_made = [0]
_openssl: list[Any] = []  # hashlib.sha256, once chosen


def _sha256(data: bytes) -> Any:
    """A SHA-256 hash object of `data` from the implementation this process should use."""
    if _openssl:
        return _openssl[0](data)
    _made[0] += 1
    if _made[0] <= YOUNG and len(data) <= LARGE and "hashlib" not in sys.modules:
        return _builtin(data)
    import hashlib

    _openssl.append(hashlib.sha256)
    return hashlib.sha256(data)


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of `data`, as 64 lowercase hex digits."""
    digest: str = _sha256(data).hexdigest()
    return digest


# RFC 2104 over SHA-256 (block size 64), as hmac.new(key, msg, "sha256") computes it.
_INNER = bytes(x ^ 0x36 for x in range(256))
_OUTER = bytes(x ^ 0x5C for x in range(256))


def hmac_sha256_hex(key: bytes, message: bytes) -> str:
    """HMAC-SHA256 of `message` under `key`, as 64 lowercase hex digits."""
    if len(message) > LARGE:
        import hmac

        return hmac.new(key, message, "sha256").hexdigest()
    if len(key) > 64:
        key = _sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner = _sha256(key.translate(_INNER) + message).digest()
    digest: str = _sha256(key.translate(_OUTER) + inner).hexdigest()
    return digest


def compare_digest(a: bytes, b: bytes) -> bool:
    """Whether `a` and `b` are equal, in time that does not depend on where they differ."""
    # What hmac.compare_digest falls back to without OpenSSL: the same constant-time check.
    from _operator import _compare_digest

    return _compare_digest(a, b)
