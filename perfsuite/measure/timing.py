"""Timing of input pipelines, and the records of every timing: Measurement (a training step's come from
measure/step_model.py, its one step timer) and a compare's ABResult.

What every function here gets right:
- the first batch / first call (pipeline start-up, trace + compile) is timed and reported apart;
- every timed unit ends with a readback that forces completion and nothing more (host_readback), so
  asynchronous device work is finished inside the timed window;
- wall times come from time.perf_counter_ns;
- per-batch times are kept, so percentiles, stability warnings and cycles can be computed.

TensorFlow is imported lazily, only by the functions that need it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from perfsuite._tensorflow import imported, tensorflow
from perfsuite.measure import stats
from perfsuite.measure.teardown import iterate
from perfsuite.records import Record


def _json_number(value: float | None) -> float | None:
    """NaN is not valid JSON; pytest-benchmark's saved files must stay readable."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


# -------------------------------------------------------------------------------- readback, sizes


def _on_host(tensor) -> bool:
    return "CPU" in tensor.device.upper()


def _force(tensor) -> None:
    """Copy one element of tensor to the host: the copy waits for the op that produced it."""
    if tensor.shape.rank and tensor.shape.num_elements():
        tensor = tensor[(0,) * tensor.shape.rank]
    tensor.numpy()


def host_readback(structure: Any, *, force_host: bool = False) -> int:
    """Make sure every tensor in structure is computed; return how many tensors and arrays it holds.

    Forces completion and nothing more. A tensor on a device (GPU, prefetch_to_device) may still be
    computing when it is returned, so one element of it is copied to the host: the copy waits for it.
    A tensor on the host is complete when returned under synchronous eager execution (TF's default),
    e.g. every tensor a tf.data iterator yields on the CPU: it is not read at all, so the cost of
    copying strings (a batch's ``id``) or whole structures is not charged to the pipeline. Under
    asynchronous eager execution, or with force_host (a step's output), host tensors are forced too,
    one element each. numpy arrays are on the host and complete; they count, and are not read.
    """
    tf = imported()
    if tf is None:  # nothing imported TensorFlow, so nothing here is a tensor: only arrays count
        return sum(isinstance(item, np.ndarray | np.generic) for item in _flatten_plain(structure))
    force_host = force_host or not tf.config.experimental.get_synchronous_execution()
    read = 0
    for item in tf.nest.flatten(structure, expand_composites=True):
        if isinstance(item, tf.Tensor):
            if force_host or not _on_host(item):
                _force(item)
            read += 1
        elif isinstance(item, np.ndarray | np.generic):
            read += 1
    return read


def _flatten_plain(structure: Any) -> list:
    """tf.nest.flatten's order for plain Python structures (dicts by sorted key, lists and tuples in
    order), without importing TensorFlow."""
    if isinstance(structure, dict):
        return [leaf for key in sorted(structure) for leaf in _flatten_plain(structure[key])]
    if isinstance(structure, list | tuple):
        return [leaf for item in structure for leaf in _flatten_plain(item)]
    return [structure]


def leading_dim(batch: Any) -> int:
    """Samples in a batch: the leading dimension of its first tensor (tf.nest order: dict keys sorted)."""
    tf = imported()
    flat = _flatten_plain(batch) if tf is None else tf.nest.flatten(batch)
    shape = getattr(flat[0], "shape", None) if flat else None
    if shape is None or len(shape) == 0 or shape[0] is None:
        raise ValueError(
            "samples_in: cannot infer the batch size; expected the first element of the batch to have a "
            f"leading dimension, found {type(flat[0]).__name__ if flat else 'an empty batch'} with shape "
            f"{shape}. Pass samples_in=callable(batch) -> int"
        )
    return int(shape[0])


# ------------------------------------------------------------------------------------ tf.function


def tracing_count(fn: Callable) -> int | None:
    """How often a tf.function has traced so far; None for anything that is not one.

    Also reads objects that wrap a tf.function and say so with a ``tracing_count()`` method (the
    training step), which returns None while they run eagerly.
    """
    getter = getattr(fn, "experimental_get_tracing_count", None) or getattr(fn, "tracing_count", None)
    count = getter() if callable(getter) else None
    return None if count is None else int(count)


