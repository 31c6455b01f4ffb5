"""The deterministic layer: the work a tf.data pipeline and a training step do, read from their graphs.

A fingerprint (``WorkFingerprint``) holds no time and nothing of the machine: float operations, the
op histogram by op and dtype (``typed_op``: 'MatMul:float32', 'Cast:float16'), the Python bodies' work
(perfsuite.measure.python_work), bytes read (``ReadFile`` and TFRecord readers wherever they sit, files
the Python bodies open), and the structural facts a timing cannot name (Python-function ops, prints,
prefetch and its place, each map's parallelism, cache, padded shapes static or not, bucketing boundaries
and batch sizes, XLA on or off, traces). The same code, TensorFlow and numpy give the same fingerprint on
every machine, in every process and under every thread setting, in seconds.

How float operations are counted (``FLOAT_OPS_METHOD``): TensorFlow's registered ``flops`` statistics
per op (what ``tf.compat.v1.profiler``'s ``float_operation`` option sums), at fully known shapes, plus
FFT ops, for which TensorFlow registers none, at 2.5·N·log2(N) per real transform of length N
(5·N·log2(N) per complex one). Ops with no registered statistic count in the op histogram, not in the float
ops; the elementwise and data-movement ones among them (casts, transposes, pads, gathers, square roots,
exponentials ...: the op table's ``ELEMENTWISE_OPS``) count their output elements as a figure of their own,
``elementwise_elements_per_sample`` / ``_per_step``, so a cast added moves a figure while float ops keep their
meaning. A loop's body counts times its trip count (perfsuite.measure.float_ops: measured in a pipeline, fixed
by constants and shapes in a step), one whose count is unknown is named in ``unresolved_float_ops``.

- A pipeline: every map function's graph is run, op by op shape-resolved, on ``reference_elements``
  elements of its input dataset (``reference_inputs``: evenly spaced over its first elements where its
  cardinality is known, the first ones where not; the same elements on every machine), and its float ops are
  counted at those elements' shapes. A conditional runs the branch taken for each element, as a nested call
  does: its Python bodies, reads and float ops count as they ran; a loop counts the trip count its counter
  says; a loop holding a Python function or a read is named, not run. Per sample: a map after a batch
  stage counts per its batch's samples. Per audio second: with ``audio_seconds`` (e.g.
  ``mel_seconds(frame_s)``), the audio the reference elements hold. The stages and their parameters
  come from the dataset's serialized graph; AUTOTUNE is recorded as ``"autotune"``, never its resolved
  value. The Python callable behind each numpy_function / py_function op runs on the values the graph
  gives it, under the deterministic counter.
- A step: traced (not run) at the reference batch's shapes for its work, wrapped in a ``tf.function``
  when it is not one (a plain callable, an eager step, a callable wrapping a tf.function: whatever it
  calls in graph ops is traced through); nested function calls are followed, a conditional counts its
  costlier branch, a loop body its trip count where constants and the batch's shapes fix it (else once,
  named). ``traces``: the traces the reference batches need; a step that
  counts its traces (a tf.function, ``tracing_count()``) is run on them to count them, as a benchmark
  runs it.

What it cannot see: a slower kernel, a slower disk, contention, Python work the counter cannot reach
(ufuncs and operators between library calls, pure-Python loops). That is the timing's job. What it cannot
count it names (``structure.unresolved_float_ops``): ops at unknown shapes, loops of unknown trip count,
Python functions and reads inside a loop body, datasets built inside a function. Why: a figure that quietly
leaves work out passes a change it should fail; a named gap fails when it moves.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from perfsuite._tensorflow import tensorflow
from perfsuite.errors import PerfsuiteError
from perfsuite.measure.float_ops import (
    FLOAT_OPS_METHOD,
    count_graph,
    float_ops_at,
    function_registry,
    truth,
    typed_op,
)
from perfsuite.measure.python_work import (
    PYTHON_WORK_METHOD,
    PythonCounts,
    count_generator,
    count_python,
)
from perfsuite.records import Record
from perfsuite.workload.function_library import (
    branch_names,
    counts_its_trips,
    function_definitions,
    graph_def_of,
    holds_reads,
)
from perfsuite.workload.op_table import (
    BOOKKEEPING_OPS,
    BRANCH_OPS,
    CALL_OPS,
    CASE_OPS,
    GENERATOR_OP,
    LOOP_OPS,
    PRINT_OPS,
    PYTHON_FUNCTION_OPS,
    READ_FILE_OP,
)
from perfsuite.workload.pipeline_model import Pipeline, PipelineModel, function_names, read_pipeline
from perfsuite.workload.python_functions import registered
from perfsuite.workload.tfrecord_files import reader_functions, record_reads, tfrecord_stages

# 2: op histogram and float ops keyed by op and dtype; Python bodies; numpy version. 3: loops count their trip
# count; elementwise and data-movement elements as figures of their own (elementwise_elements_per_sample / _step);
# the branch taken run in pipelines (its Python bodies and reads counted); reference elements spread over the input
FINGERPRINT_VERSION = 3
REFERENCE_SPREAD = 32  # reference elements are spread over at most this many times their count of first elements
METHOD = f"float ops: {FLOAT_OPS_METHOD}; Python bodies: {PYTHON_WORK_METHOD}"
AUTOTUNE = "autotune"


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
    sample, per audio second, per batch or step; bytes; the Python bodies' work); ``float_ops_by_op``: where
    the float ops are, by op and dtype ('MatMul:float32'); ``op_histogram``: every op's count by op and
    dtype (bookkeeping ops left out); ``structure``: the facts compared exactly; ``python_calls``: the
    library routines the Python bodies called over the reference elements (perfsuite.measure.python_work).
    ``reference``: what the figures are per, in words. ``tensorflow`` / ``numpy``: the major.minor
    versions the figures hold for."""

    SCHEMA_VERSION: ClassVar[int] = FINGERPRINT_VERSION

    name: str
    kind: str  # "pipeline" or "step"
    reference: str
    method: str
    tensorflow: str  # major.minor: op-level changes may be TensorFlow's own across versions
    numpy: str  # major.minor: the Python bodies' calls are numpy's own across versions
    work: dict[str, int]
    float_ops_by_op: dict[str, int]
    op_histogram: dict[str, int]
    structure: dict
    python_calls: dict[str, int]

    def snapshot(self) -> dict:
        """The reviewable form written to a snapshot file (plain types, sorted keys within)."""
        return {"schema_version": FINGERPRINT_VERSION, **self.as_dict()}

    def extra_info(self) -> dict:
        """Flat figures for pytest-benchmark's extra_info: ``work_<figure>`` and the whole fingerprint."""
        return {**{f"work_{key}": value for key, value in self.work.items()}, "work_fingerprint": self.snapshot()}


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
    """The work fingerprint of a tf.data pipeline, or of a ``Pipeline`` already read (see the module
    docstring). ``audio_seconds``: a function of one element as the last map before batching outputs it
    (numpy values, the element's own structure) giving its seconds of audio, e.g. ``mel_seconds(frame_s)``;
    or a number, the seconds of audio in one sample. With it the fingerprint has float ops per audio second.
    A pipeline whose graph cannot be read raises WorkUnavailable naming it and why."""
    if audio_seconds is not None and not callable(audio_seconds) and not audio_seconds > 0:
        raise ValueError(f"audio_seconds: expected a function of an element or seconds > 0, found {audio_seconds!r}")
    tf = tensorflow()
    if not isinstance(dataset, tf.data.Dataset | Pipeline):
        raise WorkUnavailable(name, "a tf.data.Dataset", type(dataset).__name__)
    if reference_elements < 1:
        raise ValueError(f"reference_elements: expected ≥ 1, found {reference_elements}")
    with _unreadable(name, "a pipeline whose graph can be read and run on its first elements"):
        pipeline = read_pipeline(dataset)
        return _dataset_work(pipeline, name, reference_elements, audio_seconds)


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


