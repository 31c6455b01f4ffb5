"""A user's dataset changed without the user's code: the prefixes a bottleneck search cuts, and the fixes
(docs/diagnose.md, "What is measured"), each a transformation added at its end or its graph rewritten."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfsuite._tensorflow import tensorflow
from perfsuite.tools.diagnose.streams import samples_in
from perfsuite.tools.diagnose.targets import one_line_error
from perfsuite.workload.op_table import FLAT_MAP_OP, PARALLEL_INTERLEAVE_OP, PARALLEL_MAP_OP, kind_of
from perfsuite.workload.pipeline_model import (
    Pipeline,
    chain_batched,
    chain_stages,
    class_words,
    op_of_class,
    python_chain,
    read_pipeline,
)

# Families of the op table that hold, reorder or hand on elements without work of their own to attribute.
NO_WORK_FAMILIES = ("wrapper", "prefetch", "cache", "shuffle", "repeat", "take")
MEMORY_SHARE = 0.25  # a cache is tried only when one pass of its prefix takes at most this share of free memory


@dataclass(frozen=True)
class Prefix:
    """The dataset cut after one stage: the stage's words, the Python dataset, whether it yields batches."""

    stage: str
    dataset: Any
    batched: bool


def stage_words(dataset) -> str:
    """A stage in words: its tf.data method (from the Python class) and the function it maps when known."""
    label = getattr(getattr(getattr(dataset, "_map_func", None), "_func", None), "__name__", None)
    return class_words(dataset) + (f"({label})" if label and label != "<lambda>" else "")


def prefixes(dataset) -> list[Prefix]:
    """dataset (or a Pipeline already read) cut after each stage that does work, from the source on."""
    pipeline = read_pipeline(dataset)
    return [Prefix(stage=stage_words(node), dataset=node, batched=batched)
            for node, batched in zip(pipeline.python_chain, chain_batched(pipeline)) if _works(node)]


def _works(node) -> bool:
    """Whether a Python dataset object's stage does work of its own (the op table's family)."""
    return kind_of(op_of_class(node)).family not in NO_WORK_FAMILIES


@dataclass(frozen=True)
class Fix:
    """A fix: its name, words, and build(the Pipeline read once) -> (the fixed dataset, a callable that
    readies it before it is measured, e.g. fills a cache)."""

    name: str
    words: str
    build: Callable[[Any], tuple[Any, Callable[[], None]]]


@dataclass(frozen=True)
class NotApplied:
    """A fix diagnose considered and did not apply: its name and why."""

    name: str
    why: str


def _graph(pipeline: Pipeline):
    """A copy of the pipeline's serialized graph, to rewrite."""
    if pipeline.graph_def is None:
        raise ValueError("TensorFlow cannot serialize this dataset's graph")
    copy = tensorflow().compat.v1.GraphDef()
    copy.CopyFrom(pipeline.graph_def)
    return copy


def _from_graph(graph, pipeline: Pipeline):
    """The dataset of a rewritten graph, with nothing to ready before measuring it."""
    tf = tensorflow()
    variant = tf.raw_ops.DatasetFromGraph(graph_def=graph.SerializeToString())
    return tf.data.experimental.from_variant(variant, pipeline.dataset.element_spec), lambda: None


def _add_const(graph, name: str, value: int, dtype) -> str:
    """A Const node of value appended to graph; its name."""
    const = graph.node.add(name=name, op="Const")
    const.attr["dtype"].type = dtype.as_datatype_enum
    const.attr["value"].tensor.CopyFrom(tensorflow().make_tensor_proto(value, dtype))
    return const.name


def add_prefetch(pipeline: Pipeline):
    return pipeline.dataset.prefetch(tensorflow().data.AUTOTUNE), lambda: None


def _made_parallel(pipeline: Pipeline, stages, op: str, inputs: Callable):
    """The pipeline rebuilt from its graph with the nodes of stages (its model's) made deterministic `op` nodes,
    each input (name, int64 value) of inputs(node) a Const appended to the node's inputs."""
    graph, names = _graph(pipeline), {stage.node for stage in stages}
    for node in [node for node in graph.node if node.name in names]:
        for name, value in inputs(node):
            node.input.append(_add_const(graph, f"{node.name}/perfsuite_{name}", value, tensorflow().int64))
        node.op = op
        if "force_synchronous" in node.attr:  # a sequential map's; the parallel op has none
            del node.attr["force_synchronous"]
        node.attr["deterministic"].s = b"true"
    return _from_graph(graph, pipeline)