# ---------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Measurement(Record):
    """A measured pipeline or step; as_dict() is the record itself, extra_info() its flat figures.

    first_ns: the first batch / call (start-up, trace, compile), also warmup_ns[0]; None for a round of
    a step already warm (measure_step with warmup_calls=0), which has no warm-up of its own.
    warmup_ns: all warm-up batches / calls, not part of the steady state.
    batch_ns, batch_samples: per steady batch / call, wall time and samples.
    samples_per_s, batches_per_s: steady state.
    summary, warnings, cycle: of the steady per-batch times in seconds.
    traces: tf.function traces during the whole measurement; retraces: during the steady window only
    (None when the step is not a tf.function or there is no step).
    """

    name: str
    first_ns: int | None
    warmup_ns: tuple[int, ...]
    batch_ns: tuple[int, ...]
    batch_samples: tuple[int, ...]
    samples_per_s: float
    batches_per_s: float
    summary: stats.Summary
    warnings: tuple[str, ...]
    cycle: stats.Cycle
    traces: int | None = None
    retraces: int | None = None

    @property
    def first_s(self) -> float | None:
        return None if self.first_ns is None else self.first_ns / 1e9

    @property
    def warmup_s(self) -> tuple[float, ...]:
        return tuple(ns / 1e9 for ns in self.warmup_ns)

    @property
    def batch_s(self) -> tuple[float, ...]:
        """Every steady batch / call, in seconds."""
        return tuple(ns / 1e9 for ns in self.batch_ns)

    @property
    def batches(self) -> int:
        return len(self.batch_ns)

    @property
    def samples(self) -> int:
        return sum(self.batch_samples)

    @property
    def steady_s(self) -> float:
        return sum(self.batch_ns) / 1e9

    def extra_info(self) -> dict:
        """Flat JSON-ready figures (seconds, not ns) for pytest-benchmark's extra_info."""
        summary = self.summary
        return {
            "name": self.name,
            "first_s": self.first_s,
            "warmup_s": list(self.warmup_s),
            "batches": self.batches,
            "samples": self.samples,
            "steady_s": self.steady_s,
            "samples_per_s": self.samples_per_s,
            "batches_per_s": self.batches_per_s,
            "batch_mean_s": summary.mean,
            "batch_median_s": summary.median,
            "batch_std_s": summary.std,
            "batch_min_s": summary.min,
            "batch_max_s": summary.max,
            "batch_p50_s": summary.p50,
            "batch_p95_s": summary.p95,
            "batch_p99_s": summary.p99,
            "variation_ratio": _json_number(summary.variation_ratio),
            "robust_cv": _json_number(summary.robust_cv),
            "warnings": list(self.warnings),
            "cycle_significant": self.cycle.significant,
            "cycle_period": self.cycle.period,
            "cycle_strength": _json_number(self.cycle.strength),
            "cycle_threshold": _json_number(self.cycle.threshold),
            "cycle_note": self.cycle.note,
            "traces": self.traces,
            "retraces": self.retraces,
            "batch_s": list(self.batch_s),
        }


def measurement_from_times(*, name, warmup_ns, batch_ns, batch_samples, traces=None,
                           retraces=None) -> Measurement:
    """The Measurement of these warm-up and steady times (ns) and samples: its summary, rates, cycle and
    stability warnings follow from them."""
    seconds = [ns / 1e9 for ns in batch_ns]
    total_s = sum(batch_ns) / 1e9
    cycle = stats.detect_cycle(seconds)
    warnings = stats.stability_warnings(seconds)
    if cycle.significant:
        warnings += (f"periodic per-batch times: {cycle.note}",)
    return Measurement(
        name=name,
        first_ns=warmup_ns[0] if warmup_ns else None,
        warmup_ns=tuple(warmup_ns),
        batch_ns=tuple(batch_ns),
        batch_samples=tuple(batch_samples),
        samples_per_s=sum(batch_samples) / total_s,
        batches_per_s=len(batch_ns) / total_s,
        summary=stats.summarize(seconds),
        warnings=warnings,
        cycle=cycle,
        traces=traces,
        retraces=retraces,
    )


def check_counts(**counts: int) -> None:
    """Each count an integer >= 1 (warmup_calls >= 0: a round of a step already warm), else ValueError."""
    for key, value in counts.items():
        minimum = 0 if key == "warmup_calls" else 1
        if not isinstance(value, int) or value < minimum:
            raise ValueError(f"{key}: expected an integer >= {minimum}, found {value!r}")


