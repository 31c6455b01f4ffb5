"""The deterministic layer: the work a tf.data pipeline and a training step do, read from their graphs.

A fingerprint (``WorkFingerprint``) holds no time and nothing of the machine: float operations, the
op histogram, bytes where the graph knows them, and the structural facts a timing cannot name
(Python-function ops, prints, prefetch and its place, each map's parallelism, cache, padded shapes
static or not, XLA on or off, traces). The same code and TensorFlow give the same fingerprint on every
machine, in every process and under every thread setting, in seconds.

How float operations are counted (``FLOAT_OPS_METHOD``): TensorFlow's registered ``flops`` statistics
per op (what ``tf.compat.v1.profiler``'s ``float_operation`` option sums), at fully known shapes, plus
FFT ops, for which TensorFlow registers none, at 2.5·N·log2(N) per real transform of length N
(5·N·log2(N) per complex one). Ops with no registered statistic (casts, square roots, exponentials,
gathers ...) count in the op histogram, not in the float ops.

- A pipeline: every map function's graph is run, op by op shape-resolved, on the first
  ``reference_elements`` elements of its input dataset (the same files in the same order on every
  machine), and its float ops are counted at those elements' shapes. Per sample: a map after a batch
  stage counts per its batch's samples. Per audio second: with ``audio_seconds`` (e.g.
  ``mel_seconds(frame_s)``), the audio the reference elements hold. The stages and their parameters
  come from the dataset's serialized graph; AUTOTUNE is recorded as ``"autotune"``, never its resolved
  value.
- A step: traced (never run) at the reference batch's shapes, wrapped in a ``tf.function`` when it is
  not one (a plain callable, an eager step, a callable wrapping a tf.function: whatever it calls in
  graph ops is traced through); nested function calls are followed, a conditional counts its costlier
  branch, a loop body once.

What it cannot see: a slower kernel, a slower disk, contention, Python work inside a numpy_function or
py_function (it counts the op, not its work). That is the timing's job.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from perfsuite._tensorflow import tensorflow
from perfsuite.errors import PerfsuiteError
from perfsuite.records import Record

FINGERPRINT_VERSION = 1
FLOAT_OPS_METHOD = ("TensorFlow's registered 'flops' statistics per op (what tf.compat.v1.profiler's "
                    "float_operation sums) at shapes resolved on the reference inputs, plus FFT ops at "
                    "2.5*N*log2(N) per real transform (5*N*log2(N) complex)")
AUTOTUNE = "autotune"
PYTHON_FUNCTION_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")
PRINT_OPS = ("PrintV2", "Print")
BOOKKEEPING_OPS = frozenset({"Placeholder", "Const", "Identity", "IdentityN", "NoOp", "_Arg", "_Retval"})
CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")
FFT_OPS = {"RFFT": (1, 2.5), "RFFT2D": (2, 2.5), "RFFT3D": (3, 2.5), "IRFFT": (1, 2.5), "IRFFT2D": (2, 2.5),
           "IRFFT3D": (3, 2.5), "FFT": (1, 5.0), "FFT2D": (2, 5.0), "FFT3D": (3, 5.0), "IFFT": (1, 5.0),
           "IFFT2D": (2, 5.0), "IFFT3D": (3, 5.0)}  # op: (transformed dimensions, flops per N*log2(N))
AUTOTUNE_ARGS = ("num_parallel_calls", "buffer_size", "cycle_length")
STAGE_ARGS = ("num_parallel_calls", "buffer_size", "batch_size", "drop_remainder", "count", "cycle_length",
              "block_length", "padded_shapes", "window_size", "num_elements")
STAGE_ATTRS = ("deterministic", "parallel_copy")
BATCH_OPS = ("BatchDataset", "BatchDatasetV2", "PaddedBatchDataset", "PaddedBatchDatasetV2",
             "ParallelBatchDataset", "MapAndBatchDataset")


class WorkUnavailable(PerfsuiteError, ValueError):
    """The work of a pipeline or step cannot be read: names it, the expectation and what was found."""

    def __init__(self, what: str, expected: str, found: str):
        self.what, self.expected, self.found = what, expected, found
        super().__init__(f"{what}: expected {expected}, found {found}")

    def __reduce__(self):
        return (type(self), (self.what, self.expected, self.found))


@dataclass(frozen=True)
class WorkFingerprint(Record):
    """The work of one pipeline or step. ``work``: the figures compared within a tolerance (float ops per
    sample, per audio second, per batch or step; bytes); ``float_ops_by_op``: where the float ops are,
    by op kind; ``op_histogram``: every op kind's count (bookkeeping ops left out); ``structure``: the
    facts compared exactly. ``reference``: what the figures are per, in words."""

    SCHEMA_VERSION: ClassVar[int] = FINGERPRINT_VERSION

    name: str
    kind: str  # "pipeline" or "step"
    reference: str
    method: str
    tensorflow: str  # major.minor: op-level changes may be TensorFlow's own across versions
    work: dict[str, int]
    float_ops_by_op: dict[str, int]
    op_histogram: dict[str, int]
    structure: dict

    def snapshot(self) -> dict:
        """The reviewable form written to a snapshot file (plain types, sorted keys within)."""
        return {"schema_version": FINGERPRINT_VERSION, **self.as_dict()}

    def extra_info(self) -> dict:
        """Flat figures for pytest-benchmark's extra_info: ``work_<figure>`` and the whole fingerprint."""
        return {**{f"work_{key}": value for key, value in self.work.items()}, "work_fingerprint": self.snapshot()}


