"""Emulated accelerator: will this input pipeline keep a GPU busy? Answered on a CPU-only machine.

MLPerf Storage's method: replace the accelerator's step by a wait of the step's device time and check
that the pipeline keeps that emulated accelerator busy. A GPU step does not use the host's CPU while it
runs (the host thread waits on the device), so a wait that sleeps, releasing the CPU and the GIL, leaves
the pipeline exactly the CPU it would have next to a real GPU: starvation is reproduced faithfully.

- `EmulatedDevice.hold(seconds)`: one step. The device is busy for exactly `seconds` from the moment the
  host hands it a batch (or from the end of its previous step, whichever is later); the host sleeps until
  then, never returning before the step ends. Sleep overshoot is measured and compensated (see
  `Sleeper`); a late wake-up counts as device idle time, as a host that notices the end of a real step
  late would leave the GPU idle.
- `run_emulated(batches, step=...)`: the step loop over a pipeline; the busy intervals become a
  `GpuTimeline` of the type the NVML sampler produces (utilisation = busy share of each fixed interval,
  stamped at the interval's end), so `gpu_stats` / `gpu_gate_metrics` compute the same statistics and
  gates from it. `emulated_gate_metrics` renames them `emulated_*`, apart from the real GPU's metrics.
  The timeline (measure/emulated_timeline.py) is complete only when its samples cover the measured
  window (`window_coverage`: a window of too few sample intervals loses its trailing part) and the
  round's steps account for it
  (`StepAccounting`): every step the loop ran is a busy interval of the timeline, with its device time,
  and the window is busy, the host waiting on the pipeline, or the host waking late from a step, but for
  at most MAX_UNACCOUNTED_SHARE of it. A lost step or a loop held up outside the pipeline and the
  device fails the `*_complete` gate instead of passing by default.
- `feed_rate(dataset)`: the shortest fixed step time the pipeline keeps >= 90 % busy, found by a few
  interleaved bisections on a log scale, with their interval, in steps/s and audio seconds/s.

Step times come from the user (`StepTime`) or from `STEP_PRESETS`, published training throughputs of a
TTS model on common GPUs, each with its source. No TensorFlow import here: batches are read through
numpy (`np.asarray` on tensors), so any iterable of dict batches works.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfsuite.data.audio import MelConfig
from perfsuite.measure.emulated_timeline import (  # the timeline, its coverage and step accounting
    MIN_INTERVAL_S,
    StepAccounting,
    step_accounting,
    utilisation_timeline,
    window_coverage,
    with_accounting,
)
from perfsuite.measure.rounds import InterleavedRounds
from perfsuite.measure.teardown import iterate
from perfsuite.measure.utilisation import GpuStats, GpuTimeline, gpu_gate_metrics, gpu_stats
from perfsuite.records import Record

FEED_TARGET = 0.9  # MLPerf Storage's accelerator-utilisation bar
LEAD_QUANTILE = 0.9  # the sleeper aims this quantile of its recent lateness early ...
SPIN_CAP_S = 200e-6  # ... but never more: the spin after an early wake-up holds the GIL
MIN_STEP_S = 0.001  # shortest step the sleep emulates within a few percent
FRAME_COUNTS = ("padded", "true")
DEFAULT_MEL = MelConfig()  # the loaders' mel: audio seconds = mel frames x hop / sample rate


# ------------------------------------------------------------------------------------------ step times


@dataclass(frozen=True)
class StepTime(Record):
    """Device time of one step: fixed_s + per_frame_s x frames of the batch.

    frames="padded" counts batch size x padded frames of ``mel`` (what a static-shape step computes);
    frames="true" counts the sum of ``mel_len`` (what published throughputs in frames/s count).
    """

    fixed_s: float = 0.0
    per_frame_s: float = 0.0
    frames: str = "padded"
    source: str = "user"

    def __post_init__(self):
        if not (self.fixed_s >= 0 and self.per_frame_s >= 0 and self.fixed_s + self.per_frame_s > 0):
            raise ValueError(f"StepTime: expected fixed_s ≥ 0 and per_frame_s ≥ 0, not both 0; found "
                             f"fixed_s={self.fixed_s!r}, per_frame_s={self.per_frame_s!r}")
        if self.frames not in FRAME_COUNTS:
            raise ValueError(f"StepTime.frames: expected one of {FRAME_COUNTS}, found {self.frames!r}")

    def seconds(self, batch: Any) -> float:
        if not self.per_frame_s:
            return self.fixed_s
        return self.fixed_s + self.per_frame_s * batch_frames(batch, frames=self.frames)


def fixed_step(seconds: float) -> StepTime:
    return StepTime(fixed_s=seconds)


_FASTPITCH = ("NVIDIA DeepLearningExamples, PyTorch/SpeechSynthesis/FastPitch/README.md (FastPitch 1.1), "
              "'Training performance results', the 1-GPU row: output mel frames/s averaged over an epoch, "
              "21.05-py3 NGC container, ")

# Seconds per true mel frame = 1 / published frames/s of a FastPitch training run on one GPU. They are
# epoch averages with data loading included, so that GPU's pure step is at most this long: a pipeline
# that starves the emulated step starves that GPU; one that feeds it may still starve a faster step.
STEP_PRESETS: dict[str, StepTime] = {
    "fastpitch-a100-tf32": StepTime(per_frame_s=1 / 97_735, frames="true",
                                    source=_FASTPITCH + "A100 80GB, TF32, batch 32, 97,735 frames/s"),
    "fastpitch-a100-amp": StepTime(per_frame_s=1 / 101_730, frames="true",
                                   source=_FASTPITCH + "A100 80GB, mixed precision, batch 32, 101,730 frames/s"),
    "fastpitch-v100-fp32": StepTime(per_frame_s=1 / 33_456, frames="true",
                                    source=_FASTPITCH + "V100 16GB, FP32, batch 16, 33,456 frames/s"),
    "fastpitch-v100-amp": StepTime(per_frame_s=1 / 63_986, frames="true",
                                   source=_FASTPITCH + "V100 16GB, mixed precision, batch 16, 63,986 frames/s"),
}


DEFAULT_STEP_PRESET = "fastpitch-a100-tf32"


def parse_step_time(spec: str) -> StepTime:
    """A step time as a user gives it: a STEP_PRESETS name, or seconds (a fixed step)."""
    if spec in STEP_PRESETS:
        return STEP_PRESETS[spec]
    try:
        seconds = float(spec)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"step time: expected seconds > 0 or one of {', '.join(STEP_PRESETS)}, found {spec!r}")
    return fixed_step(seconds)


def batch_frames(batch: Any, *, frames: str = "padded") -> int:
    """Mel frames of a dict batch: batch x padded frames of ``mel``, or the sum of ``mel_len``."""
    key = "mel" if frames == "padded" else "mel_len"
    if not isinstance(batch, dict) or key not in batch:
        found = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
        raise ValueError(f"batch: expected a dict with {key!r} to count {frames} frames, found {found}")
    if frames == "true":
        return int(np.sum(np.asarray(batch["mel_len"])))
    shape = tuple(batch["mel"].shape)
    if len(shape) < 2:
        raise ValueError(f"batch['mel']: expected shape [batch, frames, ...], found {shape}")
    return int(shape[0]) * int(shape[1])


def audio_seconds(batch: Any, mel_config: MelConfig = DEFAULT_MEL) -> float | None:
    """Seconds of audio a batch holds, sum(mel_len) x hop / sample rate; None without ``mel_len``.

    A mel frame stands for hop_length samples, so this overstates each utterance by under one hop.
    """
    if not isinstance(batch, dict) or "mel_len" not in batch:
        return None
    return float(np.sum(np.asarray(batch["mel_len"]))) * mel_config.hop_length / mel_config.sample_rate


def _step_seconds(step: float | StepTime | Callable[[Any], float]) -> Callable[[Any], float]:
    if isinstance(step, StepTime):
        return step.seconds
    if callable(step):
        return step
    if isinstance(step, int | float) and step > 0:
        return lambda batch: float(step)
    raise ValueError(f"step: expected seconds > 0, a StepTime or a callable(batch) -> seconds, found {step!r}")


# --------------------------------------------------------------------------------------------- the hold


class Sleeper:
    """Waits until a deadline, never returning before it, sleeping all but the last moments.

    Every sleep wakes some tens of microseconds after its target (Linux's timer slack alone is 50 µs,
    5 % of a 1 ms step; then scheduling). The sleeper keeps the last `window` latenesses and aims each
    sleep their 90th percentile early (at most SPIN_CAP_S, at most half the time left), then spins
    out the rest. A host that went on at an early wake-up would produce its next batch during the step
    and overstate how busy the device is kept. The spin is short on purpose: `sleep(0)` would wait
    out the timer slack, and `sched_yield` hands a loaded core to its other tasks for milliseconds.
    """

    def __init__(self, *, window: int = 16, clock: Callable[[], float] = time.perf_counter):
        self._lateness: deque[float] = deque(maxlen=window)
        self._clock = clock

    @property
    def lead_s(self) -> float:
        if not self._lateness:
            return 0.0
        ordered = sorted(self._lateness)
        return min(ordered[int(LEAD_QUANTILE * (len(ordered) - 1))], SPIN_CAP_S)

    def until(self, deadline: float) -> None:
        now = self._clock()
        if now >= deadline:
            return
        target = deadline - min(self.lead_s, (deadline - now) / 2)
        time.sleep(target - now)
        self._lateness.append(self._clock() - target)
        while self._clock() < deadline:
            pass


class EmulatedDevice:
    """A device that runs one step at a time; `hold` is a step, `busy` the device's busy intervals.

    The device is busy from max(the hand-over, the end of its previous step) for exactly the step's
    seconds; the host sleeps until the step ends, as a host waits on a GPU step. Times are
    time.perf_counter seconds.
    """

    def __init__(self, *, sleeper: Sleeper | None = None, clock: Callable[[], float] = time.perf_counter):
        self.sleeper = sleeper or Sleeper(clock=clock)
        self._clock = clock
        self._free_at = -math.inf
        self.busy: list[tuple[float, float]] = []
        self.woke: list[float] = []  # when the host went on after each step (its clock)

    def clear(self) -> None:
        """Forget the steps so far (the warm-up's)."""
        self.busy.clear()
        self.woke.clear()

    def hold(self, seconds: float) -> tuple[float, float]:
        """One step of `seconds` device time; returns its busy interval (start, end) once it has ended."""
        if not seconds > 0:
            raise ValueError(f"seconds: expected a device time > 0, found {seconds!r}")
        start = max(self._clock(), self._free_at)
        end = start + seconds
        self._free_at = end
        self.busy.append((start, end))
        self.sleeper.until(end)
        self.woke.append(self._clock())
        return start, end


# ----------------------------------------------------------------------------------------------- a run


@dataclass(frozen=True)
class EmulatedRunConfig(Record):
    """One round: `warmup_batches` steps unmeasured, then steps until there are at least `batches`, the
    window lasts `min_seconds` and holds `min_samples` utilisation samples (the cycle detector needs 32).

    interval_s: the utilisation sample interval; None samples once per step (the median step time, at
    least MIN_INTERVAL_S). A sample spanning about a step averages out the hand-over gap every step
    loop has, as NVML's sample periods (1/6 s to 1 s, many steps) do, while a stall of a step or more
    shows; a much shorter interval would see every hand-over as a dip, a regular ripple at the step
    period.
    """

    batches: int = 16
    warmup_batches: int = 2
    min_seconds: float = 0.0
    min_samples: int = 32
    interval_s: float | None = None

    def __post_init__(self):
        checks = [("batches", self.batches >= 1, "≥ 1"), ("warmup_batches", self.warmup_batches >= 0, "≥ 0"),
                  ("min_seconds", self.min_seconds >= 0, "≥ 0"), ("min_samples", self.min_samples >= 0, "≥ 0"),
                  ("interval_s", self.interval_s is None or self.interval_s > 0, "> 0 or None")]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"EmulatedRunConfig.{name}: expected {expected}, found {getattr(self, name)!r}")

    def interval_for(self, step_s: list[float]) -> float:
        """The sample interval for steps of these device times."""
        if self.interval_s is not None:
            return self.interval_s
        return max(MIN_INTERVAL_S, statistics.median(step_s)) if step_s else MIN_INTERVAL_S


