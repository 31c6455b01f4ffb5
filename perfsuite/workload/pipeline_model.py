"""A tf.data pipeline read once: every stage with its kind and parameters, every input branch, every
function with the functions it calls, and the Python callables its Python-function ops run.

Every reader of a user's pipeline asks this model (the fingerprint, diagnose's graph findings, buffer
draining, prefix cutting, fixes and rewrites, the tf.data service's Python-op check); none walks the graph
itself. The one table of dataset op kinds is perfsuite.workload.op_table; a Python-function op's callable is
named through perfsuite.workload.python_functions, the one reader of TensorFlow's registry of them.

The model is read from the dataset's serialized GraphDef. A dataset TensorFlow will not serialize
(``prefetch_to_device`` copies through a generator) is read from its Python dataset objects down to the
first input that can be, and from that input's graph below it; ``read_from`` says which. ``Pipeline`` keeps
that input's graph (``stages_graph_def``), so the readers that need a graph (the fingerprint's file reads)
see the same stages with the copy after them as without it.

``PipelineModel`` is the typed, versioned description (a Record); ``Pipeline`` holds it with the live
Python objects the measuring readers need (each traced function with its input dataset, the first-input
chain of dataset objects).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

from perfsuite._tensorflow import tensorflow
from perfsuite.records import Record
from perfsuite.workload.op_table import (
    BOOKKEEPING_OPS,
    FILE_READ_OPS,
    FUSED_MAP_AND_BATCH,
    GENERATOR_OP,
    OP_TABLE,
    PYTHON_FUNCTION_OPS,
    RANDOM_WORDS,
    SEQUENTIAL_MAP_OP,
    UNKNOWN_KIND,
    kind_of,
    one_to_one,
)
from perfsuite.workload.python_functions import python_callable

PIPELINE_MODEL_VERSION = 1
AUTOTUNE = -1
AUTOTUNE_BUFFER = 16  # elements counted for a buffer tf.data sizes itself (prefetch(AUTOTUNE), an injected one)

# Op arguments read as a stage's parameters: the op_def argument name -> the Stage field.
_ARGS = {"num_parallel_calls": "parallelism", "buffer_size": "buffer", "batch_size": "batch_size",
         "drop_remainder": "drop_remainder", "count": "count", "cycle_length": "cycle_length",
         "block_length": "block_length", "window_size": "window_size"}
# Python dataset attributes read where the graph cannot be serialized: attribute -> the Stage field.
_OBJECT_ATTRS = {"_num_parallel_calls": "parallelism", "_buffer_size": "buffer", "_batch_size": "batch_size",
                 "_count": "count", "_cycle_length": "cycle_length", "_block_length": "block_length"}
_FUNCTION_ATTRS = ("f", "predicate", "key_func", "reduce_func", "window_size_func", "init_func", "finalize_func",
                   "then_branch", "else_branch", "body", "cond")


@dataclass(frozen=True)
class PythonOp(Record):
    """A Python-function op in the pipeline: its op type and node, the graph function it sits in, the
    transformation that runs it (in tf.data's words, its op type and node), the Python callable it calls
    ('module.qualname') and where that is defined ('file:line'), when TensorFlow still knows it."""

    op: str
    node: str
    function: str
    transformation: str
    transformation_op: str
    transformation_node: str
    python: str | None
    defined_at: str | None = None


@dataclass(frozen=True)
class Stage(Record):
    """One dataset op. kind: its role in OP_TABLE ('source', 'stage', 'wrapper', 'pass-through'); family:
    what it does. inputs: the nodes of its input datasets (more than one: branches). parallelism: parallel
    calls (AUTOTUNE: -1; 1 for a sequential map). buffer: prefetch / shuffle elements (AUTOTUNE: -1).
    cache: 'memory' or 'file <path>'. padded_shapes: per component (-1: the batch's longest). count: a
    repeat / take / skip count (-1: endless). functions: the graph functions it runs. bucket_boundaries,
    bucket_batch_sizes: a bucket_by_sequence_length's (a group_by_window whose key function buckets by
    length), read from the constants of its key and window size functions."""

    op: str
    node: str
    method: str
    kind: str
    family: str = "other"
    inputs: tuple[str, ...] = ()
    parallelism: int | None = None
    buffer: int | None = None
    batch_size: int | None = None
    drop_remainder: bool | None = None
    padded_shapes: tuple[tuple[int, ...], ...] | None = None
    cycle_length: int | None = None
    block_length: int | None = None
    window_size: int | None = None
    count: int | None = None
    cache: str | None = None
    deterministic: str | None = None
    options: str | None = None
    functions: tuple[str, ...] = ()
    bucket_boundaries: tuple[int, ...] | None = None
    bucket_batch_sizes: tuple[int, ...] | None = None

    def words(self) -> str:
        """'map (AUTOTUNE parallel calls)', 'prefetch (buffer 50)', 'cache (in memory)', 'padded_batch (shapes
        [1024, 80], [longest])'."""
        detail, method = [], self.method
        if self.parallelism is not None:
            method = method.replace(" (parallel)", "")
            detail.append("sequential" if self.parallelism == 1 else f"{_count(self.parallelism)} parallel calls")
        if self.buffer is not None:
            detail.append(f"buffer {_count(self.buffer)}")
        if self.cycle_length is not None:
            detail.append(f"cycle length {_count(self.cycle_length)}")
        if self.cache is not None:
            detail.append("in memory" if self.cache == "memory" else self.cache)
        if self.padded_shapes is not None:
            detail.append("shapes " + ", ".join(shape_words(s) for s in self.padded_shapes))
        if self.family == "repeat" and self.count == -1:
            detail.append("endless")
        return f"{method} ({'; '.join(detail)})" if detail else method

    def batches(self) -> bool:
        """Whether the stage makes batches of its input elements: batch, padded_batch, rebatch, window,
        dense_to_sparse_batch, a map fused with its batch, and group_by_window (bucket_by_sequence_length is
        one), whose reduce function makes each window a batch, as every bucketing recipe's does; its batches
        vary in size, so their samples are not known. The other group stages do not batch: group_by_reducer
        gives one value per key, scan one element per element. Unbatch undoes a batch."""
        return (self.family == "batch" and self.method != "unbatch") or \
            self.method in (FUSED_MAP_AND_BATCH, "group_by_window")

    def sequential_map(self) -> bool:
        """Whether the stage is a map without parallel calls (tf.data's MapDataset: map() without
        num_parallel_calls), what the map-parallelism rewrite makes a parallel map. A map given
        num_parallel_calls=1 is a parallel map its user set to one call: not one."""
        return self.op == SEQUENTIAL_MAP_OP

    def parameters(self) -> dict:
        """The stage's op and set parameters as plain values (AUTOTUNE as 'autotune'), for fingerprints."""
        out = {"op": self.op}
        for name in ("parallelism", "buffer", "batch_size", "drop_remainder", "padded_shapes", "cycle_length",
                     "block_length", "window_size", "count", "cache", "deterministic", "options",
                     "bucket_boundaries", "bucket_batch_sizes"):
            value = getattr(self, name)
            if value is not None:
                out[name] = "autotune" if value == AUTOTUNE and name in ("parallelism", "buffer", "cycle_length") \
                    else [list(s) for s in value] if name == "padded_shapes" else \
                    list(value) if name.startswith("bucket_") else value
        if len(self.inputs) > 1:
            out["branches"] = len(self.inputs)
        return out