# ------------------------------------------------------------------------------------ float ops


def _registered_float_ops(graph, op) -> int | None:
    """The op's float ops at its graph's shapes: TF's registered statistic, our FFT estimate, 0 for an op
    with neither, None when a shape it needs is unknown."""
    from tensorflow.python.framework import ops as tf_ops
    from tensorflow.python.util import deprecation

    if op.type in FFT_OPS:
        return _fft_float_ops(op)
    try:
        with deprecation.silence():  # the registry's v1 shape helper warns on every first use
            stats = tf_ops.get_stats_for_node_def(graph, op.node_def, "flops")
    except (ValueError, TypeError):
        return None
    return int(stats.value or 0)


def _fft_float_ops(op) -> int | None:
    dims, per = FFT_OPS[op.type]
    shape = op.inputs[0].shape if not op.type.startswith("I") or op.type.startswith("IFFT") else op.outputs[0].shape
    if not shape.is_fully_defined():
        return None
    sizes = shape.as_list()
    n = math.prod(sizes[-dims:])
    transforms = math.prod(sizes[:-dims])
    return round(transforms * per * n * math.log2(n)) if n > 1 else 0


def _count_graph(graph, functions: dict, flops: Counter, histogram: Counter, unresolved: Counter,
                 depth: int = 0) -> int:
    """Float ops of one traced graph (nested calls followed), adding to the counters; returns its total."""
    total = 0
    for op in graph.get_operations():
        if op.type not in BOOKKEEPING_OPS:
            histogram[op.type] += 1
        bodies = _bodies(op, functions)
        if bodies and depth < 32:
            totals = []
            for body in bodies:
                body_flops = Counter()
                totals.append((_count_graph(body, functions, body_flops, histogram, unresolved, depth + 1),
                               body_flops))
            chosen, chosen_flops = max(totals, key=lambda item: item[0])
            flops.update(chosen_flops)
            total += chosen
            continue
        value = _registered_float_ops(graph, op)
        if value is None:
            unresolved[op.type] += 1
        elif value:
            flops[op.type] += value
            total += value
    return total


def _bodies(op, functions: dict) -> list:
    """The traced graphs an op runs: a call's function, a conditional's branches, a loop's body."""
    names = []
    for key in ("f", "then_branch", "else_branch", "body"):
        if key in op.node_def.attr and op.node_def.attr[key].func.name:
            names.append(op.node_def.attr[key].func.name)
    if "branches" in op.node_def.attr:
        names += [f.name for f in op.node_def.attr["branches"].list.func]
    graphs = []
    for name in names:
        function = functions.get(name)
        graph = getattr(function, "graph", None) if function is not None else None
        if graph is not None:
            graphs.append(graph)
    return graphs


def _function_registry(graph) -> dict:
    """Every function a traced graph can call, by name, nested ones included."""
    found, stack = {}, [graph]
    while stack:
        current = stack.pop()
        for name, function in getattr(current, "_functions", {}).items():
            key = name.decode() if isinstance(name, bytes) else name
            if key not in found:
                found[key] = function
                inner = getattr(function, "graph", None)
                if inner is not None:
                    stack.append(inner)
    return found


