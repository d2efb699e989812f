"""Charter's SHA-256 and HMAC-SHA256 digests are hashlib's and hmac's, short or long."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys

import pytest
from charter._model.sha256 import LARGE, YOUNG, compare_digest, hmac_sha256_hex, sha256_hex

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


# This process has hashlib loaded, so the digests above come from OpenSSL; a young process
# without it (a hook call) uses the interpreter's own SHA-256 until it has made YOUNG digests.
_YOUNG_PROCESS = """
import json, sys
from charter._model.sha256 import YOUNG, hmac_sha256_hex, sha256_hex
sizes, key = json.loads(sys.argv[1]), bytes(range(70))
data = [bytes(range(256)) * (n // 256) + bytes(range(n % 256)) for n in sizes]
plain = [sha256_hex(d) for d in data]
keyed = [hmac_sha256_hex(key, d) for d in data]
young = "hashlib" not in sys.modules
for _ in range(YOUNG):
    sha256_hex(b"x")
print(json.dumps([plain, keyed, young, "hashlib" in sys.modules]))
"""


def test_a_young_process_digests_as_hashlib_does_and_then_switches_to_it() -> None:
    # An HMAC hashes the message with 64 bytes of key: keep that within LARGE too.
    sizes = [n for n in SIZES if n + 64 <= LARGE]
    out = subprocess.run(
        [sys.executable, "-c", _YOUNG_PROCESS, json.dumps(sizes)],
        capture_output=True,
        text=True,
        check=True,
    )
    plain, keyed, young, switched = json.loads(out.stdout)
    data = [bytes(range(256)) * (n // 256) + bytes(range(n % 256)) for n in sizes]
    assert plain == [hashlib.sha256(d).hexdigest() for d in data]
    key = bytes(range(70))
    assert keyed == [hmac.new(key, d, "sha256").hexdigest() for d in data]
    assert young, "a young process loaded hashlib for short digests"
    assert switched, f"still on the built-in SHA-256 after {YOUNG} more digests"
