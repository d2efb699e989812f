"""Pinned governance: what a person trusted with `charter claude install` / `trust`.

Where the pins live, and why. The governed agent can write anything in the project and in
its home directory, so no file Charter could keep there is out of its reach. The one place
it cannot change *during a session* is the hook command itself: Claude Code reads its hooks
when the session starts, and a hook changed afterwards does not run until a person reviews
it (``/hooks``) or restarts. So `install` writes the pins onto the hook's command line:
``--pin sha256:...`` (the digest of the trusted policy set), ``--enforcement`` and
``--fail-mode``. Installed in user or managed settings (``--user``, or ``--settings-file``
with the managed settings path, written by an administrator), the pins are also out of the
project's reach between sessions.

The trusted record (`build_record`) is the policy set as data: each source (project-relative
policy file, or ``baseline:NAME``) with the SHA-256 of its bytes, the parsed policies, and
the template documents the tool mapping is built from. The pin is the SHA-256 of the exact
bytes of the record (`record_bytes`); a copy is kept under
``.charter/claude-code/trusted/<digest>.json``, and a copy whose bytes do not hash to the pin
is ignored. So an edited policy file, an emptied cache or a planted copy never becomes the
policy set: the verified copy stays in force (and the hook says the files changed), or, with
no verified copy left, every action step is denied until a person runs
``charter claude trust``.

Why the exact bytes and not the canonical (RFC 8785) digest of the record, as pins of the
first record format were: a canonical digest is the same for values that are equal as JSON
but not alike to the code that reads them. It sorts object keys, and the template set
depends on their order (the generic template's verbs are listed most consequential first, so
``get_or_delete_item`` is a DELETE); it reads ``1`` and ``1.0`` alike. A copy rewritten with
the verbs reordered still had the pinned digest, and mapped that tool as a read. A pin of the
first format is still honoured, but never from its copy: the policy set is built from the
files again on every call while they still hash to the pin (each source's SHA-256 is part of
it), and refused once they do not (`charter claude trust` pins it anew).

The trail anchor: `install` and `trust` (or, under a user-wide install, the first call in a
project) record a closed task ``charter-anchor`` in the project's audit store and a marker
outside the project (``~/.charter/claude-code/anchors``). A store that lost the anchor
(deleted, emptied, replaced) while the marker says the project had one is refused until
``charter claude trust``: the history the flow rules judge from is gone. The marker is
outside the project so that wiping ``.charter/`` alone is noticed; both are protected by
the always-on rule (`_protect`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from charter.integration import json_dumps, json_loads, sha256_hex, write_atomically

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "ANCHOR_NAME",
    "ANCHOR_TASK",
    "TrustError",
    "anchor_marker",
    "build_record",
    "current_sources",
    "first_format_pin",
    "has_anchor",
    "older_record",
    "pin_of",
    "read_record",
    "record_bytes",
    "reset_heads",
    "source_names",
    "template_part",
    "template_sources_now",
    "trusted_dir",
    "write_anchor",
    "write_record",
]

_FORMAT = 2
# The first format: pinned by the canonical digest, which does not bind key order or number
# types (see the module docstring), so its copies are never read as the policy set.
_CANONICAL_FORMAT = 1
ANCHOR_NAME = "charter-trust"
# One closed task per store, whatever the pin: a new pin (a teammate's trust) keeps it.
ANCHOR_TASK = "charter-anchor"
TRUST_COMMAND = "charter claude trust"


class TrustError(Exception):
    """The pinned policy set cannot be used; the message says what a person must do."""


def trusted_dir(state_dir: str | os.PathLike[str]) -> str:
    return os.path.join(state_dir, "trusted")


def _read_bytes(path: str | os.PathLike[str]) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def source_names(files: Sequence[str], root: str) -> list[str]:
    """How each policy file is named in the record: relative to the project when inside it
    (the same on every machine), else its absolute path."""
    real_root = os.path.realpath(root)
    names = []
    for f in files:
        real = os.path.realpath(f)
        rel = os.path.relpath(real, real_root)
        names.append(
            rel.replace(os.sep, "/")
            if not rel.startswith("..") and not os.path.isabs(rel)
            else real
        )
    return names


def _sha(data: bytes) -> str:
    return sha256_hex(data)


def current_sources(
    files: Sequence[str], names: Sequence[str], baseline_file: str | None, baseline: str | None
) -> list[list[str]] | None:
    """[[name, sha256]] of the policy sources as they are now; None when one is unreadable."""
    out: list[list[str]] = []
    try:
        if baseline:
            data = _read_bytes(baseline_file) if baseline_file else baseline.encode()
            out.append([f"baseline:{baseline}", _sha(data)])
        for f, name in zip(files, names, strict=True):
            out.append([name, _sha(_read_bytes(f))])
    except OSError:
        return None
    return out


def template_part(location: str | None) -> dict[str, Any]:
    """The template sources (with digests) and their documents as data."""
    import charter_templates

    sources = list(charter_templates.builtin_sources())
    builtin = charter_templates.template_documents(sources)
    part: dict[str, Any] = {
        "sources": [[name, _sha(text.encode())] for name, text in sources],
        "documents": builtin,
        "user": None,
    }
    if location:
        text = _read_bytes(location).decode("utf-8")
        (user,) = charter_templates.template_documents([(location, text)])
        part["sources"].append([location, _sha(text.encode())])
        part["user"] = user
    return part


def template_sources_now(location: str | None) -> list[list[str]] | None:
    import charter_templates

    try:
        out = [[n, _sha(t.encode())] for n, t in charter_templates.builtin_sources()]
        if location:
            out.append([location, _sha(_read_bytes(location))])
    except OSError:
        return None
    return out


def build_record(
    files: Sequence[str],
    names: Sequence[str],
    baseline: str | None,
    template_location: str | None,
) -> dict[str, Any]:
    """The trusted record for these policy sources, parsed now. Raises TrustError naming
    what does not load (a person fixes it before trusting it)."""
    from charter import parse_manifest

    from charter_claude_code._policies import ConfigError, baseline_file, baseline_policies

    policies: list[dict[str, Any]] = []
    try:
        found = baseline_file(baseline) if baseline else None
    except ConfigError as exc:
        raise TrustError(str(exc)) from None
    if baseline and found is None:
        policies.extend(p.to_dict() for p in baseline_policies(baseline))
    pairs = ([(found, f"baseline:{baseline}")] if found else []) + list(
        zip(files, names, strict=True)
    )
    for path, name in pairs:
        try:
            data = _read_bytes(path)
        except OSError as exc:
            raise TrustError(f"{path} cannot be read ({exc.strerror or exc})") from None
        result = parse_manifest(data, source=name)
        if not result.valid:
            problems = "; ".join(str(e) for e in result.errors) or "invalid"
            raise TrustError(f"{name} does not load: {problems}")
        policies.extend(p.to_dict() for p in result.policies)
    seen = [p.get("name") for p in policies]
    clashes = sorted({str(n) for n in seen if seen.count(n) > 1})
    if clashes:
        raise TrustError(
            "policy names must be unique across the baseline and the files, and these "
            f"repeat: {', '.join(clashes)}"
        )
    sources = current_sources(files, names, found, baseline)
    if sources is None:
        raise TrustError("a policy file cannot be read")
    return {
        "format": _FORMAT,
        "sources": sources,
        "policies": policies,
        "templates": template_part(template_location),
    }


def record_bytes(record: Mapping[str, Any]) -> bytes:
    """The bytes a record is kept as, and its pin hashed from: JSON, ASCII only (so any
    string encodes), with the keys in the record's own order."""
    return json_dumps(dict(record), separators=(",", ":")).encode("ascii")