# ------------------------------------------------------------------------------------ pipelines


def mel_seconds(frame_s: float, key: str = "mel") -> Callable[[Any], float]:
    """``audio_seconds`` for elements holding a mel ``[frames, n_mels]`` under ``key`` (a dict's key, or a
    tuple's first item): frames × ``frame_s`` (hop / sample rate)."""
    def seconds(element) -> float:
        mel = element[key] if isinstance(element, dict) else element[0] if isinstance(element, tuple) else element
        return float(mel.shape[0]) * frame_s

    return seconds


def dataset_work(dataset, *, name: str = "pipeline", reference_elements: int = 8,
                 audio_seconds: Callable[[Any], float] | float | None = None) -> WorkFingerprint:
    """The work fingerprint of a tf.data pipeline (see the module docstring). ``audio_seconds``: a
    function of one element as the last map before batching outputs it (numpy values, the element's own
    structure) giving its seconds of audio, e.g. ``mel_seconds(frame_s)``; or a number, the seconds of
    audio in one sample. With it the fingerprint has float ops per audio second. A pipeline whose graph
    cannot be read raises WorkUnavailable naming it and why."""
    if audio_seconds is not None and not callable(audio_seconds) and not audio_seconds > 0:
        raise ValueError(f"audio_seconds: expected a function of an element or seconds > 0, found {audio_seconds!r}")
    tf = tensorflow()
    if not isinstance(dataset, tf.data.Dataset):
        raise WorkUnavailable(name, "a tf.data.Dataset", type(dataset).__name__)
    if reference_elements < 1:
        raise ValueError(f"reference_elements: expected ≥ 1, found {reference_elements}")
    with _unreadable(name, "a pipeline whose graph can be read and run on its first elements"):
        return _dataset_work(dataset, name, reference_elements, audio_seconds)


@contextlib.contextmanager
def _unreadable(name: str, expected: str):
    """Errors reading a user's graph become one WorkUnavailable naming it, the expectation and the error."""
    tf = tensorflow()
    try:
        yield
    except WorkUnavailable:
        raise
    except (tf.errors.OpError, ValueError, TypeError, KeyError, AttributeError, IndexError, RuntimeError,
            NotImplementedError) as error:
        raise WorkUnavailable(name, expected, f"{type(error).__name__}: {error}") from error


def _dataset_work(dataset, name, reference_elements, audio_seconds) -> WorkFingerprint:
    stages, library = _stages(dataset, name)
    python_functions = _python_functions(dataset)
    flops, histogram, unresolved = Counter(), Counter(), Counter()
    per_sample, file_bytes, element_bytes, seconds, samples_seen = 0.0, 0.0, 0.0, None, 0
    maps = []
    last = max((i for i, s in enumerate(stages) if s["op"] in _PER_ELEMENT_MAPS and s["samples_per_element"] == 1),
               default=None)  # the map whose outputs are the samples batched (audio seconds and bytes are read there)
    for index, stage in enumerate(stages):
        samples_per_element = stage.pop("samples_per_element")
        function_name = stage.pop("_function", None)
        if function_name is None:
            continue
        _library_histogram(function_name, library, histogram)
        maps.append({"stage": stage["op"], "parallelism": stage.get("num_parallel_calls", 1),
                     **_function_facts(function_name, library)})
        found = python_functions.get(function_name)
        if found is None or stage["op"] not in _PER_ELEMENT_MAPS or not samples_per_element:
            continue
        per_sample_map = index == last
        measured = _run_map(*found, reference_elements, name,
                            audio_seconds if per_sample_map and callable(audio_seconds) else None)
        for op, value in measured.flops.items():  # per sample, as the totals
            flops[op] += value / measured.elements / samples_per_element
        unresolved.update(measured.unresolved)
        per_sample += measured.float_ops / measured.elements / samples_per_element
        file_bytes += measured.file_bytes / measured.elements / samples_per_element
        if per_sample_map:
            element_bytes = measured.output_bytes / measured.elements
            seconds, samples_seen = measured.audio_seconds, measured.elements
    batch = _samples_per_batch(stages)
    work = {"float_ops_per_sample": round(per_sample), "file_bytes_per_sample": round(file_bytes),
            "element_bytes_per_sample": round(element_bytes)}
    if batch is not None:
        work["float_ops_per_batch"] = round(per_sample * batch)
    if audio_seconds is not None and not callable(audio_seconds):
        work["float_ops_per_audio_s"] = round(per_sample / audio_seconds)
    elif seconds:
        work["float_ops_per_audio_s"] = round(per_sample * samples_seen / seconds)
    structure = {
        "stages": stages,
        "maps": maps,
        "python_function_ops": sum(m["python_function_ops"] for m in maps),
        "prints": sum(m["prints"] for m in maps),
        "prefetch": [{"buffer": s.get("buffer_size"), "stages_after": len(stages) - 1 - i}
                     for i, s in enumerate(stages) if s["op"] == "PrefetchDataset"],
        "inject_prefetch": _inject_prefetch(stages),
        "cache": [{"to": s.get("to"), "stages_after": len(stages) - 1 - i}
                  for i, s in enumerate(stages) if s["op"].startswith("CacheDataset")],
        "padded_shapes_static": _static_after_batch(dataset.element_spec),
        "element_spec": _spec_text(dataset.element_spec),
        "unresolved_float_ops": dict(sorted(unresolved.items())),
    }
    reference = (f"the first {reference_elements} elements of each map's input dataset, in its order; "
                 "per sample: a map after a batch stage divided by its batch's samples")
    return _fingerprint(name, "pipeline", reference, work, flops, histogram, structure)


