"""SHA-256 and HMAC-SHA256 digests without loading OpenSSL for short inputs.

Importing hashlib (or hmac) loads OpenSSL's libcrypto, about 2 ms: a process that lives for
one decision (a hook call, whose lifetime is the user's wait) would pay that on every call
for digests of a few hundred bytes. The interpreter's built-in SHA-256 hashes those just as
well; past `LARGE` bytes OpenSSL's is several times faster, and it is loaded then. Both
compute the same digest.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hashlib import sha256 as _builtin
else:
    try:
        if sys.version_info >= (3, 12):
            from _sha2 import sha256 as _builtin
        else:
            from _sha256 import sha256 as _builtin
    except ImportError:  # pragma: no cover - a Python built without them
        from hashlib import sha256 as _builtin

__all__ = ["LARGE", "compare_digest", "hmac_sha256_hex", "sha256_hex"]

#: Inputs longer than this are hashed by OpenSSL (hashlib).
LARGE = 1 << 16


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of `data`, as 64 lowercase hex digits."""
    if len(data) > LARGE:
        import hashlib

        return hashlib.sha256(data).hexdigest()
    return _builtin(data).hexdigest()


# RFC 2104 over SHA-256 (block size 64), as hmac.new(key, msg, "sha256") computes it.
_INNER = bytes(x ^ 0x36 for x in range(256))
_OUTER = bytes(x ^ 0x5C for x in range(256))


def hmac_sha256_hex(key: bytes, message: bytes) -> str:
    """HMAC-SHA256 of `message` under `key`, as 64 lowercase hex digits."""
    if len(message) > LARGE:
        import hmac

        return hmac.new(key, message, "sha256").hexdigest()
    if len(key) > 64:
        key = _builtin(key).digest()
    key = key.ljust(64, b"\0")
    inner = _builtin(key.translate(_INNER) + message).digest()
    return _builtin(key.translate(_OUTER) + inner).hexdigest()


def compare_digest(a: bytes, b: bytes) -> bool:
    """Whether `a` and `b` are equal, in time that does not depend on where they differ."""
    # What hmac.compare_digest falls back to without OpenSSL: the same constant-time check.
    from _operator import _compare_digest

    return _compare_digest(a, b)
