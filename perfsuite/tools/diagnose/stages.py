"""Stages of a diagnosis that are functions of their Stage, returning their figures as records: the emulated
feed, the preset's sweep, the profiler trace; and GPU sampling around a stage."""

from __future__ import annotations

import contextlib
import functools
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from perfsuite.measure.emulated import (  # no TensorFlow
    DEFAULT_MEL,
    MIN_INTERVAL_S,
    EmulatedRunConfig,
    FeedRateConfig,
    emulated_stats,
    feed_rate,
    parse_step_time,
    run_emulated,
)
from perfsuite.measure.rounds import InterleavedRounds
from perfsuite.tools.diagnose.plan import (
    FEED_ROUND_SAMPLES,
    FEED_SEARCH_SHARE,
    MIN_FEED_S,
    Stage,
    split_budget,
    status_of,
    worst_status,
)
from perfsuite.verdict.diagnosis import feed_words
from perfsuite.verdict.diagnosis_figures import (
    DECIDED,
    SWEEP_ALPHA,
    SWEEP_AXES,
    SWEEP_BOUNDARIES,
    SWEEP_MIN_GAIN,
    SWEEP_MIN_WIN_SHARE,
    TOO_SHORT,
    UNDECIDED,
    DiagnoseSettings,
    FeedFigures,
    GpuFigures,
    SweepAxis,
    SweepPoint,
    estimate,
)


def _dataset_rounds(reads: dict, *, warmup: int) -> InterleavedRounds:
    """Interleaved rounds (A B C, C B A, ...) of reads, {label: (name, dataset, timed batches)}: each a fresh
    iterator, its first `warmup` batches untimed (timing.measure_dataset). The first round of all is a short
    warm-up (start-up, first file reads: one batch each), whose time only sizes the next round."""
    from perfsuite.measure import timing

    def measure(label):
        name, dataset, batches = reads[label]
        return timing.measure_dataset(dataset=dataset, name=name, warmup_batches=warmup,
                                      measure_batches=1 if rounds.warming_up else batches)

    rounds = InterleavedRounds({label: functools.partial(measure, label) for label in reads}, warmup_rounds=1)
    return rounds


def feed_stage(stage: Stage, sources: dict[str, Callable[[], Iterator]], *, step_time: str | None,
               mel_config=DEFAULT_MEL) -> tuple[FeedFigures, ...]:
    """Each source ({label: a function that starts its endless batch iterator}) against an emulated accelerator:
    its feed rate, then a round at step_time; what is left of the share, once the iterator is started (a
    pipeline's may drain its buffers first), split evenly over the sources still to measure. A source left with
    MIN_FEED_S or less ends the stage TOO_SHORT, saying so."""
    stage.planned(f"{len(sources)} pipeline(s): a feed-rate search each, then a round at the {step_time} step")
    out = []
    for index, (label, start) in enumerate(sources.items()):
        batches = start()
        share_s = stage.left_s() / (len(sources) - index)
        if share_s <= MIN_FEED_S:
            stage.planned(f"{label}: no time left for a feed-rate search once its iterator started (draining its "
                          f"buffers, where it does, can take the whole share): {stage.left_s():.1f} s left", TOO_SHORT)
            return tuple(out)
        figures = feed_figures(batches, label=label, step_time=step_time, share_s=share_s, mel_config=mel_config)
        out.append(figures)
        stage.rounds += 1
        stage.tell("round", f"{label}: {feed_words(figures)}")
    stage.status = DECIDED if all(f.keeps_busy is not None for f in out) else UNDECIDED
    return tuple(out)