_PER_ELEMENT_MAPS = ("MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2")


class _MapRun:
    def __init__(self):
        self.flops, self.unresolved = Counter(), Counter()
        self.float_ops = self.file_bytes = self.output_bytes = 0
        self.elements = 0
        self.audio_seconds = 0.0


def _run_map(wrapper, source, count: int, name: str, audio_seconds) -> _MapRun:
    """Runs the map's graph on the first ``count`` elements of its input, returning every tensor's shape,
    and counts the float ops at those shapes."""
    tf = tensorflow()
    from tensorflow.python.data.util import structure

    concrete = wrapper.function
    graph_def = concrete.graph.as_graph_def()
    inputs = [t.name for t in concrete.graph.inputs]
    tensors = [t.name for op in concrete.graph.get_operations() for t in op.outputs
               if t.dtype not in (tf.resource, tf.variant)]
    reads = [t.name for op in concrete.graph.get_operations() if op.type == "ReadFile" for t in op.outputs]
    outputs = [t.name for t in concrete.graph.outputs]

    @tf.function(autograph=False)
    def resolve(flat):
        found = tf.graph_util.import_graph_def(graph_def, input_map=dict(zip(inputs, flat)),
                                               return_elements=tensors + reads + outputs, name="work")
        shapes = [tf.shape(t, out_type=tf.int64) for t in found[:len(tensors)]]
        lengths = [tf.strings.length(t) for t in found[len(tensors):len(tensors) + len(reads)]]
        return shapes, lengths, found[len(tensors) + len(reads):]

    run = _MapRun()
    spec = source.element_spec
    for element in source.take(count):
        flat = structure.to_tensor_list(spec, element) + list(concrete.captured_inputs)
        shapes, lengths, flat_out = resolve(flat)
        flops, unresolved = _float_ops_at(graph_def, tensors, [s.numpy().tolist() for s in shapes])
        run.flops.update(flops)
        run.unresolved.update(unresolved)
        run.float_ops += sum(flops.values())
        run.file_bytes += int(sum(int(x.numpy()) for x in lengths))
        values = structure.from_tensor_list(wrapper.output_structure, list(flat_out))
        run.output_bytes += _bytes_of(values)
        if audio_seconds is not None:
            run.audio_seconds += float(audio_seconds(tf.nest.map_structure(_numpy, values)))
        run.elements += 1
    if not run.elements:
        raise WorkUnavailable(name, "a map whose input dataset yields at least one element", "an empty input")
    return run