def pin_of(record: Mapping[str, Any]) -> str:
    """The pin of a record: ``sha256:`` and the SHA-256 of `record_bytes` (of a first-format
    record: its RFC 8785 canonical digest)."""
    if record.get("format") == _CANONICAL_FORMAT:
        import charter

        return "sha256:" + str(charter.canonical_digest(dict(record)))
    return "sha256:" + sha256_hex(record_bytes(record))


def first_format_pin(record: Mapping[str, Any]) -> str:
    """The pin a Charter of the first record format gave the same policy set."""
    return pin_of({**record, "format": _CANONICAL_FORMAT})


def _record_path(state_dir: str | os.PathLike[str], pin: str) -> str:
    return os.path.join(trusted_dir(state_dir), f"{pin.removeprefix('sha256:')}.json")


def write_record(state_dir: str | os.PathLike[str], record: Mapping[str, Any]) -> str:
    """Keep the verified copy of `record`; returns its pin."""
    data = record_bytes(record)
    pin = "sha256:" + sha256_hex(data)
    path = _record_path(state_dir, pin)
    write_atomically(path, data)
    return pin


def read_record(state_dir: str | os.PathLike[str], pin: str) -> dict[str, Any] | None:
    """The verified copy of the record pinned as `pin`, or None when there is none whose
    bytes hash to the pin (missing, damaged, replaced, or a first-format copy: all ignored
    alike)."""
    try:
        raw = _read_bytes(_record_path(state_dir, pin))
    except OSError:
        return None
    if "sha256:" + sha256_hex(raw) != pin:
        return None
    try:
        data = json_loads(raw)
    except ValueError:
        return None
    # The bytes are the pinned ones; a first-format record's canonical bytes would be too.
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        return None
    if not isinstance(data.get("policies"), list) or not isinstance(data.get("sources"), list):
        return None
    return data


