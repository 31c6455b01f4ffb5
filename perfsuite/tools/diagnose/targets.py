"""The targets of `perfsuite diagnose --pipeline MODULE:FUNCTION [--step MODULE:FUNCTION]`: the user's
dataset factory and step imported, the factory called, or TargetError."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfsuite._tensorflow import tensorflow
from perfsuite.errors import PerfsuiteError, one_line_error

__all__ = ["TargetError", "load_callable", "load_step", "make_dataset", "one_line_error"]


class TargetError(PerfsuiteError, ValueError):
    """A --pipeline or --step target perfsuite cannot use: option, target, what was expected and found."""

    def __init__(self, option: str, target: str, expected: str, found: str):
        self.option, self.target, self.expected, self.found = option, target, expected, found
        super().__init__(f"{option} {target}: expected {expected}, found {found}")


def load_callable(spec: str, option: str) -> Callable:
    """The callable named by spec, 'MODULE:FUNCTION' (a module name or a .py path; FUNCTION may be dotted)."""
    tensorflow()  # before the user's module imports it: perfsuite's accessor quiets TensorFlow's logs first
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise TargetError(option, spec, "MODULE:FUNCTION (a module name or a .py file, a colon, a function name)",
                          "no colon" if ":" not in spec else "an empty part")
    module = _import(module_name, spec, option)
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            names = ", ".join(sorted(n for n in dir(found) if not n.startswith("_"))[:12]) or "nothing public"
            where = f"module {module.__name__!r} ({getattr(module, '__file__', None) or 'built in'})"
            raise TargetError(option, spec, f"an attribute {attribute!r} in {where}",
                              f"no attribute {part!r} (it has: {names})")
        found = getattr(found, part)
    if not callable(found):
        raise TargetError(option, spec, f"{attribute!r} to be callable", type(found).__name__)
    return found


def load_step(spec: str, tell: Callable[[str], None]) -> Callable:
    """The training step named by --step: the step itself (one required parameter, the batch) or a factory
    of no arguments that returns it (as model code does), told apart by signature; tell() says which."""
    found = load_callable(spec, "--step")
    if (required := _required_parameters(found, spec)) == 1:
        tell(f"--step {spec}: the step itself (it takes one argument, the batch)")
        return found
    if required != 0:
        raise TargetError("--step", spec, "step(batch) or a factory with no required arguments returning it",
                          f"a callable with {required} required arguments")
    try:
        step = found()
    except Exception as error:  # noqa: BLE001 -- the user's factory may raise anything: named in one line
        raise TargetError("--step", spec, "the factory to return a step", one_line_error(error)) from None
    required = _required_parameters(step, spec) if callable(step) else None
    if required != 1:
        raise TargetError("--step", spec, "the factory to return step(batch), a callable of one argument",
                          type(step).__name__ if required is None else f"a callable with {required} required arguments")
    tell(f"--step {spec}: a factory; called it for the step")
    return step


def _required_parameters(function: Callable, spec: str) -> int:
    """How many arguments `function` requires (positional, without defaults; *args counts none)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        raise TargetError("--step", spec, "a callable whose signature can be read", "none") from None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty)


def _import(name: str, spec: str, option: str):
    """A module by name (the current directory searched first, as `python -m` does) or by .py path."""
    if name.endswith(".py") or "/" in name:
        path = Path(name)
        if not path.is_file():
            raise TargetError(option, spec, f"a Python file at {path}", "nothing there" if not path.exists() else
                              "something that is not a file")
        module_spec = importlib.util.spec_from_file_location(f"perfsuite_target_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)
        try:
            module_spec.loader.exec_module(module)
        except Exception as error:  # noqa: BLE001 -- the user's module may raise anything: named in one line
            raise TargetError(option, spec, f"{path} to import", one_line_error(error)) from None
        return module
    cwd = str(Path.cwd())
    if added := cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 -- the user's module may raise anything: named in one line
        missing = error.name if isinstance(error, ModuleNotFoundError) else None
        if missing is not None and (name == missing or name.startswith(f"{missing}.")):
            raise TargetError(option, spec, f"an importable module {name!r} (searched the current directory and "
                              "sys.path)", "no such module") from None
        raise TargetError(option, spec, f"module {name!r} to import", one_line_error(error)) from None
    finally:
        if added:
            sys.path.remove(cwd)


def make_dataset(factory: Callable, args: Mapping[str, str], spec: str):
    """factory(**args) (the --arg values, as strings), checked to be a tf.data.Dataset."""
    try:
        dataset = factory(**args)
    except Exception as error:  # noqa: BLE001 -- the user's factory may raise anything: named in one line
        call = ", ".join(f"{key}={value!r}" for key, value in args.items())
        raise TargetError("--pipeline", spec, f"{getattr(factory, '__name__', 'it')}({call}) to return a dataset",
                          f"it raised {one_line_error(error)}") from None
    if not isinstance(dataset, tensorflow().data.Dataset):
        raise TargetError("--pipeline", spec, "a tf.data.Dataset", type(dataset).__name__)
    return dataset