@dataclass(frozen=True)
class GraphFunction(Record):
    """A function of the pipeline's graph library: its op kinds (bookkeeping ops left out) and the
    functions it calls (tf.function calls, If / While bodies, dataset functions)."""

    name: str
    ops: dict[str, int]
    calls: tuple[str, ...]


@dataclass(frozen=True)
class PipelineModel(Record):
    """A tf.data pipeline read once (see the module docstring). stages: every dataset op, inputs before
    the stages that read them, the output last; chain(): the main line along first inputs."""

    SCHEMA_VERSION: ClassVar[int] = PIPELINE_MODEL_VERSION

    stages: tuple[Stage, ...]
    functions: tuple[GraphFunction, ...]
    python_ops: tuple[PythonOp, ...]
    element_spec: str
    inject_prefetch: bool
    read_from: str = "serialized graph"

    def by_node(self) -> dict[str, Stage]:
        return {stage.node: stage for stage in self.stages}

    def chain(self) -> tuple[Stage, ...]:
        """The stages from the source to the output along first inputs."""
        nodes, out = self.by_node(), []
        current = self.stages[-1] if self.stages else None
        while current is not None:
            out.append(current)
            current = nodes.get(current.inputs[0]) if current.inputs else None
        return tuple(reversed(out))

    def branched(self) -> tuple[Stage, ...]:
        """Stages reading more than one input dataset (zip, concatenate, sample / choose)."""
        return tuple(stage for stage in self.stages if len(stage.inputs) > 1)

    def last_real_stage(self) -> Stage | None:
        """The last stage of the main line that does work or holds elements (wrappers and pass-through
        stages skipped)."""
        return next((s for s in reversed(self.chain()) if s.kind in ("stage", "source")), None)

    def reachable(self, names) -> tuple[str, ...]:
        """The named functions and every function they call, nested calls resolved, each once."""
        library = {f.name: f for f in self.functions}
        seen, pending = [], list(names)
        while pending:
            name = pending.pop(0)
            if name in seen or name not in library:
                continue
            seen.append(name)
            pending += library[name].calls
        return tuple(seen)

    def op_counts(self, names) -> Counter:
        """Op kinds of the named functions with every function they call (each function once)."""
        library = {f.name: f for f in self.functions}
        counts = Counter()
        for name in self.reachable(names):
            counts.update(library[name].ops)
        return counts

    def python_ops_of(self, stage: Stage) -> tuple[PythonOp, ...]:
        return tuple(op for op in self.python_ops if op.transformation_node == stage.node)

    def deterministic(self, stage: Stage) -> bool:
        """No shuffle, random op or Python-function op in the stage or the functions it runs."""
        ops = set(self.op_counts(stage.functions)) | {stage.op}
        return not any(word in op for op in ops for word in RANDOM_WORDS) and not ops & PYTHON_FUNCTION_OPS

    def sequential_maps(self) -> tuple[Stage, ...]:
        """Maps without parallel calls (Stage.sequential_map: what the map-parallelism rewrite makes parallel)."""
        return tuple(stage for stage in self.stages if stage.sequential_map())

    def sequential_reads(self) -> tuple[tuple[Stage, tuple[str, ...]], ...]:
        """(stage, the file reads it runs) for every interleave or flat_map without parallel calls whose
        functions read files (a TFRecordDataset over several files is a flat_map of one reader per file)."""
        out = []
        for stage in self.stages:
            if stage.family == "interleave" and stage.parallelism is None:
                reads = sorted(set(self.op_counts(stage.functions)) & FILE_READ_OPS)
                if reads:
                    out.append((stage, tuple(reads)))
        return tuple(out)

    def caches_after_endless_repeat(self) -> tuple[Stage, ...]:
        """Cache stages with an endless repeat before them: the cache never completes a pass, so it never
        serves from memory, and it holds every element it has seen."""
        nodes, out = self.by_node(), []
        for stage in self.stages:
            if stage.family != "cache":
                continue
            upstream = nodes.get(stage.inputs[0]) if stage.inputs else None
            while upstream is not None:
                if upstream.family == "repeat" and upstream.count == -1:
                    out.append(stage)
                    break
                upstream = nodes.get(upstream.inputs[0]) if upstream.inputs else None
        return tuple(out)

    def buckets(self) -> bool:
        """Whether the pipeline groups elements into batches by a key (bucket_by_sequence_length, group_by_window)."""
        return any(kind_of(stage.op).method == "group_by_window" for stage in self.stages)

    def buffered_elements(self) -> int:
        """At most how many elements the pipeline's buffers hold ready: every prefetch's buffer
        (AUTOTUNE_BUFFER for an autotuned or unknown one, and for the prefetch tf.data injects at the end
        when it does) and every parallel transformation's calls in flight (os.cpu_count() for AUTOTUNE)."""
        total = 0
        for stage in self.stages:
            if stage.family in ("prefetch", "copy"):
                total += _elements(stage.buffer, AUTOTUNE_BUFFER)
            elif OP_TABLE.get(stage.op, UNKNOWN_KIND).buffers:
                total += _elements(stage.parallelism if stage.parallelism is not None else 1, os.cpu_count() or 1)
        last = self.last_real_stage()
        if self.inject_prefetch and (last is None or last.family != "prefetch"):
            total += AUTOTUNE_BUFFER
        return total

    def samples_per_batch(self) -> int | None:
        """The samples one output element holds, the batch sizes along the chain multiplied; None when a
        batch size is not constant, a group stage comes before, nothing batches or an unbatch undoes it."""
        samples = self.output_samples().get(self.stages[-1].node, 0) if self.stages else 0
        return samples if samples > 1 else None

    def batched(self) -> dict[str, bool]:
        """Per stage, whether the elements it produces are batches: a stage that batches (Stage.batches, the
        rule for group stages there) is on its first input's line, and no unbatch after it. Every reader that
        asks whether a stage's elements are batches asks here."""
        out = {}
        for stage in self.stages:  # inputs come first
            before = out.get(stage.inputs[0], False) if stage.inputs else False
            out[stage.node] = stage.batches() or (before and stage.method != "unbatch")
        return out

    def samples_per_element(self) -> dict[str, int]:
        """Per stage, the samples one of its input elements holds: the batch sizes before it on its first
        input's line multiplied (0 where one is not constant: a group, an unknown batch size)."""
        return self._samples()[0]

    def output_samples(self) -> dict[str, int]:
        """Per stage, the samples one of the elements it produces holds (samples_per_element's rule)."""
        return self._samples()[1]

    def _samples(self) -> tuple[dict[str, int], dict[str, int]]:
        out, after = {}, {}
        for stage in self.stages:  # inputs come first
            samples = after.get(stage.inputs[0], 1) if stage.inputs else 1
            out[stage.node] = samples
            if stage.method == "unbatch":
                samples = 1 if samples else 0
            elif stage.batches():
                samples = samples * stage.batch_size if isinstance(stage.batch_size, int) and samples else 0
            elif stage.family == "group":
                samples = 0
            after[stage.node] = samples
        return out, after

    def branch_stages(self, stage: Stage) -> tuple[Stage, ...]:
        """The stages feeding stage's inputs after the first (a zip's other branches), every one upstream of them."""
        nodes, out, pending = self.by_node(), {}, list(stage.inputs[1:])
        while pending:
            upstream = nodes.get(pending.pop())
            if upstream is not None and upstream.node not in out:
                out[upstream.node] = upstream
                pending += upstream.inputs
        return tuple(out.values())

    def sample_maps(self) -> tuple[Stage, ...]:
        """The maps whose outputs are the samples batched: on each line into the first batch, the last map
        that runs per sample (one for a single line; one per branch of a zip before batching)."""
        samples, consumers = self.samples_per_element(), {}
        for stage in self.stages:
            for upstream in stage.inputs:
                consumers.setdefault(upstream, []).append(stage)
        out = []
        for stage in self.stages:
            if stage.family != "map" or kind_of(stage.op).method == FUSED_MAP_AND_BATCH or samples[stage.node] != 1:
                continue
            later = consumers.get(stage.node, [])
            while len(later) == 1 and later[0].family not in ("map", "batch", "group"):
                later = consumers.get(later[0].node, [])
            if not any(s.family == "map" and samples[s.node] == 1 for s in later):
                out.append(stage)
        return tuple(out)