class Source:
    """An iterator that says, when it runs dry, how many items were needed and how many it had."""

    def __init__(self, iterable: Iterable, *, name: str, needed: int, what: str):
        self._iterator: Iterator = iterate(iterable)
        self._name = name
        self._needed = needed
        self._what = what
        self.taken = 0

    def next(self) -> Any:
        try:
            item = next(self._iterator)
        except StopIteration:
            raise ValueError(
                f"{self._name}: the dataset ended after {self.taken} batches; expected at least "
                f"{self._needed} ({self._what}). Repeat it (dataset.repeat()) or measure fewer batches"
            ) from None
        self.taken += 1
        return item


# -------------------------------------------------------------------------------------- datasets


def _time_fetches(source: Source, count: int, readback: Callable, samples_in: Callable):
    times, samples = [], []
    for _ in range(count):
        start = time.perf_counter_ns()
        batch = source.next()
        readback(batch)
        times.append(time.perf_counter_ns() - start)
        samples.append(samples_in(batch))
    return times, samples


# A measurement extended to min_seconds takes at most this many times measure_batches batches.
MAX_EXTENSION = 100


def measure_dataset(*, dataset: Iterable, warmup_batches: int, measure_batches: int,
                    samples_in: Callable[[Any], int] | None = None,
                    readback: Callable[[Any], Any] | None = None, name: str = "dataset",
                    min_seconds: float = 0.0) -> Measurement:
    """Time batches drawn from one iterator over dataset (a tf.data.Dataset or any iterable).

    Each batch is timed from the request to the end of its readback. The first warmup_batches
    (>= 1; the first of them is first_ns) are kept apart from the measure_batches steady ones.
    With min_seconds, more steady batches are taken, measure_batches at a time, until they add up to
    min_seconds (at most MAX_EXTENSION times measure_batches): ten batches of a fast pipeline last a
    few milliseconds and measure its buffers filling, not its rate.
    The dataset is not repeated implicitly: one that ends early raises ValueError naming the counts.
    samples_in defaults to leading_dim, readback to host_readback.
    """
    check_counts(warmup_batches=warmup_batches, measure_batches=measure_batches)
    samples_in = samples_in or leading_dim
    readback = readback or host_readback
    source = Source(dataset, name=name, needed=warmup_batches + measure_batches,
                    what=f"{warmup_batches} warm-up + {measure_batches} measured")
    warmup_ns, _ = _time_fetches(source, warmup_batches, readback, samples_in)
    batch_ns, batch_samples = _time_fetches(source, measure_batches, readback, samples_in)
    while sum(batch_ns) < min_seconds * 1e9 and len(batch_ns) < measure_batches * MAX_EXTENSION:
        more_ns, more_samples = _time_fetches(source, measure_batches, readback, samples_in)
        batch_ns += more_ns
        batch_samples += more_samples
    return measurement_from_times(name=name, warmup_ns=warmup_ns, batch_ns=batch_ns,
                                  batch_samples=batch_samples)


def null_pipeline(batch_structure: Any):
    """A dataset that yields one batch again and again with no input work: the harness's floor.

    batch_structure is a batch (nested tensors or arrays) or a tf.data.Dataset whose first batch is
    kept (take(1).cache()). Prefetched like the loaders, so the iterator's hand-off is the same.
    """
    tf = tensorflow()
    if isinstance(batch_structure, tf.data.Dataset):
        base = batch_structure.take(1).cache()
    else:
        base = tf.data.Dataset.from_tensors(batch_structure)
    return base.repeat().prefetch(tf.data.AUTOTUNE)


def harness_overhead(batch_structure: Any, *, warmup_batches: int = 8, measure_batches: int = 256,
                     samples_in: Callable[[Any], int] | None = None,
                     readback: Callable[[Any], Any] | None = None) -> float:
    """Seconds per batch that measure_dataset charges to a pipeline that does no work.

    The median per-batch time of measure_dataset (same loop, same readback and samples_in) over
    null_pipeline(batch_structure): the iterator's next(), the readback, and the Python around them.
    Every batch_ns of a real pipeline with this batch structure holds about this much that is not
    the pipeline's input work; it matters where batches take a few milliseconds (ceilings, caches).
    The median, not the mean, so a load spike on a shared machine does not inflate it.
    """
    measurement = measure_dataset(dataset=null_pipeline(batch_structure), warmup_batches=warmup_batches,
                                  measure_batches=measure_batches, samples_in=samples_in,
                                  readback=readback, name="harness_overhead")
    return measurement.summary.median


