"""One model of a training step: how every step timing in perfsuite is taken (the fixture's measure_step,
diagnose's stages, the machine's peak rate).

- The first call (trace + compile for a tf.function) is timed apart from the steady calls (``first_calls``).
- One call (``_call``): ``step(batch)`` and its output read back, so the step's work, asynchronous device
  work included, is finished inside the timed window. ``calls`` times a run of them (each fetching its batch,
  timed apart as ``fetch_s``), ``call_ns`` one. The default readback copies one element of every output
  tensor to the host (host tensors included): the copy waits for the op that produced it, and costs nothing
  more.
- Traces counted: a tf.function's tracing count (or that of an object that says so with ``tracing_count()``)
  read before and after; None for a plain callable, whose traces cannot be counted.
- A step that raises, or returns no tensor to read back, raises StepError naming the step.
- measure_step: a Measurement (timing.Measurement) of per-call times, each call timed by call_ns.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from perfsuite.errors import PerfsuiteError, one_line_error
from perfsuite.measure.timing import (
    Measurement,
    Source,
    check_counts,
    host_readback,
    leading_dim,
    measurement_from_times,
    tracing_count,
)


class StepError(PerfsuiteError, ValueError):
    """A step that cannot be timed: names the step, what was expected and what was found (one line)."""

    def __init__(self, name: str, expected: str, found: str):
        self.name, self.expected, self.found = name, expected, found
        super().__init__(f"{name}: expected {expected}, found {found}")


@dataclass(frozen=True)
class FirstCalls:
    """The step's first call on a batch (trace, compile, run) and the call after it (the first steady one),
    in seconds; traces: how often it traced during both (None: not a tf.function)."""

    first_s: float
    steady_s: float
    traces: int | None


@dataclass(frozen=True)
class Calls:
    """Timed calls of a step: how many, their seconds from the first fetch to the last readback, and the
    part of those seconds spent fetching batches."""

    count: int
    seconds: float
    fetch_s: float

    @property
    def per_call_s(self) -> float:
        return self.seconds / self.count

    @property
    def fetch_per_call_s(self) -> float:
        return self.fetch_s / self.count

    @property
    def per_s(self) -> float:
        """Calls per second."""
        return self.count / self.seconds


class StepModel:
    """A step(batch) callable, timed one way. ``name`` is what errors call it (e.g. '--step m:f');
    ``readback(output)`` forces the step's completion (default: one element of every output tensor back to
    the host; StepError when the output holds no tensor)."""

    def __init__(self, step: Callable[[Any], Any], *, name: str = "step",
                 readback: Callable[[Any], Any] | None = None):
        self.step, self.name = step, name
        self._readback = readback or self._read_back
        self._traces_at_start = tracing_count(step)
        self._traces_at_steady = self._traces_at_start

    def first_calls(self, batch) -> FirstCalls:
        """The first call on batch, timed apart, then one steady call; retraces are counted from here on."""
        before = tracing_count(self.step)
        first_s, steady_s = self.call_s(batch), self.call_s(batch)
        self.settled()
        traces = _difference(self._traces_at_steady, before)
        return FirstCalls(first_s=first_s, steady_s=steady_s, traces=traces)

    def settled(self) -> None:
        """Retraces are counted from here on (the end of the step's warm-up)."""
        self._traces_at_steady = tracing_count(self.step)

    def call_s(self, batch) -> float:
        """Seconds of one call on batch, its readback included."""
        return self.calls(itertools.repeat(batch)).seconds

    def call_ns(self, batch) -> int:
        """Nanoseconds of one call on batch, its readback included: the one timer of a single call."""
        start = time.perf_counter_ns()
        self._call(batch)
        return time.perf_counter_ns() - start

    def calls(self, batches: Iterator, *, count: int = 1, warmup: int = 0,
              at_least_s: float = 0.0) -> Calls:
        """``warmup`` untimed calls, then ``count`` timed ones, more until they last ``at_least_s``; each takes
        next(batches) (its fetch timed apart too), calls the step and reads its output back."""
        for _ in range(warmup):
            self._call(next(batches))
        done, fetch_ns, start = 0, 0, time.perf_counter_ns()
        while done < count or time.perf_counter_ns() - start < at_least_s * 1e9:
            fetched = time.perf_counter_ns()
            batch = next(batches)
            fetch_ns += time.perf_counter_ns() - fetched
            self._call(batch)
            done += 1
        return Calls(count=done, seconds=(time.perf_counter_ns() - start) / 1e9, fetch_s=fetch_ns / 1e9)

    @property
    def traces(self) -> int | None:
        """Traces since the model was made; None when the step is not a tf.function."""
        return _difference(tracing_count(self.step), self._traces_at_start)

    @property
    def retraces(self) -> int | None:
        """Traces since the first calls (since the model was made, before them); None when the step is not
        a tf.function."""
        return _difference(tracing_count(self.step), self._traces_at_steady)

    def _call(self, batch) -> None:
        try:
            self._readback(self.step(batch))
        except StepError:
            raise
        except Exception as error:  # a step may raise anything: named in one line
            raise StepError(self.name, "step(batch) to run on the pipeline's batches",
                            one_line_error(error)) from error

    def _read_back(self, output) -> None:
        if host_readback(output, force_host=True) == 0:
            raise StepError(self.name, "step(batch) to return a tensor (e.g. the loss) to wait for",
                            type(output).__name__)


def _difference(after: int | None, before: int | None) -> int | None:
    return None if after is None or before is None else after - before


def measure_step(*, step: Callable[[Any], Any], warmup_calls: int, measure_calls: int,
                 batches: Iterable | None = None, batch: Any = None,
                 readback: Callable[[Any], Any] | None = None,
                 samples_in: Callable[[Any], int] | None = None, name: str = "step") -> Measurement:
    """Time step(batch) calls one by one (StepModel.call_ns), fed either by batches (an iterable, drawn once
    per call; fetching is not timed) or by one fixed batch (exactly one of the two). A dict or tuple batch
    is itself iterable, hence the two separate arguments.

    The first call (trace + compile for a tf.function) is first_ns; warmup_calls includes it. A round of
    a step already warm in this process (its first call measured before) may take warmup_calls=0.
    The default readback is the StepModel's (one element of every output tensor to the host), so the step
    must return a tensor (e.g. its loss). For a tf.function, traces counts all traces during the
    measurement and retraces those in the steady window.
    """
    check_counts(warmup_calls=warmup_calls, measure_calls=measure_calls)
    if (batches is None) == (batch is None):
        raise ValueError("measure_step: expected exactly one of batches= (an iterable) or batch= (a fixed batch)")
    samples_in = samples_in or leading_dim
    model = StepModel(step, name=name, readback=readback)
    source = Source(itertools.repeat(batch) if batch is not None else batches, name=name,
                    needed=warmup_calls + measure_calls,
                    what=f"{warmup_calls} warm-up + {measure_calls} measured calls")
    warmup_ns = [model.call_ns(source.next()) for _ in range(warmup_calls)]
    model.settled()
    batch_ns, batch_samples = [], []
    for _ in range(measure_calls):
        fed = source.next()
        batch_ns.append(model.call_ns(fed))
        batch_samples.append(samples_in(fed))
    return measurement_from_times(name=name, warmup_ns=warmup_ns, batch_ns=batch_ns, batch_samples=batch_samples,
                                  traces=model.traces, retraces=model.retraces)
