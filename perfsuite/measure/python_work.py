"""The work of Python bodies (the callables behind ``tf.numpy_function`` / ``tf.py_function`` ops and the
generators of ``tf.data.Dataset.from_generator``), counted deterministically by numpy operation, element
and dtype, with the files the body reads; what cannot be counted is named with its call count.

Which counter, and why (``PYTHON_WORK_METHOD``): the body's arrays are made of a thin ndarray subclass
(``_Tracked``) implementing numpy's override protocols, ``__array_ufunc__`` (NEP 13) and ``__array_function__``
(NEP 18). Every ufunc (``np.log``, ``np.abs``) and operator (``a * b``, ``a @ b``, ``a += b``: numpy routes
them through ufuncs), array function (``np.fft.rfft``, ``np.dot``, ``np.pad``) and computing ndarray method
(``.astype``, ``.sum``, ``.dot``, item assignment, fancy indexing) is recorded, run on plain arrays and its
result tracked again. A subclass rather than a duck type: views (slicing, ``.T``, ``.reshape``) keep it at no
cost, and every library takes an ndarray. numpy's conversions drop a subclass (``np.asarray``) and creations
have none (``np.zeros``, a library's result), so a trace hook (``sys.settrace``) on the body's own frames (its
package, perfsuite, code outside site-packages and the standard library) tracks each plain array that
appears in their locals, or that they return or yield, counted once as ``new`` unless it views a counted
one. The count depends only on the code path, the shapes and the dtypes: the same on every machine, in
every process, on any thread and thread setting. Nothing is timed and no instruction counted (those differ
by CPU: numpy picks its SIMD kernels at run time). A body is run once uncounted the first time it is counted
in a process, so a cache it fills (an ``lru_cache``'d filterbank) is counted in no run rather than the first.

- ``python_calls``, summed over the reference elements: ``ufunc:<name>[.<method>]:<dtype>``,
  ``func:<module>.<name>:<dtype>``, ``method:<name>:<dtype>`` (the output's dtype: float32 -> float64 moves
  a key even where the elements stay), ``new:<dtype>``, ``call:<numpy routine>`` (seen by its call only:
  creations, conversions, calls on untracked temporaries), and ``uncounted:<module>.<qualname>``: calls
  from the body's code into any other library (scipy, librosa, soundfile, TensorFlow, a C extension's
  builtins; numba as ``uncounted:numba``), handed plain arrays, their work named, never counted. A callable
  that raises no hook (a Cython function, a numba dispatcher) is named by the line that loads it by name.
- ``python_work``: elements, inputs plus outputs, of every recorded ufunc, array function and method
  (``np.dot`` of ``[m, k]`` and ``[k, n]``: m·k + k·n + m·n; a 1-D transform's input at its padded length
  ``n``; a view, as ``sliding_window_view`` or a reshape returns, touched nothing: 0), plus those of ``new``
  arrays. Elements, not float ops: a matmul's inner dimension and an FFT's log factor are not weighed.
- ``file_bytes``: the sizes of the files the body opens (Python's ``open`` audit event: ``open``,
  ``np.load``) or names to a library call (``soundfile.read(path)``, which opens in C), each once a run.

Blind spots, stated: numpy work on temporaries that never reach a tracked array or a local
(``np.fft.rfft(np.zeros(n))`` counts the call and the result, not the transform); arrays in a list kept in
a local; work on threads the body starts; a hook-less callable reached other than by a name (an attribute
of an object, a list's item). Arrays the body keeps beyond its call (a cache, an attribute) stay tracked,
and compute as plain ndarrays outside a count. The figures are numpy's version's: the fingerprint records it.
"""

from __future__ import annotations

import contextlib
import dis
import functools
import gc
import inspect
import os
import sys
import threading
import types
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import numpy as np

from perfsuite.workload.op_table import PYTHON_FUNCTION_OPS
from perfsuite.workload.python_functions import registered

PYTHON_WORK_METHOD = ("numpy ufuncs, operators, array functions and computing ndarray methods in the Python "
                      "bodies, recorded through numpy's __array_ufunc__ / __array_function__ protocols on an "
                      "ndarray subclass given to the body and to the arrays its own code makes (a trace hook), "
                      "keyed by name and output dtype; work: elements of their inputs and outputs (views: 0) "
                      "plus those of arrays made outside the protocols; calls into other libraries named "
                      "'uncounted' with their call counts; a body is run once uncounted first (caches)")


