"""The targets of `perfsuite diagnose --pipeline MODULE:FUNCTION [--step MODULE:FUNCTION]`: importing the
user's dataset factory and step, calling the factory, and reading the dataset's serialized graph (its
Python-function ops, where it prefetches, the dynamic shapes of its elements). A target perfsuite cannot
use raises TargetError, one line naming what was looked up and what was found."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.errors import PerfsuiteError
from perfsuite.records import Record

PYTHON_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")
PREFETCH_OPS = ("PrefetchDataset", "PrefetchToDevice")
# Dataset op types in the words of the tf.data method that makes them.
TRANSFORMATIONS = {"MapDataset": "map", "ParallelMapDataset": "map", "ParallelMapDatasetV2": "map (parallel)",
                   "FlatMapDataset": "flat_map", "InterleaveDataset": "interleave",
                   "ParallelInterleaveDatasetV2": "interleave (parallel)",
                   "ParallelInterleaveDatasetV3": "interleave (parallel)",
                   "ParallelInterleaveDatasetV4": "interleave (parallel)", "FilterDataset": "filter",
                   "GeneratorDataset": "from_generator", "MapAndBatchDataset": "map and batch (fused)",
                   "ScanDataset": "scan", "GroupByWindowDataset": "group_by_window",
                   "GroupByReducerDataset": "group_by_reducer", "ReduceDataset": "reduce"}



class TargetError(PerfsuiteError, ValueError):
    """A --pipeline or --step target perfsuite cannot use: names the option and the target, what was
    looked up or expected, and what was found."""

    def __init__(self, option: str, target: str, expected: str, found: str):
        self.option = option
        self.target = target
        self.expected = expected
        self.found = found
        super().__init__(f"{option} {target}: expected {expected}, found {found}")


def one_line_error(error: BaseException) -> str:
    """An exception in one line: its type and the first line of its message (TensorFlow's '{{function_node
    ...}}' prefix left out, so a Python error inside the pipeline shows its own type and message)."""
    lines = re.sub(r"^\{\{[^}]*\}\}\s*", "", str(error).strip()).splitlines()
    message = lines[0][:300] if lines else ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


# ------------------------------------------------------------------------------------ the targets


def load_callable(spec: str, option: str) -> Callable:
    """The callable named by spec, 'MODULE:FUNCTION' (MODULE a module name, found from the current
    directory first, or a path to a .py file; FUNCTION may be dotted). TargetError names what is wrong."""
    from perfsuite._tensorflow import tensorflow

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
            raise TargetError(option, spec, f"an attribute {attribute!r} in {_where(module)}",
                              f"no attribute {part!r} (it has: {names})")
        found = getattr(found, part)
    if not callable(found):
        raise TargetError(option, spec, f"{attribute!r} to be callable", type(found).__name__)
    return found


def load_step(spec: str, tell: Callable[[str], None]) -> Callable:
    """The training step named by --step: the step itself (one required parameter, the batch) or a
    zero-argument factory that returns it (the usual shape of model code), told apart by signature; tell()
    says which was taken. TargetError when neither shape fits."""
    found = load_callable(spec, "--step")
    if _required_parameters(found, spec) == 1:
        tell(f"--step {spec}: the step itself (it takes one argument, the batch)")
        return found
    if _required_parameters(found, spec) != 0:
        raise TargetError("--step", spec, "step(batch) or a factory with no required arguments returning it",
                          f"a callable with {_required_parameters(found, spec)} required arguments")
    try:
        step = found()
    except Exception as error:  # noqa: BLE001 -- the user's factory may raise anything: named in one line
        raise TargetError("--step", spec, "the factory to return a step", one_line_error(error)) from None
    if not callable(step) or _required_parameters(step, spec) != 1:
        raise TargetError("--step", spec, "the factory to return step(batch), a callable of one argument",
                          type(step).__name__ if not callable(step) else
                          f"a callable with {_required_parameters(step, spec)} required arguments")
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


def _where(module) -> str:
    return f"module {module.__name__!r} ({getattr(module, '__file__', None) or 'built in'})"


def _import(name: str, spec: str, option: str):
    """A module by name (the current directory searched first, as `python -m` does) or by .py path."""
    if name.endswith(".py") or "/" in name:
        return _import_file(Path(name), spec, option)
    added = str(Path.cwd()) not in sys.path
    if added:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and (name == error.name or name.startswith(f"{error.name}.")):
            raise TargetError(option, spec, f"an importable module {name!r} (searched the current directory and "
                              "sys.path)", "no such module") from None
        raise TargetError(option, spec, f"module {name!r} to import", one_line_error(error)) from None
    except Exception as error:  # noqa: BLE001 -- the user's module may raise anything: named in one line
        raise TargetError(option, spec, f"module {name!r} to import", one_line_error(error)) from None
    finally:
        if added:
            sys.path.remove(str(Path.cwd()))


def _import_file(path: Path, spec: str, option: str):
    if not path.is_file():
        raise TargetError(option, spec, f"a Python file at {path}", "nothing there" if not path.exists() else
                          "something that is not a file")
    name = f"perfsuite_target_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 -- the user's module may raise anything: named in one line
        raise TargetError(option, spec, f"{path} to import", one_line_error(error)) from None
    return module


def make_dataset(factory: Callable, args: Mapping[str, str], spec: str):
    """factory(**args) (the --arg values, as strings), checked to be a tf.data.Dataset."""
    from perfsuite._tensorflow import tensorflow

    try:
        dataset = factory(**args)
    except Exception as error:  # noqa: BLE001 -- the user's factory may raise anything: named in one line
        call = ", ".join(f"{key}={value!r}" for key, value in args.items())
        raise TargetError("--pipeline", spec, f"{getattr(factory, '__name__', 'it')}({call}) to return a dataset",
                          f"it raised {one_line_error(error)}") from None
    if not isinstance(dataset, tensorflow().data.Dataset):
        raise TargetError("--pipeline", spec, "a tf.data.Dataset", type(dataset).__name__)
    return dataset


# ------------------------------------------------------------------------------------- the graph


@dataclass(frozen=True)
class PythonOp(Record):
    """A Python-function op in the dataset graph: its op type and node, the graph function it sits in,
    the dataset transformation that runs it (in tf.data's words, its op type and node), and the Python
    callable it calls when TensorFlow still knows it (None otherwise)."""

    op: str
    node: str
    function: str
    transformation: str
    transformation_op: str
    transformation_node: str
    python: str | None


@dataclass(frozen=True)
class DynamicShape(Record):
    """An element component whose static shape leaves dimensions open: its path in element_spec ('' for
    a single tensor), its shape in words, and the open dimensions (None: not even the rank is known)."""

    component: str
    shape: str
    dims: tuple[int, ...] | None


@dataclass(frozen=True)
class GraphFindings(Record):
    """What the dataset's graph shows. transformations: dataset op types from the source to the output
    (along first inputs). ends_with_prefetch: the last one is a prefetch. inject_prefetch: whether tf.data
    adds one at run time when the last transformation is synchronous (its option; TensorFlow's default
    is on). dynamic_shapes: element components with open dimensions, which can make a step retrace."""

    transformations: tuple[str, ...]
    python_ops: tuple[PythonOp, ...]
    ends_with_prefetch: bool
    inject_prefetch: bool
    dynamic_shapes: tuple[DynamicShape, ...]
    element_spec: str


def inspect_graph(dataset) -> GraphFindings:
    """The GraphFindings of a tf.data.Dataset, from its serialized graph (dataset._as_serialized_graph())."""
    from perfsuite._tensorflow import tensorflow

    tf = tensorflow()
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    functions = {function.signature.name: function for function in graph.library.function}
    nodes = {node.name: node for node in graph.node}
    python_ops = tuple(op for node in graph.node if "Dataset" in node.op for op in _python_ops_of(node, functions))
    chain = _chain(nodes)
    options = dataset.options()
    inject = options.experimental_optimization.inject_prefetch
    autotune = options.autotune.enabled
    return GraphFindings(transformations=chain, python_ops=python_ops,
                         ends_with_prefetch=bool(chain) and chain[-1] in PREFETCH_OPS,
                         inject_prefetch=(inject is not False) and (autotune is not False),
                         dynamic_shapes=dynamic_shapes(dataset.element_spec), element_spec=str(dataset.element_spec))


def _chain(nodes: dict) -> tuple[str, ...]:
    """Dataset op types from the source to the output node ('dataset'), following first inputs."""
    out, name = [], None
    retval = nodes.get("dataset")
    if retval is not None and retval.input:
        name = retval.input[0].split(":")[0].lstrip("^")
    while name in nodes:
        node = nodes[name]
        out.append(node.op)
        inputs = [i.split(":")[0].lstrip("^") for i in node.input]
        name = next((i for i in inputs if nodes.get(i) is not None and nodes[i].op != "Const"), None)
    return tuple(reversed(out))


def _function_attrs(node) -> list[str]:
    """The graph functions a node calls (func attrs and lists of them)."""
    names = []
    for value in node.attr.values():
        if value.func.name:
            names.append(value.func.name)
        names += [func.name for func in value.list.func]
    return names


def _python_ops_of(node, functions: dict) -> list[PythonOp]:
    """Every Python-function op reachable from a dataset node through the functions it calls."""
    found, seen = [], set()
    pending = list(_function_attrs(node))
    generator = False
    while pending:
        name = pending.pop(0)
        if name in seen or name not in functions:
            continue
        seen.add(name)
        for inner in functions[name].node_def:
            generator |= inner.op == "GeneratorDataset"
            if inner.op in PYTHON_OPS:
                found.append((inner, name))
            pending += _function_attrs(inner)
    words = TRANSFORMATIONS.get(node.op, node.op)
    if generator:
        words = f"from_generator (a Python generator under {words})"
    return [PythonOp(op=inner.op, node=inner.name, function=function, transformation=words,
                     transformation_op=node.op, transformation_node=node.name, python=_python_name(inner))
            for inner, function in found]


def _python_name(node) -> str | None:
    """The qualified name of the Python callable a PyFunc op calls, from TensorFlow's registry of them
    (internal: None when it cannot be read)."""
    with contextlib.suppress(Exception):
        from tensorflow.python.ops import script_ops

        function = script_ops._py_funcs.get(node.attr["token"].s.decode())
        function = getattr(function, "__wrapped__", function)
        name = getattr(function, "__qualname__", None)
        return None if name is None else f"{getattr(function, '__module__', '?')}.{name}"
    return None


def dynamic_shapes(element_spec) -> tuple[DynamicShape, ...]:
    """Components of element_spec whose static shape has open dimensions (or an unknown rank)."""
    out = []
    for path, spec in _leaves(element_spec, ""):
        shape = getattr(spec, "shape", None)
        if shape is None:
            continue
        if shape.rank is None:
            out.append(DynamicShape(component=path, shape="<unknown rank>", dims=None))
            continue
        dims = tuple(i for i, dim in enumerate(shape.as_list()) if dim is None)
        if dims:
            out.append(DynamicShape(component=path, shape=str(tuple(shape.as_list())), dims=dims))
    return tuple(out)


def _leaves(structure, path: str) -> Iterator[tuple[str, Any]]:
    """(path, leaf) of a nested element_spec: dicts by sorted key (tf.nest's order), tuples by index."""
    if isinstance(structure, Mapping):
        for key in sorted(structure):
            yield from _leaves(structure[key], f"{path}/{key}" if path else str(key))
    elif isinstance(structure, tuple | list):
        for index, item in enumerate(structure):
            yield from _leaves(item, f"{path}/{index}" if path else str(index))
    else:
        yield path, structure