@dataclass(frozen=True)
class RunFigures(Record):
    """The figures of one emulated round (EmulatedRun.figures()): its window in seconds, the batches it
    took, its busy fraction, its timeline's coverage (window_coverage), its rates, and the median device
    time and the median and longest host wait per batch."""

    duration_s: float
    batches: int
    busy_fraction: float
    timeline_covered_share: float
    timeline_longest_gap_s: float
    steps_per_s: float
    audio_s_per_s: float | None
    step_s_median: float
    wait_s_median: float
    wait_s_max: float


@dataclass(frozen=True)
class EmulatedRun(Record):
    """One emulated round. Times are epoch seconds (perf_counter precision), like the NVML timeline's.

    busy: the device's busy intervals in the window; step_s: their device times; wait_s: the host's time
    in next() per batch (the pipeline's share of the gap). busy_fraction = busy seconds / window seconds,
    MLPerf Storage's accelerator utilisation. audio_s: audio seconds of the measured batches (None when
    batches carry no ``mel_len``). accounting: what the window is made of (StepAccounting); the timeline
    is incomplete when it does not account for every step and the window.
    """

    start: float
    end: float
    busy: tuple[tuple[float, float], ...]
    step_s: tuple[float, ...]
    wait_s: tuple[float, ...]
    audio_s: float | None
    timeline: GpuTimeline = field(repr=False)
    accounting: StepAccounting | None = None

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    @property
    def busy_fraction(self) -> float:
        return sum(self.step_s) / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def steps_per_s(self) -> float:
        return len(self.step_s) / self.duration_s

    @property
    def audio_s_per_s(self) -> float | None:
        return None if self.audio_s is None else self.audio_s / self.duration_s

    def figures(self) -> RunFigures:
        """The round's figures (as_dict() is the round itself: every interval, step and wait)."""
        coverage = window_coverage(self.timeline)
        return RunFigures(duration_s=self.duration_s, batches=len(self.step_s), busy_fraction=self.busy_fraction,
                          timeline_covered_share=coverage.covered_share,
                          timeline_longest_gap_s=coverage.longest_gap_s, steps_per_s=self.steps_per_s,
                          audio_s_per_s=self.audio_s_per_s, step_s_median=statistics.median(self.step_s),
                          wait_s_median=statistics.median(self.wait_s), wait_s_max=max(self.wait_s))