@dataclass
class PythonCounts:
    """What the counted bodies did: calls per key (see the module docstring), elements processed, bytes of
    the files opened or named, and bodies run."""

    calls: Counter = field(default_factory=Counter)
    work: float = 0
    file_bytes: float = 0
    runs: int = 0


# ------------------------------------------------------------------------------------ the tracked array


class _Tracked(np.ndarray):
    """An ndarray whose numpy operations are recorded by the counter active on this thread; outside a
    count it computes as ndarray and returns plain arrays."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if any(_foreign(x) for x in inputs + tuple(kwargs.get("out", ()))):
            return NotImplemented
        out = kwargs.get("out")
        plain = _plain_tree(kwargs)
        result = getattr(ufunc, method)(*(_plain(x) for x in inputs), **plain)
        counter = _counter()
        outputs = plain["out"] if out is not None else result if isinstance(result, tuple) else (result,)
        if counter is not None:
            dtype = next((o.dtype for o in outputs if isinstance(o, np.ndarray | np.generic)),
                         next((x.dtype for x in inputs if isinstance(x, np.ndarray)), None))
            name = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
            counter.record(f"ufunc:{name}:{dtype}", sum(map(_size, inputs)) + sum(map(_size, outputs)))
        if out is None:
            return _wrap_tree(result) if counter is not None else result
        results = result if isinstance(result, tuple) else (result,)  # the given out arrays, tracked ones kept
        final = tuple(given if given is not None else _wrap_tree(r) for given, r in zip(out, results))
        return final[0] if len(final) == 1 else final

    def __array_function__(self, func, types, args, kwargs):
        if not all(issubclass(t, np.ndarray) for t in types):
            return NotImplemented
        plain_args, plain_kwargs = _plain_tree(args), _plain_tree(kwargs)
        result = func(*plain_args, **plain_kwargs)
        counter = _counter()
        if counter is None:
            return result
        name = f"{getattr(func, '__module__', None) or '?'}.{getattr(func, '__qualname__', repr(func))}"
        counter.computed(f"func:{name}", [plain_args, plain_kwargs], result, metadata=name in _METADATA,
                         padding=_fft_padding(name, func, plain_args, plain_kwargs))
        if isinstance(kwargs.get("out"), _Tracked) and result is plain_kwargs["out"]:
            return kwargs["out"]
        return _wrap_tree(result)

    def __getitem__(self, key):
        plain = self.view(np.ndarray)
        result = plain[_plain_tree(key)]
        if not isinstance(result, np.ndarray):
            return result
        counter = _counter()
        if counter is None:
            return result
        if not np.may_share_memory(result, plain):  # fancy or boolean indexing: a gather
            counter.record(f"method:getitem:{result.dtype}", result.size)
        return _track(result)

    def __setitem__(self, key, value):
        plain, key = self.view(np.ndarray), _plain_tree(key)
        plain[key] = _plain(value)
        counter = _counter()
        if counter is not None:
            region = plain[key]
            counter.record(f"method:setitem:{plain.dtype}", _size(region) + _size(value))

    def __repr__(self):
        return repr(self.view(np.ndarray))

    def __str__(self):
        return str(self.view(np.ndarray))


def _computing_method(name: str):
    """An ndarray method that computes (not a view): recorded as ``method:<name>:<dtype>``."""
    plain_method = getattr(np.ndarray, name)

    def method(self, *args, **kwargs):
        plain_self = self.view(np.ndarray)
        plain_args, plain_kwargs = _plain_tree(args), _plain_tree(kwargs)
        result = plain_method(plain_self, *plain_args, **plain_kwargs)
        counter = _counter()
        if counter is None:
            return result
        if result is None:  # in place (sort, fill, put): it wrote the array
            counter.record(f"method:{name}:{plain_self.dtype}",
                           plain_self.size + _size_tree([plain_args, plain_kwargs]))
            return None
        if result is plain_self:  # .astype(same dtype, copy=False): nothing done
            return self
        counter.computed(f"method:{name}", [plain_self, plain_args, plain_kwargs], result)
        if isinstance(kwargs.get("out"), _Tracked) and result is plain_kwargs["out"]:
            return kwargs["out"]
        return _wrap_tree(result)

    method.__name__ = method.__qualname__ = name
    return method


_COMPUTING_METHODS = ("astype", "copy", "dot", "flatten", "repeat", "take", "compress", "choose", "put", "fill",
                      "sort", "argsort", "partition", "argpartition", "searchsorted", "nonzero", "argmax",
                      "argmin", "max", "min", "sum", "prod", "mean", "std", "var", "any", "all", "cumsum",
                      "cumprod", "clip", "round", "conj", "conjugate", "trace", "tobytes", "tolist")
for _name in _COMPUTING_METHODS:
    setattr(_Tracked, _name, _computing_method(_name))
del _name

# Array functions that read metadata only (no element is touched): recorded by call, with no elements.
_METADATA = frozenset(f"numpy.{n}" for n in ("shape", "ndim", "size", "result_type", "can_cast", "min_scalar_type",
                                             "may_share_memory", "shares_memory", "iscomplexobj", "isrealobj"))


# numpy's 1-D transforms: the input length each transforms, from its n (real-input and complex ones: n;
# the ones returning real: n // 2 + 1 complex inputs).
_FFT_LENGTH = {**{f"numpy.fft.{n}": lambda n: n for n in ("fft", "ifft", "rfft", "ihfft")},
               **{f"numpy.fft.{n}": lambda n: n // 2 + 1 for n in ("irfft", "hfft")}}


def _fft_padding(name: str, func, args, kwargs) -> int:
    """The elements a 1-D transform adds to its input by zero-padding it to ``n`` (it processes them),
    negative where it crops: so a longer transform counts more."""
    length = _FFT_LENGTH.get(name)
    if length is None:
        return 0
    with contextlib.suppress(TypeError, ValueError, IndexError, np.exceptions.AxisError):
        bound = inspect.signature(func).bind(*args, **kwargs).arguments
        array, n, axis = bound.get("a"), bound.get("n"), bound.get("axis", -1)
        if isinstance(array, np.ndarray) and array.ndim and n is not None:
            given = array.shape[axis]
            return (length(int(n)) - given) * (array.size // given if given else 0)
    return 0


def _foreign(value) -> bool:
    """Another array type with a ufunc override of its own: it, not this counter, answers."""
    override = getattr(type(value), "__array_ufunc__", np.ndarray.__array_ufunc__)
    return not isinstance(value, np.ndarray) and override is not np.ndarray.__array_ufunc__


def _plain(value):
    return value.view(np.ndarray) if isinstance(value, _Tracked) else value


def _plain_tree(value, depth: int = 0):
    """The value with its tracked arrays plain, through tuples, lists and dicts (three levels)."""
    if isinstance(value, _Tracked):
        return value.view(np.ndarray)
    if depth < 3 and type(value) in (tuple, list):
        return type(value)(_plain_tree(item, depth + 1) for item in value)
    if depth < 3 and type(value) is dict:
        return {key: _plain_tree(item, depth + 1) for key, item in value.items()}
    return value


def _track(array) -> _Tracked:
    """A tracked view of an array a recorded operation made; the array itself is remembered (weakly) by the
    active counter, so a plain view of it later (``np.asarray``) is known as no new array."""
    counter = _counter()
    if counter is not None:
        counter.made[id(array)] = array
    return array.view(_Tracked)


def _wrap_tree(value, depth: int = 0):
    """The value with its plain arrays tracked, through tuples (named ones too) and lists (two levels)."""
    if type(value) in (np.ndarray, np.memmap):
        return _track(value)
    if depth < 2 and isinstance(value, tuple | list):
        items = [_wrap_tree(item, depth + 1) for item in value]
        return type(value)._make(items) if hasattr(value, "_fields") else type(value)(items)
    return value


def _size(value) -> int:
    return value.size if isinstance(value, np.ndarray | np.generic) else 0


def _arrays(value, depth: int = 0) -> list:
    if isinstance(value, np.ndarray | np.generic):
        return [value]
    if depth < 3 and isinstance(value, tuple | list):
        return [a for item in value for a in _arrays(item, depth + 1)]
    if depth < 3 and isinstance(value, dict):
        return [a for item in value.values() for a in _arrays(item, depth + 1)]
    return []


def _size_tree(value) -> int:
    return sum(_size(a) for a in _arrays(value))


# ------------------------------------------------------------------------------------ the counter

_USER, _NUMPY, _STDLIB, _LIBRARY, _SELF = "user", "numpy", "stdlib", "library", "self"
_CO_OPTIMIZED = 0x01  # a function's frame (fast locals), not a module's or a class body's
_ENTRY_DUNDERS = ("__init__", "__call__", "__next__", "__iter__", "__getitem__", "__setitem__")
_MODULE_FILES = (".py", ".pyc", ".so", ".pyd")
_SITE_DIRS = ("site-packages", "dist-packages")
_C_DISPATCHERS = "numpy._core.multiarray"  # its Python functions are the dispatchers of numpy's C functions
# Libraries named as a whole: a jitted function's call enters them at an internal routine (numba's
# dispatcher, a C object, types a tracked argument in Python), not at the function's own name.
_BY_LIBRARY = frozenset({"numba"})


_MISSING = object()
# Callables whose call the hooks see (Python functions, builtins, method descriptors: a profile event; ufuncs
# and numpy's array-function dispatchers: the protocols), classes, and wrappers of those.
_HOOKED_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.MethodDescriptorType,
                     types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType, type,
                     np.ufunc, type(np.dot), functools.partial)
_LOADS = ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLASSDEREF")
_ATTRIBUTES = ("LOAD_ATTR", "LOAD_METHOD")


@functools.lru_cache(maxsize=4096)
def _loaded_chains(code) -> dict[int, tuple[tuple[str, ...], ...]]:
    """The dotted names each line of a code object loads from a name (``_sosfilt._sosfilt``, ``pyworld.dio``,
    ``jitted``), by line, from its bytecode."""
    chains: dict[int, list] = {}
    chain, line = None, None
    for instruction in [*dis.get_instructions(code), None]:
        if instruction is not None and instruction.opname in _ATTRIBUTES and chain is not None:
            chain.append(instruction.argval)
            continue
        if chain is not None and line is not None:
            chains.setdefault(line, []).append(tuple(chain))
        chain = None
        if instruction is not None and instruction.opname in _LOADS and isinstance(instruction.argval, str):
            chain, line = [instruction.argval], instruction.positions.lineno
    return {line: tuple(dict.fromkeys(found)) for line, found in chains.items()}


def _module_kind(module: str | None, user_tops: frozenset) -> str:
    """Whose code a module is: the body's (its package, perfsuite, code outside site-packages and the
    standard library), numpy's, the standard library's, this module's, or another library's."""
    if not module:
        return _USER
    if module == __name__:
        return _SELF
    top = module.partition(".")[0]
    if top == "numpy":
        return _NUMPY
    if top in ("perfsuite", "__main__"):
        return _USER
    if top in sys.stdlib_module_names or top == "builtins":
        return _STDLIB
    if top in user_tops:
        return _USER
    loaded = sys.modules.get(top) or sys.modules.get(module)
    if loaded is None:
        return _LIBRARY
    paths = [getattr(loaded, "__file__", None), *list(getattr(loaded, "__path__", None) or [])]
    paths = [p for p in paths if p]
    if not paths or any(part in _SITE_DIRS for p in paths for part in PurePath(p).parts):
        return _LIBRARY
    return _USER


def _hidden_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and name not in _ENTRY_DUNDERS


def _argument_names(code) -> tuple[str, ...]:
    flags = code.co_flags
    count = code.co_argcount + code.co_kwonlyargcount + bool(flags & 0x04) + bool(flags & 0x08)
    return code.co_varnames[:count]


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
    """The hooks of one counted run (see the module docstring)."""

    def __init__(self, counts: PythonCounts, user_tops: frozenset, top):
        self.counts, self.user_tops, self.top = counts, user_tops, top
        self.kinds: dict[str | None, str] = {}
        self.files: dict[str, int] = {}
        self.seen: dict[int, Any] = {}  # id -> array, kept alive for the run: arrays already counted
        self.made = weakref.WeakValueDictionary()  # id -> array made by a recorded operation, while it lives
        self.transparent: set = set()  # the code of TensorFlow's wrappers around the body: not the body's calls

    def record(self, key: str, elements: int) -> None:
        self.counts.calls[key] += 1
        self.counts.work += elements

    def computed(self, key: str, inputs, result, metadata: bool = False, padding: int = 0) -> None:
        """An array function or method: inputs (with the zeros a transform pads them with) plus fresh
        outputs, 0 where every array out is a view."""
        outputs = _arrays(result)
        dtype = next((o.dtype for o in outputs), None)
        key = f"{key}:{dtype}" if dtype is not None else key
        sources = [a for a in _arrays(inputs) if isinstance(a, np.ndarray)]
        fresh = [o for o in outputs if isinstance(o, np.generic)
                 or not any(np.may_share_memory(o, a) for a in sources)]
        views_only = bool(outputs) and not fresh
        self.record(key, 0 if metadata or views_only else _size_tree(inputs) + padding + sum(map(_size, fresh)))

    def kind(self, frame) -> str:
        module = frame.f_globals.get("__name__")
        found = self.kinds.get(module)
        if found is None:
            found = self.kinds[module] = _module_kind(module, self.user_tops)
        return found

    # -- the body's own frames (sys.settrace): tracking the arrays that appear in them

    def trace(self, frame, event: str, arg):
        if self.kind(frame) != _USER or not frame.f_code.co_flags & _CO_OPTIMIZED:
            return None
        self.track_locals(frame, frame.f_locals)
        return self.local

    def local(self, frame, event: str, arg):
        if event == "line":
            local = frame.f_locals  # once an event: each read of f_locals snapshots the frame again (to 3.12)
            self.track_locals(frame, local)
            for chain in _loaded_chains(frame.f_code).get(frame.f_lineno, ()):
                self.silent(frame, local, chain)
        elif event == "return":
            for value in (arg, *arg) if isinstance(arg, tuple | list) else \
                    (arg, *arg.values()) if isinstance(arg, dict) else (arg,):
                if type(value) in (np.ndarray, np.memmap):
                    self.arrived(value)
        return self.local

    def track_locals(self, frame, local) -> None:
        # ``local`` is written back to the frame when the hook returns (CPython's trace trampoline until 3.12,
        # a write-through proxy from 3.13); free variables are the enclosing scope's: left alone
        code = frame.f_code
        plain = [(name, local[name]) for name in code.co_varnames + code.co_cellvars
                 if type(local.get(name)) in (np.ndarray, np.memmap)]
        for name, value in plain:
            self.arrived(value)
            tracked = value.view(_Tracked)
            self.seen[id(tracked)] = tracked
            local[name] = tracked

    def silent(self, frame, local, chain: tuple[str, ...]) -> None:
        """A library's callable that raises no hook when called (a Cython function, a numba dispatcher), named
        by a line of the body's code that loads it from a name or a module's attribute, once each time the
        line runs."""
        found = local.get(chain[0], _MISSING)  # locals and free variables
        if found is _MISSING:
            found = frame.f_globals.get(chain[0], frame.f_builtins.get(chain[0], _MISSING))
        for attribute in chain[1:]:  # through modules only: reading another object's attribute may run code
            if not isinstance(found, types.ModuleType):
                return
            found = vars(found).get(attribute, _MISSING)
        if found is _MISSING or not callable(found) or isinstance(found, _HOOKED_CALLABLES) \
                or isinstance(inspect.getattr_static(type(found), "__call__", None), types.FunctionType) \
                or _module_kind(type(found).__module__, frozenset()) != _LIBRARY:
            return
        module = getattr(found, "__module__", None) or type(found).__module__
        name = getattr(found, "__qualname__", None) or getattr(found, "__name__", None) or type(found).__name__
        self.counts.calls[f"uncounted:{module}.{name}"] += 1

    def arrived(self, array) -> None:
        """A plain array in the body's code: counted once, as ``new``, unless it views a counted one."""
        if id(array) in self.seen:
            return
        self.seen[id(array)] = array
        base, depth = array.base, 0
        while base is not None and depth < 64:
            if isinstance(base, _Tracked) or id(base) in self.seen or self.made.get(id(base)) is base:
                return
            base, depth = getattr(base, "base", None), depth + 1
        self.record(f"new:{array.dtype}", array.size)

    # -- calls out of the body's code (sys.setprofile): named, given plain arrays

    def profile(self, frame, event: str, arg) -> None:
        if event == "call":
            caller = frame.f_back
            if caller is not None and (caller is self.top or self.kind(caller) == _USER):
                self.entered(frame)
        elif event == "c_call" and (frame is self.top or self.kind(frame) == _USER):
            self.c_called(arg)

    def entered(self, frame) -> None:
        kind, code = self.kind(frame), frame.f_code
        if kind not in (_LIBRARY, _NUMPY) or code in self.transparent or code.co_name.startswith("<") or _hidden_dunder(code.co_name):
            return
        module = frame.f_globals.get("__name__")
        if kind == _NUMPY and (code.co_name.endswith("_dispatcher") or module == _C_DISPATCHERS):
            return  # numpy's array-function dispatchers: the routine or the protocol follows
        name = f"{module}.{code.co_qualname}"
        if kind == _NUMPY:
            self.counts.calls[f"call:{name}"] += 1
            return
        top = name.partition(".")[0]
        self.counts.calls[f"uncounted:{top if top in _BY_LIBRARY else name}"] += 1
        local = frame.f_locals
        for argument in _argument_names(code):
            value = local.get(argument)
            self.file(value)
            if isinstance(value, _Tracked | tuple | list):
                local[argument] = _plain_tree(value)
            elif isinstance(value, dict):
                value.update(_plain_tree(value))

    def c_called(self, function) -> None:
        owner = getattr(function, "__self__", None)
        if isinstance(owner, _Tracked):
            return  # a method of a tracked array: the protocols count it
        module = getattr(function, "__module__", None)
        if module is None and owner is not None:
            module = owner.__name__ if type(owner).__name__ == "module" else type(owner).__module__
        kind = _module_kind(module, self.user_tops)
        if kind in (_STDLIB, _SELF):
            return
        name = f"{module}.{getattr(function, '__qualname__', getattr(function, '__name__', '?'))}"
        self.counts.calls[f"call:{name}" if kind == _NUMPY else f"uncounted:{name}"] += 1

    def file(self, value: Any) -> None:
        found = _file_size(value)
        if found is not None and not found[0].endswith(_MODULE_FILES):  # an import's reads are not the body's
            self.files.setdefault(found[0], found[1])