def _dataset_work(pipeline: Pipeline, name, reference_elements, audio_seconds) -> WorkFingerprint:
    model = pipeline.model
    stages, samples_before = model.chain(), model.samples_per_element()
    flops, histogram, unresolved, python_calls = Counter(), Counter(), Counter(), Counter()
    totals = Counter()  # per sample: float_ops, file_bytes, python_work; per element: element_bytes
    seconds, samples_seen, maps, spread = None, 0, [], []
    sample_maps = [s.node for s in model.sample_maps()]
    main_line = [s.node for s in stages if s.node in sample_maps]
    seconds_map = (main_line or sample_maps or [None])[-1]  # where audio_seconds reads the element
    typed = _TypedOps(pipeline)
    for stage in model.stages:  # every stage, branches included: each runs its functions on its own input
        samples_per_element = samples_before[stage.node]
        for function_name in stage.functions:
            histogram.update(typed.counts([function_name]))
            if stage.family in _COUNTED_FAMILIES:
                maps.append({"stage": stage.op, "parallelism": _autotune(stage.parallelism, 1),
                             **_function_facts(model, function_name)})
            found = pipeline.traced.get(function_name)
            if found is None or stage.family not in _COUNTED_FAMILIES:
                continue
            if not samples_per_element:
                unresolved[f"{stage.op} after a batch of varying size"] += 1
                continue
            measured = _run_function(*found, reference_elements, name, stage.node in sample_maps,
                                     audio_seconds if stage.node == seconds_map and callable(audio_seconds) else None)
            per = measured.elements * samples_per_element
            spread.append(f"{stage.op}: {measured.reference}")
            for op, value in measured.flops.items():  # per sample, as the totals
                flops[op] += value / per
            unresolved.update(measured.unresolved)
            python_calls.update(measured.python.calls)
            totals.update({"float_ops": measured.float_ops / per, "python_work": measured.python.work / per,
                           "elementwise": measured.elementwise / per,
                           "file_bytes": (measured.file_bytes + measured.python.file_bytes) / per,
                           "element_bytes": measured.output_bytes / measured.elements})
            if stage.node == seconds_map:
                seconds, samples_seen = measured.audio_seconds, measured.elements
    totals["file_bytes"] += _source_record_bytes(pipeline, reference_elements, unresolved)
    dropped = _batch_kept(pipeline)  # a map after the batch that keeps part of it: work per sample delivered
    for figure in ("float_ops", "python_work", "elementwise", "file_bytes"):
        totals[figure] /= dropped
    for op in flops:
        flops[op] /= dropped
    work = _pipeline_figures(model, totals, audio_seconds, seconds, samples_seen)
    structure = _pipeline_structure(pipeline, stages, maps, unresolved)
    reference = (f"{reference_elements} elements of each map, filter and interleave function's input dataset: "
                 "evenly spaced over its first min(cardinality, "
                 f"{REFERENCE_SPREAD * reference_elements}) elements where its cardinality is finite and known, else "
                 "its first ones (" + "; ".join(spread) + "); nested functions, the branches taken and Python "
                 "bodies run on the values they are called with; per sample: a function after a batch stage "
                 "divided by its batch's samples")
    return _fingerprint(name, "pipeline", reference, work, flops, histogram, structure,
                        python_calls={k: round(v) for k, v in python_calls.items()})


