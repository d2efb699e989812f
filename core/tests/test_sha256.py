"""Charter's SHA-256 and HMAC-SHA256 digests are hashlib's and hmac's, short or long."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from charter._model.sha256 import LARGE, compare_digest, hmac_sha256_hex, sha256_hex

SIZES = (0, 1, 55, 56, 63, 64, 65, 1000, LARGE - 1, LARGE, LARGE + 1, 3 * LARGE)


@pytest.mark.parametrize("size", SIZES)
def test_sha256_hex_is_hashlibs(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("key_size", (0, 1, 32, 64, 65, 200))
def test_hmac_sha256_hex_is_hmacs(size: int, key_size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    key = bytes((7 * i) % 256 for i in range(key_size))
    assert hmac_sha256_hex(key, data) == hmac.new(key, data, "sha256").hexdigest()


def test_compare_digest() -> None:
    assert compare_digest(b"abc", b"abc")
    assert not compare_digest(b"abc", b"abd")
    assert not compare_digest(b"abc", b"ab")
