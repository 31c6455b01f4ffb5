"""The user's output kept off diagnose's: while a --pipeline target runs, everything written to the process's
stdout and stderr (the user's prints, also from inside tf.numpy_function, tf.print, TensorFlow's and Keras's
C++ and Python warnings, subprocesses) goes to a log file, caught at the file-descriptor level (os.dup2);
diagnose writes its own lines to the terminal it had before. Both are restored on exit, Ctrl-C included."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


def log_path_for(json_path: Path | None) -> Path:
    """Where the user's output goes: beside --json (its name with .log), else a new file in the temp folder."""
    if json_path is not None:
        return json_path.with_suffix(".log")
    handle, name = tempfile.mkstemp(prefix="perfsuite-diagnose-", suffix=".log")
    os.close(handle)
    return Path(name)


@contextlib.contextmanager
def user_output_to(path: Path) -> Iterator[TextIO]:
    """stdout and stderr (file descriptors 1 and 2, and sys.stdout / sys.stderr) into path while the block
    runs; yields the stream diagnose's own progress goes to (the stderr it had before)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    old_out, old_err = sys.stdout, sys.stderr
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    try:
        on_fd_2 = old_err.fileno() == 2
    except (AttributeError, OSError, ValueError):
        on_fd_2 = False
    terminal = os.fdopen(os.dup(saved[2]), "w", buffering=1) if on_fd_2 else old_err
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab", buffering=0) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    captured = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout = sys.stderr = captured
    try:
        yield terminal
    finally:
        with contextlib.suppress(Exception):
            captured.flush()
        sys.stdout, sys.stderr = old_out, old_err
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        captured.close()
        if terminal is not old_err:
            terminal.close()