def _pipeline_figures(model: PipelineModel, totals: Counter, audio_seconds, seconds, samples_seen) -> dict:
    per_sample = totals["float_ops"]
    work = {"float_ops_per_sample": round(per_sample), "file_bytes_per_sample": round(totals["file_bytes"]),
            "element_bytes_per_sample": round(totals["element_bytes"]),
            "python_work_per_sample": round(totals["python_work"]),
            "elementwise_elements_per_sample": round(totals["elementwise"])}
    batch = model.samples_per_batch()
    if batch is not None:
        work["float_ops_per_batch"] = round(per_sample * batch)
    if audio_seconds is not None and not callable(audio_seconds):
        work["float_ops_per_audio_s"] = round(per_sample / audio_seconds)
    elif seconds:
        work["float_ops_per_audio_s"] = round(per_sample * samples_seen / seconds)
    return work


def _pipeline_structure(pipeline: Pipeline, stages, maps: list, unresolved: Counter) -> dict:
    model = pipeline.model
    return {
        "stages": [s.parameters() for s in model.stages],
        "maps": maps,
        "python_function_ops": sum(m["python_function_ops"] for m in maps),
        "prints": sum(m["prints"] for m in maps),
        "prefetch": [{"buffer": _autotune(s.buffer, None), "stages_after": len(stages) - 1 - i}
                     for i, s in enumerate(stages) if s.family == "prefetch"],
        "inject_prefetch": model.inject_prefetch,
        "cache": [{"to": None if s.cache is None else s.cache.split(" ")[0], "stages_after": len(stages) - 1 - i}
                  for i, s in enumerate(stages) if s.family == "cache"],
        "padded_shapes_static": _static_after_batch(pipeline.dataset.element_spec),
        "element_spec": _spec_text(pipeline.dataset.element_spec),
        "unresolved_float_ops": dict(sorted(unresolved.items())),
    }


