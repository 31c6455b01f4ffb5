"""The work of Python bodies (the callables behind ``tf.numpy_function`` / ``tf.py_function`` ops),
counted deterministically: calls into numpy, scipy, librosa and soundfile, with the sizes of the arrays
that cross them, and the files the body reads.

Which counter, and why (``PYTHON_WORK_METHOD``): a profile hook (``sys.setprofile``) on the thread that
runs the body. It sees every Python-level function call with its frame (so its arguments, and its return
value) and every call of a C builtin by name (not its arguments: CPython's profile events carry none for C
calls). That gives a count that is the same on every machine, in every process and under every thread
setting, because it depends only on the code path and the arrays' shapes, never on time, CPU features or
the scheduler. Instruction counts would see more (ufuncs and operators) but differ by CPU (numpy picks
its SIMD kernels at run time) and need a simulator or performance counters this suite cannot rely on.

- ``python_calls``: the library routines the body calls, by ``module.qualname`` (an "entry": a routine of
  the libraries called from outside them; their calls of each other are theirs, not counted again).
- ``python_work``: over the Python-level entries, the elements of the numpy arrays passed in and of those
  returned with data of their own (``np.fft.rfft`` of ``[F, 1024]`` to ``[F, 513]``: F·1024 + F·513; a
  returned view, as ``sliding_window_view``'s, touched nothing: 0). A longer FFT, a second STFT, more
  frames move it. C-level entries (``np.zeros``, ``ndarray.astype``) count in ``python_calls`` only.
- ``file_bytes``: the sizes of the files the body opens (Python's ``open`` audit event: ``open``,
  ``np.load``) or names to a library entry (``soundfile.read(path)``, which opens in C), each once a run.

Blind spots, stated: ufunc calls (``np.log``, ``np.abs``) and operators on arrays (``a * b``, ``a @ b``)
raise no profile event; their arrays count only where they cross an entry. Work in TensorFlow ops a
``py_function`` body runs eagerly is not counted here. The count is per numpy / library version: the
fingerprint records numpy's, and CI installs pinned versions (constraints.txt).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

LIBRARIES = ("numpy", "scipy", "librosa", "soundfile", "_soundfile", "soxr", "audioread")
PYTHON_WORK_METHOD = ("calls of numpy / scipy / librosa / soundfile routines from outside them, counted by a "
                      "profile hook on the thread running the body; work: elements of the numpy arrays passed to "
                      "and returned by the Python-level routines (C routines, ufuncs and operators: calls only "
                      "or unseen)")


@dataclass
class PythonCounts:
    """What the counted bodies did: calls per entry, array elements across Python-level entries, bytes of
    the files opened or named, and bodies run."""

    calls: Counter = field(default_factory=Counter)
    work: int = 0
    file_bytes: int = 0
    runs: int = 0


def _library(module: str | None) -> bool:
    return bool(module) and module.split(".", 1)[0] in LIBRARIES


def _frame_module(frame) -> str | None:
    return frame.f_globals.get("__name__") if frame is not None else None


def _c_name(function) -> str | None:
    """'numpy.zeros', 'numpy.ndarray.astype': a C builtin of the libraries, by module and qualname."""
    owner = getattr(function, "__self__", None)
    module = getattr(function, "__module__", None) or (type(owner).__module__ if owner is not None else None)
    if not _library(module):
        return None
    return f"{module}.{getattr(function, '__qualname__', getattr(function, '__name__', '?'))}"


def _elements(value: Any, depth: int = 0, *, views: bool = True) -> int:
    """Elements of the numpy arrays in a value (an array, or a tuple / list / dict of them, one level);
    with ``views=False`` an array that is a view of another's data counts 0 (making it touched none)."""
    size = getattr(value, "size", None)
    if type(value).__module__ == "numpy" and isinstance(size, int) and hasattr(value, "shape"):
        return size if views or getattr(value, "base", None) is None else 0
    if depth == 0 and isinstance(value, tuple | list):
        return sum(_elements(item, 1, views=views) for item in value)
    if depth == 0 and isinstance(value, dict):
        return sum(_elements(item, 1, views=views) for item in value.values())
    return 0