def structural_periods(stages) -> dict[int, str]:
    """Periods of batches the pipeline's own structure makes, in words, by period: a bucket_by_sequence_length's
    buckets (each bucket's batches differ in length, so batch times repeat with the buckets) and an interleave's
    cycle over its inputs (a fixed cycle length). A cycle of batch times at such a period is that structure, not
    a stall to hide."""
    found = {}
    for stage in stages:
        if stage.family == "group" and stage.bucket_boundaries:
            buckets = len(stage.bucket_boundaries) + 1
            found.setdefault(buckets, f"its {buckets} length buckets ({stage.method}): each bucket's batches have "
                                      "their own length")
        elif stage.family == "interleave" and isinstance(stage.cycle_length, int) and stage.cycle_length > 1:
            found.setdefault(stage.cycle_length, f"its {stage.method}'s cycle over {stage.cycle_length} inputs")
    return found


def _elements(value: int | None, autotuned: int) -> int:
    return autotuned if value is None or value == AUTOTUNE else max(int(value), 0)


def _count(value: int) -> str:
    return "AUTOTUNE" if value == AUTOTUNE else str(value)


def shape_words(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join("longest" if d == -1 else str(d) for d in shape) + "]"


def class_words(dataset) -> str:
    """A Python dataset object's class in tf.data's words: _ParallelMapDataset -> 'parallel_map'."""
    name = type(dataset).__name__.strip("_").removesuffix("Dataset").removesuffix("V2")
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).strip("_") or type(dataset).__name__


