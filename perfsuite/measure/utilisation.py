"""A GPU utilisation timeline and its statistics: median and mean, idle share, oscillation, starvation
episodes, and the flat gate metrics. Both sources produce the timeline: the NVML sampler
(perfsuite.measure.gpu) and the emulated accelerator (perfsuite.measure.emulated), so the same gates
apply to both.
Utilisation is in percent (0-100), NVML's unit; the idle fraction is a fraction (0-1)."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from perfsuite.measure.stats import Cycle, detect_cycle, summarize
from perfsuite.records import Record

IDLE_THRESHOLD_PCT = 10.0
# Defaults for a GPU runner's gates (issue 5): the compiled step fed by the TF-native cache pipeline
# should keep the GPU busy.
MIN_UTIL_MEDIAN_PCT = 85.0
MAX_IDLE_FRACTION = 0.05
# A sampler covers its window when no stretch of it without one of the sampler's own samples (from the
# window's start to the first, between two, from the last to the end) is longer than this many sampling
# intervals. A sampler that keeps to its interval leaves gaps of one interval and the time of its calls;
# one held up (an NVML call that blocks, a starved thread) for a few intervals leaves a longer one.
MAX_GAP_INTERVALS = 3.0


# ---------------------------------------------------------------------------------------------- timeline


@dataclass(frozen=True)
class DeviceTimeline(Record):
    """One device's samples within the measured window, in time order; timestamps in clock seconds.

    Utilisation has its own time axis because the driver buffer samples at the driver's rate; the
    polled series (memory utilisation, memory used, SM clock) share `timestamps`. With polling the two
    axes are the same. Each utilisation value is the share of the driver's last sample period (1/6 s to
    1 s depending on the GPU) in which a kernel ran, stamped at the period's end.
    """

    index: int
    name: str
    source: str | None  # SOURCE_DRIVER_BUFFER, SOURCE_POLLING, or None when no read succeeded
    util_timestamps: tuple[float, ...]
    util: tuple[float, ...]  # percent
    timestamps: tuple[float, ...]
    mem_util: tuple[float, ...]  # percent of time the memory was being read or written
    mem_used: tuple[int, ...]  # bytes
    sm_clock: tuple[int, ...]  # MHz


@dataclass(frozen=True)
class GpuTimeline(Record):
    """The sampled window (clock seconds) and each device's samples in it; as_dict() is its JSON."""

    start: float
    end: float
    interval_s: float
    devices: tuple[DeviceTimeline, ...]
    complete: bool  # False when an NVML error stopped sampling early or the samples miss part of the window
    error: str | None

    @property
    def source(self) -> str:
        """The utilisation source, or the sources joined by '+' when devices differ."""
        return "+".join(sorted({d.source or "none" for d in self.devices}))

    @property
    def duration_s(self) -> float:
        return self.end - self.start



@dataclass(frozen=True)
class SampleCoverage(Record):
    """How a sampler's own sample times (stamped by its clock as it took them) cover a window: the
    stretches without a sample from the window's start to the first, the largest between two, and from
    the last to the end, in seconds. The window is covered when none is over MAX_GAP_INTERVALS x
    interval_s."""

    samples: int
    interval_s: float
    window_s: float
    first_gap_s: float
    largest_gap_s: float
    last_gap_s: float

    @property
    def longest_s(self) -> float:
        return max(self.first_gap_s, self.largest_gap_s, self.last_gap_s)

    @property
    def covered(self) -> bool:
        return self.longest_s <= MAX_GAP_INTERVALS * self.interval_s

    def problem(self, device: str) -> str | None:
        """Why the window is not covered, naming the device; None when it is."""
        if self.covered:
            return None
        return (f"{device}: the sampler's {self.samples} sample(s) leave {self.longest_s:.3g} s of the "
                f"{self.window_s:.3g} s window without a sample (from the start to the first "
                f"{self.first_gap_s:.3g} s, largest between two {self.largest_gap_s:.3g} s, from the last to "
                f"the end {self.last_gap_s:.3g} s); at most {MAX_GAP_INTERVALS:g} sampling intervals of "
                f"{self.interval_s:.3g} s expected")


