"""The emulated accelerator's timeline (measure/emulated.py): the step's busy intervals turned into a
`GpuTimeline` of the type the NVML sampler produces, and what makes it complete. It has no sampler, so
completeness checks what can go wrong there: its samples cover the measured window (`window_coverage`),
and the round's steps account for it (`StepAccounting`: every step the loop ran is a busy interval with
its device time; the window is busy, waiting on the pipeline, or a late wake-up, but for at most
MAX_UNACCOUNTED_SHARE of it)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from perfsuite.measure.utilisation import DeviceTimeline, GpuTimeline
from perfsuite.records import Record

SOURCE_EMULATED = "emulated"
DEVICE_NAME = "emulated accelerator"
MIN_INTERVAL_S = 0.01  # shortest automatic utilisation sample interval (emulated.EmulatedRunConfig)
# A timeline covers its window when its samples' intervals cover at least MIN_COVERAGE of it and no
# stretch of it (from the start to the first sample's stamp, between stamps, from the last stamp to the
# end) is longer than MAX_GAP_INTERVALS sample intervals: one missed sample is a gap of 2 intervals.
# 10 whole samples in a window always cover 90 % of it (the trailing partial interval is under one).
MIN_COVERAGE = 0.9
MAX_GAP_INTERVALS = 1.5
# The loop's own time between steps (handing over, reading a batch's frames) is neither the device's nor
# the pipeline's; a window of more than this share of it measures the loop, not the pipeline.
MAX_UNACCOUNTED_SHARE = 0.05


def busy_within(busy: Iterable[tuple[float, float]], edges: np.ndarray) -> np.ndarray:
    """Busy seconds of each window [edges[k], edges[k + 1]], given disjoint busy intervals."""
    intervals = np.asarray(sorted(busy), dtype=np.float64).reshape(-1, 2)
    starts, lengths = intervals[:, 0], intervals[:, 1] - intervals[:, 0]
    done_before = np.concatenate([[0.0], np.cumsum(lengths)])  # busy seconds before interval i starts
    t = np.asarray(edges, dtype=np.float64)
    i = np.searchsorted(starts, t, side="right") - 1  # the last interval starting at or before t; -1: none
    k = np.maximum(i, 0)
    busy_until = np.where(i >= 0, done_before[k] + np.clip(t - starts[k], 0, lengths[k]), 0.0)
    return np.diff(busy_until)


def utilisation_timeline(busy: Iterable[tuple[float, float]], *, start: float, end: float,
                         interval_s: float = MIN_INTERVAL_S) -> GpuTimeline:
    """The NVML sampler's timeline type from busy intervals: one utilisation sample per whole interval
    from `start`, the busy percentage of that interval, stamped at its end (as the driver stamps its
    samples). A trailing partial interval is left out. The polled series (memory, clock) are empty.
    complete: whether the samples cover the window (`with_coverage`)."""
    if not interval_s > 0:
        raise ValueError(f"interval_s: expected a positive number of seconds, found {interval_s!r}")
    if not end >= start:
        raise ValueError(f"window: expected end ≥ start, found start={start!r}, end={end!r}")
    count = int((end - start) / interval_s + 1e-9)
    edges = start + interval_s * np.arange(count + 1)
    busy = list(busy)
    shares = busy_within(busy, edges) / interval_s if busy and count else np.zeros(count)
    util = tuple(float(min(100.0, max(0.0, 100.0 * s))) for s in shares)
    device = DeviceTimeline(index=0, name=DEVICE_NAME, source=SOURCE_EMULATED,
                            util_timestamps=tuple(float(t) for t in edges[1:]), util=util,
                            timestamps=(), mem_util=(), mem_used=(), sm_clock=())
    return with_coverage(GpuTimeline(start=start, end=end, interval_s=interval_s, devices=(device,), complete=True,
                                     error=None))


@dataclass(frozen=True)
class Coverage(Record):
    """How much of a timeline's window its first device's utilisation samples cover. A sample stamped at
    t stands for [t - interval_s, t]. covered_share: the union of those intervals within the window over
    the window; longest_gap_s: the longest stretch without a stamp (start to the first, between stamps,
    the last to the end)."""

    samples: int
    interval_s: float
    window_s: float
    covered_share: float
    longest_gap_s: float

    @property
    def complete(self) -> bool:
        return (self.covered_share >= MIN_COVERAGE
                and self.longest_gap_s <= MAX_GAP_INTERVALS * self.interval_s + 1e-9)

    @property
    def problem(self) -> str | None:
        """Why the timeline is incomplete, or None."""
        if self.complete:
            return None
        return (f"the utilisation samples cover {self.covered_share:.0%} of the {self.window_s:.3g} s window "
                f"(at least {MIN_COVERAGE:.0%} expected) and leave a gap of {self.longest_gap_s:.3g} s "
                f"(at most {MAX_GAP_INTERVALS:g} sample intervals of {self.interval_s:.3g} s expected)")


def window_coverage(timeline: GpuTimeline) -> Coverage:
    """The coverage of the timeline's window by its first device's utilisation samples (see Coverage)."""
    stamps = sorted(t for t in timeline.devices[0].util_timestamps if timeline.start < t <= timeline.end)
    edges = [timeline.start, *stamps, timeline.end]
    gaps = [b - a for a, b in itertools.pairwise(edges)]
    covered = sum(min(gap, timeline.interval_s) for gap in gaps[:-1])  # each stamp's interval, overlaps once
    window = timeline.duration_s
    return Coverage(samples=len(stamps), interval_s=timeline.interval_s, window_s=window,
                    covered_share=covered / window if window > 0 else 0.0, longest_gap_s=max(gaps))


def with_coverage(timeline: GpuTimeline) -> GpuTimeline:
    """The timeline marked incomplete, with the reason as its error, when its samples do not cover its
    window; an already incomplete timeline keeps its own error."""
    problem = window_coverage(timeline).problem
    if problem is None or not timeline.complete:
        return timeline
    return dataclasses.replace(timeline, complete=False, error=problem)


@dataclass(frozen=True)
class StepAccounting(Record):
    """What a round's window is made of. steps_run: the steps the loop ran; steps_in_timeline: those
    that are a busy interval of the device inside the window, in order, with the device time the loop
    asked for. busy_s: the device's busy seconds; waiting_s: the host's seconds in the pipeline's next();
    late_s: the host's seconds between a step's end and its going on (a late wake-up, device idle time a
    real host has too); unaccounted_s: the rest of the window (the loop's own time)."""

    steps_run: int
    steps_in_timeline: int
    window_s: float
    busy_s: float
    waiting_s: float
    late_s: float

    @property
    def unaccounted_s(self) -> float:
        return self.window_s - self.busy_s - self.waiting_s - self.late_s

    @property
    def complete(self) -> bool:
        return self.problem is None

    @property
    def problem(self) -> str | None:
        """Why the round's timeline does not account for its steps and window, or None."""
        problems = []
        if self.steps_in_timeline != self.steps_run:
            problems.append(f"{self.steps_run} step(s) ran, {self.steps_in_timeline} of them are in the timeline")
        if self.unaccounted_s > MAX_UNACCOUNTED_SHARE * self.window_s:
            problems.append(f"{self.unaccounted_s:.3g} s of the {self.window_s:.3g} s window is neither busy, "
                            f"waiting on the pipeline nor a late wake-up (at most {MAX_UNACCOUNTED_SHARE:.0%} "
                            f"expected)")
        return "; ".join(problems) or None


def step_accounting(busy: list[tuple[float, float]], woke: list[float], *, steps: list[float],
                    waits: list[float], start: float, end: float) -> StepAccounting:
    """The accounting of a round (see StepAccounting) from the device's busy intervals and wake-ups and the
    loop's steps and waits, all on one clock; [start, end] the window."""
    in_timeline = sum(1 for (b_start, b_end), seconds in zip(busy, steps)
                      if start <= b_start and b_end <= end
                      and math.isclose(b_end - b_start, seconds, rel_tol=1e-9, abs_tol=1e-9))
    busy_s = sum(min(b_end, end) - max(b_start, start) for b_start, b_end in busy if b_end > start and b_start < end)
    late = sum(max(0.0, min(up, end) - b_end) for (_, b_end), up in zip(busy, woke))
    return StepAccounting(steps_run=len(steps), steps_in_timeline=in_timeline, window_s=end - start,
                          busy_s=busy_s, waiting_s=sum(waits), late_s=late)


def with_accounting(timeline: GpuTimeline, accounting: StepAccounting) -> GpuTimeline:
    """The timeline marked incomplete, with the reason as its error, when the round's steps do not account
    for its window; an already incomplete timeline keeps its own error."""
    problem = accounting.problem
    if problem is None or not timeline.complete:
        return timeline
    return dataclasses.replace(timeline, complete=False, error=problem)