def run_emulated(batches: Iterable, *, step: float | StepTime | Callable[[Any], float],
                 config: EmulatedRunConfig = EmulatedRunConfig(), mel_config: MelConfig = DEFAULT_MEL,
                 device: EmulatedDevice | None = None) -> EmulatedRun:
    """Feed the emulated device from `batches`, one step per batch, and return the measured round.

    Pass an iterator (e.g. ``iter(dataset.repeat())``) to continue one pipeline across rounds; a
    dataset is iterated afresh. The window opens after the warm-up steps, before the first measured
    batch is asked for, and closes when the last step ends.
    """
    seconds_of = _step_seconds(step)
    source = iterate(batches)
    device = device or EmulatedDevice()
    for index in range(config.warmup_batches):
        device.hold(seconds_of(_next(source, index, config)))
    device.clear()
    start = time.perf_counter()
    steps, waits, audio = [], [], 0.0
    while not _enough(config, steps, device.busy[-1][1] - start if steps else 0.0):  # the window so far
        asked = time.perf_counter()
        batch = _next(source, config.warmup_batches + len(steps), config)
        seconds = seconds_of(batch)
        batch_audio = audio_seconds(batch, mel_config)
        audio = None if audio is None or batch_audio is None else audio + batch_audio
        waits.append(time.perf_counter() - asked)
        steps.append(seconds)
        device.hold(seconds)
    end = device.busy[-1][1]
    offset = time.time() - time.perf_counter()
    busy = tuple((s + offset, e + offset) for s, e in device.busy)
    accounting = step_accounting(device.busy, device.woke, steps=steps, waits=waits, start=start, end=end)
    timeline = with_accounting(utilisation_timeline(busy, start=start + offset, end=end + offset,
                                                    interval_s=config.interval_for(steps)), accounting)
    return EmulatedRun(start=start + offset, end=end + offset, busy=busy, step_s=tuple(steps), wait_s=tuple(waits),
                       audio_s=audio, timeline=timeline, accounting=accounting)