def op_of_class(dataset) -> str:
    """The dataset op a Python dataset object makes, by its class name (the op table's spelling)."""
    name = type(dataset).__name__.lstrip("_")
    for candidate in (name, f"{name}V2", f"{name}V3", f"{name}V4", name.removesuffix("V2")):
        if candidate in OP_TABLE:
            return candidate
    return name


def known_cardinality(dataset) -> int:
    """The dataset's cardinality, read through stages that give one element per element where TensorFlow
    does not know it (copy_to_device, say) from the first input that knows it; UNKNOWN_CARDINALITY (-2)
    when none does, INFINITE (-1) when endless."""
    tf = tensorflow()
    while (count := int(dataset.cardinality())) == tf.data.UNKNOWN_CARDINALITY:
        inputs = dataset._inputs() if one_to_one(op_of_class(dataset)) else []
        if not inputs:
            return count
        dataset = inputs[0]
    return count


@dataclass(frozen=True)
class Pipeline:
    """The model with the live objects the measuring readers need: the dataset, each traced function of
    its Python objects by name with the dataset it reads, and the Python dataset objects from the source to
    the output along first inputs."""

    model: PipelineModel
    dataset: Any = field(repr=False)
    traced: dict[str, tuple[Any, Any]] = field(repr=False)
    python_chain: tuple[Any, ...] = field(repr=False)
    graph_def: Any = field(default=None, repr=False)  # the whole pipeline's serialized graph (None: not serializable)
    # the serialized graph the model's graph stages were read from: the whole pipeline's, or the graph of the
    # input below the stages read from Python objects (None: no input serializes)
    stages_graph_def: Any = field(default=None, repr=False)


