"""The one atomic write: a reader sees the old file or the new one, never a half-written one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path | str, data: str | bytes) -> None:
    """Write `data` (text as UTF-8, or bytes) to `path` atomically: a temporary file in the same
    directory, flushed and fsynced, then os.replace. The temporary file is removed on failure."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