def _enough(config: EmulatedRunConfig, steps: list[float], elapsed: float) -> bool:
    if len(steps) < config.batches or elapsed < config.min_seconds:
        return False
    # A hair over: the timeline counts whole intervals of the window in epoch seconds, whose rounding at
    # ~1.8e9 s (0.24 µs) must not drop the last one.
    return elapsed >= config.min_samples * config.interval_for(steps) + 1e-5


def _next(source: Iterator, index: int, config: EmulatedRunConfig) -> Any:
    try:
        return next(source)
    except StopIteration:
        raise ValueError(f"batches: expected at least {config.warmup_batches} warm-up + {config.batches} "
                         f"batches, found {index}; pass an endless source such as iter(dataset.repeat())") from None


# ----------------------------------------------------------------------------------- statistics, gates


def emulated_stats(run: EmulatedRun, **options) -> GpuStats:
    """`gpu_stats` of the run's timeline: the same statistics the NVML timeline gets."""
    return gpu_stats(run.timeline, **options)


def _emulated_names(figures: dict) -> dict:
    return {"emulated_" + key.removeprefix("gpu_"): value for key, value in figures.items()}


def emulated_gate_metrics(stats: GpuStats) -> dict[str, Any]:
    """`gpu_gate_metrics` renamed emulated_* (emulated_util_median, emulated_idle_fraction, ...), so the
    real GPU's gates and the emulated ones never judge each other's figures."""
    return _emulated_names(gpu_gate_metrics(stats))