def _base_op(op: str) -> str:
    """An op name without its version suffix: ParallelMapDatasetV2 -> ParallelMapDataset."""
    return re.sub(r"V\d+$", "", op)


def chain_stages(pipeline: Pipeline) -> tuple[Stage | None, ...]:
    """The model's stage of each Python dataset of pipeline.python_chain, in its order (None where none matches):
    the two chains zipped where they are as long, else matched in order by op (version suffixes aside)."""
    chain, objects = pipeline.model.chain(), pipeline.python_chain
    ops = [_base_op(op_of_class(node)) for node in objects]
    if len(chain) == len(objects) and all(_base_op(s.op) == op for s, op in zip(chain, ops)):
        return tuple(chain)
    out, position = [], 0
    for op in ops:
        found = next((i for i in range(position, len(chain)) if _base_op(chain[i].op) == op), None)
        out.append(None if found is None else chain[found])
        position = position if found is None else found + 1
    return tuple(out)


def chain_batched(pipeline: Pipeline) -> tuple[bool, ...]:
    """Per Python dataset of pipeline.python_chain, whether its elements are batches (PipelineModel.batched;
    a dataset with no stage in the model keeps the answer of the one before it)."""
    batched, out = pipeline.model.batched(), []
    for stage in chain_stages(pipeline):
        out.append(batched[stage.node] if stage is not None else bool(out) and out[-1])
    return tuple(out)


