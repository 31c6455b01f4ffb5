"""The emulated accelerator: hold accuracy and CPU use, its timeline, the shared gates, the feed-rate search.

No GPU and no TensorFlow: batches are dicts of numpy arrays from Python generators. The timing tests
measure real sleeps on a shared machine, so they assert on medians with tolerances that hold under load.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import random
import statistics
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from perfsuite.data.audio import MelConfig
from perfsuite.measure import utilisation
from perfsuite.measure.emulated import (
    STEP_PRESETS,
    EmulatedDevice,
    EmulatedRunConfig,
    FeedRateConfig,
    StepTime,
    audio_seconds,
    batch_frames,
    emulated_figures,
    emulated_gate_metrics,
    emulated_stats,
    feed_rate,
    fixed_step,
    run_emulated,
)
from perfsuite.measure.emulated_timeline import (
    SOURCE_EMULATED,
    step_accounting,
    utilisation_timeline,
    window_coverage,
    with_coverage,
)
from perfsuite.measure.utilisation import GpuTimeline, gpu_gate_metrics, gpu_stats
from perfsuite.verdict.baselines import load_ratios
from perfsuite.verdict.gates import FAIL, PASS, check_benchmark


def batch(frames: int = 100, size: int = 4) -> dict:
    lengths = np.full(size, frames, dtype=np.int32)
    return {"mel": np.zeros((size, frames, 80), np.float32), "mel_len": lengths}


def produced(every_s: float):
    """An endless generator that takes `every_s` to produce each batch (in the consumer's thread)."""
    while True:
        time.sleep(every_s)
        yield batch()


class Prefetched:
    """Batches produced every `every_s` by a background thread into a small queue: a prefetching pipeline."""

    def __init__(self, every_s: float, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._every_s = every_s
        self._thread = threading.Thread(target=self._produce, daemon=True)
        self._thread.start()

    def _produce(self):
        while not self._stop.is_set():
            time.sleep(self._every_s)
            while not self._stop.is_set():
                try:
                    self._queue.put(batch(), timeout=0.05)
                    break
                except queue.Full:
                    continue

    def __iter__(self):
        return self

    def __next__(self):
        return self._queue.get()

    def close(self):
        self._stop.set()
        self._thread.join(1)


# ------------------------------------------------------------------------------------------------ the hold


@pytest.mark.parametrize("target_s,holds", [(0.001, 41), (0.01, 15), (0.1, 5)], ids=["1ms", "10ms", "100ms"])
def test_hold_lasts_its_target_within_a_few_percent(target_s, holds):
    device = EmulatedDevice()
    for _ in range(5):  # the sleeper learns this machine's wake-up lateness
        device.hold(target_s)
    walls = []
    for _ in range(holds):
        asked = time.perf_counter()
        device.hold(target_s)
        walls.append(time.perf_counter() - asked)
    error = statistics.median(walls) / target_s - 1
    # Measured on the loaded 2-core box: medians within ±0.7 %; single holds up to several times late
    # when another process holds both cores. 5 % on the median holds under that load.
    assert abs(error) <= 0.05, f"median hold {statistics.median(walls) * 1e3:.4f} ms for {target_s * 1e3} ms"
    # The device's own busy intervals are exact: lateness is the host's, not the step's.
    assert all(end - start == pytest.approx(target_s, abs=1e-9) for start, end in device.busy)


def test_the_host_never_goes_on_before_the_step_ends():
    # The sleeper aims early by the lateness it has seen; a host that went on at such an early wake-up
    # would produce its next batch during the step and overstate how busy the device is kept.
    device = EmulatedDevice()
    for _ in range(200):
        _, end = device.hold(0.001)
        assert time.perf_counter() >= end
    assert device.sleeper.lead_s > 0  # it did aim early


def test_hold_does_not_burn_cpu():
    device = EmulatedDevice()
    device.hold(0.02)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(10):
        device.hold(0.02)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert wall >= 0.19
    assert cpu < 0.1 * wall, f"{cpu * 1e3:.1f} ms of CPU during {wall * 1e3:.0f} ms of holds"


class Asleep:
    """A sleeper that returns at once: the host 'wakes' before the device has finished its step."""

    def until(self, deadline):
        pass


def test_a_step_handed_over_before_the_previous_one_ended_queues_behind_it():
    now = [0.0]
    device = EmulatedDevice(sleeper=Asleep(), clock=lambda: now[0])
    assert device.hold(1.0) == (0.0, 1.0)
    assert device.hold(1.0) == (1.0, 2.0)  # the host came back at 0.0: the device was still busy
    now[0] = 2.5  # a late host: the device idles from 2.0 to 2.5
    assert device.hold(0.5) == (2.5, 3.0)


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan")])
def test_hold_needs_a_positive_time(seconds):
    with pytest.raises(ValueError, match=r"seconds: expected a device time > 0, found"):
        EmulatedDevice().hold(seconds)


# ----------------------------------------------------------------------------------------- step times


def test_step_time_fixed_and_per_frame():
    assert fixed_step(0.02).seconds(batch()) == 0.02
    padded = {"mel": np.zeros((4, 100, 80)), "mel_len": np.array([100, 50, 50, 0])}
    per_padded = StepTime(fixed_s=0.001, per_frame_s=1e-5)
    assert per_padded.seconds(padded) == pytest.approx(0.001 + 1e-5 * 400)
    assert StepTime(per_frame_s=1e-5, frames="true").seconds(padded) == pytest.approx(1e-5 * 200)
    assert batch_frames(padded) == 400 and batch_frames(padded, frames="true") == 200


def test_step_time_errors_name_the_field():
    with pytest.raises(ValueError, match=r"StepTime: expected fixed_s ≥ 0 and per_frame_s ≥ 0, not both 0"):
        StepTime()
    with pytest.raises(ValueError, match=r"StepTime.frames: expected one of \('padded', 'true'\), found 'all'"):
        StepTime(fixed_s=1, frames="all")
    with pytest.raises(ValueError, match=r"batch: expected a dict with 'mel_len' to count true frames, found"):
        batch_frames({"mel": np.zeros((1, 2, 3))}, frames="true")


def test_presets_name_their_source_and_count_true_frames():
    assert STEP_PRESETS
    for name, preset in STEP_PRESETS.items():
        assert preset.frames == "true" and preset.fixed_s == 0
        assert "DeepLearningExamples" in preset.source and "frames/s" in preset.source
        published = int(preset.source.rsplit(", ", 1)[1].split()[0].replace(",", ""))
        assert preset.per_frame_s == pytest.approx(1 / published), name


def test_audio_seconds_from_mel_lengths():
    config = MelConfig()
    assert audio_seconds(batch(frames=100, size=4), config) == pytest.approx(400 * 256 / 22050)
    assert audio_seconds({"mel": np.zeros((1, 2, 3))}) is None


# ------------------------------------------------------------------------------------------- timeline


def test_timeline_samples_the_busy_share_of_each_interval():
    timeline = utilisation_timeline([(10.0, 10.5), (10.9, 11.0)], start=10.0, end=11.1, interval_s=0.25)
    assert isinstance(timeline, GpuTimeline)
    series = timeline.devices[0]
    assert series.source == SOURCE_EMULATED
    assert series.util == pytest.approx((100.0, 100.0, 0.0, 40.0))  # the partial fifth interval is left out
    assert series.util_timestamps == pytest.approx((10.25, 10.5, 10.75, 11.0))
    assert series.mem_used == () and timeline.complete


SHIPPED_RATIOS = Path(__file__).parents[1] / "benchmarks" / "baselines" / "ratios.yaml"


def missing_samples(timeline: GpuTimeline, keep) -> GpuTimeline:
    """The timeline with only the samples whose index `keep` admits, marked complete: the coverage rule
    on its own (a run's timeline lays its samples on an even grid, so it misses none; what goes wrong in
    a run, a lost step or a held-up loop, is tested on real runs with the step accounting below)."""
    series = timeline.devices[0]
    kept = [i for i in range(len(series.util)) if keep(i)]
    series = dataclasses.replace(series, util=tuple(series.util[i] for i in kept),
                                 util_timestamps=tuple(series.util_timestamps[i] for i in kept))
    return dataclasses.replace(timeline, devices=(series,), complete=True, error=None)


def complete_verdict(timelines) -> str:
    """The shipped emulated_complete gate on these timelines as rounds, decided as a user's run decides it."""
    per_round = [float(emulated_gate_metrics(gpu_stats(with_coverage(t)))["emulated_complete"]) for t in timelines]
    check = check_benchmark(profile=None, ratios=load_ratios(SHIPPED_RATIOS), benchmark_id="emulated",
                            metrics={"emulated_complete": statistics.median(per_round)},
                            rounds={"emulated_complete": per_round})
    (verdict,) = check.verdicts
    return verdict.decision


def test_a_timeline_that_covers_its_window_is_complete_and_passes_the_complete_gate():
    steps = [(i * 0.05, (i + 1) * 0.05 - 0.001) for i in range(40)]
    timeline = utilisation_timeline(steps, start=0.0, end=2.03, interval_s=0.05)
    coverage = window_coverage(timeline)
    assert timeline.complete and timeline.error is None and coverage.samples == 40
    assert coverage.covered_share == pytest.approx(2.0 / 2.03) and coverage.longest_gap_s == pytest.approx(0.05)
    assert complete_verdict([timeline] * 5) == PASS


@pytest.mark.parametrize("missed,keep", [("the middle", lambda i: not 15 <= i < 20),
                                         ("the end", lambda i: i < 30), ("one sample", lambda i: i != 7)])
def test_the_coverage_rule_fails_a_timeline_that_misses_part_of_the_window(missed, keep):
    steps = [(i * 0.05, (i + 1) * 0.05) for i in range(40)]
    timeline = missing_samples(utilisation_timeline(steps, start=0.0, end=2.0, interval_s=0.05), keep)
    marked = with_coverage(timeline)
    assert not marked.complete and "gap of" in marked.error, missed
    assert complete_verdict([marked] * 5) == FAIL
    upstream = dataclasses.replace(timeline, complete=False, error="NVML: lost the device")
    assert with_coverage(upstream).error == "NVML: lost the device"  # its own error is kept


def test_a_window_with_too_few_samples_is_incomplete():
    timeline = utilisation_timeline([(0.0, 0.1)], start=0.0, end=0.19, interval_s=0.1)  # one sample, 53 %
    assert not timeline.complete and "cover 53% of the 0.19 s window" in timeline.error


def test_a_run_s_timeline_covers_its_window():
    run = run_emulated(produced(0.002), step=0.01, config=EmulatedRunConfig(batches=4, min_samples=10))
    assert run.timeline.complete, run.timeline.error
    assert run.figures().timeline_covered_share >= 0.9


class LosingDevice(EmulatedDevice):
    """An emulated device that loses the record of its `lose`-th measured step (1-based): the step runs,
    the timeline never hears of it."""

    def __init__(self, lose: int):
        super().__init__()
        self.lose, self.held = lose, 0

    def clear(self):
        super().clear()
        self.held = 0

    def hold(self, seconds):
        interval = super().hold(seconds)
        self.held += 1
        if self.held == self.lose:
            self.busy.pop()
        return interval


class StalledDevice(EmulatedDevice):
    """An emulated device whose hand-over stalls for `stall_s` before the `at`-th measured step: time the
    loop spends that is neither the device's, the pipeline's nor a late wake-up."""

    def __init__(self, *, at: int, stall_s: float):
        super().__init__()
        self.at, self.stall_s, self.held = at, stall_s, 0

    def clear(self):
        super().clear()
        self.held = 0

    def hold(self, seconds):
        self.held += 1
        if self.held == self.at:
            time.sleep(self.stall_s)
        return super().hold(seconds)


ACCOUNTED = EmulatedRunConfig(batches=4, warmup_batches=1, min_samples=12)


def test_a_round_accounts_for_every_step_and_its_window():
    run = run_emulated(produced(0.001), step=0.01, config=ACCOUNTED)
    accounting = run.accounting
    assert accounting.steps_run == accounting.steps_in_timeline == len(run.step_s) >= ACCOUNTED.batches
    assert accounting.busy_s == pytest.approx(sum(run.step_s))
    assert accounting.unaccounted_s <= 0.05 * accounting.window_s
    assert run.timeline.complete, run.timeline.error
    assert emulated_gate_metrics(emulated_stats(run))["emulated_complete"] is True


def test_a_round_that_loses_a_step_is_incomplete_and_fails_the_complete_gate():
    run = run_emulated(produced(0.001), step=0.01, config=ACCOUNTED, device=LosingDevice(lose=5))
    assert run.accounting.steps_in_timeline == run.accounting.steps_run - 1
    assert not run.timeline.complete
    assert f"{run.accounting.steps_run} step(s) ran, {run.accounting.steps_run - 1} of them" in run.timeline.error
    assert complete_verdict([run.timeline] * 5) == FAIL


def test_a_loop_held_up_outside_the_pipeline_and_the_device_is_incomplete():
    run = run_emulated(produced(0.001), step=0.01, config=ACCOUNTED, device=StalledDevice(at=4, stall_s=0.1))
    assert run.accounting.steps_in_timeline == run.accounting.steps_run
    assert run.accounting.unaccounted_s >= 0.1
    assert not run.timeline.complete and "neither busy, waiting on the pipeline nor a late wake-up" in run.timeline.error
    assert complete_verdict([run.timeline] * 5) == FAIL


def test_waits_and_late_wake_ups_are_accounted_not_the_loop_s():
    busy = [(1.0, 2.0), (3.0, 4.0), (4.5, 5.0)]
    accounting = step_accounting(busy, [2.2, 4.1, 5.3], steps=[1.0, 1.0, 0.5], waits=[0.0, 0.8, 0.4],
                                 start=1.0, end=5.0)
    assert accounting.steps_in_timeline == 3 and accounting.busy_s == pytest.approx(2.5)
    assert accounting.late_s == pytest.approx(0.3)  # the last step's wake-up is after the window
    assert accounting.unaccounted_s == pytest.approx(4.0 - 2.5 - 1.2 - 0.3)
    shorter = step_accounting(busy, [2.2, 4.1, 5.3], steps=[1.0, 0.9, 0.5], waits=[0.0, 0.8, 0.4], start=1.0, end=5.0)
    assert shorter.steps_in_timeline == 2 and "3 step(s) ran, 2 of them" in shorter.problem


def duty_cycle(*, on: int, off: int, cycles: int, interval: float = 0.01) -> list[tuple[float, float]]:
    period = (on + off) * interval
    return [(c * period, c * period + on * interval) for c in range(cycles)]


def test_a_steady_full_busy_timeline_passes_the_gpu_gates():
    steps = [(i * 0.05, (i + 1) * 0.05) for i in range(80)]  # back to back
    stats = gpu_stats(utilisation_timeline(steps, start=0.0, end=4.0, interval_s=0.05))
    metrics = gpu_gate_metrics(stats)
    assert metrics["gpu_util_median"] == pytest.approx(100.0)
    assert metrics["gpu_idle_fraction"] == 0.0
    assert metrics["gpu_oscillation"] is False
    assert stats.starvation_episodes == 0 and stats.longest_starvation_s is None
    assert metrics["gpu_util_median"] >= utilisation.MIN_UTIL_MEDIAN_PCT
    assert metrics["gpu_idle_fraction"] <= utilisation.MAX_IDLE_FRACTION


def test_a_planted_duty_cycle_is_an_oscillation_with_its_period():
    # 4 samples busy, 12 idle: the 25 % busy on/off cycle of a starved device, 0.16 s period.
    busy = duty_cycle(on=4, off=12, cycles=12)
    stats = gpu_stats(utilisation_timeline(busy, start=0.0, end=12 * 0.16, interval_s=0.01))
    assert stats.oscillation.significant
    assert stats.oscillation.period == 16
    assert stats.oscillation_period_s == pytest.approx(0.16)
    assert stats.oscillation_swing == pytest.approx(100.0)
    assert stats.idle_fraction == pytest.approx(0.75)
    assert stats.util_median == 0.0
    assert stats.starvation_episodes == 12 and stats.longest_starvation_s == pytest.approx(0.12)
    assert gpu_gate_metrics(stats)["gpu_oscillation"] is True


def test_a_starved_timeline_fails_the_idle_and_median_gates():
    rng = random.Random(7)
    busy, t = [], 0.0
    for _ in range(40):  # 10 ms steps, each after an irregular 40-120 ms wait for its batch
        t += rng.uniform(0.04, 0.12)
        busy.append((t, t + 0.01))
        t += 0.01
    stats = gpu_stats(utilisation_timeline(busy, start=0.0, end=t, interval_s=0.01))
    metrics = gpu_gate_metrics(stats)
    assert metrics["gpu_idle_fraction"] > utilisation.MAX_IDLE_FRACTION
    assert metrics["gpu_util_median"] < utilisation.MIN_UTIL_MEDIAN_PCT
    assert stats.starvation_episodes >= 35


def test_hand_over_gaps_at_full_load_are_a_ripple_not_an_oscillation():
    # 50 ms steps with a 1.5 ms hand-over gap. Sampled once per step (run_emulated's default) each sample
    # misses at most the one gap, a ripple of 3 points; sampled every 10 ms, every fifth or sixth sample
    # dips by 15 points in a regular beat, which the cycle detector reports.
    busy = [(i * 0.0515, i * 0.0515 + 0.05) for i in range(120)]
    per_step = gpu_stats(utilisation_timeline(busy, start=0.0, end=120 * 0.0515, interval_s=0.05))
    assert not per_step.oscillation.significant
    assert per_step.util_median >= utilisation.MIN_UTIL_MEDIAN_PCT and per_step.idle_fraction == 0.0
    fine = gpu_stats(utilisation_timeline(busy, start=0.0, end=120 * 0.0515, interval_s=0.01))
    assert fine.oscillation.significant and fine.oscillation_swing == pytest.approx(15, abs=1)


def test_a_regular_ripple_below_the_swing_floor_is_not_an_oscillation():
    ripple = [97.0 if i % 6 == 0 else 100.0 for i in range(120)]
    timeline = utilisation_timeline([], start=0.0, end=0.0)
    series = timeline.devices[0].__class__(
        index=0, name="planted", source=SOURCE_EMULATED, util_timestamps=tuple(0.01 * i for i in range(120)),
        util=tuple(ripple), timestamps=(), mem_util=(), mem_used=(), sm_clock=())
    planted = GpuTimeline(start=0.0, end=1.2, interval_s=0.01, devices=(series,), complete=True, error=None)
    stats = gpu_stats(planted)
    assert not stats.oscillation.significant
    assert stats.oscillation.period is None and stats.oscillation_period_s is None
    assert "a ripple, not an oscillation" in stats.oscillation.note and "swings 3.0 points" in stats.oscillation.note
    assert stats.oscillation_swing == pytest.approx(3.0)
    assert gpu_stats(planted, min_swing=2.0).oscillation.significant


def test_emulated_metrics_are_the_gpu_ones_renamed():
    busy = duty_cycle(on=4, off=12, cycles=12)
    stats = gpu_stats(utilisation_timeline(busy, start=0.0, end=12 * 0.16, interval_s=0.01))
    assert emulated_gate_metrics(stats) == {
        "emulated_util_median": stats.util_median,
        "emulated_idle_fraction": stats.idle_fraction,
        "emulated_oscillation": True,
        "emulated_complete": True,
    }
    figures = emulated_figures(stats)
    assert all(key.startswith("emulated_") for key in figures)
    assert figures["emulated_oscillation_period_s"] == pytest.approx(0.16)
    assert json.loads(json.dumps(figures, allow_nan=False)) == figures


# ------------------------------------------------------------------------------------------------ a run


def test_a_run_over_a_slow_source_measures_its_share():
    # The source takes 5 ms per batch in the consumer's thread (no prefetch): busy = 20 / (20 + 5).
    run = run_emulated(produced(0.005), step=0.02, config=EmulatedRunConfig(batches=12, min_samples=0))
    assert len(run.step_s) == 12 and len(run.busy) == 12
    assert run.busy_fraction == pytest.approx(0.8, abs=0.06)
    assert statistics.median(run.wait_s) == pytest.approx(0.005, abs=0.003)
    assert run.audio_s == pytest.approx(12 * 400 * 256 / 22050)
    assert run.audio_s_per_s == pytest.approx(run.audio_s / run.duration_s)
    stats = emulated_stats(run)
    assert stats.device_name == "emulated accelerator" and stats.source == SOURCE_EMULATED
    assert stats.sample_spacing_s == pytest.approx(0.02)  # one sample per step by default
    assert json.loads(json.dumps(run.as_dict(), allow_nan=False)) == run.as_dict()


def test_a_run_takes_enough_steps_for_the_cycle_detector():
    run = run_emulated(produced(0.0), step=0.01, config=EmulatedRunConfig(batches=2, min_samples=32))
    assert len(run.timeline.devices[0].util) >= 32
    assert run.timeline.devices[0].util_timestamps[-1] <= run.end + 1e-9


class LateSleeper:
    """Returns `late_s` after every deadline, as a busy host's wake-up does."""

    def __init__(self, late_s: float):
        self.late_s = late_s

    def until(self, deadline: float) -> None:
        time.sleep(max(0.0, deadline - time.perf_counter()) + self.late_s)


def test_a_late_host_does_not_cut_the_window_short_of_its_samples():
    device = EmulatedDevice(sleeper=LateSleeper(0.05))  # steps 60 ms apart, the window ends 50 ms before the host goes on
    run = run_emulated(produced(0.0), step=0.01, config=EmulatedRunConfig(batches=2, min_samples=32), device=device)
    assert len(run.timeline.devices[0].util) >= 32


def test_a_run_needs_enough_batches():
    with pytest.raises(ValueError, match=r"batches: expected at least 2 warm-up \+ 5 batches, found 3"):
        run_emulated(iter([batch()] * 3), step=0.001, config=EmulatedRunConfig(batches=5, min_samples=0))


@pytest.mark.parametrize("field,value", [("batches", 0), ("min_samples", -1), ("interval_s", 0.0)])
def test_run_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"EmulatedRunConfig.{field}: expected"):
        EmulatedRunConfig(**{field: value})


# -------------------------------------------------------------------------------------------- feed rate


SEARCH = FeedRateConfig(searches=3, iterations=3, probe_batches=4,
                        run=EmulatedRunConfig(batches=6, warmup_batches=2, min_seconds=0.05, min_samples=0))


def test_feed_rate_of_a_prefetching_source_is_its_production_time():
    # Produced every 10 ms in the background: a step of at least ~9 ms is kept 90 % busy.
    source = Prefetched(0.01)
    try:
        result = feed_rate(source, config=SEARCH)
    finally:
        source.close()
    assert result.step_s is not None and result.step_low_s is not None
    assert 0.006 <= result.step_s <= 0.015, result.as_dict()
    assert len(result.answers) == SEARCH.searches
    assert result.step_low_s < min(result.answers) <= result.step_s <= max(result.answers) == result.step_high_s
    for search in range(SEARCH.searches):  # one round per bisection and iteration
        assert sum(1 for t in result.trials if t.search == search) == SEARCH.iterations
    assert [t.search for t in result.trials if t.search is not None] == [0, 1, 2, 2, 1, 0, 0, 1, 2]  # alternating
    assert result.steps_per_s == pytest.approx(1 / result.step_s)
    assert result.steps_per_s_interval == pytest.approx((1 / result.step_high_s, 1 / result.step_low_s))
    assert result.audio_s_per_s == pytest.approx(400 * 256 / 22050 / result.step_s)
    assert json.loads(json.dumps(result.as_dict(), allow_nan=False)) == result.as_dict()


def test_feed_rate_of_a_source_without_prefetch_needs_nine_times_its_production_time():
    # 3 ms per batch in the consumer's thread: busy = s / (s + 3 ms) ≥ 0.9 from s = 27 ms on an idle
    # machine. Load only lengthens the host's gaps, so 27 ms is a floor, not a figure: with three
    # processes on 2 cores answers up to 108 ms were seen. A host that went on before each step ended
    # (an early wake-up) overlapped the batch with the step and passed at 1 ms.
    result = feed_rate(produced(0.003), config=SEARCH)
    assert result.step_s is not None
    assert result.step_s >= 0.018, result.as_dict()
    assert result.free_running_batch_s == pytest.approx(0.003, abs=0.002)


def test_feed_rate_says_when_the_shortest_step_searched_is_fed():
    # A source with no cost at a 50 ms floor: the host's own gap (tens of µs; a few ms on a loaded CI box)
    # is far below 10 % of it.
    result = feed_rate(produced(0.0), config=FeedRateConfig(
        searches=1, iterations=1, min_step_s=0.05, run=EmulatedRunConfig(batches=4, min_samples=0)))
    assert result.step_s == 0.05 and result.step_low_s is None and result.steps_per_s_interval[1] is None
    assert "may feed faster still" in result.note


def test_feed_rate_stops_bisecting_when_its_budget_is_spent():
    config = FeedRateConfig(searches=2, iterations=5, probe_batches=2, budget_s=1e-9,
                            run=EmulatedRunConfig(batches=3, warmup_batches=1, min_samples=0))
    result = feed_rate(produced(0.002), config=config)
    assert all(trial.search is None for trial in result.trials)  # the bracket only
    assert result.step_low_s is not None and result.step_high_s == pytest.approx(2 * result.step_low_s)


@pytest.mark.parametrize("field,value", [("target", 1.0), ("searches", 0), ("min_step_s", 0), ("budget_s", 0)])
def test_feed_rate_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"FeedRateConfig.{field}: expected"):
        FeedRateConfig(**{field: value})