def emulated_figures(stats: GpuStats) -> dict[str, Any]:
    """`GpuStats.extra_info()` renamed emulated_*, for extra_info."""
    return _emulated_names(stats.extra_info())


# ------------------------------------------------------------------------------------------ feed rate


@dataclass(frozen=True)
class FeedRateConfig(Record):
    """The search. A round at a step passes when its busy fraction is ≥ `target`. From the pipeline's
    free-running batch time, single rounds double or halve the step until the outcome flips (at most
    `max_doublings` times); then `searches` independent bisections of that bracket on a log scale,
    `iterations` rounds each, run interleaved (one round of each per iteration, the order alternating),
    so a change of the machine's load reaches them alike and their spread is the answer's interval.
    `budget_s`: no new iteration starts once the search has run this long (None: no limit); a slow
    pipeline then gets a wider interval instead of a longer search."""

    target: float = FEED_TARGET
    searches: int = 3
    iterations: int = 3
    max_doublings: int = 6
    min_step_s: float = MIN_STEP_S
    probe_batches: int = 8
    budget_s: float | None = None
    run: EmulatedRunConfig = EmulatedRunConfig(batches=6, warmup_batches=1, min_seconds=0.1, min_samples=0)

    def __post_init__(self):
        checks = [("target", 0 < self.target < 1, "in (0, 1)"), ("searches", self.searches >= 1, "≥ 1"),
                  ("budget_s", self.budget_s is None or self.budget_s > 0, "> 0 or None"),
                  ("iterations", self.iterations >= 0, "≥ 0"), ("max_doublings", self.max_doublings >= 1, "≥ 1"),
                  ("min_step_s", self.min_step_s > 0, "> 0"), ("probe_batches", self.probe_batches >= 1, "≥ 1")]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"FeedRateConfig.{name}: expected {expected}, found {getattr(self, name)!r}")


