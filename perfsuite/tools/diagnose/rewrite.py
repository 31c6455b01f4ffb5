"""A user's dataset changed without the user's code: its stages (the prefixes a bottleneck search cuts),
and the fixes perfsuite can apply to it, each a new dataset rebuilt from the serialized graph
(tf.raw_ops.DatasetFromGraph) or the dataset with a transformation added at its end.

What each fix does, exactly (docs/diagnose.md, "Fixes measured"):
- prefetch: `.prefetch(tf.data.AUTOTUNE)` added at the end.
- map parallelism: every sequential map (MapDataset) becomes a parallel map with AUTOTUNE calls
  (ParallelMapDatasetV2, deterministic order kept). A map running Python still holds the GIL.
- read parallelism: every interleave or flat_map reading files one at a time becomes a parallel interleave
  of AUTOTUNE calls (a flat_map's order then alternates between files).
- cache: a memory cache after the longest deterministic prefix (no shuffle, no random op, no stateful
  Python op), filled once before it is measured; only when the prefix is finite and fits in memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfsuite.tools.diagnose.targets import one_line_error
from perfsuite.workload.pipeline_model import (
    FLAT_MAP_OP,
    PARALLEL_INTERLEAVE_OP,
    PARALLEL_MAP_OP,
    PYTHON_FUNCTION_OPS,
    RANDOM_WORDS,
    Pipeline,
    class_words,
    kind_of,
    object_functions,
    op_of_class,
    python_chain,
    read_pipeline,
)

# Families of the op table that hold, reorder or hand on elements without work of their own to attribute.
NO_WORK_FAMILIES = ("wrapper", "prefetch", "cache", "shuffle", "repeat", "take")
MEMORY_SHARE = 0.25  # a cache is tried only when one pass of its prefix takes at most this share of free memory


@dataclass(frozen=True)
class Prefix:
    """The dataset cut after one stage: the stage's words, the Python dataset, whether its elements
    are batches (a batching stage is at or before the cut, and no unbatch after it)."""

    stage: str
    dataset: Any
    batched: bool


def stage_words(dataset) -> str:
    """A stage in words: its tf.data method (from the Python class) and the function it maps when known."""
    words = class_words(dataset)
    function = getattr(getattr(dataset, "_map_func", None), "_func", None)
    label = getattr(function, "__name__", None)
    if label and label != "<lambda>":
        words += f"({label})"
    return words


def prefixes(dataset) -> list[Prefix]:
    """dataset cut after each stage that does work (wrappers: options, prefetch, repeat, shuffle, cache ...
    skipped), from the source to the last such stage."""
    out, batched = [], False
    for node in _chain(dataset):
        batched = _batched_after(op_of_class(node), batched)
        if _works(node):
            out.append(Prefix(stage=stage_words(node), dataset=node, batched=batched))
    return out


def _chain(dataset) -> tuple:
    return dataset.python_chain if isinstance(dataset, Pipeline) else tuple(python_chain(dataset))


def _works(node) -> bool:
    """Whether a Python dataset object's stage does work of its own (the op table's family)."""
    return kind_of(op_of_class(node)).family not in NO_WORK_FAMILIES


# ------------------------------------------------------------------------------------------ the fixes


@dataclass(frozen=True)
class Fix:
    """A fix perfsuite can apply: its name, what it does in words, and build(dataset) -> (the fixed dataset,
    a callable that readies it before it is measured, e.g. fills a cache)."""

    name: str
    words: str
    build: Callable[[Any], tuple[Any, Callable[[], None]]]


@dataclass(frozen=True)
class NotApplied:
    """A fix diagnose considered and did not apply: its name and why."""

    name: str
    why: str


def _graph(dataset):
    """A copy of the serialized graph of a dataset or a Pipeline already read, to rewrite (the model's own
    reading of it)."""
    from perfsuite._tensorflow import tensorflow

    graph = _pipeline(dataset).graph_def
    if graph is None:
        raise ValueError("TensorFlow cannot serialize this dataset's graph")
    copy = tensorflow().compat.v1.GraphDef()
    copy.CopyFrom(graph)
    return copy


def _pipeline(dataset) -> Pipeline:
    return dataset if isinstance(dataset, Pipeline) else read_pipeline(dataset)


def _from_graph(graph, element_spec):
    from perfsuite._tensorflow import tensorflow

    tf = tensorflow()
    variant = tf.raw_ops.DatasetFromGraph(graph_def=graph.SerializeToString())
    return tf.data.experimental.from_variant(variant, element_spec)


def _nothing() -> None:
    """Nothing to ready before measuring."""


def add_prefetch(dataset):
    from perfsuite._tensorflow import tensorflow

    return dataset.prefetch(tensorflow().data.AUTOTUNE), _nothing


def _const(node, name: str, value: int, added: list) -> str:
    """A Const node of an int64 value beside node (appended to added), by its name."""
    from perfsuite._tensorflow import tensorflow

    tf = tensorflow()
    made = type(node)()
    made.name, made.op = f"{node.name}/perfsuite_{name}", "Const"
    made.attr["dtype"].type = tf.int64.as_datatype_enum
    made.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, tf.int64))
    added.append(made)
    return made.name


def parallel_maps(dataset):
    """dataset rebuilt with every sequential map a parallel one of AUTOTUNE calls, order kept."""
    pipeline = read_pipeline(dataset)
    graph = _graph(pipeline)
    sequential = {stage.node for stage in pipeline.model.sequential_maps()}
    added = []
    for node in graph.node:
        if node.name not in sequential:
            continue
        node.op = PARALLEL_MAP_OP
        node.input.append(_const(node, "parallel_calls", -1, added))
        if "force_synchronous" in node.attr:
            del node.attr["force_synchronous"]
        node.attr["deterministic"].s = b"true"
    graph.node.extend(added)
    return _from_graph(graph, dataset.element_spec), _nothing


def parallel_reads(dataset):
    """dataset rebuilt with every interleave or flat_map that reads files one at a time a parallel interleave
    of AUTOTUNE calls, cycle length and buffers (a flat_map: AUTOTUNE files at a time, one element each in
    turn, so its order differs; an interleave keeps its cycle and order)."""
    pipeline = read_pipeline(dataset)
    graph = _graph(pipeline)
    sequential = {stage.node for stage, _ in pipeline.model.sequential_reads()}
    added = []
    for node in graph.node:
        if node.name not in sequential:
            continue
        if node.op == FLAT_MAP_OP:
            node.input.extend([_const(node, "cycle_length", -1, added), _const(node, "block_length", 1, added)])
        node.input.extend([_const(node, name, -1, added) for name in ("buffer_output_elements",
                                                                      "prefetch_input_elements",
                                                                      "num_parallel_calls")])
        node.op = PARALLEL_INTERLEAVE_OP
        node.attr["deterministic"].s = b"true"
    graph.node.extend(added)
    return _from_graph(graph, dataset.element_spec), _nothing


def sequential_maps(dataset) -> int:
    pipeline = _pipeline(dataset)
    if pipeline.graph_def is None:
        raise ValueError("TensorFlow cannot serialize this dataset's graph")
    return len(pipeline.model.sequential_maps())


def cache_after(dataset, prefix):
    """dataset rebuilt with a memory cache after prefix (a Python dataset in its first-input chain), and
    the callable that fills the cache by reading prefix.cache() once (the rebuilt graph reads the same
    cache resource)."""
    cached = prefix.cache()
    cache_model = read_pipeline(cached)
    cache_nodes = {node.name: node for node in cache_model.graph_def.node}
    cache_node = cache_nodes[cache_model.model.stages[-1].node]
    pipeline = read_pipeline(dataset)
    graph = _graph(pipeline)
    nodes = {node.name: node for node in graph.node}
    chain = [nodes[stage.node] for stage in pipeline.model.chain()]
    cut = len(cache_model.model.chain()) - 2  # the prefix's own last node, below the cache
    if cut < 0 or cut >= len(chain) - 1 or chain[cut].op != cache_nodes[cache_node.input[0].split(":")[0]].op:
        raise ValueError("the prefix was not found in the dataset's graph")
    node, consumer = chain[cut], chain[cut + 1]
    added = []
    for name in cache_node.input[1:]:
        const = type(node)()
        const.CopyFrom(cache_nodes[name.split(":")[0]])
        const.name = f"perfsuite_cache/{const.name}"
        added.append(const)
    inserted = type(node)()
    inserted.CopyFrom(cache_node)
    inserted.name = "perfsuite_cache/CacheDatasetV2"
    del inserted.input[:]
    inserted.input.extend([node.name, *(const.name for const in added)])
    consumer.input[0] = inserted.name
    graph.node.extend([*added, inserted])
    fixed = _from_graph(graph, dataset.element_spec)

    def fill() -> None:
        for _ in cached:
            pass

    fixed._perfsuite_keep = cached  # the cache resource lives as long as the Python dataset that made it
    return fixed, fill


def deterministic_prefix(dataset) -> tuple[Any | None, str]:
    """(the longest prefix of dataset's chain with no shuffle, random op or stateful Python op, ending
    before its first repeat; or None) and why it ends where it does."""
    pipeline = _pipeline(dataset)
    last, why = None, "the pipeline ends"
    for node in pipeline.python_chain:
        op = op_of_class(node)
        if kind_of(op).family == "repeat":
            why = "a repeat follows"
            break
        if kind_of(op).family == "shuffle" or _random_or_stateful(pipeline, node, op):
            why = f"{stage_words(node)} is not deterministic"
            break
        last = node
    return last, why


def _random_or_stateful(pipeline: Pipeline, node, op: str) -> bool:
    """A random op, or a Python-function op, in the stage or the functions it runs (nested ones included)."""
    ops = {op, *pipeline.model.op_counts(object_functions(node))}
    return any(word in name for name in ops for word in RANDOM_WORDS) or bool(ops & PYTHON_FUNCTION_OPS)


def pass_bytes(prefix, sample) -> int | None:
    """Bytes of one pass of prefix (its cardinality x the bytes of one element, every component of it,
    strings by their length); None when not finite or unknown."""
    from perfsuite._tensorflow import tensorflow

    tf = tensorflow()
    count = int(tf.data.experimental.cardinality(prefix).numpy())
    if count < 0:
        return None
    values = [np.asarray(leaf) for leaf in tf.nest.flatten(sample, expand_composites=True)]
    sizes = [sum(len(x) for x in v.ravel()) if v.dtype == object else v.nbytes for v in values]
    return count * int(sum(sizes))


def free_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def applicable_fixes(dataset, *, ends_with_prefetch: bool, samples_per_s: float | None = None,
                     fill_limit_s: float | None = None) -> tuple[list[Fix], list[NotApplied]]:
    """The fixes that apply to dataset (a tf.data.Dataset or a Pipeline already read) and, for the rest
    considered, why not. samples_per_s (the pipeline's
    measured throughput) estimates how long filling a cache takes; over fill_limit_s it is not tried."""
    fixes, skipped = [], []
    dataset = _pipeline(dataset)
    if ends_with_prefetch:
        skipped.append(NotApplied("prefetch", "the pipeline already ends with a prefetch"))
    else:
        fixes.append(Fix("prefetch", "adding .prefetch(tf.data.AUTOTUNE) at the end", add_prefetch))
    try:
        maps = sequential_maps(dataset)
    except Exception as error:  # noqa: BLE001 -- a graph TensorFlow will not serialize: said, not raised
        maps, why_not = 0, f"the graph cannot be rewritten: {one_line_error(error)}"
    else:
        why_not = "no sequential map in the graph"
    if maps:
        fixes.append(Fix("map-parallelism", f"making {maps} sequential map(s) parallel (num_parallel_calls=AUTOTUNE)",
                         parallel_maps))
    else:
        skipped.append(NotApplied("map-parallelism", why_not))
    reads = dataset.model.sequential_reads() if dataset.graph_def is not None else ()
    if reads:
        fixes.append(Fix("read-parallelism", f"reading files in parallel: {len(reads)} sequential interleave or "
                         "flat_map stage(s) made parallel interleaves (num_parallel_calls=AUTOTUNE)", parallel_reads))
    else:
        skipped.append(NotApplied("read-parallelism", "no interleave or flat_map reads files one at a time"
                                  if dataset.graph_def is not None else "the graph cannot be rewritten: "
                                  + dataset.model.read_from))
    try:
        fix, why = _cache_fix(dataset, samples_per_s, fill_limit_s)
    except Exception as error:  # noqa: BLE001 -- a graph TensorFlow will not serialize: said, not raised
        fix, why = None, f"the graph cannot be rewritten: {one_line_error(error)}"
    if fix is not None:
        fixes.append(fix)
    else:
        skipped.append(NotApplied("cache", why))
    return fixes, skipped


def _cache_fix(pipeline: Pipeline, samples_per_s: float | None, fill_limit_s: float | None
               ) -> tuple[Fix | None, str]:
    if pipeline.graph_def is None:
        return None, f"the graph cannot be rewritten: {pipeline.model.read_from}"
    prefix, ends = deterministic_prefix(pipeline)
    if prefix is None or not _does_work(prefix):
        return None, f"no deterministic stage to cache before the first one that is not ({ends})"
    families = {stage.family for stage in pipeline.model.stages}
    if "cache" in families:
        return None, "the pipeline already caches"
    if "repeat" not in families:
        return None, "the pipeline does not repeat: a cache pays only from the second pass"
    sample = next(iter(prefix.take(1)), None)
    size = None if sample is None else pass_bytes(prefix, sample)
    free = free_memory_bytes()
    if size is None or free is None:
        return None, f"the size of one pass of {stage_words(prefix)} is not known"
    if size > MEMORY_SHARE * free:
        return None, (f"one pass of {stage_words(prefix)} ({size / 2**30:.1f} GiB) exceeds {MEMORY_SHARE:.0%} of the "
                      f"free memory ({free / 2**30:.1f} GiB)")
    samples = int(tf_cardinality(prefix)) * (_leading(sample) if _batched(prefix) else 1)
    if samples_per_s and fill_limit_s is not None and samples / samples_per_s > fill_limit_s:
        return None, (f"filling the cache reads a whole pass ({samples} samples, about {samples / samples_per_s:.0f} s "
                      f"at the measured throughput), more than the {fill_limit_s:.0f} s left to measure it")
    return Fix("cache", f"caching in memory after {stage_words(prefix)} ({size / 2**20:.1f} MiB a pass, {ends})",
               lambda data: cache_after(data, prefix)), ""


def _does_work(prefix) -> bool:
    """Whether a stage after the source does work of its own."""
    return any(_works(node) for node in python_chain(prefix)[1:])


def tf_cardinality(dataset) -> int:
    from perfsuite._tensorflow import tensorflow

    return int(tensorflow().data.experimental.cardinality(dataset).numpy())


def _batched(prefix) -> bool:
    batched = False
    for node in python_chain(prefix):
        batched = _batched_after(op_of_class(node), batched)
    return batched


def _batched_after(op: str, batched: bool) -> bool:
    """Whether elements are batches after a stage of this op, given whether they were before it."""
    if op.startswith("Unbatch"):
        return False
    return batched or kind_of(op).family in ("batch", "group") or "Batch" in op


def _leading(sample) -> int:
    from perfsuite._tensorflow import tensorflow

    leaves = tensorflow().nest.flatten(sample)
    shape = getattr(leaves[0], "shape", ()) if leaves else ()
    return int(shape[0]) if len(shape) else 1
