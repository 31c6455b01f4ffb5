"""The user's tf.data graph read as it runs: its stages from the source to the output, each with what
it does (parallelism, buffer, cache, padding), the Python functions it calls, and the element's dynamic
shapes.

The graph is the dataset's serialized GraphDef (``dataset._as_serialized_graph()``). A dataset that
cannot be serialized (``prefetch_to_device`` copies through a generator TensorFlow will not serialize)
is read from its Python dataset objects down to the first input that can be, and from that input's
graph below it; ``GraphFindings.read_from`` says which.

Rules (docs/diagnose.md): the *last real stage* skips wrappers (options, model, thread pools, asserts,
stats: they do no work per element) and pass-through stages (repeat, take, skip: they hand elements on
untouched), so a pipeline ending ``.prefetch(50).repeat().with_options(opts)`` ends with a prefetch.
``prefetch_to_device`` must be the last transformation (TensorFlow's rule); any real stage after it is
flagged.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass
from typing import Any

from perfsuite.measure.batch_spec import leaves
from perfsuite.measure.speech import PaddingFigures
from perfsuite.records import Record
from perfsuite.verdict.diagnosis import (
    fixed_padding_finding,
    graph_finding,
    prefetch_to_device_finding,
    sequential_map_finding,
)
from perfsuite.verdict.diagnosis_figures import DiagnosisFinding, RoundsEstimate

PYTHON_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")
PREFETCH_OPS = ("PrefetchDataset", "PrefetchToDevice")
COPY_TO_DEVICE = "CopyToDeviceDataset"
AUTOTUNE = -1
WRAPPER_OPS = frozenset({
    "OptionsDataset", "ModelDataset", "OptimizeDataset", "OptimizeDatasetV2", "FinalizeDataset",
    "MaxIntraOpParallelismDataset", "ExperimentalMaxIntraOpParallelismDataset", "PrivateThreadPoolDataset",
    "ExperimentalPrivateThreadPoolDataset", "ThreadPoolDataset", "ExperimentalThreadPoolDataset",
    "AssertCardinalityDataset", "AssertNextDataset", "ExperimentalAssertNextDataset", "AssertPrevDataset",
    "NonSerializableDataset", "ExperimentalNonSerializableDataset", "SetStatsAggregatorDataset",
    "ExperimentalSetStatsAggregatorDataset", "LatencyStatsDataset", "ExperimentalLatencyStatsDataset",
    "BytesProducedStatsDataset", "ExperimentalBytesProducedStatsDataset", "WrapDatasetVariant",
    "UnwrapDatasetVariant"})
PASS_THROUGH_OPS = frozenset({"RepeatDataset", "TakeDataset", "SkipDataset"})
MAP_OPS = frozenset({"MapDataset", "ExperimentalMapDataset", "ParallelMapDataset", "ParallelMapDatasetV2",
                     "MapAndBatchDataset", "ExperimentalMapAndBatchDataset"})
# Dataset op types in the words of the tf.data method that makes them.
TRANSFORMATIONS = {"MapDataset": "map", "ParallelMapDataset": "map (parallel)", "ParallelMapDatasetV2": "map (parallel)",
                   "FlatMapDataset": "flat_map", "InterleaveDataset": "interleave",
                   "ParallelInterleaveDatasetV2": "interleave (parallel)",
                   "ParallelInterleaveDatasetV3": "interleave (parallel)",
                   "ParallelInterleaveDatasetV4": "interleave (parallel)", "FilterDataset": "filter",
                   "ParallelFilterDataset": "filter (parallel)",
                   "GeneratorDataset": "from_generator", "MapAndBatchDataset": "map and batch (fused)",
                   "ScanDataset": "scan", "GroupByWindowDataset": "group_by_window",
                   "GroupByReducerDataset": "group_by_reducer", "ReduceDataset": "reduce",
                   "PrefetchDataset": "prefetch", COPY_TO_DEVICE: "prefetch_to_device (copy_to_device)",
                   "ShuffleDataset": "shuffle", "ShuffleDatasetV2": "shuffle", "ShuffleDatasetV3": "shuffle",
                   "ShuffleAndRepeatDataset": "shuffle and repeat", "ShuffleAndRepeatDatasetV2": "shuffle and repeat",
                   "CacheDataset": "cache", "CacheDatasetV2": "cache", "BatchDataset": "batch",
                   "BatchDatasetV2": "batch", "ParallelBatchDataset": "batch (parallel)",
                   "PaddedBatchDataset": "padded_batch", "PaddedBatchDatasetV2": "padded_batch",
                   "RepeatDataset": "repeat", "TakeDataset": "take", "SkipDataset": "skip",
                   "OptionsDataset": "with_options", "RangeDataset": "range", "TensorSliceDataset": "from_tensor_slices",
                   "TensorDataset": "from_tensors", "ZipDataset": "zip", "UnbatchDataset": "unbatch"}
# Where a stage's figure sits among its op's inputs (after the input dataset): index from the end or start.
_PARALLELISM_INPUT = {"ParallelMapDataset": -1, "ParallelMapDatasetV2": -1, "ParallelInterleaveDatasetV2": -1,
                      "ParallelInterleaveDatasetV3": -1, "ParallelInterleaveDatasetV4": -1,
                      "ParallelFilterDataset": -1, "ParallelBatchDataset": 2, "MapAndBatchDataset": -2,
                      "ExperimentalMapAndBatchDataset": -2}
_BUFFER_INPUT = {"PrefetchDataset": 1, "ShuffleDataset": 1, "ShuffleDatasetV2": 1, "ShuffleDatasetV3": 1,
                 "ShuffleAndRepeatDataset": 1, "ShuffleAndRepeatDatasetV2": 1}
# Python dataset classes (the fallback walk) by the op they make.
_CLASS_OPS = {"ParallelMapDataset": "ParallelMapDatasetV2", "ShuffleDataset": "ShuffleDatasetV3",
              "CacheDataset": "CacheDatasetV2", "PaddedBatchDataset": "PaddedBatchDatasetV2",
              "BatchDataset": "BatchDatasetV2", "PrefetchDataset": "PrefetchDataset"}


@dataclass(frozen=True)
class PythonOp(Record):
    """A Python-function op in the dataset graph: its op type and node, the graph function it sits in,
    the dataset transformation that runs it (in tf.data's words, its op type and node), the Python
    callable it calls ('module.qualname') and where that is defined ('file:line'), when TensorFlow still
    knows it (None otherwise)."""

    op: str
    node: str
    function: str
    transformation: str
    transformation_op: str
    transformation_node: str
    python: str | None
    defined_at: str | None = None


@dataclass(frozen=True)
class DynamicShape(Record):
    """An element component whose static shape leaves dimensions open: its path in element_spec ('' for
    a single tensor), its shape in words, and the open dimensions (None: not even the rank is known)."""

    component: str
    shape: str
    dims: tuple[int, ...] | None


@dataclass(frozen=True)
class GraphStage(Record):
    """One dataset op from the source to the output. method: the tf.data method in words. kind: 'wrapper'
    (no work per element), 'pass-through' (hands elements on untouched) or 'stage'. parallelism: parallel
    calls (AUTOTUNE: -1; 1 for a sequential map; None where it does not apply or could not be read).
    buffer: prefetch / shuffle buffer elements (AUTOTUNE: -1). cache: 'memory' or 'file <path>'.
    padded_shapes: padded_batch's shapes per component (-1: the batch's longest)."""

    op: str
    node: str
    method: str
    kind: str
    parallelism: int | None = None
    buffer: int | None = None
    cache: str | None = None
    padded_shapes: tuple[tuple[int, ...], ...] | None = None

    def words(self) -> str:
        """'map (AUTOTUNE parallel calls)', 'prefetch (buffer 50)', 'cache (in memory)', 'padded_batch (shapes
        [1024, 80], [longest])'."""
        detail, method = [], self.method
        if self.parallelism is not None:
            method = method.replace(" (parallel)", "")
            detail.append("sequential" if self.parallelism == 1 else f"{_count(self.parallelism)} parallel calls")
        if self.buffer is not None:
            detail.append(f"buffer {_count(self.buffer)}")
        if self.cache is not None:
            detail.append("in memory" if self.cache == "memory" else self.cache)
        if self.padded_shapes is not None:
            detail.append("shapes " + ", ".join(_shape_words(s) for s in self.padded_shapes))
        return f"{method} ({'; '.join(detail)})" if detail else method