def read_pipeline(dataset) -> Pipeline:
    """Reads a tf.data.Dataset once into its Pipeline (see the module docstring); a Pipeline already read is
    handed back as it is, so a caller given either asks the one reading."""
    if isinstance(dataset, Pipeline):
        return dataset
    from tensorflow.python.data.ops.options import ExternalStatePolicy

    tf = tensorflow()
    upper: list[Any] = []
    below, graph = dataset, None
    while True:
        try:
            serialized = below._as_serialized_graph(external_state_policy=ExternalStatePolicy.IGNORE)
            graph = tf.compat.v1.GraphDef.FromString(serialized.numpy())
            break
        except (tf.errors.FailedPreconditionError, tf.errors.UnimplementedError):
            upper.insert(0, below)
            inputs = below._inputs()
            if not inputs:
                break
            below = inputs[0]
    stages, functions, python_ops = _read_graph(graph) if graph is not None else ((), (), ())
    object_stages = []
    for obj in upper:
        below_node = object_stages[-1].node if object_stages else stages[-1].node if stages else None
        stage, ops = _stage_of_object(obj, below_node)
        object_stages.append(stage)
        python_ops += ops
    read_from = "serialized graph"
    if upper:
        read_from = (f"Python dataset objects for the last {len(upper)} stage(s) (TensorFlow cannot serialize "
                     f"{object_stages[0].method}), the serialized graph below them" if graph is not None else
                     "Python dataset objects (TensorFlow cannot serialize this dataset)")
    options = dataset.options()
    inject = (options.experimental_optimization.inject_prefetch is not False) and (options.autotune.enabled is not False)
    model = PipelineModel(stages=tuple(stages) + tuple(object_stages), functions=tuple(functions),
                          python_ops=tuple(python_ops), element_spec=str(dataset.element_spec),
                          inject_prefetch=inject, read_from=read_from)
    return Pipeline(model=model, dataset=dataset, traced=_traced_functions(dataset),
                    python_chain=tuple(python_chain(dataset)), graph_def=graph if not upper else None,
                    stages_graph_def=graph)


# ------------------------------------------------------------------------------ the serialized graph


def _read_graph(graph) -> tuple[list[Stage], list[GraphFunction], list[PythonOp]]:
    nodes = {node.name: node for node in graph.node}
    library = {function.signature.name: function for function in graph.library.function}
    output = next((_name(node.input[0]) for node in graph.node if node.op == "_Retval" and node.input), None)
    order = _dataset_nodes(nodes, output)
    stages = [_stage_of_node(nodes[name], nodes, library) for name in order]
    functions = [GraphFunction(name=name, ops=dict(sorted(Counter(n.op for n in f.node_def
                                                                   if n.op not in BOOKKEEPING_OPS).items())),
                               calls=tuple(dict.fromkeys(c for n in f.node_def for c in function_names(n))))
                 for name, f in sorted(library.items())]
    python_ops = [op for name in order for op in _python_ops_of(nodes[name], library)]
    return stages, functions, python_ops