def _float_ops_at(graph_def, tensors: Sequence[str], shapes: Sequence[list]) -> tuple[Counter, Counter]:
    tf = tensorflow()
    graph = tf.Graph()
    flops, unresolved = Counter(), Counter()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        for tensor, shape in zip(tensors, shapes):
            graph.get_tensor_by_name(tensor).set_shape(shape)
        _count_graph(graph, _function_registry(graph), flops, Counter(), unresolved)
    return flops, unresolved


def _numpy(value):
    return value.numpy() if hasattr(value, "numpy") else value


def _bytes_of(values) -> int:
    tf = tensorflow()
    total = 0
    for value in tf.nest.flatten(values, expand_composites=True):
        if value.dtype == tf.string:
            total += int(tf.reduce_sum(tf.strings.length(value)).numpy())
        else:
            total += int(tf.size(value).numpy()) * value.dtype.size
    return total


def _stages(dataset, name: str) -> tuple[list[dict], dict]:
    """The dataset's stages, source first, from its serialized graph, and its function library by name.
    A map stage carries its function's name under ``_function`` and every stage its
    ``samples_per_element`` (the batch sizes before it multiplied, 0 where one is not constant)."""
    tf = tensorflow()
    from tensorflow.python.data.ops.options import ExternalStatePolicy

    serialized = dataset._as_serialized_graph(strip_device_assignment=True,
                                              external_state_policy=ExternalStatePolicy.IGNORE)
    graph_def = tf.compat.v1.GraphDef.FromString(serialized.numpy())
    nodes = {node.name: node for node in graph_def.node}
    library = {f.signature.name: f for f in graph_def.library.function}
    retval = [node for node in graph_def.node if node.op == "_Retval"]
    if not retval:
        raise WorkUnavailable(name, "a dataset graph with an output", "none in its serialized graph")
    chain, current = [], nodes[_node_name(retval[0].input[0])]
    while current is not None:
        chain.append(current)
        upstream = [nodes[_node_name(i)] for i in current.input
                    if not i.startswith("^") and "Dataset" in nodes[_node_name(i)].op]
        current = upstream[0] if upstream else None
    stages, samples = [], 1
    for node in reversed(chain):
        stage = _stage(node, nodes)
        stage["samples_per_element"] = samples
        if node.op in BATCH_OPS:
            size = stage.get("batch_size")
            samples = samples * size if isinstance(size, int) and samples else 0
        elif node.op == "GroupByWindowDataset":
            samples = 0
        stages.append(stage)
    return stages, library


def _node_name(reference: str) -> str:
    return reference.lstrip("^").split(":")[0]


def _stage(node, nodes) -> dict:
    from tensorflow.python.framework import op_def_registry, tensor_util

    stage: dict[str, Any] = {"op": node.op}
    op_def = op_def_registry.get(node.op)
    inputs = [i for i in node.input if not i.startswith("^")]
    position = 0
    for arg in op_def.input_arg if op_def is not None else ():
        if arg.number_attr:
            width = node.attr[arg.number_attr].i
        elif arg.type_list_attr:
            width = len(node.attr[arg.type_list_attr].list.type)
        else:
            width = 1
        taken, position = inputs[position:position + width], position + width
        if arg.name == "filename" and taken:
            source = nodes[_node_name(taken[0])]
            if source.op == "Const":
                filename = tensor_util.MakeNdarray(source.attr["value"].tensor)
                stage["to"] = "memory" if filename.size == 1 and not filename.item() else "file"
        if arg.name not in STAGE_ARGS:
            continue
        values = [_constant(nodes[_node_name(t)]) for t in taken]
        value = values[0] if width == 1 and values else values
        if arg.name in AUTOTUNE_ARGS and value == -1:
            value = AUTOTUNE
        stage[arg.name] = value
    for attr in STAGE_ATTRS:
        if attr in node.attr:
            value = node.attr[attr]
            stage[attr] = value.s.decode() if value.WhichOneof("value") == "s" else bool(value.b)
    if node.op == "OptionsDataset":
        stage["options"] = _options_text(node.attr["serialized_options"].s)
    if "f" in node.attr and node.attr["f"].func.name:
        stage["_function"] = node.attr["f"].func.name
    return stage


def _constant(node):
    """A small constant's value as plain Python (a shape list, an int, a bool); '?' when not a constant."""
    from tensorflow.python.framework import tensor_util

    if node.op != "Const":
        return "?"
    value = tensor_util.MakeNdarray(node.attr["value"].tensor)
    if value.dtype.kind not in "biu" or value.size > 64:
        return "?"
    return value.tolist()