def sample_coverage(stamps: Sequence[float], *, start: float, end: float, interval_s: float) -> SampleCoverage:
    """The coverage of [start, end] by the sample times in it (see SampleCoverage); no sample leaves the
    whole window as one gap."""
    inside = sorted(t for t in stamps if start <= t <= end)
    between = [b - a for a, b in itertools.pairwise(inside)]
    if not inside:
        return SampleCoverage(0, interval_s, end - start, end - start, 0.0, end - start)
    return SampleCoverage(samples=len(inside), interval_s=interval_s, window_s=end - start,
                          first_gap_s=inside[0] - start, largest_gap_s=max(between, default=0.0),
                          last_gap_s=end - inside[-1])


# A significant cycle whose swing (peak to trough of the utilisation averaged per phase of the cycle) is
# smaller than this many percentage points is a ripple, not an oscillation: at full load, a beat between
# the step period and the sampling interval makes a regular pattern of a few points that the
# scale-free cycle detector would otherwise report.
MIN_OSCILLATION_SWING_PCT = 10.0


@dataclass(frozen=True)
class GpuStats(Record):
    """Utilisation statistics of one device's timeline; utilisation in percent, idle as a fraction.
    as_dict() is the record itself, extra_info() its flat gpu_* figures.

    Both utilisation sources compute these here: the NVML sampler's timeline and the emulated
    accelerator's (perfsuite.measure.emulated), so the same gates apply to both.
    """

    device_index: int
    device_name: str
    source: str | None
    samples: int
    sample_spacing_s: float | None  # median time between utilisation samples
    util_median: float
    util_mean: float
    idle_fraction: float  # share of samples with utilisation below idle_threshold
    idle_threshold: float
    variation_ratio: float  # std (ddof=1) / mean as in perfsuite.measure.stats; 0 for a series without variation
    oscillation: Cycle  # not significant when its swing is below min_swing (the note says so)
    oscillation_period_s: float | None  # oscillation.period (samples) x sample_spacing_s when significant
    oscillation_swing: float | None  # points, peak to trough of the per-phase mean at the cycle's lag
    starvation_episodes: int  # maximal runs of consecutive idle samples
    longest_starvation_s: float | None  # the longest such run, samples x sample_spacing_s
    mem_used_max: int | None  # bytes
    sm_clock_median: float | None  # MHz
    complete: bool
    error: str | None

    def extra_info(self) -> dict[str, Any]:
        """Flat gpu_* keys for pytest-benchmark's extra_info."""
        return {
            "gpu_device": self.device_index,
            "gpu_name": self.device_name,
            "gpu_source": self.source,
            "gpu_samples": self.samples,
            "gpu_sample_spacing_s": self.sample_spacing_s,
            "gpu_util_median": self.util_median,
            "gpu_util_mean": self.util_mean,
            "gpu_idle_fraction": self.idle_fraction,
            "gpu_idle_threshold": self.idle_threshold,
            "gpu_util_variation_ratio": self.variation_ratio,
            "gpu_oscillation": self.oscillation.significant,
            "gpu_oscillation_period_samples": self.oscillation.period,  # None when not significant
            "gpu_oscillation_period_s": self.oscillation_period_s,
            "gpu_oscillation_strength": self.oscillation.strength,  # None: not measured
            "gpu_oscillation_note": self.oscillation.note,
            "gpu_oscillation_swing": self.oscillation_swing,
            "gpu_starvation_episodes": self.starvation_episodes,
            "gpu_longest_starvation_s": self.longest_starvation_s,
            "gpu_mem_used_max_bytes": self.mem_used_max,
            "gpu_sm_clock_median_mhz": self.sm_clock_median,
            "gpu_complete": self.complete,
            "gpu_error": self.error,
        }