@dataclass(frozen=True)
class Trial(Record):
    """One round at one step time: its busy fraction and whether it passed. search: the bisection it
    belongs to, None for the bracketing rounds."""

    step_s: float
    busy: float
    passed: bool
    search: int | None


@dataclass(frozen=True)
class FeedRate(Record):
    """The shortest fixed step the pipeline keeps ≥ target busy.

    answers: each bisection's shortest passing step; step_s: their median. The interval
    [step_low_s, step_high_s] is the union of the bisections' final brackets (each from a step that
    bisection saw fail to its answer): its width is the search's resolution where they agree and the
    machine's noise where they do not. step_low_s is None when the shortest step searched (min_step_s)
    passed, so the pipeline may feed faster still; step_s is None when no step up to the longest tried
    passed. Rates are 1 / step (steps/s) and the batches' mean audio seconds / step (audio-s/s).
    """

    target: float
    step_s: float | None
    step_low_s: float | None
    step_high_s: float | None
    answers: tuple[float, ...]
    free_running_batch_s: float
    audio_s_per_batch: float | None
    trials: tuple[Trial, ...]
    note: str

    @property
    def steps_per_s(self) -> float | None:
        return _inverse(self.step_s)

    @property
    def steps_per_s_interval(self) -> tuple[float | None, float | None]:
        return _inverse(self.step_high_s), _inverse(self.step_low_s)

    @property
    def audio_s_per_s(self) -> float | None:
        return self._audio(self.steps_per_s)

    @property
    def audio_s_per_s_interval(self) -> tuple[float | None, float | None]:
        low, high = self.steps_per_s_interval
        return self._audio(low), self._audio(high)

    def _audio(self, rate: float | None) -> float | None:
        return None if rate is None or self.audio_s_per_batch is None else rate * self.audio_s_per_batch

    def extra_info(self) -> dict:
        """Flat feed_* keys with the derived rates, for pytest-benchmark's extra_info (as_dict() is the
        record itself)."""
        return {"feed_target": self.target, "feed_step_s": self.step_s, "feed_step_low_s": self.step_low_s,
                "feed_step_high_s": self.step_high_s, "feed_answers_s": list(self.answers),
                "feed_steps_per_s": self.steps_per_s, "feed_steps_per_s_interval": list(self.steps_per_s_interval),
                "feed_audio_s_per_s": self.audio_s_per_s,
                "feed_audio_s_per_s_interval": list(self.audio_s_per_s_interval),
                "feed_audio_s_per_batch": self.audio_s_per_batch,
                "feed_free_running_batch_s": self.free_running_batch_s,
                "feed_trials": [t.as_dict() for t in self.trials], "feed_note": self.note}


def _inverse(seconds: float | None) -> float | None:
    return None if seconds is None else 1 / seconds


class _Search:
    """The state of one feed-rate search: the source, the rounds so far, the audio seen."""

    def __init__(self, source: Iterator, config: FeedRateConfig, mel_config: MelConfig):
        self.source, self.config, self.mel_config = source, config, mel_config
        self.started = time.perf_counter()
        self.trials: list[Trial] = []
        self.audio: list[float] = []  # audio seconds per batch, per round
        self.audio_known = True

    def passes(self, step_s: float, search: int | None = None) -> bool:
        run = run_emulated(self.source, step=step_s, config=self.config.run, mel_config=self.mel_config)
        if run.audio_s is None:
            self.audio_known = False
        else:
            self.audio.append(run.audio_s / len(run.step_s))
        passed = run.busy_fraction >= self.config.target
        self.trials.append(Trial(step_s=step_s, busy=run.busy_fraction, passed=passed, search=search))
        return passed