def feed_figures(source: Iterator, *, label: str, step_time: str | None, share_s: float,
                 mel_config=DEFAULT_MEL) -> FeedFigures:
    """The feed rate of an endless batch iterator (a search of FEED_SEARCH_SHARE of share_s), then one
    round at step_time (None: no round), of FEED_ROUND_SAMPLES utilisation samples where the rest of
    share_s holds them, else of its minimum batches (too short to detect a cycle). A step the batches
    cannot give (a per-frame preset on batches without mel_len) leaves the round out, with the reason."""
    result = feed_rate(source, config=FeedRateConfig(budget_s=FEED_SEARCH_SHARE * share_s), mel_config=mel_config)
    no_round = functools.partial(FeedFigures, pipeline=label, feed=result, step_time=step_time, step_s=None,
                                 keeps_busy=None, round=None, stats=None, timeline=None)
    if step_time is None:
        return no_round(reason="no step time given (--step-time)")
    step = parse_step_time(step_time)
    try:
        first_step_s = step.seconds(next(source))
    except ValueError as error:
        return no_round(reason=f"step {step_time}: {error}; give --step-time SECONDS for a fixed step")
    fits = FEED_ROUND_SAMPLES * max(first_step_s, MIN_INTERVAL_S) <= (1 - FEED_SEARCH_SHARE) * share_s
    run = run_emulated(source, step=step, mel_config=mel_config, config=EmulatedRunConfig(
        batches=8, warmup_batches=1, min_samples=FEED_ROUND_SAMPLES if fits else 0))
    step_s = statistics.median(run.step_s)
    return FeedFigures(pipeline=label, feed=result, step_time=step_time, step_s=step_s,
                       keeps_busy=keeps_busy(result.step_s, result.step_low_s, result.step_high_s, step_s),
                       round=run.figures(), stats=emulated_stats(run), timeline=run.timeline)


def keeps_busy(fed_s: float | None, low_s: float | None, high_s: float | None, step_s: float) -> bool | None:
    """Whether a step of step_s is kept >= 90 % busy, from a feed rate's interval: True at or above its
    upper end, False at or below its lower end (a step seen to fail), None inside it."""
    if fed_s is None:  # no step up to low_s was kept busy
        return False if step_s <= low_s else None
    if step_s >= high_s:
        return True
    return False if low_s is not None and step_s <= low_s else None


def sweep_points(axis: str, settings: DiagnoseSettings) -> tuple[int, ...]:
    """The points of a sweep axis, the current setting included, in increasing order (AUTOTUNE first)."""
    if axis == "workers":
        return tuple(sorted({*settings.sweep_workers, settings.workers}))
    if axis == "batch_size":
        return tuple(sorted({*settings.sweep_batch_sizes, settings.batch_size}))
    raise ValueError(f"axis: expected one of {SWEEP_AXES}, found {axis!r}")


def sweep_stage(stage: Stage, loader, settings: DiagnoseSettings) -> tuple[SweepAxis, ...]:
    """Both SWEEP_AXES, the stage's share split between them by their number of points."""
    weights = {axis: float(len(sweep_points(axis, settings))) for axis in SWEEP_AXES}
    stage.planned(f"tf_native WAV samples/s at {int(weights['workers'])} worker counts, then at "
                   f"{int(weights['batch_size'])} batch sizes, in interleaved rounds after a warm-up round; the "
                   "share split by points")
    found = []
    for axis in SWEEP_AXES:
        share = split_budget(stage.left_s(), weights)[axis]
        weights.pop(axis)
        found.append(_sweep_axis(stage, axis, loader, settings, share))
    stage.status = worst_status(status for _, status in found)
    return tuple(figures for figures, _ in found if figures is not None)


def _sweep_axis(stage: Stage, axis: str, loader, settings: DiagnoseSettings, share_s: float):
    """(SweepAxis or None without a measured round, status): tf_native WAV samples/s at every point of the axis
    in interleaved rounds until every point's ratio to the current one is decided or share_s is spent. On the
    batch-size axis a round reads about as many samples at every point (2 batches at least), so they take as long."""
    points, current = sweep_points(axis, settings), getattr(settings, axis)
    batches = {point: settings.batches if axis == "workers" else max(2, round(settings.batches * current / point))
               for point in points}
    rounds = _dataset_rounds({point: (f"sweep-{axis}-{point}", loader(**{axis: point}),
                                      batches[point]) for point in points}, warmup=settings.warmup)

    def figures() -> SweepAxis | None:
        if not rounds.orders:
            return None
        values = {point: [m.samples_per_s for m in measured] for point, measured in rounds.values.items()}
        return sweep_figures(axis=axis, current=current, values=values, order=rounds.orders, batches=batches)

    def decided() -> bool:
        return all(point.ratio.decided for point in figures().points if point.ratio is not None)

    outcome = rounds.until_decided(decided, driver=stage.rounds_until_decided, share_s=share_s,
                                   what=f"{axis.replace('_', ' ')}: ")
    return figures(), status_of(outcome)