def _file_size(value: Any) -> tuple[str, int] | None:
    """(path, size) of an existing regular file a value names (str, bytes or os.PathLike)."""
    if not isinstance(value, str | bytes | os.PathLike):
        return None
    with contextlib.suppress(OSError, TypeError, ValueError):
        path = os.fsdecode(value)
        if os.path.isfile(path):
            return path, os.path.getsize(path)
    return None


class _Counter:
    """The profile hook of one counted run (see the module docstring)."""

    def __init__(self, counts: PythonCounts):
        self.counts, self.entries, self.files = counts, {}, {}

    def profile(self, frame, event: str, arg: Any) -> None:
        if event == "c_call":
            name = _c_name(arg)
            if name is not None and not _library(_frame_module(frame)):
                self.counts.calls[name] += 1
        elif event == "call":
            self._call(frame)
        elif event == "return" and id(frame) in self.entries:
            self.entries.pop(id(frame))
            self.counts.work += _elements(arg, views=False)

    def _call(self, frame) -> None:
        module = _frame_module(frame)
        code = frame.f_code
        if not _library(module) or _library(_frame_module(frame.f_back)):
            return
        if code.co_name.endswith("_dispatcher") or code.co_name.startswith("<") or _hidden_dunder(code.co_name):
            return  # numpy's array-function dispatchers (the routine follows), module code, comprehensions,
            # finalizers and lazy module attributes
        self.counts.calls[f"{module}.{code.co_qualname}"] += 1
        self.entries[id(frame)] = True
        arguments = [frame.f_locals[name] for name in code.co_varnames[:_argument_count(code)]
                     if name in frame.f_locals]
        self.counts.work += sum(_elements(value) for value in arguments)
        for value in arguments:
            self.file(value)

    def file(self, value: Any) -> None:
        found = _file_size(value)
        if found is not None and not found[0].endswith(_MODULE_FILES):  # an import's reads are not the body's
            self.files.setdefault(found[0], found[1])


_MODULE_FILES = (".py", ".pyc", ".so", ".pyd")


def _hidden_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and name not in ("__init__", "__call__")


def _argument_count(code) -> int:
    flags = code.co_flags
    return code.co_argcount + code.co_kwonlyargcount + bool(flags & 0x04) + bool(flags & 0x08)


_ACTIVE = threading.local()  # the counter of this thread's counted run, read by the audit hook
_HOOKED = []


def _audit(event: str, args: tuple) -> None:
    counter = getattr(_ACTIVE, "counter", None)
    if counter is not None and event == "open" and args:
        mode = args[1] if len(args) > 1 else None
        if mode is None or (isinstance(mode, str) and ("r" in mode or "+" in mode)):
            counter.file(args[0])


def count_python(function, arguments: list, counts: PythonCounts) -> Any:
    """Runs ``function(*arguments)`` on this thread under the counter, adding to ``counts``; returns its
    result. The garbage collector is held for the run (a collection's finalizers are no part of the body)."""
    if not _HOOKED:
        sys.addaudithook(_audit)  # once a process; a no-op outside a counted run
        _HOOKED.append(True)
    counter = _Counter(counts)
    enabled = gc.isenabled()
    gc.disable()
    previous = sys.getprofile()
    _ACTIVE.counter = counter
    sys.setprofile(counter.profile)
    try:
        return function(*arguments)
    finally:
        sys.setprofile(previous)
        _ACTIVE.counter = None
        if enabled:
            gc.enable()
        counts.file_bytes += sum(counter.files.values())
        counts.runs += 1


def python_body(token: str):
    """The Python callable a PyFunc / EagerPyFunc op with this ``token`` attr runs, from TensorFlow's
    registry of them (internal: None when it cannot be read), and whether it takes tensors (py_function)."""
    with contextlib.suppress(Exception):
        from tensorflow.python.ops import script_ops

        function = script_ops._py_funcs.get(token)
        if function is None:
            return None, False
        eager = getattr(function, "_func", None)
        return (eager, True) if eager is not None else (function, False)
    return None, False