def with_parallel_calls(pipeline: Pipeline, calls: dict[str, int]):
    """The pipeline rebuilt with each named node's num_parallel_calls input a Const of calls[node] (what the
    capacity model's split sets); ValueError for a named node that has no such input."""
    from tensorflow.python.framework import op_def_registry

    graph = _graph(pipeline)
    for node in [node for node in graph.node if node.name in calls]:
        op_def = op_def_registry.get(node.op)
        position = 0
        for arg in op_def.input_arg if op_def is not None else ():
            if arg.name == "num_parallel_calls":
                break
            position += node.attr[arg.number_attr].i if arg.number_attr else \
                len(node.attr[arg.type_list_attr].list.type) if arg.type_list_attr else 1
        else:
            raise ValueError(f"{node.name} ({node.op}) has no num_parallel_calls input")
        node.input[position] = _add_const(graph, f"{node.name}/perfsuite_split_calls", int(calls[node.name]),
                                          tensorflow().as_dtype(arg.type))
    return _from_graph(graph, pipeline)


def parallel_maps(pipeline: Pipeline):
    """The pipeline rebuilt with every sequential map a parallel one of AUTOTUNE calls, order kept."""
    return _made_parallel(pipeline, pipeline.model.sequential_maps(), PARALLEL_MAP_OP,
                          lambda node: [("parallel_calls", -1)])


def parallel_reads(pipeline: Pipeline):
    """The pipeline rebuilt with each interleave or flat_map reading files one at a time a parallel interleave
    of AUTOTUNE calls and buffers (a flat_map's order changes: AUTOTUNE files, one element each in turn)."""
    flat_map = [("cycle_length", -1), ("block_length", 1)]
    rest = [(n, -1) for n in ("buffer_output_elements", "prefetch_input_elements", "num_parallel_calls")]
    reads = [stage for stage, _ in pipeline.model.sequential_reads()]
    return _made_parallel(pipeline, reads, PARALLEL_INTERLEAVE_OP,
                          lambda node: (flat_map if node.op == FLAT_MAP_OP else []) + rest)


def cache_after(pipeline: Pipeline, prefix):
    """The pipeline rebuilt with a memory cache after prefix (a Python dataset in its first-input chain), and
    the callable that fills it by reading prefix.cache() once (the rebuilt graph reads the same resource)."""
    cached = prefix.cache()
    cache_model = read_pipeline(cached)
    cache_nodes = {node.name: node for node in cache_model.graph_def.node}
    cache_node = cache_nodes[cache_model.model.stages[-1].node]
    graph = _graph(pipeline)
    nodes = {node.name: node for node in graph.node}
    chain = [nodes[stage.node] for stage in pipeline.model.chain()]
    cut = len(cache_model.model.chain()) - 2  # the prefix's own last node, below the cache
    if cut < 0 or cut >= len(chain) - 1 or chain[cut].op != cache_nodes[cache_node.input[0].split(":")[0]].op:
        raise ValueError("the prefix was not found in the dataset's graph")
    below, consumer = chain[cut].name, chain[cut + 1]
    consumer.input[0] = "perfsuite_cache/CacheDatasetV2"
    inserted = graph.node.add()
    inserted.CopyFrom(cache_node)
    inserted.name = consumer.input[0]
    del inserted.input[1:]
    inserted.input[0] = below
    for name in cache_node.input[1:]:
        const = graph.node.add()
        const.CopyFrom(cache_nodes[name.split(":")[0]])
        const.name = f"perfsuite_cache/{const.name}"
        inserted.input.append(const.name)
    fixed, _ = _from_graph(graph, pipeline)

    def fill() -> None:
        for _ in cached:
            pass

    fixed._perfsuite_keep = cached  # the cache resource lives as long as the Python dataset that made it
    return fixed, fill


def deterministic_prefix(pipeline: Pipeline) -> tuple[Any | None, str]:
    """(the longest prefix of the chain with deterministic stages, before its first repeat; or None) and why
    it ends there. A dataset with no stage of its own in the model (a TFRecordDataset) has none to judge."""
    last = None
    for node, stage in zip(pipeline.python_chain, chain_stages(pipeline)):
        if stage is not None and stage.family == "repeat":
            return last, "a repeat follows"
        if stage is not None and not pipeline.model.deterministic(stage):
            return last, f"{stage_words(node)} is not deterministic"
        last = node
    return last, "the pipeline ends"