def _options_text(serialized: bytes) -> str:
    from google.protobuf import text_format
    from tensorflow.core.framework import dataset_options_pb2

    return text_format.MessageToString(dataset_options_pb2.Options.FromString(serialized), as_one_line=True)


def _inject_prefetch(stages: list[dict]) -> bool:
    """Whether tf.data injects a prefetch of its own at the end (its default, unless the options say no)."""
    return not any("inject_prefetch: false" in s.get("options", "") for s in stages)


def _samples_per_batch(stages: list[dict]) -> int | None:
    samples = 1
    for stage in stages:
        if stage["op"] in BATCH_OPS:
            size = stage.get("batch_size")
            if not isinstance(size, int):
                return None
            samples *= size
        elif stage["op"] == "GroupByWindowDataset":
            return None
    return samples if samples > 1 else None


def _python_functions(dataset) -> dict:
    """Every traced function of the dataset's Python objects, by name: (its wrapper, its input dataset)."""
    from tensorflow.python.data.ops import structured_function

    found, stack, seen = {}, [dataset], set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        inputs = current._inputs()
        for value in vars(current).values():
            if isinstance(value, structured_function.StructuredFunctionWrapper):
                source = getattr(current, "_input_dataset", inputs[0] if inputs else None)
                name = value.function.name
                found[name.decode() if isinstance(name, bytes) else name] = (value, source)
        stack.extend(inputs)
    return found


def _library_histogram(function_name: str, library: dict, histogram: Counter, depth: int = 0) -> None:
    """The op kinds of a library function, nested functions included (each call site once)."""
    function = library.get(function_name)
    if function is None or depth > 32:
        return
    for node in function.node_def:
        if node.op not in BOOKKEEPING_OPS:
            histogram[node.op] += 1
        for value in node.attr.values():
            if value.func.name:
                _library_histogram(value.func.name, library, histogram, depth + 1)
            for func in value.list.func:
                _library_histogram(func.name, library, histogram, depth + 1)


def _function_facts(function_name: str, library: dict) -> dict:
    histogram = Counter()
    _library_histogram(function_name, library, histogram)
    return {"python_function_ops": sum(histogram[op] for op in PYTHON_FUNCTION_OPS),
            "prints": sum(histogram[op] for op in PRINT_OPS)}


def _static_after_batch(spec) -> bool:
    """Whether every component's shape is known apart from its first (batch) dimension."""
    tf = tensorflow()
    shapes = [s.shape for s in tf.nest.flatten(spec, expand_composites=False) if hasattr(s, "shape")]
    return all(shape.rank is not None and all(d is not None for d in shape.as_list()[1:]) for shape in shapes)


def _spec_text(spec) -> Any:
    """The element spec as plain text: dtype and shape per component ('?' for an unknown dimension)."""
    tf = tensorflow()

    def text(component):
        if not hasattr(component, "shape"):
            return type(component).__name__
        dims = "?" if component.shape.rank is None else ", ".join(
            "?" if d is None else str(d) for d in component.shape.as_list())
        return f"{component.dtype.name}[{dims}]"

    return tf.nest.map_structure(text, spec)


# ------------------------------------------------------------------------------------ steps


def step_work(step: Callable[[Any], Any], batch, *, name: str = "step",
              batches: Sequence[Any] | None = None) -> WorkFingerprint:
    """The work fingerprint of a training step at ``batch`` (a tensor, tuple, dict or nested structure of
    them, as the step takes it): traced, never run (see the module docstring). ``batches``: the
    reference batches whose traces are counted (default: ``batch`` alone); a step retracing for their
    shapes shows as more than one trace."""
    if not callable(step):
        raise WorkUnavailable(name, "a callable step", type(step).__name__)
    with _unreadable(name, "a step that traces at its batch's shapes"):
        return _step_work(step, batch, name, batches)