class _TypedOps:
    """Op counts keyed by op and dtype (``typed_op``) of the pipeline's functions, from their FunctionDefs
    (the library of the serialized graph the stages were read from, else the traced functions'); a function
    found in neither counts by op kind, as the model has it."""

    def __init__(self, pipeline: Pipeline):
        self.model = pipeline.model
        self.library = function_definitions(pipeline.stages_graph_def, pipeline.traced)

    def counts(self, names) -> Counter:
        out = Counter()
        untyped = {f.name: f.ops for f in self.model.functions}
        for function_name in self.model.reachable(names):
            definition = self.library.get(function_name)
            if definition is None:
                out.update(untyped.get(function_name, {}))
                continue
            out.update(typed_op(n) for n in definition.node_def if n.op not in BOOKKEEPING_OPS)
        return out


def _source_record_bytes(pipeline: Pipeline, count: int, unresolved: Counter) -> float:
    """Bytes per record of every TFRecord reader among the serialized graph's stages (a reader op, or
    TFRecordDataset's per-file flat_map / interleave over a dataset of file names; one inside a traced function
    is counted where its function runs), over the first ``count`` files' first ``count`` records. The graph is
    the one the stages were read from: below a ``prefetch_to_device`` too. File names count where that graph
    fixes them (perfsuite.workload.tfrecord_files); names computed at run time, and a reader read from Python
    objects only, are listed unresolved, never a silent 0."""
    total = 0.0
    for stage, names, compression in tfrecord_stages(pipeline):
        if compression is None:
            unresolved[f"{stage.op} (TFRecord reader read from Python objects: file names not known)"] += 1
        elif names is None:
            unresolved[f"{stage.op} (TFRecord file names not constant)"] += 1
        else:
            total += record_bytes(names[:count], compression, count)
    return total


_COUNTED_FAMILIES = ("map", "filter", "interleave")  # stages whose functions run once per input element


def _autotune(value, default):
    return default if value is None else AUTOTUNE if value == -1 else value


class _Counts:
    def __init__(self):
        self.flops, self.unresolved = Counter(), Counter()
        self.float_ops = self.file_bytes = self.output_bytes = self.elementwise = 0
        self.elements = 0
        self.audio_seconds = 0.0
        self.python = PythonCounts()
        self.reference = ""  # which elements of the input, in words


def _run_function(wrapper, source, count: int, name: str, per_sample: bool, audio_seconds) -> _Counts:
    """Runs a dataset function's graph on ``count`` reference elements of its input (``reference_inputs``),
    resolving every tensor's shape (nested calls and the branches taken run on the values they are called
    with), and counts its float ops."""
    tf = tensorflow()
    from tensorflow.python.data.util import structure

    concrete = wrapper.function
    graph_def = graph_def_of(concrete.graph)
    runner = _GraphRun(graph_def, [t.name for t in concrete.graph.inputs], [t.name for t in concrete.graph.outputs],
                       reference=count)
    run = _Counts()
    spec = source.element_spec
    elements, run.reference = reference_inputs(source, count)
    for element in elements:
        flat_out = runner.run(structure.to_tensor_list(spec, element) + list(concrete.captured_inputs), run)
        if per_sample:
            values = structure.from_tensor_list(wrapper.output_structure, list(flat_out))
            run.output_bytes += _bytes_of(values)
            if audio_seconds is not None:
                run.audio_seconds += float(audio_seconds(tf.nest.map_structure(_numpy, values)))
        run.elements += 1
    if not run.elements:
        raise WorkUnavailable(name, "a function whose input dataset yields at least one element", "an empty input")
    return run