def sweep_figures(*, axis: str, current: int, values: dict, order=(), batches: dict | None = None) -> SweepAxis:
    """One sweep axis from per-round samples/s ({point: [per round]}, the same rounds for every point):
    per point the median, range, relative spread and interval over the rounds and, for every point but
    the current one, the same-round ratios to the current point with their paired test (stats.paired_gain:
    significant means faster beyond the round-to-round noise) and their RoundsEstimate against
    SWEEP_BOUNDARIES. order: the points' order in each round; batches: {point: steady batches per round}."""
    from perfsuite.measure import stats

    if current not in values:
        raise ValueError(f"current: expected one of the measured points {sorted(values)}, found {current!r}")
    points = []
    for point, measured in values.items():
        per_round = tuple(float(v) for v in measured)
        median = float(statistics.median(per_round))
        gain = ratio = None
        if point != current:
            paired = stats.paired_gain(candidate=per_round, reference=values[current], alpha=SWEEP_ALPHA,
                                       min_effect=SWEEP_MIN_GAIN, min_win_share=SWEEP_MIN_WIN_SHARE)
            gain, ratio = paired, estimate(paired.ratios, SWEEP_BOUNDARIES)
        points.append(SweepPoint(point=point, current=point == current, batches=(batches or {}).get(point),
                                 samples_per_s=median, samples_per_s_low=min(per_round),
                                 samples_per_s_high=max(per_round),
                                 samples_per_s_spread=(max(per_round) - min(per_round)) / median,
                                 samples_per_s_rounds=per_round, interval=estimate(per_round), vs_current=gain,
                                 ratio=ratio))
    return SweepAxis(axis=axis, current=current, rounds=len(values[current]), min_gain=SWEEP_MIN_GAIN,
                     min_win_share=SWEEP_MIN_WIN_SHARE, alpha=SWEEP_ALPHA, points=tuple(points),
                     order=tuple(tuple(labels) for labels in order))


def trace_stage(stage: Stage, step, call_s: float, dataset, trace_dir: Path, steps: int) -> str | None:
    """A TensorBoard profiler trace of `steps` steady steps (two untimed steps first) when they fit the share;
    otherwise TOO_SHORT and no trace."""
    from perfsuite._tensorflow import tensorflow

    need_s = (2 + steps) * call_s
    stage.plan = f"a profiler trace of {steps} steady steps after 2 untimed ones, about {need_s:.1f} s"
    if need_s > stage.left_s():
        stage.status = TOO_SHORT
        stage.tell("note", f"skipped: it needs about {need_s:.0f} s, {max(stage.left_s(), 0):.0f} s are left")
        return None
    stage.tell("note", stage.plan)
    profiler, iterator = tensorflow().profiler.experimental, iter(dataset)
    for _ in range(2):
        step(next(iterator)).numpy()
    trace_dir.mkdir(parents=True, exist_ok=True)
    profiler.start(str(trace_dir))
    try:
        for _ in range(steps):
            step(next(iterator)).numpy()
    finally:
        profiler.stop()
    return str(trace_dir)


def gpu_sampled(work: Callable[[], Any]) -> tuple[Any, GpuFigures]:
    """(work(), the GpuFigures of GPU sampling around it; where no GPU can be sampled, they say why)."""
    from perfsuite.errors import GpuUnavailable
    from perfsuite.measure.gpu import GpuSampler
    from perfsuite.measure.utilisation import gpu_stats

    with contextlib.ExitStack() as sampling:
        try:
            sampler = sampling.enter_context(GpuSampler())
        except GpuUnavailable as error:
            sampler, reason = None, error.reason
        result = work()
    if sampler is None:
        return result, GpuFigures(available=False, reason=reason)
    try:
        return result, GpuFigures(available=True, stats=gpu_stats(sampler.timeline), timeline=sampler.timeline)
    except ValueError as error:  # sampled, but no utilisation sample fell in the window
        return result, GpuFigures(available=True, reason=str(error), timeline=sampler.timeline)