def _step_work(step, batch, name, batches) -> WorkFingerprint:
    tf = tensorflow()
    is_function = hasattr(step, "get_concrete_function")
    traced = step if is_function else tf.function(lambda b: step(b), autograph=False)
    concrete = _concrete(traced, batch)
    # the traces the reference batches need: one per distinct concrete function (a trace taken before
    # this call, e.g. by the timed rounds, counts as well)
    traces = len({id(concrete), *(id(_concrete(traced, other)) for other in batches or ())})
    if is_function and not _static_inputs(concrete):
        # an input signature with unknown dimensions: its float ops are counted on its Python function
        # traced again at the batch's shapes (the traces above are the step's own)
        again = tf.function(step.python_function, jit_compile=getattr(step, "_jit_compile", None),
                            autograph=getattr(step, "_autograph", True))
        concrete = again.get_concrete_function(tf.nest.map_structure(_spec_of, batch))
    graph = concrete.graph
    flops, histogram, unresolved = Counter(), Counter(), Counter()
    total = _count_graph(graph, _function_registry(graph), flops, histogram, unresolved)
    samples = _leading_dimension(batch)
    work = {"float_ops_per_step": total, "input_bytes_per_step": _bytes_of(batch),
            "variable_bytes": sum(v.shape.num_elements() * v.dtype.size for v in concrete.graph.variables
                                  if v.shape.is_fully_defined())}
    if samples:
        work["float_ops_per_sample"] = round(total / samples)
    xla = bool(getattr(traced, "_jit_compile", False)) or _calls_xla(graph, _function_registry(graph))
    nested = _calls_function(graph)
    structure = {
        "mode": "xla" if xla else "graph" if is_function or nested else "eager",
        "xla": xla,
        "python_function_ops": sum(histogram[op] for op in PYTHON_FUNCTION_OPS),
        "prints": sum(histogram[op] for op in PRINT_OPS),
        "traces": traces,
        "input_spec": _spec_text(tf.nest.map_structure(_spec_of, batch)),
        "unresolved_float_ops": dict(sorted(unresolved.items())),
    }
    reference = ("one step traced at the reference batch's shapes (per sample: over its leading dimension)"
                 + (f"; traces counted over {1 + len(batches)} reference batches" if batches else ""))
    return _fingerprint(name, "step", reference, work, flops, histogram, structure)


def _static_inputs(concrete) -> bool:
    args, kwargs = concrete.structured_input_signature
    specs = [s for s in _flatten((args, kwargs)) if hasattr(s, "shape")]
    return all(spec.shape.is_fully_defined() for spec in specs)


def _flatten(structure) -> list:
    return tensorflow().nest.flatten(structure, expand_composites=False)


def _spec_of(value):
    tf = tensorflow()
    return tf.type_spec_from_value(tf.convert_to_tensor(value) if not hasattr(value, "dtype") else value)


def _concrete(traced, batch):
    tf = tensorflow()
    specs = tf.nest.map_structure(_spec_of, batch)
    if getattr(traced, "input_signature", None):
        return traced.get_concrete_function()
    return traced.get_concrete_function(specs)


def _leading_dimension(batch) -> int | None:
    tf = tensorflow()
    for value in tf.nest.flatten(batch):
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) >= 1 and shape[0] is not None:
            return int(shape[0])
    return None


def _calls_xla(graph, functions: dict) -> bool:
    for function in [graph, *(getattr(f, "graph", None) for f in functions.values())]:
        if function is None:
            continue
        for op in function.get_operations():
            attr = op.node_def.attr.get("_XlaMustCompile")
            if attr is not None and attr.b:
                return True
    return False


def _calls_function(graph) -> bool:
    return any(op.type in CALL_OPS for op in graph.get_operations())


# ------------------------------------------------------------------------------------ the record


def _fingerprint(name, kind, reference, work, flops, histogram, structure) -> WorkFingerprint:
    tf = tensorflow()
    version = ".".join(tf.__version__.split(".")[:2])
    return WorkFingerprint(name=name, kind=kind, reference=reference, method=FLOAT_OPS_METHOD, tensorflow=version,
                           work={k: int(v) for k, v in sorted(work.items())},
                           float_ops_by_op={k: round(v) for k, v in sorted(flops.items()) if round(v)},
                           op_histogram={k: int(v) for k, v in sorted(histogram.items())},
                           structure=_plain(structure))


def _plain(value):
    """Plain, deterministic YAML/JSON values: dicts with sorted keys, lists, str, int, float, bool, None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        return value.item()
    return value