def _cardinality(dataset) -> int:
    return int(tensorflow().data.experimental.cardinality(dataset).numpy())


def pass_bytes(prefix, sample) -> int | None:
    """Bytes of one pass of prefix (cardinality x an element's bytes, strings by length); None: not finite."""
    count = _cardinality(prefix)
    if count < 0:
        return None
    values = [np.asarray(leaf) for leaf in tensorflow().nest.flatten(sample, expand_composites=True)]
    sizes = [sum(len(x) for x in v.ravel()) if v.dtype == object else v.nbytes for v in values]
    return count * int(sum(sizes))


def free_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def applicable_fixes(dataset, *, ends_with_prefetch: bool, samples_per_s: float | None = None,
                     fill_limit_s: float | None = None) -> tuple[list[Fix], list[NotApplied]]:
    """The fixes that apply to dataset (or a Pipeline already read) and why the rest do not. samples_per_s
    (the measured throughput) estimates how long filling a cache takes; over fill_limit_s it is not tried."""
    pipeline = read_pipeline(dataset)
    found = [NotApplied("prefetch", "the pipeline already ends with a prefetch") if ends_with_prefetch
             else Fix("prefetch", "adding .prefetch(tf.data.AUTOTUNE) at the end", add_prefetch)]
    if pipeline.graph_def is None:
        why = f"the graph cannot be rewritten: {pipeline.model.read_from}"
        found += [NotApplied(name, why) for name in ("map-parallelism", "read-parallelism", "cache")]
    else:
        maps, reads = len(pipeline.model.sequential_maps()), len(pipeline.model.sequential_reads())
        found.append(Fix("map-parallelism", f"making {maps} sequential map(s) parallel (num_parallel_calls=AUTOTUNE)",
                         parallel_maps) if maps else NotApplied("map-parallelism", "no sequential map in the graph"))
        found.append(Fix("read-parallelism", f"reading files in parallel: {reads} sequential interleave or flat_map "
                         "stage(s) made parallel interleaves (num_parallel_calls=AUTOTUNE)", parallel_reads) if reads
                     else NotApplied("read-parallelism", "no interleave or flat_map reads files one at a time"))
        try:
            found.append(_cache_fix(pipeline, samples_per_s, fill_limit_s))
        except Exception as error:  # noqa: BLE001 -- a graph TensorFlow will not serialize: said, not raised
            found.append(NotApplied("cache", f"the graph cannot be rewritten: {one_line_error(error)}"))
    return [f for f in found if isinstance(f, Fix)], [f for f in found if isinstance(f, NotApplied)]


def _cache_fix(pipeline: Pipeline, samples_per_s: float | None, fill_limit_s: float | None) -> Fix | NotApplied:
    prefix, ends = deterministic_prefix(pipeline)
    families = {stage.family for stage in pipeline.model.stages}
    if prefix is None or not any(_works(node) for node in python_chain(prefix)[1:]):
        return NotApplied("cache", f"no deterministic stage to cache before the first one that is not ({ends})")
    if "cache" in families:
        return NotApplied("cache", "the pipeline already caches")
    if "repeat" not in families:
        return NotApplied("cache", "the pipeline does not repeat: a cache pays only from the second pass")
    sample = next(iter(prefix.take(1)), None)
    size = None if sample is None else pass_bytes(prefix, sample)
    free = free_memory_bytes()
    if size is None or free is None:
        return NotApplied("cache", f"the size of one pass of {stage_words(prefix)} is not known")
    if size > MEMORY_SHARE * free:
        return NotApplied("cache", f"one pass of {stage_words(prefix)} ({size / 2**30:.1f} GiB) exceeds "
                          f"{MEMORY_SHARE:.0%} of the free memory ({free / 2**30:.1f} GiB)")
    batched = next(b for node, b in zip(pipeline.python_chain, chain_batched(pipeline)) if node is prefix)
    samples = _cardinality(prefix) * (samples_in(sample)[0] if batched else 1)
    if samples_per_s and fill_limit_s is not None and samples / samples_per_s > fill_limit_s:
        return NotApplied("cache", f"filling the cache reads a whole pass ({samples} samples, about "
                          f"{samples / samples_per_s:.0f} s at the measured throughput), more than the "
                          f"{fill_limit_s:.0f} s left to measure it")
    return Fix("cache", f"caching in memory after {stage_words(prefix)} ({size / 2**20:.1f} MiB a pass, {ends})",
               lambda read: cache_after(read, prefix))