_ACTIVE = threading.local()  # the counter of this thread's counted run, read by the protocols and audit hook
_HOOKED = []
_WARMED: weakref.WeakSet = weakref.WeakSet()


def _counter() -> _Counter | None:
    return getattr(_ACTIVE, "counter", None)


def _audit(event: str, args: tuple, active=_ACTIVE) -> None:
    counter = getattr(active, "counter", None)  # no module global: the hook outlives the module at exit
    if counter is not None and event == "open" and args:
        mode = args[1] if len(args) > 1 else None
        if mode is None or (isinstance(mode, str) and ("r" in mode or "+" in mode)):
            counter.file(args[0])


def _warm(function, arguments: list) -> None:
    """Runs a Python body once uncounted the first time it is counted in this process (see the module
    docstring); a callable that cannot be remembered (a builtin) is not."""
    key = getattr(function, "__func__", function)
    try:
        if key in _WARMED:
            return
        _WARMED.add(key)
    except TypeError:
        return
    function(*arguments)


def _tensorflow_wrappers(function) -> set:
    """The code of the wrappers TensorFlow put around a body (autograph's ``do_not_convert``), which
    call it unchanged."""
    found = set()
    while getattr(function, "__wrapped__", None) is not None and len(found) < 8:
        if not str(getattr(function, "__globals__", {}).get("__name__", "")).startswith("tensorflow."):
            break
        found.add(function.__code__)
        function = function.__wrapped__
    return found


