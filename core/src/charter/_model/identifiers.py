"""Identifier grammar and the helpers that map framework names onto it.

Identifiers are used as lock keys, storage keys and hash input, so they follow a narrow grammar;
integrations never have to guess because `task_id_from` and `step_name_from` map anything onto it
deterministically.
"""

from __future__ import annotations

import itertools
import os
import threading

from charter._model.sha256 import sha256_hex

# hashlib's blake2b is this one; importing hashlib would also load OpenSSL (see sha256).
try:
    from _blake2 import blake2b as _blake2b
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import blake2b as _blake2b

__all__ = [
    "check_identifier",
    "check_step_name",
    "new_id",
    "step_name_from",
    "task_id_from",
]

# Plain string scans, not regular expressions: ids and names come from the agent and its
# framework, and these run on every step.
_ID_ALLOWED = str.maketrans(
    "", "", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
)
_CONTROL_TO_SPACE = {c: " " for c in (*range(0x20), *range(0x7F, 0xA0))}


def _id_chars(value: str) -> bool:
    # ASCII letters and digits alone (a hex id, most names) pass without translate's lookup
    # per character, which costs more than the rest of building a step's ids.
    return (value.isascii() and value.isalnum()) or not value.translate(_ID_ALLOWED)


def _has_control(value: str) -> bool:
    return value.translate(_CONTROL_TO_SPACE) != value


# Field name -> (min length, max length).
ID_LIMITS: dict[str, tuple[int, int]] = {
    "agent_id": (0, 255),
    "task_id": (1, 100),
    "action_id": (1, 255),
}


def check_identifier(field: str, value: object) -> str:
    """Return `value` if it follows the identifier grammar for `field`, else raise ValueError."""
    low, high = ID_LIMITS[field]
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a string, not {type(value).__name__}")
    if low <= len(value) <= high and _id_chars(value):
        return value
    hint = " (charter.task_id_from maps any id onto this grammar)" if field == "task_id" else ""
    raise ValueError(
        f"{field} {value!r}: use letters, digits and . _ : - only ({low}-{high} characters){hint}"
    )


def check_step_name(value: object) -> str:
    """Return `value` if it is 1-255 characters without control characters, else raise."""
    if not isinstance(value, str):
        raise ValueError(f"step_name must be a string, not {type(value).__name__}")
    if not 1 <= len(value) <= 255:
        raise ValueError(
            f"step_name {value[:40]!r}: must be 1-255 characters, got {len(value)} "
            "(charter.step_name_from shortens any name)"
        )
    if _has_control(value):
        raise ValueError(
            f"step_name {value[:40]!r}: contains a control character "
            "(charter.step_name_from removes them)"
        )
    return value


def task_id_from(raw: object) -> str:
    """Map any framework id onto a valid task_id, deterministically.

    A valid task_id is returned unchanged; anything else (a LangGraph thread id with ``/``, a
    UUID object, an over-long string) becomes ``x-`` plus the first 32 hex digits of the SHA-256
    of its text, so the same raw id always maps to the same task.
    """
    text = raw if isinstance(raw, str) else str(raw)
    if 1 <= len(text) <= 100 and _id_chars(text):
        return text
    return "x-" + sha256_hex(text.encode("utf-8", "surrogatepass"))[:32]


def step_name_from(value: object) -> str:
    """Map any framework name (str, class, callable, None) onto a valid step_name.

    Control characters become spaces, whitespace runs collapse, the result is cut to 255
    characters, and an empty result becomes ``unnamed``. Deterministic and never raises.
    """
    if type(value) is str and len(value) <= 255:
        found = _mapped_names.get(value)
        if found is not None:
            return found
        mapped = _map_name(value)
        if len(_mapped_names) >= _NAME_MEMORY:
            _mapped_names.clear()
        _mapped_names[value] = mapped
        return mapped
    return _map_name(value)


# The names mapped so far, by plain string of a step name's length at most: a tool's name is
# mapped on every call. Bounded (cleared when full): agents choose names.
_NAME_MEMORY = 4096
_mapped_names: dict[str, str] = {}


def _map_name(value: object) -> str:
    if isinstance(value, str):
        text = value
    else:
        text = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or ""
        if not isinstance(text, str) or not text:
            text = "" if value is None else type(value).__name__
    text = text.encode("utf-8", "replace").decode("utf-8")
    if not text.isascii():
        # ASCII is NFC already: a process whose names are ASCII (a hook call's tool names)
        # never imports unicodedata.
        import unicodedata

        text = unicodedata.normalize("NFC", text)
    text = " ".join(text.translate(_CONTROL_TO_SPACE).split())
    return text[:255] or "unnamed"


class _IdSource:
    """Fresh ids without a system call per id (uuid4 asks the kernel for 16 random bytes).

    An id is 32 lowercase hex digits, like ``uuid4().hex``: 12 of a keyed BLAKE2b of a
    per-process counter, 8 of that counter and 12 of a per-process random suffix. The digest
    comes first so that ids differ from their first digit (`charter show` and `--task` take
    a short prefix, as for uuid4 ids); one digest serves ten consecutive counter values (its
    120 hex digits are cut in ten, and a digest is a pure function of the key and the block,
    so threads racing on a block compute the same one). Suffix and key come
    from `os.urandom` when the process starts (again in a forked child, and when the counter
    runs out after 2**32 ids), so ids are unique within a process by the counter and across
    processes unless two draw the same 48-bit suffix and their keyed digests also agree
    (about 2**-48 for any two ids of two processes). The digest makes the next id unguessable
    from the ones seen without the key; ids are not secrets and grant nothing.
    """

    __slots__ = ("_block", "_count", "_key", "_lock", "_suffix")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reseed()
        os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        self._lock = threading.Lock()  # a fork may have copied it held
        self._key = os.urandom(16)
        self._suffix = os.urandom(6).hex()
        self._block: tuple[int, str] = (-1, "")
        self._count = itertools.count(1)

    def __call__(self) -> str:
        n = next(self._count)
        if n > 0xFFFFFFFF:
            with self._lock:
                self._reseed()
            n = next(self._count)
        block, at = divmod(n, 10)
        found = self._block
        if found[0] != block:
            digest = _blake2b(block.to_bytes(4, "big"), key=self._key, digest_size=60).hexdigest()
            found = self._block = (block, digest)
        at *= 12
        return f"{found[1][at : at + 12]}{n:08x}{self._suffix}"


#: A fresh task or action id: 32 lowercase hex digits, unique and unpredictable (see _IdSource).
#: The bound method, not the instance: calling an instance looks its __call__ up every time.
new_id = _IdSource().__call__
