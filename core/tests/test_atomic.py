"""write_atomically replaces a file whole, or leaves it as it was."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from charter.integration import write_atomically


def test_the_file_is_replaced_and_its_folder_made(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "state.json"
    write_atomically(target, b"first")
    write_atomically(str(target), b"second" * 10_000)
    assert target.read_bytes() == b"second" * 10_000
    assert os.listdir(target.parent) == ["state.json"]


def test_a_private_file_is_created_private(tmp_path: Path) -> None:
    target = tmp_path / "key"
    write_atomically(target, b"secret", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_refused_write_leaves_the_old_content_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    (tmp_path / f".state.json.{os.getpid()}.tmp").mkdir()  # the temporary name is taken
    with pytest.raises(OSError):
        write_atomically(target, b"new")
    assert target.read_bytes() == b"old"