def count_python(function, arguments: list, counts: PythonCounts, *, warm: bool = True,
                 module: str | None = None) -> Any:
    """Runs ``function(*arguments)`` on this thread under the counter, adding to ``counts``; returns its
    result. Its numpy array arguments are given tracked; ``module`` (by default the function's) is the
    body's own code with the package it is in. With ``warm``, a body counted for the first time in this
    process is run once uncounted first. The garbage collector is held for the run (a collection's
    finalizers are no part of the body)."""
    if not _HOOKED:
        sys.addaudithook(_audit)  # once a process; a no-op outside a counted run
        _HOOKED.append(True)
    if warm:
        _warm(function, [a.copy() if isinstance(a, np.ndarray) else a for a in arguments])
    module = module or getattr(getattr(function, "__func__", function), "__module__", None) or ""
    counter = _Counter(counts, frozenset({module.partition(".")[0]} - {""}), sys._getframe())
    counter.transparent = _tensorflow_wrappers(function)
    given = []
    for value in arguments:
        if type(value) in (np.ndarray, np.memmap):
            tracked = value.view(_Tracked)
            counter.seen.update({id(value): value, id(tracked): tracked})
            given.append(tracked)
        else:
            given.append(value)
    enabled = gc.isenabled()
    gc.disable()
    previous_counter, previous_profile, previous_trace = _counter(), sys.getprofile(), sys.gettrace()
    _ACTIVE.counter = counter
    sys.settrace(counter.trace)
    sys.setprofile(counter.profile)
    try:
        return function(*given)
    finally:
        sys.setprofile(previous_profile)
        sys.settrace(previous_trace)
        _ACTIVE.counter = previous_counter
        if enabled:
            gc.enable()
        counts.file_bytes += sum(counter.files.values())
        counts.runs += 1


