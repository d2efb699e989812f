"""SHA-256 hex digests for the hook's own names and records, without loading OpenSSL.

hashlib loads OpenSSL's libcrypto when imported (about 2 ms of every hook call, whose
lifetime is the user's wait), and Charter's core does not load it for short inputs either.
The interpreter's built-in SHA-256 computes the same digest; past 64 KiB OpenSSL's is
several times faster, and it is loaded then.
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

__all__ = ["sha256_hex"]

_LARGE = 1 << 16


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of `data`, as 64 lowercase hex digits."""
    if len(data) > _LARGE:
        import hashlib

        return hashlib.sha256(data).hexdigest()
    return _builtin(data).hexdigest()