def older_record(state_dir: str | os.PathLike[str], pin: str) -> bool:
    """Whether the copy kept for `pin` is a first-format record with that canonical digest
    (pinned by an earlier Charter), for saying so when it cannot be used."""
    try:
        data = json_loads(_read_bytes(_record_path(state_dir, pin)))
        return (
            isinstance(data, dict)
            and data.get("format") == _CANONICAL_FORMAT
            and pin_of(data) == pin
        )
    except (OSError, ValueError, TypeError):
        return False


def anchor_marker(root: str, environ: Mapping[str, str]) -> str | None:
    """The marker saying that the project `root` had an anchored trail (outside it)."""
    home = environ.get("HOME") or os.path.expanduser("~")
    if not home or home == "~":
        return None
    key = sha256_hex(os.path.realpath(root).encode("utf-8", "surrogatepass"))
    return os.path.join(home, ".charter", "claude-code", "anchors", key[:32])


def has_anchor(gate: Any) -> bool:
    """Whether the gate's store holds the trail anchor."""
    return bool(gate.resume_task(ANCHOR_TASK) == "ended")


def write_anchor(gate: Any, pin: str, root: str, environ: Mapping[str, str]) -> None:
    """Record the anchor task in the gate's store (unless there) and the marker."""
    from charter.integration import Blocked

    tid = ANCHOR_TASK
    if gate.resume_task(tid) != "ended":
        started = gate.start_task(tid, name=ANCHOR_NAME, input={"pin": pin, "project": root})
        if isinstance(started, Blocked):
            raise TrustError(f"the audit store could not record the trail anchor: {started.reason}")
        gate.end_task(tid, output={"pin": pin})
        if not has_anchor(gate):
            raise TrustError("the audit store did not keep the trail anchor; check it")
    marker = anchor_marker(root, environ)
    if marker is not None:
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "w", encoding="utf-8") as f:
            f.write(os.path.realpath(root) + "\n")


def reset_heads(root: str) -> int:
    """Let every session of the project continue from its trail as stored now (after a
    person re-trusted it): session states whose recorded head is past the store's are
    lowered to it. Returns how many were."""
    import charter

    from charter_claude_code._handler import state_dir
    from charter_claude_code._state import SessionState, StateError

    folder = os.path.join(state_dir(root), "sessions")
    location = f"sqlite:///{root}/.charter/audit.db"
    changed = 0
    if not os.path.isdir(folder):
        return 0
    store = charter.open_store(location)
    try:
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                state = SessionState.load(os.path.join(folder, name), name[: -len(".json")])
            except StateError:
                continue
            if not state.task_id:
                continue
            records = store.read_task(state.task_id, "claude-code")
            stored = int(records[-1]["seq"]) if records else 0
            if stored < state.head:
                state.head = stored
                state.save()
                changed += 1
    finally:
        store.close()
    return changed