def _dataset_nodes(nodes: dict, output: str | None) -> list[str]:
    """Dataset nodes reachable from the output through dataset inputs, inputs first (depth first)."""
    order, seen = [], set()

    def visit(name: str) -> None:
        if name in seen or name not in nodes:
            return
        seen.add(name)
        for upstream in dataset_inputs(nodes[name], nodes):
            visit(upstream)
        order.append(name)

    if output is not None:
        visit(output)
    return order


def dataset_inputs(node, nodes: dict) -> list[str]:
    """The names of a node's input datasets, in order (constants and other tensors left out)."""
    out = []
    for text in node.input:
        if text.startswith("^"):
            continue
        upstream = nodes.get(_name(text))
        if upstream is not None and upstream.op != "Const" and ("Dataset" in upstream.op or upstream.op in OP_TABLE):
            out.append(upstream.name)
    return out


def _name(text: str) -> str:
    return text.split(":")[0].lstrip("^")


def _stage_of_node(node, nodes: dict, library: dict | None = None) -> Stage:
    from tensorflow.python.framework import op_def_registry

    kind = kind_of(node.op)
    values: dict[str, Any] = {}
    op_def = op_def_registry.get(node.op)
    inputs = [i for i in node.input if not i.startswith("^")]
    position = 0
    for arg in op_def.input_arg if op_def is not None else ():
        width = node.attr[arg.number_attr].i if arg.number_attr else \
            len(node.attr[arg.type_list_attr].list.type) if arg.type_list_attr else 1
        taken, position = inputs[position:position + width], position + width
        if arg.name in _ARGS and taken:
            value = _constant(nodes.get(_name(taken[0])))
            values[_ARGS[arg.name]] = bool(value) if arg.name == "drop_remainder" and value is not None else value
        elif arg.name == "padded_shapes":
            shapes = [_constant(nodes.get(_name(t)), shape=True) for t in taken]
            values["padded_shapes"] = None if any(s is None for s in shapes) else tuple(shapes)
        elif arg.name == "window_size_func_other_arguments" and taken:
            sizes = _constant(nodes.get(_name(taken[0])), shape=True)
            values["bucket_batch_sizes"] = sizes or None
        elif arg.name == "filename" and taken:
            name = _constant(nodes.get(_name(taken[0])), text=True)
            values["cache"] = None if name is None else "memory" if not name else f"file {name}"
    if kind_of(node.op).method == "map":  # a sequential map: one call at a time
        values["parallelism"] = 1
    if "deterministic" in node.attr and node.attr["deterministic"].s:
        values["deterministic"] = node.attr["deterministic"].s.decode()
    if kind_of(node.op).method == "with_options":
        values["options"] = _options_text(node.attr["serialized_options"].s)
    if kind_of(node.op).method == "group_by_window":
        values["bucket_boundaries"] = _bucket_boundaries(library or {}, node.attr["key_func"].func.name)
        if values["bucket_boundaries"] is None:
            values.pop("bucket_batch_sizes", None)
    return Stage(op=node.op, node=node.name, method=kind.method or node.op, kind=kind.role, family=kind.family,
                 inputs=tuple(dataset_inputs(node, nodes)), functions=tuple(function_names(node)), **values)


def _bucket_boundaries(library: dict, key_func: str) -> tuple[int, ...] | None:
    """bucket_by_sequence_length's boundaries: its key function's constant of the buckets' upper ends, the
    last of them int32's maximum; None for a key function with no such constant."""
    function = library.get(key_func)
    for node in function.node_def if function is not None else ():
        values = _constant(node, shape=True) if node.op == "Const" else None
        if values and len(values) > 1 and values[-1] == 2**31 - 1:
            return values[:-1]
    return None