# ------------------------------------------------------------------------------------ from_generator

def count_generator(op, library: dict, reference: int, counts: PythonCounts) -> str | None:
    """Counts the Python generator of a ``from_generator`` dataset (its ``GeneratorDataset`` op, with the
    FunctionDefs of its graph by name) on its first ``reference`` elements, each ``next`` under the
    counter: ``calls`` summed over them, ``work`` and ``file_bytes`` per element. Returns None, or why it
    could not (to be named as unresolved, never a silent 0)."""
    state = _generator_state(op, library)
    if isinstance(state, str):
        return state
    init = library.get(op.get_attr("init_func").name)
    if init is None or any(node.op in PYTHON_FUNCTION_OPS and any(not i.startswith("^") for i in node.input)
                           for node in init.node_def):
        return "from_generator with args: the generator's arguments are not read"
    generator = state._generator
    with _closing(iter(generator())) as first:  # warm-up: caches, imports, lazy set-ups
        next(first, None)
    run, yielded = PythonCounts(), 0
    with _closing(iter(generator())) as iterator:
        for _ in range(reference):
            try:
                count_python(next, [iterator], run, warm=False, module=getattr(generator, "__module__", None))
            except StopIteration:
                break
            yielded += 1
    if not yielded:
        return "from_generator whose generator yields nothing"
    counts.calls.update(run.calls)
    counts.work += run.work / yielded
    counts.file_bytes += run.file_bytes / yielded
    counts.runs += run.runs
    return None