def gpu_stats(
    timeline: GpuTimeline,
    *,
    device: int | None = None,
    idle_threshold: float = IDLE_THRESHOLD_PCT,
    alpha: float = 0.05,
    min_points: int = 32,
    max_lag: int | None = None,
    min_swing: float = MIN_OSCILLATION_SWING_PCT,
) -> GpuStats:
    """Statistics of one device's utilisation (`device` = NVML index; default: the first sampled device,
    the one TensorFlow places work on by default). Oscillation uses the same cycle detector as batch times;
    a cycle swinging less than `min_swing` points is reported as not significant (a ripple).
    A starvation episode is a maximal run of consecutive idle samples.
    Raises ValueError when the device has no utilisation sample in the window."""
    series = _device(timeline, device)
    util = series.util
    if not util:
        raise ValueError(
            f"GPU {series.index} ({series.name}): expected utilisation samples in the "
            f"{timeline.duration_s:.3f} s window, found none (source={series.source}, error={timeline.error})"
        )
    gaps = [b - a for a, b in zip(series.util_timestamps, series.util_timestamps[1:])]
    spacing = statistics.median(gaps) if gaps else None
    summary = summarize(util)
    # detect_cycle analyses the logarithm of positive values (batch times stall multiplicatively).
    # Utilisation is additive and often 0, so it goes in as exp(u / 100): the detector's logarithm then
    # sees the utilisation itself, and its robust z-scores do not depend on the scale.
    cycle = detect_cycle([math.exp(u / 100) for u in util], alpha=alpha, min_points=min_points,
                         max_lag=max_lag)
    swing = _folded_swing(util, cycle.period) if cycle.significant else None
    if swing is not None and swing < min_swing:
        cycle = replace(cycle, significant=False, period=None,
                        note=f"a ripple, not an oscillation: {cycle.note}, but it swings {swing:.1f} points "
                             f"< min_swing={min_swing:g}")
    period_s = cycle.period * spacing if cycle.significant and spacing is not None else None
    idle_runs = _runs(u < idle_threshold for u in util)
    return GpuStats(
        device_index=series.index,
        device_name=series.name,
        source=series.source,
        samples=len(util),
        sample_spacing_s=spacing,
        util_median=summary.median,
        util_mean=summary.mean,
        idle_fraction=sum(1 for u in util if u < idle_threshold) / len(util),
        idle_threshold=idle_threshold,
        # summarize() has no ratio for an all-zero series; a series without variation has ratio 0.
        variation_ratio=summary.variation_ratio if summary.std > 0 else 0.0,
        oscillation=cycle,
        oscillation_period_s=period_s,
        oscillation_swing=swing,
        starvation_episodes=len(idle_runs),
        longest_starvation_s=max(idle_runs) * spacing if idle_runs and spacing is not None else None,
        mem_used_max=max(series.mem_used) if series.mem_used else None,
        sm_clock_median=float(statistics.median(series.sm_clock)) if series.sm_clock else None,
        complete=timeline.complete,
        error=timeline.error,
    )


def _folded_swing(util: Sequence[float], period: int) -> float:
    """Peak to trough, in points, of the mean utilisation at each phase of a cycle of `period` samples."""
    phases = [util[phase::period] for phase in range(period)]
    means = [statistics.fmean(values) for values in phases if values]
    return max(means) - min(means)


def _runs(flags) -> list[int]:
    """Lengths of the maximal runs of true values."""
    runs, length = [], 0
    for flag in flags:
        if flag:
            length += 1
        elif length:
            runs.append(length)
            length = 0
    return [*runs, length] if length else runs


def _device(timeline: GpuTimeline, index: int | None) -> DeviceTimeline:
    if not timeline.devices:
        raise ValueError("timeline: expected at least one device, found none")
    if index is None:
        return timeline.devices[0]
    for series in timeline.devices:
        if series.index == index:
            return series
    found = [d.index for d in timeline.devices]
    raise ValueError(f"device: expected one of the sampled GPUs {found}, found {index}")


def gpu_gate_metrics(stats: GpuStats) -> dict[str, Any]:
    """The metrics baselines gate GPU profiles on (min_/max_ thresholds):

    gpu_util_median  percent (0-100), default gate MIN_UTIL_MEDIAN_PCT = 85
    gpu_idle_fraction  fraction (0-1), default gate MAX_IDLE_FRACTION = 0.05
    gpu_oscillation  bool, a significant cycle; a GPU runner gates it at False
    gpu_complete  bool: the window was sampled without an error and its samples cover it
    """
    return {
        "gpu_util_median": stats.util_median,
        "gpu_idle_fraction": stats.idle_fraction,
        "gpu_oscillation": stats.oscillation.significant,
        "gpu_complete": stats.complete,
    }
