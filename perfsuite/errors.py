"""perfsuite's user-facing errors: one base class, so the CLI and the plugin catch them in one place.

Each message names the thing (file, key, option, device), what was expected and what was found.
"""

from __future__ import annotations

import re
from pathlib import Path


class PerfsuiteError(Exception):
    """Base of every error perfsuite raises for its user (bad input, an unavailable resource)."""


def one_line_error(error: BaseException) -> str:
    """An exception in one line: its type and the first line of its message (TensorFlow's '{{function_node
    ...}}' prefix left out, so a Python error inside the pipeline shows its own type and message)."""
    lines = re.sub(r"^\{\{[^}]*\}\}\s*", "", str(error).strip()).splitlines()
    message = lines[0][:300] if lines else ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


class DataError(PerfsuiteError, ValueError):
    """A data file the loaders cannot use: names the file, what was expected and what was found."""

    def __init__(self, path, expected: str, found: str):
        self.path = str(path)
        self.expected = expected
        self.found = found
        super().__init__(f"{self.path}: expected {expected}, found {found}")

    def __reduce__(self):  # keeps the attributes across pickling (worker processes)
        return (type(self), (self.path, self.expected, self.found))


class BaselineError(PerfsuiteError, ValueError):
    """A baseline file (or a request to record one) is wrong: names the file, the key and the problem."""

    def __init__(self, path: Path | str | None, key: str, problem: str):
        self.path = None if path is None else str(path)
        self.key = key
        self.problem = problem
        where = f"{self.path}: {key}" if self.path is not None else key
        super().__init__(f"{where}: {problem}")


class ServiceError(PerfsuiteError, RuntimeError):
    """A tf.data service cluster could not be started, reached or read."""


class GpuUnavailable(PerfsuiteError, RuntimeError):
    """No GPU can be sampled here. `cause` is one of perfsuite.measure.gpu's CAUSE_* constants;
    `reason` says it in words."""

    def __init__(self, *, cause: str, reason: str):
        super().__init__(reason)
        self.cause = cause
        self.reason = reason


class ReportUnavailable(PerfsuiteError, RuntimeError):
    """matplotlib is not installed; the message names the extra that provides it."""


class PinningUnavailable(PerfsuiteError, RuntimeError):
    """This platform cannot pin threads to a CPU (no os.sched_setaffinity or /proc/self/task)."""
