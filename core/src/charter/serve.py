"""Clients of a project's decision server (``charter serve``): what a hook or a tool needs.

`Client` speaks the protocol over the project's unix socket; `server_folder` is where the
project's server keeps its socket (``charter.sock``), identity key (``key``) and HTTP token
(``token``); `ensure_key` creates the key (what ``charter claude install --serve`` pins, as
`key_digest`) and `read_key` reads it. A process that asks one question and ends (a hook)
can use `exchange` instead of `Client`: one request line out, the answer line back, with
neither ``socket`` nor ``json`` imported; `sign` computes the proof of an answer from its
canonical result bytes, for results a client reads without a JSON parser.

Importing this module loads no engine, store or policy code, nor typing, pathlib, json,
socket or hashlib (hooks import it on every call); `Client` loads on first use.
"""

from __future__ import annotations

import os as _os

from charter._runtime.project_files import ensure_secret as _ensure_secret
from charter._runtime.project_files import key_digest, sign
from charter._runtime.project_files import read_secret as _read_secret
from charter._runtime.project_files import serve_dir as _serve_dir
from charter._server.wire import ClientError, exchange

_TYPE_CHECKING = False
if _TYPE_CHECKING:
    from collections.abc import Mapping as _Mapping

    from charter._server.client import Client

__all__ = [
    "Client",
    "ClientError",
    "ensure_key",
    "exchange",
    "key_digest",
    "read_key",
    "server_folder",
    "sign",
]


def __getattr__(name: str) -> object:
    # Client imports json and socket: a hook that only uses `exchange` never pays for them.
    if name == "Client":
        from charter._server.client import Client

        globals()["Client"] = Client
        return Client
    raise AttributeError(f"module 'charter.serve' has no attribute {name!r}")


def server_folder(root: str | _os.PathLike[str], environ: _Mapping[str, str] | None = None) -> str:
    """The server folder of the project at `root`: ``~/.charter/serve/<key>/`` (``HOME``
    from `environ`, default the process's), or ``<root>/.charter/serve`` without a home."""
    return _serve_dir(root, environ)


def ensure_key(folder: str | _os.PathLike[str]) -> str:
    """The server key in `folder`, created (0600, folder 0700) when missing; as text."""
    return _ensure_secret(_os.path.join(folder, "key"))


def read_key(folder: str | _os.PathLike[str]) -> str | None:
    """The server key in `folder`, or None when there is none (or it is malformed)."""
    return _read_secret(_os.path.join(folder, "key"))