def free_running_batch_s(source: Iterator, *, batches: int = 8) -> float:
    """Median time next() takes when nothing else runs: the pipeline's own batch time."""
    times = []
    for _ in range(batches):
        asked = time.perf_counter()
        next(source)
        times.append(time.perf_counter() - asked)
    return statistics.median(times)


def feed_rate(dataset: Iterable, *, config: FeedRateConfig = FeedRateConfig(),
              mel_config: MelConfig = DEFAULT_MEL) -> FeedRate:
    """The feed rate of a pipeline: the shortest fixed emulated step it keeps ≥ config.target busy.

    `dataset`: a tf.data.Dataset (repeated here) or any endless iterable of dict batches. Costs the
    bracketing rounds (typically 2-4) + searches x iterations rounds, each about
    max(run.min_seconds, (run.warmup_batches + run.batches) x step).
    """
    source = iterate(dataset.repeat() if hasattr(dataset, "repeat") else dataset)
    next(source)  # start-up (threads, first file reads) is no part of the rate
    probe = free_running_batch_s(source, batches=config.probe_batches)
    search = _Search(source, config, mel_config)  # the budget counts from here: the probe is cheap
    low, high = _bracket(search, max(probe, config.min_step_s))
    if high is None:
        return _result(search, probe, None, (low, None), (),
                       f"no step up to {low:.4g} s was kept ≥ {config.target:.0%} busy")
    if low is None:
        return _result(search, probe, high, (None, high), (high,),
                       f"kept ≥ {config.target:.0%} busy at the shortest step searched ({high:.4g} s, "
                       "min_step_s): the pipeline may feed faster still")
    brackets = _bisect(search, low, high)
    answers = tuple(upper for _, upper in brackets)
    interval = (min(lower for lower, _ in brackets), max(answers))
    return _result(search, probe, statistics.median(answers), interval, answers, "")


def _bracket(search: _Search, start: float) -> tuple[float | None, float | None]:
    """(longest failing, shortest passing) step around `start`, doubling or halving until it flips."""
    config = search.config
    if search.passes(start):
        high = start
        for _ in range(config.max_doublings):
            if high / 2 < config.min_step_s:
                break
            if not search.passes(high / 2):
                return high / 2, high
            high /= 2
        return None, high
    low = start
    for _ in range(config.max_doublings):
        if search.passes(low * 2):
            return low, low * 2
        low *= 2
    return low, None


def _bisect(search: _Search, low: float, high: float) -> list[tuple[float, float]]:
    """`searches` bisections of (low, high] on a log scale, one round of each per iteration, interleaved by
    the round engine (rounds.InterleavedRounds, alternating); no iteration starts once the search's budget
    is spent (rounds.until_decided)."""
    brackets = [(low, high)] * search.config.searches

    def narrow(which: int) -> None:
        lower, upper = brackets[which]
        middle = math.sqrt(lower * upper)
        brackets[which] = (lower, middle) if search.passes(middle, search=which) else (middle, upper)

    budget = search.config.budget_s
    rounds = InterleavedRounds({which: functools.partial(narrow, which) for which in range(len(brackets))})
    rounds.until_decided(lambda: False, limit_s=math.inf if budget is None else budget,
                         max_rounds=search.config.iterations, planned_s=time.perf_counter() - search.started,
                         clock=time.perf_counter, fit=False)
    return brackets


def _result(search: _Search, probe: float, step_s: float | None, interval: tuple[float | None, float | None],
            answers: tuple[float, ...], note: str) -> FeedRate:
    audio = statistics.fmean(search.audio) if search.audio_known and search.audio else None
    return FeedRate(target=search.config.target, step_s=step_s, step_low_s=interval[0], step_high_s=interval[1],
                    answers=answers, free_running_batch_s=probe, audio_s_per_batch=audio,
                    trials=tuple(search.trials), note=note)
