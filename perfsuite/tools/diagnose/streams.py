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

import time
from typing import Any

from perfsuite.tools.diagnose.targets import TargetError, one_line_error
from perfsuite.workload.pipeline_model import Pipeline, read_pipeline


def buffered_elements(dataset) -> int:
    """At most how many elements the dataset's buffers hold ready (a tf.data.Dataset or a Pipeline already
    read): PipelineModel.buffered_elements, what a fresh or idle iterator may hold before its reads time the
    pipeline."""
    pipeline = dataset if isinstance(dataset, Pipeline) else read_pipeline(dataset)
    return pipeline.model.buffered_elements()


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
