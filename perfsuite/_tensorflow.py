"""The one way perfsuite reaches TensorFlow: imported only when asked (so the CLI can check its arguments,
and NVML/baseline code can run, without paying for the import), with its start-up lines kept out.

Importing TensorFlow writes to stderr before any of its settings apply: absl's "All log messages before
absl::InitializeLog() ..." and "Could not find cuda drivers" come from C++ before TF_CPP_MIN_LOG_LEVEL is
read. So the import runs with file descriptor 2 pointed at a temporary file; what landed there is kept
(``startup_log``) and written to stderr only when ``PERFSUITE_TF_LOGS=1`` (the CLI's ``-v``) or when the
import fails (it may say why). With ``PERFSUITE_TF_LOGS=1`` TensorFlow's own log level is left alone.
"""

import contextlib
import functools
import os
import sys
import tempfile

LOGS_VARIABLE = "PERFSUITE_TF_LOGS"
_startup = []  # what TensorFlow wrote to stderr while it was imported


def startup_log() -> str:
    """What TensorFlow wrote to stderr while perfsuite imported it ('' before the import)."""
    return "".join(_startup)


def show_logs() -> bool:
    return os.environ.get(LOGS_VARIABLE, "") not in ("", "0")


@functools.cache  # a C wrapper: AutoGraph calls it as it is when a traced function asks for TensorFlow
def tensorflow():
    """The ``tensorflow`` module, imported on first use (see the module docstring for its stderr)."""
    if show_logs():
        import tensorflow

        return tensorflow
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _stderr_kept() as kept:
        try:
            import tensorflow
        except BaseException:
            kept.failed = True
            raise
    return tensorflow


def imported():
    """The ``tensorflow`` module if something has imported it already, else None (then no value can be
    a tensor or a dataset, and a caller can handle plain Python and numpy without the import)."""
    return sys.modules.get("tensorflow")


def is_dataset(value) -> bool:
    """Whether ``value`` is a tf.data.Dataset, without importing TensorFlow: before TensorFlow is
    imported nothing can be one (a pure-Python pipeline never pays the import)."""
    module = imported()
    return module is not None and isinstance(value, module.data.Dataset)


class _Kept:
    failed = False


@contextlib.contextmanager
def _stderr_kept():
    """File descriptor 2 pointed at a temporary file while the body runs; its text appended to
    _startup, and replayed to stderr when the body raised (``failed``)."""
    kept = _Kept()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no file descriptor 2 to redirect: leave stderr as it is
        yield kept
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield kept
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
            _startup.append(text)
            if kept.failed and text:
                sys.stderr.write(text)