@contextlib.contextmanager
def _closing(iterator):
    """A generator closed after use (its ``finally`` runs now); any other iterator handed on as it is."""
    try:
        yield iterator
    finally:
        if hasattr(iterator, "close"):
            iterator.close()


def _generator_state(op, library: dict):
    """from_generator's ``_GeneratorState`` (holding the user's generator), from the registered Python
    function of the op's ``next_func``; or why it cannot be found."""
    function = library.get(op.get_attr("next_func").name)
    tokens = [node.attr["token"].s.decode() for node in (function.node_def if function is not None else [])
              if node.op in PYTHON_FUNCTION_OPS]
    if len(tokens) != 1:
        return "from_generator: its next function holds no single Python function"
    functions, depth = [registered(tokens[0])[0]], 0
    while functions and depth < 4:  # the registered function, and the functions its closure wraps
        cells = [cell for function in functions for cell in getattr(function, "__closure__", None) or ()]
        values = []
        for cell in cells:
            with contextlib.suppress(ValueError):
                values.append(cell.cell_contents)
        for value in values:
            if callable(getattr(value, "_generator", None)) and hasattr(value, "get_iterator"):
                return value
        functions, depth = [v for v in values if callable(v) and hasattr(v, "__closure__")], depth + 1
    return "from_generator: its generator is not found through TensorFlow's registry"
