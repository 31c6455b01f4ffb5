"""Reading a user's dataset in its steady state, never a buffer: the iterators diagnose's --pipeline stages
read, and how many elements a fresh or idle iterator may hold ready (its buffers) before its reads time the
pipeline rather than what it stored.

The rule (docs/diagnose.md, "Steady state, not a buffer"): a stage reads an iterator made for it, after the
start-up and the step's first calls, never one that sat while something else ran; before its timed reads it
reads, untimed, the warm-up batches plus every element the pipeline's buffers can hold (buffered_elements).
An iterator that sat idle between rounds (a prefix, a fix's before and after) is drained again before each
round. While it is read as fast as it can be, a buffer only empties, so after the drain every read waits for
the pipeline itself.
"""

from __future__ import annotations

import os
import time
from typing import Any

from perfsuite.tools.diagnose.targets import TargetError, one_line_error

AUTOTUNE_BUFFER = 16  # elements counted for a buffer tf.data sizes itself (prefetch(AUTOTUNE), an injected one)
BUFFER_OPS = ("PrefetchDataset", "PrefetchToDevice")
PARALLEL_OPS = ("ParallelMapDatasetV2", "ParallelMapDataset", "ParallelBatchDataset", "MapAndBatchDataset",
                "ParallelInterleaveDatasetV2", "ParallelInterleaveDatasetV3", "ParallelInterleaveDatasetV4")


def buffered_elements(dataset) -> int:
    """At most how many elements the dataset's buffers hold ready: every prefetch's buffer (AUTOTUNE_BUFFER
    for an autotuned one, and for the prefetch tf.data injects at the end when it does) and every parallel
    transformation's calls in flight (os.cpu_count() for AUTOTUNE), read from its serialized graph; where
    TensorFlow will not serialize it (prefetch_to_device), from its Python dataset objects down to an input
    it will."""
    from perfsuite._tensorflow import tensorflow

    tf = tensorflow()
    above = 0
    while True:
        try:
            graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
            break
        except (tf.errors.FailedPreconditionError, tf.errors.UnimplementedError):
            above += _object_buffer(dataset)
            inputs = dataset._inputs()
            if not inputs:
                return above
            dataset = inputs[0]
    return above + _graph_buffers(graph, dataset)


def _object_buffer(dataset) -> int:
    """The elements one Python dataset object can hold ready: its buffer or its parallel calls, an autotuned
    allowance for a buffer of unknown size (a copy to a device)."""
    for name in ("_buffer_size", "_num_parallel_calls"):
        value = getattr(dataset, name, None)
        if value is not None:
            try:
                return _buffer(int(value), AUTOTUNE_BUFFER if name == "_buffer_size" else os.cpu_count() or 1)
            except (TypeError, ValueError):
                return AUTOTUNE_BUFFER
    kind = type(dataset).__name__
    return AUTOTUNE_BUFFER if "Prefetch" in kind or "Device" in kind else 0


def _graph_buffers(graph, dataset) -> int:
    consts = {node.name: _const_value(node) for node in graph.node if node.op == "Const"}
    total, last = 0, None
    for node in graph.node:
        if node.op in BUFFER_OPS and len(node.input) > 1:
            total += _buffer(consts.get(node.input[1].split(":")[0]), AUTOTUNE_BUFFER)
        elif node.op in PARALLEL_OPS:
            calls = [consts.get(name.split(":")[0]) for name in node.input[1:]]
            total += max([_buffer(value, os.cpu_count() or 1) for value in calls if value is not None] or [1])
        if node.op == "_Retval":
            last = node.input[0].split(":")[0] if node.input else None
    ops = {node.name: node.op for node in graph.node}
    options = dataset.options()
    inject = options.experimental_optimization.inject_prefetch is not False and options.autotune.enabled is not False
    if inject and ops.get(last) not in BUFFER_OPS:
        total += AUTOTUNE_BUFFER
    return total


def _const_value(node) -> int | None:
    tensor = node.attr["value"].tensor
    if tensor.int64_val:
        return int(tensor.int64_val[0])
    if tensor.int_val:
        return int(tensor.int_val[0])
    return None


def _buffer(value: int | None, autotuned: int) -> int:
    if value is None or value < 0:
        return autotuned
    return value


class Stream:
    """Batches of a dataset from one iterator, made when the Stream is; a new pass begins when it ends
    (counted in restarts); an error inside the user's pipeline becomes a TargetError naming it."""

    def __init__(self, dataset, spec: str):
        self._dataset = dataset
        self._spec = spec
        self._iterator = iter(dataset)
        self.restarts = 0

    def __iter__(self):
        return self

    def __next__(self):
        return self.next()

    def next(self):
        for attempt in range(2):
            try:
                return next(self._iterator)
            except StopIteration:
                if attempt:
                    break
                self.restarts += 1
                self._iterator = iter(self._dataset)
            except Exception as error:  # noqa: BLE001 -- the user's pipeline may raise anything: named
                raise TargetError("--pipeline", self._spec, "a dataset whose batches can be read",
                                  one_line_error(error)) from None
        raise TargetError("--pipeline", self._spec, "a dataset that yields at least one batch", "an empty dataset")

    def drain(self, count: int) -> None:
        """count elements read and dropped, untimed (what the buffers filled while the iterator waited)."""
        for _ in range(count):
            self.next()

    def close(self) -> None:
        """The iterator closed now (inside the stage that used it: its teardown can take seconds)."""
        self._iterator = None


def steady_stream(dataset, spec: str, *, warmup: int, buffered: int) -> Stream:
    """A fresh Stream of dataset with warmup + buffered elements read and dropped: what a stage times."""
    stream = Stream(dataset, spec)
    stream.drain(warmup + buffered)
    return stream


def timed_next(stream: Stream) -> tuple[Any, float]:
    """(the next element, its seconds up to its readback to the host)."""
    from perfsuite.measure.timing import host_readback

    start = time.perf_counter()
    element = stream.next()
    host_readback(element)
    return element, time.perf_counter() - start


def samples_in(element) -> tuple[int, str]:
    """(samples in an element: its leading dimension, 'samples'), or (1, 'batches') when it has none."""
    from perfsuite.measure.timing import leading_dim

    try:
        return leading_dim(element), "samples"
    except (ValueError, TypeError, IndexError):
        return 1, "batches"
