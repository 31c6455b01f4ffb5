"""The Python callables behind a pipeline's Python-function ops (tf.py_function, tf.numpy_function,
from_generator's generator): TensorFlow's registry of them is read here and nowhere else, by the op's
``token`` attr. The pipeline model names each op's callable and where it is defined (PythonOp.python,
PythonOp.defined_at); the work fingerprint runs the callable (perfsuite.measure.python_work).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any


def registered(token: str) -> tuple[Any, bool]:
    """(the Python callable the PyFunc / EagerPyFunc op with this ``token`` attr runs, whether it takes
    tensors: py_function's), from TensorFlow's registry of them (internal: (None, False) when it cannot be
    read or holds no such callable)."""
    with contextlib.suppress(Exception):
        from tensorflow.python.ops import script_ops

        function = script_ops._py_funcs.get(token)
        eager = getattr(function, "_func", None)  # py_function's EagerFunc
        return (eager, True) if eager is not None else (function, False)
    return None, False


def python_callable(node) -> tuple[str | None, str | None]:
    """('module.qualname', 'file:line') of the Python callable a PyFunc node calls ((None, None) when it
    cannot be read)."""
    with contextlib.suppress(Exception):
        return callable_words(registered(node.attr["token"].s.decode())[0])
    return None, None


def callable_words(function: Any) -> tuple[str | None, str | None]:
    """('module.qualname', 'file:line') of a callable, through autograph's do_not_convert, functools.partial
    and bound methods; a callable object by its class's __call__."""
    function = inspect.unwrap(function) if callable(function) else function
    if getattr(function, "__qualname__", "").endswith("do_not_convert.<locals>.wrapper"):  # around an object
        function = next((cell.cell_contents for cell in function.__closure__ or ()
                         if callable(cell.cell_contents)), function)
    while isinstance(function, functools.partial):
        function = inspect.unwrap(function.func)
    if function is None:
        return None, None
    called = _called_by_lambda(function)
    if called is not None:  # a lambda around the user's function, as numpy_function(lambda x: f(x, ...)) is
        name, where = callable_words(called)
        return (None if name is None else f"{name} (called by a lambda)"), where
    target = function if hasattr(function, "__qualname__") else type(function)
    name = getattr(target, "__qualname__", None)
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    if code is None and not hasattr(function, "__qualname__"):
        code = getattr(type(function).__call__, "__code__", None)
    where = None if code is None else f"{code.co_filename}:{code.co_firstlineno}"
    return (None if name is None else f"{getattr(target, '__module__', '?')}.{name}"), where


def _library_module(module: str | None) -> bool:
    """Whether a module is TensorFlow's or perfsuite's own (a user's module perfsuite imported is named
    perfsuite_target_*: it is the user's)."""
    return any(module == name or (module or "").startswith(f"{name}.") for name in ("tensorflow", "perfsuite"))


def _called_by_lambda(function: Any) -> Any:
    """The one Python function a lambda calls (by a global or closure name; autograph's own helpers left
    out), or None when the callable is not a lambda or calls no single function of its own."""
    if getattr(function, "__name__", None) != "<lambda>" or not hasattr(function, "__code__"):
        return None
    names = [function.__globals__.get(name) for name in function.__code__.co_names]
    cells = [cell.cell_contents for cell in function.__closure__ or ()]
    called = {id(c): c for c in names + cells if inspect.isfunction(c) and not _library_module(c.__module__)}
    return next(iter(called.values())) if len(called) == 1 else None