def reference_inputs(source, count: int):
    """(the reference elements of a dataset, which ones in words): ``count`` elements at evenly spaced indices
    (``i * span // count``) over its first ``span`` = min(cardinality, REFERENCE_SPREAD × count) where its
    cardinality is finite and known, so later, longer or other elements count too, the same ones on every
    machine; its first ``count`` where the cardinality is infinite, unknown or no larger than ``count``. The
    elements skipped pass through the stages before it (bounded by the span), not through the function."""
    tf = tensorflow()
    size = int(source.cardinality().numpy())
    if size < 0:
        known = "infinite" if size == tf.data.INFINITE_CARDINALITY else "unknown"
        return source.take(count), f"the first {count} (cardinality {known})"
    if size <= count:
        return source, f"all {size}"
    span = min(size, REFERENCE_SPREAD * count)
    indices = sorted({i * span // count for i in range(count)})
    chosen = tf.constant(indices, tf.int64)
    plain = tf.autograph.experimental.do_not_convert
    picked = source.enumerate().filter(plain(lambda index, _: tf.reduce_any(tf.equal(index, chosen))))
    return (picked.map(plain(lambda _, element: element)).take(len(indices)),
            f"{len(indices)} evenly spaced over the first {span} of {size}")


class _GraphRun:
    """One graph run to resolve its shapes: every tensor's shape, the bytes its ReadFile ops read, the values
    each nested function call is called with, which run the called function the same way, each conditional's
    predicate and inputs, which run the branch taken the same way (its Python bodies, reads and float ops counted
    as they ran), and each while_v2 loop's counter, its trip count. A loop whose body holds a Python function or a
    file read (not run: its values per pass are not at hand) is listed as such, never a silent 0."""

    def __init__(self, graph_def, inputs: Sequence[str], outputs: Sequence[str], depth: int = 0,
                 reference: int = 8):
        tf = tensorflow()
        self.graph_def, self.depth, self.nested, self.reference = graph_def, depth, {}, reference
        self.library = {f.signature.name: f for f in graph_def.library.function}
        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        operations = graph.get_operations()
        self.tensors = [t.name for op in operations for t in op.outputs if t.dtype not in (tf.resource, tf.variant)]
        reads = [t.name for op in operations if op.type == READ_FILE_OP for t in op.outputs]
        plain = [op for op in operations if all(t.dtype not in (tf.resource, tf.variant) for t in op.inputs)]
        self.calls = [op for op in plain if op.type in CALL_OPS and op.get_attr("f").name in self.library]
        self.branches = [op for op in plain if op.type in BRANCH_OPS
                         and all(name in self.library for name in branch_names(op))]
        self.loops = [op for op in operations if op.type in LOOP_OPS and counts_its_trips(op, self.library)]
        self.unrun = Counter()  # loops, and branches not run, holding Python functions or reads: named per run
        for op in operations:
            if (op.type in LOOP_OPS or (op.type in BRANCH_OPS and op not in self.branches)) \
                    and holds_reads(function_names(op.node_def), self.library):
                where = "its body" if op.type in LOOP_OPS else "a branch"
                self.unrun[f"{op.type} (a Python function or file read in {where}: not run)"] += 1
        self.bodies = [op for op in plain if op.type in PYTHON_FUNCTION_OPS]
        self.generators = [op for op in operations if op.type == GENERATOR_OP]  # from_generator
        self.records = record_reads(operations, reader_functions(self.library))  # (op, file names, compression)
        arguments = [t.name for op in self.calls + self.branches + self.bodies for t in op.inputs]
        arguments += [tensor.name for _, names, compression in self.records if names is not None
                      for tensor in (names, compression) if not isinstance(tensor, str)]
        arguments += [op.outputs[0].name for op in self.loops]  # while_v2's loop counter: the trip count
        sizes = (len(self.tensors), len(reads), len(arguments))

        @tf.function(autograph=False, reduce_retracing=True)
        def resolve(flat):
            found = tf.graph_util.import_graph_def(graph_def, input_map=dict(zip(inputs, flat)), name="work",
                                                   return_elements=self.tensors + reads + arguments + list(outputs))
            shapes = [tf.shape(t, out_type=tf.int64) for t in found[:sizes[0]]]
            lengths = [tf.strings.length(t) for t in found[sizes[0]:sizes[0] + sizes[1]]]
            return shapes, lengths, found[sum(sizes[:2]):sum(sizes)], found[sum(sizes):]

        self.resolve = resolve

    def run(self, flat: list, counts: _Counts) -> list:
        """Runs the graph on ``flat`` (its inputs), adds its float ops, elementwise elements, reads and
        unresolved ops to ``counts`` and returns its outputs."""
        shapes, lengths, arguments, outputs = self.resolve(flat)
        arguments = list(arguments)
        counters = arguments[len(arguments) - len(self.loops):]
        trips = {op.name: int(value.numpy()) for op, value in zip(self.loops, counters)}
        flops, unresolved, elements = float_ops_at(self.graph_def, self.tensors, [s.numpy().tolist() for s in shapes],
                                                   {op.name for op in self.calls + self.branches}, trips)
        counts.flops.update(flops)
        counts.unresolved.update(unresolved)
        counts.unresolved.update(self.unrun)
        counts.float_ops += sum(flops.values())
        counts.elementwise += sum(elements.values())
        counts.file_bytes += int(sum(int(x.numpy()) for x in lengths))
        for op in self.calls:
            values, arguments = arguments[:len(op.inputs)], arguments[len(op.inputs):]
            self._called(op.get_attr("f").name, counts).run(values, counts)
        for op in self.branches:
            values, arguments = arguments[:len(op.inputs)], arguments[len(op.inputs):]
            self._called(_branch_taken(op, values[0].numpy()), counts).run(values[1:], counts)
        for op in self.bodies:
            values, arguments = arguments[:len(op.inputs)], arguments[len(op.inputs):]
            _run_python_body(op, values, counts)
        for op in self.generators:  # its Python generator, on the reference elements (per element)
            missing = count_generator(op, self.library, self.reference, counts.python)
            if missing is not None:
                counts.unresolved[f"{GENERATOR_OP} ({missing})"] += 1
        for op_type, names, compression in self.records:
            if names is None:
                counts.unresolved[f"{op_type} (TFRecord file names not constant)"] += 1
                continue
            width = 1 if isinstance(compression, str) else 2
            values, arguments = arguments[:width], arguments[width:]
            counts.file_bytes += record_bytes(values[0].numpy(), compression if width == 1 else values[1].numpy(),
                                              self.reference)
        return list(outputs)

    def _called(self, function_name: str, counts: _Counts) -> _GraphRun:
        if function_name not in self.nested:
            from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

            function = self.library[function_name]
            body, _ = function_def_to_graph_def(function)
            body.library.CopyFrom(self.graph_def.library)
            inputs = [f"{arg.name}:0" for arg in function.signature.input_arg]
            self.nested[function_name] = _GraphRun(body, inputs, [], self.depth + 1, self.reference)
        return self.nested[function_name]


def _branch_taken(op, predicate) -> str:
    """The branch a conditional runs for its first input's value: If by the predicate's truth (a scalar's
    value, else whether it holds elements); Case by its index, the last branch where it is out of range."""
    names = branch_names(op)
    if op.type in CASE_OPS:
        index = int(predicate)
        return names[index] if 0 <= index < len(names) else names[-1]
    return names[0] if truth(predicate) else names[1]


def _run_python_body(op, values: list, counts: _Counts) -> None:
    """Runs the Python callable of a PyFunc / EagerPyFunc op on the values the graph gave it, under the
    deterministic counter (perfsuite.measure.python_work); one whose callable cannot be found is unresolved."""
    tf = tensorflow()
    function, takes_tensors = registered(op.get_attr("token").decode())
    if function is None:
        counts.unresolved[f"{op.type} (its Python callable is gone)"] += 1
        return
    arguments = [tf.identity(v) if takes_tensors else _numpy(v) for v in values]
    count_python(function, arguments, counts.python)


def record_bytes(names, compression, count: int) -> float:
    """Mean bytes a TFRecord reader reads per record over the first ``count`` records of each named file
    (payload plus the 16 bytes that frame a record; of the records as decompressed where compressed). Not
    rounded: the fingerprint rounds its figures once (an interleave's readers, one per file, are averaged
    over the files first)."""
    tf = tensorflow()
    names = names.reshape(-1).tolist() if hasattr(names, "reshape") else [names]
    compression = compression.decode() if isinstance(compression, bytes) else str(compression or "")
    sizes = [len(record) + 16 for name in names
             for record in tf.data.TFRecordDataset(name, compression_type=compression).take(count).as_numpy_iterator()]
    return sum(sizes) / len(sizes) if sizes else 0.0


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


def _batch_kept(pipeline: Pipeline) -> float:
    """The share of a batch's samples the pipeline delivers: 1, unless a map or filter follows the last
    stage that batches (Stage.batches; it may cut the batch, so work done for samples then dropped is work
    per delivered sample); then one output element is drawn and its leading dimension read against the batch
    size."""
    model = pipeline.model
    chain = model.chain()
    batch = model.samples_per_batch()
    last = max((i for i, s in enumerate(chain) if s.batches()), default=None)
    if batch is None or last is None or not any(s.family in ("map", "filter") for s in chain[last + 1:]):
        return 1.0
    from perfsuite.measure.timing import leading_dim

    for element in pipeline.dataset.take(1):
        return min(1.0, leading_dim(element) / batch)
    return 1.0


def _function_facts(model: PipelineModel, function_name: str) -> dict:
    counts = model.op_counts([function_name])
    return {"python_function_ops": sum(counts[op] for op in PYTHON_FUNCTION_OPS),
            "prints": sum(counts[op] for op in PRINT_OPS)}


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
              batches: Sequence[Any] | None = None, run: bool = True, shapes: Sequence[Any] = ()) -> WorkFingerprint:
    """The work fingerprint of a training step at ``batch`` (a tensor, tuple, dict or nested structure of
    them, as the step takes it): traced, not run, for its work (see the module docstring). ``batches``: the
    reference batches whose traces are counted: a step that can count its traces is run on each of them
    (its variables then move as in training; ``run=False``: traced on them only, which a retrace its trace
    cache hides escapes); a step retracing for them shows as more than one trace. ``shapes``: batches of
    other shapes, on which the step's own tf.function (the step, or its ``function`` attribute) is traced,
    not run: ``structure["shape_traces"]`` counts the traces ``batch`` and they need (one where an input
    signature holds them, one per shape where it was dropped; None for a step with no tf.function)."""
    if not callable(step):
        raise WorkUnavailable(name, "a callable step", type(step).__name__)
    with _unreadable(name, "a step that traces at its batch's shapes"):
        return _step_work(step, batch, name, batches, run, shapes)


def _step_work(step, batch, name, batches, run, shapes) -> WorkFingerprint:
    tf = tensorflow()
    is_function = hasattr(step, "get_concrete_function")
    traced = step if is_function else tf.function(lambda b: step(b), autograph=False)
    concrete = _concrete(traced, batch)
    traces = _traces(step, traced, concrete, batches, run)
    if is_function and not _static_inputs(concrete):
        # an input signature with unknown dimensions: its float ops are counted on its Python function
        # traced again at the batch's shapes (the traces above are the step's own)
        again = tf.function(step.python_function, jit_compile=getattr(step, "_jit_compile", None),
                            autograph=getattr(step, "_autograph", True))
        concrete = again.get_concrete_function(tf.nest.map_structure(_spec_of, batch))
    graph = concrete.graph
    flops, histogram, unresolved, elements = Counter(), Counter(), Counter(), Counter()
    total = count_graph(graph, function_registry(graph), flops, histogram, unresolved, elements=elements)
    samples = _leading_dimension(batch)
    work = {"float_ops_per_step": total, "input_bytes_per_step": _bytes_of(batch),
            "elementwise_elements_per_step": sum(elements.values()),
            "variable_bytes": sum(v.shape.num_elements() * v.dtype.size for v in concrete.graph.variables
                                  if v.shape.is_fully_defined())}
    if samples:
        work["float_ops_per_sample"] = round(total / samples)
    xla = bool(getattr(traced, "_jit_compile", False)) or _calls_xla(graph, function_registry(graph))
    nested = _calls_function(graph)
    structure = {
        "mode": "xla" if xla else "graph" if is_function or nested else "eager",
        "xla": xla,
        "python_function_ops": _of_kinds(histogram, PYTHON_FUNCTION_OPS),
        "prints": _of_kinds(histogram, PRINT_OPS),
        "traces": traces,
        "shape_traces": _shape_traces(step if is_function else getattr(step, "function", None), batch, shapes),
        "input_spec": _spec_text(tf.nest.map_structure(_spec_of, batch)),
        "unresolved_float_ops": dict(sorted(unresolved.items())),
    }
    reference = ("one step traced at the reference batch's shapes (per sample: over its leading dimension)"
                 + (f"; traces counted over {1 + len(batches)} reference batches" if batches else ""))
    return _fingerprint(name, "step", reference, work, flops, histogram, structure)


def _traces(step, traced, concrete, batches, run: bool) -> int:
    """The traces the reference batches need. A step that can say how often it traced (a tf.function, or
    ``tracing_count()`` as the training step has): traced at ``batch``, then run on each of ``batches`` as
    the benchmark runs it, its count after them, so a retrace its trace cache would hide (a Python value that
    changes per call, a function made anew) shows. Otherwise: the distinct traces of the wrapper around it.
    A trace taken before this call (by the timed rounds) counts."""
    from perfsuite.measure.timing import tracing_count

    if run and batches and tracing_count(step) is not None:
        for reference in batches:
            step(reference)
        return tracing_count(step)
    distinct = len({id(concrete), *(id(_concrete(traced, other)) for other in batches or ())})
    own = None if traced is step else tracing_count(step)
    return distinct if own is None else own


def _shape_traces(function, batch, shapes: Sequence[Any]) -> int | None:
    """The concrete functions a tf.function needs for ``batch`` and batches of other ``shapes`` (traced,
    not run): 1 where its input signature holds them all, one per shape where it has none."""
    if not shapes or not hasattr(function, "get_concrete_function"):
        return None
    return len({id(_concrete(function, reference)) for reference in (batch, *shapes)})


def _of_kinds(histogram: Counter, kinds) -> int:
    """The count of the op kinds ``kinds`` in a histogram keyed by op and dtype."""
    return sum(count for key, count in histogram.items() if key.split(":")[0] in kinds)


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


def _fingerprint(name, kind, reference, work, flops, histogram, structure, python_calls=None) -> WorkFingerprint:
    import numpy

    tf = tensorflow()
    return WorkFingerprint(name=name, kind=kind, reference=reference, method=METHOD, tensorflow=minor(tf.__version__),
                           numpy=minor(numpy.__version__), work={k: int(v) for k, v in sorted(work.items())},
                           float_ops_by_op={k: round(v) for k, v in sorted(flops.items()) if round(v)},
                           op_histogram={k: int(v) for k, v in sorted(histogram.items())},
                           structure=_plain(structure), python_calls=dict(sorted((python_calls or {}).items())))


def minor(version: str) -> str:
    """'2.21' of '2.21.0': the part of a version a fingerprint is keyed by."""
    return ".".join(version.split(".")[:2])


def _plain(value):
    """Plain, deterministic YAML/JSON values: dicts with sorted keys, lists, str, int, float, bool, None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        return value.item()
    return value