def _constant(node, *, shape: bool = False, text: bool = False) -> Any:
    """A small constant's value as plain Python: an int or bool, a shape tuple, a string; None when the
    input is not a constant."""
    from tensorflow.python.framework import tensor_util

    if node is None or node.op != "Const":
        return None
    with contextlib.suppress(Exception):
        value = tensor_util.MakeNdarray(node.attr["value"].tensor)
        if text:
            item = value.reshape(-1)[0] if value.size else b""
            return item.decode() if isinstance(item, bytes) else str(item)
        if shape:
            return tuple(int(d) for d in value.reshape(-1))
        if value.size == 1 and value.dtype.kind in "biu":
            return value.item()
    return None


def _options_text(serialized: bytes) -> str:
    from google.protobuf import text_format
    from tensorflow.core.framework import dataset_options_pb2

    return text_format.MessageToString(dataset_options_pb2.Options.FromString(serialized), as_one_line=True)


def function_names(node) -> list[str]:
    """The graph functions a node calls (func attrs and lists of them)."""
    names = []
    for value in node.attr.values():
        if value.func.name:
            names.append(value.func.name)
        names += [func.name for func in value.list.func]
    return names


def _python_ops_of(node, library: dict) -> list[PythonOp]:
    """Every Python-function op reachable from a dataset node through the functions it calls."""
    found, seen, generator = [], set(), False
    pending = function_names(node)
    while pending:
        name = pending.pop(0)
        if name in seen or name not in library:
            continue
        seen.add(name)
        for inner in library[name].node_def:
            generator |= inner.op == GENERATOR_OP
            if inner.op in PYTHON_FUNCTION_OPS:
                found.append((inner, name))
            pending += function_names(inner)
    words = kind_of(node.op).method or node.op
    if generator:
        words = f"from_generator (a Python generator under {words})"
    return [_python_op(inner, function, words, node.op, node.name) for inner, function in found]


def _python_op(inner, function: str, words: str, op: str, node_name: str) -> PythonOp:
    python, defined_at = python_callable(inner)
    return PythonOp(op=inner.op, node=inner.name, function=function, transformation=words, transformation_op=op,
                    transformation_node=node_name, python=python, defined_at=defined_at)


# ------------------------------------------------------------------------------ the Python objects


def _stage_of_object(dataset, below: str | None) -> tuple[Stage, list[PythonOp]]:
    """A stage read from its Python dataset object (where the graph cannot be serialized), with the
    Python-function ops of the functions it holds."""
    op = op_of_class(dataset)
    kind = kind_of(op)
    values = {}
    for attribute, name in _OBJECT_ATTRS.items():
        with contextlib.suppress(Exception):
            values[name] = int(getattr(dataset, attribute))
    if kind.family != "prefetch" and kind.family != "shuffle":
        values.pop("buffer", None)
    if op == SEQUENTIAL_MAP_OP:
        values["parallelism"] = 1
    if kind.family == "cache":
        with contextlib.suppress(Exception):
            name = dataset._filename.numpy().decode()
            values["cache"] = "memory" if not name else f"file {name}"
    node = f"{type(dataset).__name__.lstrip('_')} (Python object)"
    words = kind.method or op
    ops = [_python_op(inner, graph_name, words, op, node) for inner, graph_name in _object_python_ops(dataset)]
    return Stage(op=op, node=node, method=words, kind=kind.role, family=kind.family,
                 inputs=() if below is None else (below,), **values), ops


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
            found += [(n, graph.name) for n in nodes if n.op in PYTHON_FUNCTION_OPS]
    return found


def _traced_functions(dataset) -> dict[str, tuple[Any, Any]]:
    """Every traced function of the dataset's Python objects, by name: (its wrapper, the dataset it reads)."""
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


def python_chain(dataset) -> list:
    """The Python datasets from the source to dataset, along first inputs."""
    chain = [dataset]
    while True:
        inputs = chain[-1]._inputs() if hasattr(chain[-1], "_inputs") else []
        if not inputs:
            return chain[::-1]
        chain.append(inputs[0])
