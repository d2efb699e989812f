"""`write_atomically`: replace a file's content so that a reader never sees half of it.

Charter's state files (policy caches, a hook's session state, trusted records, snapshots,
secrets) are read by other processes at any moment, and a process can die mid-write: each
is written to a temporary file beside it and renamed over it, which POSIX makes atomic.
"""

from __future__ import annotations

import os

__all__ = ["write_atomically"]


def write_atomically(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o666) -> None:
    """Replace the file at `path` with `data`, creating its folder when missing.

    The temporary file is ``.<name>.<pid>.tmp`` in the same folder, created with `mode`
    (less the umask); a reader sees the old content or the new, never a part. Raises
    OSError when the folder or the file cannot be written; the temporary file is removed
    then, and the old content stays.
    """
    folder, name = os.path.split(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