# ------------------------------------------------------------------------------------------- A/B


@dataclass(frozen=True)
class ABResult(Record):
    """Interleaved A/B rounds.

    a_values, b_values: per round, seconds (unit 's', callables returning a time for a fixed amount
    of work) or samples/s (unit 'samples/s', callables returning a Measurement).
    ratios: per pair, A's speed over B's speed (b_s / a_s, or a_samples_per_s / b_samples_per_s),
    so a ratio > 1 means A is faster. order: 'AB' or 'BA' per measured round.
    summary: the ratios' summary, written as ratio_median, ratio_low, ratio_high and ratio_spread.
    """

    DERIVED: ClassVar[tuple[str, ...]] = ("ratio_median", "ratio_low", "ratio_high", "ratio_spread")

    a_values: tuple[float, ...]
    b_values: tuple[float, ...]
    unit: str
    ratios: tuple[float, ...]
    order: tuple[str, ...]

    @property
    def summary(self) -> stats.RatioSummary:
        return stats.ratio_summary(self.ratios)

    ratio_median = property(lambda self: self.summary.median)
    ratio_low = property(lambda self: self.summary.low)
    ratio_high = property(lambda self: self.summary.high)
    ratio_spread = property(lambda self: self.summary.spread)


def round_value(result: Any, side: str) -> tuple[float, str]:
    """One call's figure and its unit: a Measurement's samples/s, or seconds (a float) for fixed work."""
    if isinstance(result, Measurement):
        return result.samples_per_s, "samples/s"
    if isinstance(result, int | float) and not isinstance(result, bool):
        return float(result), "s"
    raise TypeError(f"{side}: expected the callable to return seconds (float) or a Measurement, "
                    f"found {type(result).__name__}")


def ab_runs(a: Callable[[], Any], b: Callable[[], Any]) -> dict[str, Callable[[], tuple[float, str]]]:
    """A compare's two sides as runs of the round engine (measure.rounds: interleaved, InterleavedRounds),
    labelled A and B: each call's figure and its unit (round_value). ab_result reads their rounds."""
    return {"A": lambda: round_value(a(), "a"), "B": lambda: round_value(b(), "b")}


def ab_result(values: dict, orders: Sequence[Sequence[str]]) -> ABResult:
    """The ABResult of the measured rounds of ab_runs: their values ({"A": [(figure, unit)], "B": ...})
    and orders, as measure.rounds.interleaved returns them or an InterleavedRounds keeps them. Rounds
    go A B, B A, ... (rounds.alternating): each side runs first equally often, so a drift of the
    machine's speed during a pair favours A and B equally often, and the per-pair ratio cancels what
    both sides of a pair share."""
    units = {unit for figures in (values["A"], values["B"]) for _, unit in figures}
    if len(units) != 1:
        raise TypeError(f"a, b: expected both to return the same kind of value, found {sorted(units)}")
    unit = units.pop()
    a_values, b_values = tuple(v for v, _ in values["A"]), tuple(v for v, _ in values["B"])
    ratios = stats.ratio_of(b_values, a_values) if unit == "s" else stats.ratio_of(a_values, b_values)
    return ABResult(a_values=a_values, b_values=b_values, unit=unit, ratios=ratios,
                    order=tuple("".join(order) for order in orders))


def combine(rounds: list[Measurement], *, name: str, first: Measurement) -> Measurement:
    """One Measurement from several measured rounds of the same pipeline or step.

    ``first`` is the measurement that started it (its first batch / call and warm-up are reported);
    the steady state is every round's steady batches, in order. Per-round warm-up is dropped. Traces
    add up over all of them; retraces count those in the rounds after ``first``.
    """
    if not rounds:
        raise ValueError("rounds: expected at least one measured round, found none")
    traces = [m.traces for m in (first, *rounds)]
    total_traces = None if None in traces else sum(traces)
    retraces = None if total_traces is None else sum(m.traces for m in rounds)
    return measurement_from_times(name=name, warmup_ns=first.warmup_ns + first.batch_ns,
                                  batch_ns=[ns for m in rounds for ns in m.batch_ns],
                                  batch_samples=[s for m in rounds for s in m.batch_samples],
                                  traces=total_traces, retraces=retraces)
