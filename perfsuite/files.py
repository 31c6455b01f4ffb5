"""The one atomic write: a reader sees the old file or the new one, never a half-written one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_target(path: Path | str) -> Iterator[BinaryIO]:
    """A binary file object whose content replaces `path` atomically when the block ends without
    an exception: a temporary file in the same directory (so os.replace is a rename), flushed and
    fsynced, made readable as a plain file would be (mkstemp's 0600 would make it private), then
    renamed over `path` and the directory fsynced so the rename itself survives a crash. On an
    exception the temporary file is removed and `path` is left as it was. For writers that need a
    file object (np.save, yaml.safe_dump); others use write_atomic."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def write_atomic(path: Path | str, data: str | bytes) -> None:
    """Write `data` (text as UTF-8, or bytes) to `path` atomically (see atomic_target)."""
    with atomic_target(path) as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
