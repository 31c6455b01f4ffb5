"""A user's dataset read in its steady state, never a buffer (docs/diagnose.md): an iterator per stage,
drained untimed of the warm-up and of what its buffers hold ready, and again before a round after idling."""

from __future__ import annotations

import time
from typing import Any

from perfsuite.measure.teardown import BackgroundTeardown, iterate
from perfsuite.measure.timing import host_readback, leading_dim
from perfsuite.tools.diagnose.targets import TargetError, one_line_error
from perfsuite.workload.pipeline_model import read_pipeline


def buffered_elements(dataset) -> int:
    """At most how many elements the buffers of a tf.data.Dataset or a Pipeline already read hold ready."""
    return read_pipeline(dataset).model.buffered_elements()


class Stream:
    """Batches of a dataset from one iterator, made with the Stream and drained of `drain` elements; a new
    pass begins when one ends (restarts); an error in the user's pipeline becomes a TargetError naming it."""

    def __init__(self, dataset, spec: str, *, drain: int = 0):
        self._dataset, self._spec, self._iterator, self.restarts = dataset, spec, iterate(dataset), 0
        self.drain(drain)

    def __iter__(self):
        return self

    @property
    def iterator(self):
        """The tf.data iterator read (None if closed); not to keep: its teardown needs the only reference."""
        iterator = self._iterator
        return iterator._iterator if isinstance(iterator, BackgroundTeardown) else iterator

    def __next__(self):
        failure = None
        for attempt in range(2):
            try:
                return next(self._iterator)
            except StopIteration:
                if attempt:
                    break
                self.restarts += 1
                self._iterator = iterate(self._dataset)
            except Exception as error:  # noqa: BLE001 -- the user's pipeline may raise anything: named
                failure = one_line_error(error)
                break
        if failure is None:
            raise TargetError("--pipeline", self._spec, "a dataset that yields at least one batch", "an empty dataset")
        if isinstance(self._iterator, BackgroundTeardown):  # its threads stop, and say why, before the error leaves
            self._iterator.close_now()
        raise TargetError("--pipeline", self._spec, "a dataset whose batches can be read", failure)

    next = __next__

    def drain(self, count: int) -> None:
        """count elements read and dropped, untimed."""
        for _ in range(count):
            self.next()

    def close(self) -> None:
        """The iterator dropped now; its teardown, seconds at times, runs on measure.teardown's thread."""
        self._iterator = None


def timed_next(stream: Stream) -> tuple[Any, float]:
    """(the next element, its seconds up to its readback to the host)."""
    start = time.perf_counter()
    element = stream.next()
    host_readback(element)
    return element, time.perf_counter() - start


def samples_in(element) -> tuple[int, str]:
    """(samples in an element: its leading dimension, 'samples'), or (1, 'batches') when it has none."""
    try:
        return leading_dim(element), "samples"
    except (ValueError, TypeError, IndexError):
        return 1, "batches"