def _count(value: int) -> str:
    return "AUTOTUNE" if value == AUTOTUNE else str(value)


def _shape_words(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join("longest" if d == -1 else str(d) for d in shape) + "]"


@dataclass(frozen=True)
class GraphFindings(Record):
    """What the dataset's graph shows. transformations: dataset op types from the source to the output
    (along first inputs); stages: the same as GraphStage records. last_stage: the op of the last real
    stage (wrappers and pass-through stages skipped); ends_with_prefetch: that stage prefetches.
    inject_prefetch: whether tf.data adds a prefetch at run time when the last transformation is
    synchronous (its option; TensorFlow's default is on). after_prefetch_to_device: the real stages after
    a prefetch_to_device (TensorFlow requires it last; empty when it is, or when there is none).
    dynamic_shapes: element components with open dimensions, which can make a step retrace. read_from:
    'serialized graph', or the walk that read a dataset TensorFlow would not serialize."""

    transformations: tuple[str, ...]
    python_ops: tuple[PythonOp, ...]
    ends_with_prefetch: bool
    inject_prefetch: bool
    dynamic_shapes: tuple[DynamicShape, ...]
    element_spec: str
    stages: tuple[GraphStage, ...] = ()
    last_stage: str | None = None
    after_prefetch_to_device: tuple[str, ...] = ()
    read_from: str = "serialized graph"

    def chain_words(self) -> str:
        """The stages as they run, wrappers named apart: 'range -> map (AUTOTUNE parallel) -> ...'."""
        real = [stage.words() for stage in self.stages if stage.kind != "wrapper"]
        wrappers = sorted({stage.method for stage in self.stages if stage.kind == "wrapper"})
        return " -> ".join(real) + (f" (wrappers skipped: {', '.join(wrappers)})" if wrappers else "")

    def sequential_maps(self) -> tuple[GraphStage, ...]:
        return tuple(s for s in self.stages if s.op in MAP_OPS and s.parallelism == 1)

    def fixed_padding(self) -> tuple[GraphStage, ...]:
        """padded_batch stages that pad a component of rank >= 2 to a fixed length on its first axis."""
        return tuple(s for s in self.stages if s.padded_shapes
                     and any(len(shape) >= 2 and shape[0] > 0 for shape in s.padded_shapes))


def inspect_graph(dataset) -> GraphFindings:
    """The GraphFindings of a tf.data.Dataset, from its serialized graph, or where TensorFlow will not
    serialize it, from its Python dataset objects down to an input it will."""
    from perfsuite._tensorflow import tensorflow

    tf = tensorflow()
    upper: list[tuple[GraphStage, list[PythonOp]]] = []
    below, read_from = dataset, "serialized graph"
    while True:
        try:
            graph = tf.compat.v1.GraphDef.FromString(below._as_serialized_graph().numpy())
            break
        except (tf.errors.FailedPreconditionError, tf.errors.UnimplementedError):
            inputs = below._inputs()
            upper.insert(0, _stage_of_object(below))
            if not inputs:
                graph = None
                break
            below = inputs[0]
    if upper:
        read_from = (f"Python dataset objects for the last {len(upper)} stage(s) (TensorFlow cannot serialize "
                     f"{upper[0][0].method}), the serialized graph below them" if graph is not None else
                     "Python dataset objects (TensorFlow cannot serialize this dataset)")
    lower, lower_ops = _read_graph(graph, tf) if graph is not None else ((), ())
    stages = lower + tuple(stage for stage, _ in upper)
    python_ops = lower_ops + tuple(op for _, ops in upper for op in ops)
    options = dataset.options()
    inject = options.experimental_optimization.inject_prefetch
    autotune = options.autotune.enabled
    last = next((s for s in reversed(stages) if s.kind == "stage"), None)
    return GraphFindings(transformations=tuple(s.op for s in stages), python_ops=python_ops,
                         ends_with_prefetch=last is not None and last.op in PREFETCH_OPS,
                         inject_prefetch=(inject is not False) and (autotune is not False),
                         dynamic_shapes=dynamic_shapes(dataset.element_spec), element_spec=str(dataset.element_spec),
                         stages=stages, last_stage=None if last is None else last.op,
                         after_prefetch_to_device=_after_copy_to_device(stages), read_from=read_from)


def _after_copy_to_device(stages: tuple[GraphStage, ...]) -> tuple[str, ...]:
    """The real stages after the last copy_to_device, its own prefetch (prefetch_to_device's second
    half) left out."""
    positions = [i for i, s in enumerate(stages) if s.op == COPY_TO_DEVICE]
    if not positions:
        return ()
    after = [s for s in stages[positions[-1] + 1:] if s.kind != "wrapper"]
    if after and after[0].op == "PrefetchDataset":
        after = after[1:]
    return tuple(s.method for s in after)


def _kind(op: str) -> str:
    return "wrapper" if op in WRAPPER_OPS else "pass-through" if op in PASS_THROUGH_OPS else "stage"


# ------------------------------------------------------------------------------ the serialized graph


def _read_graph(graph, tf) -> tuple[tuple[GraphStage, ...], tuple[PythonOp, ...]]:
    functions = {function.signature.name: function for function in graph.library.function}
    nodes = {node.name: node for node in graph.node}
    python_ops = tuple(op for node in graph.node if "Dataset" in node.op for op in _python_ops_of(node, functions))
    return tuple(_stage_of_node(node, nodes, tf) for node in _chain(nodes)), python_ops


def _chain(nodes: dict) -> list:
    """Dataset nodes from the source to the output node ('dataset'), following first inputs."""
    out, name = [], None
    retval = nodes.get("dataset")
    if retval is not None and retval.input:
        name = _name(retval.input[0])
    while name in nodes:
        node = nodes[name]
        out.append(node)
        name = next((i for i in map(_name, _data_inputs(node)) if nodes.get(i) is not None
                     and nodes[i].op != "Const"), None)
    return list(reversed(out))


def _name(text: str) -> str:
    return text.split(":")[0].lstrip("^")


def _data_inputs(node) -> list[str]:
    return [i for i in node.input if not i.startswith("^")]


def _const(nodes: dict, name: str, tf) -> Any:
    """The value of a Const node (a numpy value), or None when the input is not a constant."""
    node = nodes.get(_name(name))
    if node is None or node.op != "Const":
        return None
    with contextlib.suppress(Exception):
        return tf.make_ndarray(node.attr["value"].tensor)
    return None


def _int_input(node, nodes: dict, position: int, tf) -> int | None:
    inputs = _data_inputs(node)
    if not -len(inputs) <= position < len(inputs):
        return None
    value = _const(nodes, inputs[position], tf)
    return None if value is None or getattr(value, "shape", ()) != () else int(value)


def _stage_of_node(node, nodes: dict, tf) -> GraphStage:
    op = node.op
    parallelism = _int_input(node, nodes, _PARALLELISM_INPUT[op], tf) if op in _PARALLELISM_INPUT else None
    if op in ("MapDataset", "ExperimentalMapDataset"):
        parallelism = 1
    buffer = _int_input(node, nodes, _BUFFER_INPUT[op], tf) if op in _BUFFER_INPUT else None
    cache, padded = None, None
    if op in ("CacheDataset", "CacheDatasetV2"):
        name = _const(nodes, _data_inputs(node)[1], tf)
        cache = None if name is None else _cache_words(name.item() if hasattr(name, "item") else name)
    if op in ("PaddedBatchDataset", "PaddedBatchDatasetV2"):
        padded = _padded_shapes(node, nodes, tf)
    return GraphStage(op=op, node=node.name, method=TRANSFORMATIONS.get(op, op), kind=_kind(op),
                      parallelism=parallelism, buffer=buffer, cache=cache, padded_shapes=padded)


def _cache_words(filename: Any) -> str:
    name = filename.decode() if isinstance(filename, bytes) else str(filename)
    return "memory" if not name else f"file {name}"


def _padded_shapes(node, nodes: dict, tf) -> tuple[tuple[int, ...], ...] | None:
    """padded_batch's padded_shapes (per component, inputs 2 .. 2+N), None when one is not a constant."""
    count = node.attr["N"].i or len(node.attr["Toutput_types"].list.type)
    shapes = []
    for name in _data_inputs(node)[2:2 + count]:
        value = _const(nodes, name, tf)
        if value is None:
            return None
        shapes.append(tuple(int(d) for d in value.reshape(-1)))
    return tuple(shapes)


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
    return [_python_op(inner, function, words, node.op, node.name) for inner, function in found]


def _python_op(inner, function: str, words: str, op: str, node_name: str) -> PythonOp:
    python, defined_at = python_callable(inner)
    return PythonOp(op=inner.op, node=inner.name, function=function, transformation=words, transformation_op=op,
                    transformation_node=node_name, python=python, defined_at=defined_at)


def python_callable(node) -> tuple[str | None, str | None]:
    """('module.qualname', 'file:line') of the Python callable a PyFunc op calls, from TensorFlow's
    registry of them (internal: (None, None) when it cannot be read)."""
    with contextlib.suppress(Exception):
        from tensorflow.python.ops import script_ops

        return callable_words(script_ops._py_funcs.get(node.attr["token"].s.decode()))
    return None, None


def callable_words(function: Any) -> tuple[str | None, str | None]:
    """('module.qualname', 'file:line') of a callable, through TensorFlow's wrappers (EagerFunc, autograph's
    do_not_convert), functools.partial and bound methods; a callable object by its class's __call__."""
    function = getattr(function, "_func", function)  # py_function's EagerFunc
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
        code = getattr(getattr(type(function), "__call__", None), "__code__", None)
    where = None if code is None else f"{code.co_filename}:{code.co_firstlineno}"
    return (None if name is None else f"{getattr(target, '__module__', '?')}.{name}"), where


def _library(module: str | None) -> bool:
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
    called = {id(c): c for c in names + cells if inspect.isfunction(c) and not _library(c.__module__)}
    return next(iter(called.values())) if len(called) == 1 else None


# ------------------------------------------------------------------------------ the Python objects


def _stage_of_object(dataset) -> tuple[GraphStage, list[PythonOp]]:
    """A stage read from its Python dataset object (where the graph cannot be serialized), with the
    Python-function ops of the functions it holds."""
    name = type(dataset).__name__.lstrip("_")
    op = _CLASS_OPS.get(name, name)
    words = TRANSFORMATIONS.get(op, op)
    parallelism = _object_int(dataset, "_num_parallel_calls")
    if op in ("MapDataset",):
        parallelism = 1
    buffer = _object_int(dataset, "_buffer_size") if op in _BUFFER_INPUT else None
    cache = None
    if op == "CacheDatasetV2":
        with contextlib.suppress(Exception):
            cache = _cache_words(dataset._filename.numpy())
    node = f"{name} (Python object)"
    ops = [_python_op(inner, graph_name, words, op, node) for inner, graph_name in _object_python_ops(dataset)]
    return GraphStage(op=op, node=node, method=words, kind=_kind(op), parallelism=parallelism, buffer=buffer,
                      cache=cache), ops


def _object_int(dataset, attribute: str) -> int | None:
    with contextlib.suppress(Exception):
        return int(getattr(dataset, attribute))
    return None


def _object_python_ops(dataset) -> list:
    """(PyFunc node, graph name) in the traced functions a dataset object holds."""
    found = []
    for value in vars(dataset).values():
        graph = getattr(getattr(value, "function", None), "graph", None)
        if graph is None:
            continue
        with contextlib.suppress(Exception):
            definition = graph.as_graph_def()
            nodes = list(definition.node) + [n for f in definition.library.function for n in f.node_def]
            found += [(n, graph.name) for n in nodes if n.op in PYTHON_OPS]
    return found


# ------------------------------------------------------------------------------ the element


def dynamic_shapes(element_spec) -> tuple[DynamicShape, ...]:
    """Components of element_spec whose static shape has open dimensions (or an unknown rank)."""
    out = []
    for path, spec in leaves(element_spec):
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


# ------------------------------------------------------------------------------ the findings


def graph_findings(graph: GraphFindings, *, padding: PaddingFigures | None, not_measured: str | None = None,
                   waits: bool | None = None, why_not: str = "", share: RoundsEstimate | None = None,
                   ) -> list[DiagnosisFinding]:
    """The graph's findings (verdict/diagnosis.py words them): the stages as they run, prefetch_to_device
    not last, sequential maps (recommended against only when waits: the step is measured to wait for
    input; else why_not says why not), and padding to a fixed length with padding's measured waste
    (not_measured: why there is no padding figure)."""
    fixed = tuple(f"{s.method} {s.node} ({', '.join(_shape_words(p) for p in s.padded_shapes)})"
                  for s in graph.fixed_padding())
    found = [graph_finding(graph.chain_words(), graph.last_stage, graph.read_from),
             prefetch_to_device_finding(graph.after_prefetch_to_device),
             sequential_map_finding(tuple(s.node for s in graph.sequential_maps()), waits, why_not, share),
             fixed_padding_finding(padding, fixed, not_measured)]
    return [finding for finding in found if finding is not None]
