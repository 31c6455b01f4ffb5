"""GPU sampler tests against a fake NVML: no GPU, no driver, no TensorFlow needed.

The fake is driven by a simulated wall clock that advances one tick per call, so the sampled timeline
(a planted on/off duty cycle) is the same however the threads are scheduled.
"""

from __future__ import annotations

import json
import random
import re
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from perfsuite.measure import gpu, utilisation
from perfsuite.measure.gpu import (
    CAUSE_DRIVER_NOT_LOADED,
    CAUSE_NO_DEVICE,
    CAUSE_NVML_MISSING,
    CAUSE_PERMISSION_DENIED,
    SAMPLER_THREAD_NAME,
    SOURCE_DRIVER_BUFFER,
    SOURCE_POLLING,
    GpuIdentity,
    GpuSampler,
    GpuUnavailable,
    gpu_identity,
    select_devices,
)
from perfsuite.measure.utilisation import DeviceTimeline, GpuTimeline, gpu_gate_metrics, gpu_stats

STEP_S = 1 / 16  # exact in binary, so tick times and their microsecond stamps compare exactly
ORIGIN_S = 1_700_000_000.0
PERIOD = 16  # ticks: one second
ON_TICKS = 4  # 25 % busy at 40 %, 75 % at 2 %: the reported 2 %..40 % oscillation
HIGH, LOW = 40, 2
RUN_TICKS = 12 * PERIOD


# ------------------------------------------------------------------------------------------ the fake NVML


class FakeNVMLError(Exception):
    pass


class FakeClock:
    """Wall clock in seconds that advances by STEP_S on every call."""

    def __init__(self) -> None:
        self.tick = 0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.tick += 1
            return self.time_of(self.tick)

    @staticmethod
    def time_of(tick: int) -> float:
        return ORIGIN_S + tick * STEP_S

    def wait_for_tick(self, tick: int, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.tick < tick:
            assert time.monotonic() < deadline, f"fake clock stuck at tick {self.tick}, waiting for {tick}"
            time.sleep(0.001)


def duty_cycle(tick: int) -> int:
    return HIGH if tick % PERIOD < ON_TICKS else LOW


class FakeNvml:
    """Module-shaped stand-in for pynvml: the functions and constants gpu.py uses."""

    NVMLError = FakeNVMLError
    NVMLError_LibraryNotFound = type("NVMLError_LibraryNotFound", (FakeNVMLError,), {})
    NVMLError_DriverNotLoaded = type("NVMLError_DriverNotLoaded", (FakeNVMLError,), {})
    NVMLError_NoPermission = type("NVMLError_NoPermission", (FakeNVMLError,), {})
    NVMLError_NotSupported = type("NVMLError_NotSupported", (FakeNVMLError,), {})
    NVMLError_NotFound = type("NVMLError_NotFound", (FakeNVMLError,), {})
    NVMLError_GpuIsLost = type("NVMLError_GpuIsLost", (FakeNVMLError,), {})
    NVMLError_Unknown = type("NVMLError_Unknown", (FakeNVMLError,), {})
    NVML_GPU_UTILIZATION_SAMPLES = 1
    NVML_CLOCK_SM = 1
    NVML_VALUE_TYPE_DOUBLE = 0
    NVML_VALUE_TYPE_UNSIGNED_INT = 1

    def __init__(
        self,
        *,
        clock: FakeClock,
        util=duty_cycle,
        polled_util=None,
        names=("Fake GPU A",),
        uuids=None,
        buffer=True,
        buffer_capacity=120,
        buffer_lead=0,
        init_error=None,
        handle_error=None,
        fail_in=None,
        fail_at_tick=0,
        fail_with=None,
        hang_in=None,
    ):
        self.clock = clock
        self.util = util
        self.polled_util = polled_util or util
        self.names = names
        self.uuids = uuids or [f"GPU-{i:04d}-fake" for i in range(len(names))]
        self.buffer = buffer
        self.buffer_capacity = buffer_capacity
        self.buffer_lead = buffer_lead  # samples stamped after "now": written after the window closed
        self.init_error = init_error
        self.handle_error = handle_error
        self.fail_in = fail_in
        self.fail_at_tick = fail_at_tick
        self.fail_with = fail_with or self.NVMLError_GpuIsLost("GPU is lost")
        self.hang_in = hang_in
        self.failed = threading.Event()
        self.hanging = threading.Event()
        self.release = threading.Event()
        self.inits = 0
        self.shutdowns = 0
        self.buffer_reads = 0

    def _hook(self, name: str) -> None:
        if name == self.fail_in and self.clock.tick >= self.fail_at_tick:
            self.failed.set()
            raise self.fail_with
        if name == self.hang_in:
            self.hanging.set()
            self.release.wait(10)

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index):
        if self.handle_error is not None:
            raise self.handle_error
        assert 0 <= index < len(self.names)
        return SimpleNamespace(index=index)

    def nvmlDeviceGetName(self, handle):
        return self.names[handle.index].encode()  # older bindings return bytes

    def nvmlDeviceGetUUID(self, handle):
        return self.uuids[handle.index]

    def nvmlSystemGetDriverVersion(self):
        self._hook("nvmlSystemGetDriverVersion")
        return "555.42"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12050  # NVML's encoding of CUDA 12.5

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        self._hook("nvmlDeviceGetEnforcedPowerLimit")
        return 699_600 + handle.index  # milliwatts

    def nvmlDeviceGetUtilizationRates(self, handle):
        self._hook("nvmlDeviceGetUtilizationRates")
        tick = self.clock.tick
        return SimpleNamespace(gpu=self.polled_util(tick), memory=self.polled_util(tick) // 2)

    def nvmlDeviceGetMemoryInfo(self, handle):
        self._hook("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=1_000_000 * self.clock.tick, total=80 * 2**30)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        assert kind == self.NVML_CLOCK_SM
        return 1400 + self.clock.tick % 3

    def nvmlDeviceGetSamples(self, handle, sampling_type, last_seen_us):
        self._hook("nvmlDeviceGetSamples")
        self.buffer_reads += 1
        if not self.buffer:
            raise self.NVMLError_NotSupported("Not Supported")
        assert sampling_type == self.NVML_GPU_UTILIZATION_SAMPLES
        newest = self.clock.tick + self.buffer_lead
        ticks = range(newest - self.buffer_capacity + 1, newest + 1)
        samples = [
            SimpleNamespace(timeStamp=stamp, sampleValue=SimpleNamespace(uiVal=self.util(tick)))
            for tick in ticks
            if (stamp := round(FakeClock.time_of(tick) * 1e6)) > last_seen_us
        ]
        if not samples:
            raise self.NVMLError_NotFound("Not Found")
        # A ring buffer read need not be in time order.
        return self.NVML_VALUE_TYPE_UNSIGNED_INT, samples[::-1]


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == SAMPLER_THREAD_NAME]


@pytest.fixture(autouse=True)
def _no_visible_devices_env_and_no_leftover_thread(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield
    assert sampler_threads() == []


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    # The fake clock advances a tick (62.5 ms) per call while the sampler waits 1 ms of real time, so in
    # the fake's time every sample is dozens of intervals after the last: coverage cannot be judged on
    # it. It is judged on the real sampler thread and its real clock below ("Coverage").
    monkeypatch.setattr(utilisation, "MAX_GAP_INTERVALS", float("inf"))
    return FakeClock()


def use(monkeypatch, fake: FakeNvml) -> FakeNvml:
    monkeypatch.setattr(gpu, "_load_nvml", lambda: fake)
    return fake


def run_window(fake: FakeNvml, *, ticks: int = RUN_TICKS, **sampler_args) -> GpuTimeline:
    with GpuSampler(interval_s=0.001, clock=fake.clock, **sampler_args) as sampler:
        fake.clock.wait_for_tick(fake.clock.tick + ticks)
    assert sampler_threads() == []
    assert fake.inits == fake.shutdowns == 1
    return sampler.timeline


# ----------------------------------------------------------------------------------- planted duty cycle


def test_polling_timeline_of_a_planted_duty_cycle(monkeypatch, clock):
    fake = use(monkeypatch, FakeNvml(clock=clock, buffer=False))
    timeline = run_window(fake)
    stats = gpu_stats(timeline)

    assert timeline.complete and timeline.error is None
    assert timeline.source == SOURCE_POLLING
    assert stats.source == SOURCE_POLLING
    assert stats.samples >= RUN_TICKS
    assert stats.util_median == LOW
    assert stats.idle_fraction == pytest.approx(1 - ON_TICKS / PERIOD, abs=0.03)
    assert stats.util_mean == pytest.approx((ON_TICKS * HIGH + (PERIOD - ON_TICKS) * LOW) / PERIOD, abs=1.0)
    assert stats.variation_ratio > 1.0  # std/mean of a 2 %..40 % square wave: about 1.4
    assert stats.sample_spacing_s == pytest.approx(STEP_S)
    assert stats.oscillation.significant
    assert stats.oscillation.period == PERIOD
    assert stats.oscillation_period_s == pytest.approx(PERIOD * STEP_S)


def test_driver_buffer_is_preferred_to_polling(monkeypatch, clock):
    # The polled utilisation is a constant 77 %, so any 77 in the series would come from polling.
    fake = use(monkeypatch, FakeNvml(clock=clock, buffer=True, polled_util=lambda tick: 77))
    timeline = run_window(fake)
    series = timeline.devices[0]
    stats = gpu_stats(timeline)

    assert series.source == SOURCE_DRIVER_BUFFER
    assert set(series.util) == {HIGH, LOW}
    assert set(series.mem_util) == {77 // 2}  # memory utilisation is still polled
    assert stats.util_median == LOW
    assert stats.oscillation.significant and stats.oscillation.period == PERIOD
    assert stats.extra_info()["gpu_source"] == SOURCE_DRIVER_BUFFER


def test_buffer_samples_are_every_driver_sample_inside_the_window_only(monkeypatch, clock):
    # The buffer holds 120 samples from before the window and 10 stamped after it closed.
    fake = use(monkeypatch, FakeNvml(clock=clock, buffer=True, buffer_lead=10))
    timeline = run_window(fake, ticks=3 * PERIOD)
    series = timeline.devices[0]

    first = round((timeline.start - ORIGIN_S) / STEP_S) + 1
    last = round((timeline.end - ORIGIN_S) / STEP_S)
    assert series.util_timestamps == tuple(FakeClock.time_of(t) for t in range(first, last + 1))
    assert series.util == tuple(duty_cycle(t) for t in range(first, last + 1))
    assert all(timeline.start <= t <= timeline.end for t in series.timestamps)


def test_polled_series_are_aligned_and_inside_the_window(monkeypatch, clock):
    fake = use(monkeypatch, FakeNvml(clock=clock, buffer=False))
    timeline = run_window(fake, ticks=2 * PERIOD)
    series = timeline.devices[0]

    assert len(series.timestamps) == len(series.mem_used) == len(series.sm_clock) == len(series.mem_util)
    assert series.timestamps == series.util_timestamps
    assert list(series.timestamps) == sorted(series.timestamps)
    assert timeline.start < series.timestamps[0] and series.timestamps[-1] <= timeline.end
    ticks = [round((t - ORIGIN_S) / STEP_S) for t in series.timestamps]
    assert list(series.mem_used) == [1_000_000 * t for t in ticks]
    assert list(series.sm_clock) == [1400 + t % 3 for t in ticks]
    assert list(series.util) == [duty_cycle(t) for t in ticks]
    assert series.name == "Fake GPU A"


def test_use_driver_buffer_false_only_polls(monkeypatch, clock):
    fake = use(monkeypatch, FakeNvml(clock=clock, buffer=True, polled_util=lambda tick: 77))
    timeline = run_window(fake, ticks=PERIOD, use_driver_buffer=False)

    assert fake.buffer_reads == 0
    assert timeline.devices[0].source == SOURCE_POLLING
    assert set(timeline.devices[0].util) == {77}


def test_steady_utilisation_has_no_oscillation(monkeypatch, clock):
    rng = random.Random(5)
    noise = {}

    def busy(tick):
        return noise.setdefault(tick, 95 + rng.randint(-3, 3))

    fake = use(monkeypatch, FakeNvml(clock=clock, buffer=False, util=busy))
    stats = gpu_stats(run_window(fake))

    assert 92 <= stats.util_median <= 98
    assert stats.idle_fraction == 0.0
    assert stats.variation_ratio < 0.05
    assert not stats.oscillation.significant
    assert stats.oscillation_period_s is None
    metrics = gpu_gate_metrics(stats)
    assert metrics["gpu_util_median"] >= utilisation.MIN_UTIL_MEDIAN_PCT
    assert metrics["gpu_idle_fraction"] <= utilisation.MAX_IDLE_FRACTION
    assert metrics["gpu_oscillation"] is False
    assert metrics["gpu_complete"] is True


def test_stats_extra_info_is_flat_json_and_as_dict_the_record(monkeypatch, clock):
    fake = use(monkeypatch, FakeNvml(clock=clock, buffer=False))
    stats = gpu_stats(run_window(fake))
    assert type(stats).from_dict(json.loads(json.dumps(stats.as_dict(), allow_nan=False))) == stats
    info = stats.extra_info()

    assert json.loads(json.dumps(info, allow_nan=False)) == info
    assert all(not isinstance(v, (dict, list)) for v in info.values())
    assert info["gpu_util_median"] == LOW
    assert info["gpu_oscillation"] is True
    assert info["gpu_oscillation_period_samples"] == PERIOD
    assert info["gpu_oscillation_period_s"] == pytest.approx(1.0)
    assert info["gpu_complete"] is True and info["gpu_error"] is None
    assert info["gpu_samples"] == stats.samples
    assert gpu_gate_metrics(stats) == {
        "gpu_util_median": LOW,
        "gpu_idle_fraction": stats.idle_fraction,
        "gpu_oscillation": True,
        "gpu_complete": True,
    }


# --------------------------------------------------------------------------------- statistics by hand


def timeline_of(util, *, complete=True, error=None, index=0) -> GpuTimeline:
    stamps = tuple(float(i) for i in range(len(util)))
    device = DeviceTimeline(
        index=index,
        name="hand-made",
        source=SOURCE_POLLING,
        util_timestamps=stamps,
        util=tuple(float(u) for u in util),
        timestamps=stamps,
        mem_util=tuple(0.0 for _ in util),
        mem_used=tuple(0 for _ in util),
        sm_clock=tuple(0 for _ in util),
    )
    return GpuTimeline(start=-1.0, end=float(len(util)), interval_s=1.0, devices=(device,),
                       complete=complete, error=error)


def test_idle_means_strictly_below_the_threshold():
    stats = gpu_stats(timeline_of([9.9, 10.0, 50.0, 0.0]))
    assert stats.idle_fraction == 0.5
    assert gpu_stats(timeline_of([9.9, 10.0, 50.0, 0.0]), idle_threshold=50.5).idle_fraction == 1.0


def test_constant_utilisation_has_zero_variation_ratio():
    assert gpu_stats(timeline_of([0.0] * 40)).variation_ratio == 0.0
    assert gpu_stats(timeline_of([60.0] * 40)).variation_ratio == 0.0
    assert gpu_stats(timeline_of([30.0, 90.0] * 20)).variation_ratio == pytest.approx(0.5 * (40 / 39) ** 0.5)


def test_an_idle_gpu_and_a_short_window_give_json_safe_stats():
    idle = gpu_stats(timeline_of([0.0] * 40))
    assert (idle.util_median, idle.idle_fraction, idle.variation_ratio) == (0.0, 1.0, 0.0)
    assert not idle.oscillation.significant
    short = gpu_stats(timeline_of([5.0, 50.0] * 5))
    assert not short.oscillation.significant and "too few points" in short.oscillation.note
    for stats in (idle, short):
        info = stats.extra_info()
        assert json.loads(json.dumps(info, allow_nan=False)) == info


def test_oscillation_at_high_utilisation_is_detected_too():
    # Utilisation is analysed linearly: a 60 %..98 % swing is as visible as 2 %..40 %.
    rng = random.Random(3)
    wave = [(98.0 if i % 8 < 4 else 60.0) + rng.uniform(-1, 1) for i in range(128)]
    stats = gpu_stats(timeline_of(wave))
    assert stats.oscillation.significant and stats.oscillation.period == 8
    assert stats.oscillation_period_s == pytest.approx(8.0)  # hand-made samples are 1 s apart
    steady = gpu_stats(timeline_of([95.0 + rng.uniform(-1, 1) for _ in range(128)]))
    assert not steady.oscillation.significant


def test_stats_of_an_empty_series_name_the_problem():
    with pytest.raises(ValueError, match=r"GPU 0 \(hand-made\).*found none.*GpuIsLost"):
        gpu_stats(timeline_of([], complete=False, error="NVMLError_GpuIsLost: lost"))


def test_stats_device_must_be_a_sampled_one():
    assert gpu_stats(timeline_of([50.0] * 4, index=3), device=3).device_index == 3
    with pytest.raises(ValueError, match=r"expected one of the sampled GPUs \[3\], found 0"):
        gpu_stats(timeline_of([50.0] * 4, index=3), device=0)


def test_incomplete_timeline_is_reported_in_stats():
    info = gpu_stats(timeline_of([50.0] * 40, complete=False, error="NVMLError_Unknown: x")).extra_info()
    assert info["gpu_complete"] is False
    assert info["gpu_error"] == "NVMLError_Unknown: x"


# ----------------------------------------------------------------------------------------- skip paths


def check_unavailable(monkeypatch, fake, cause, reason_part):
    if fake is not None:
        use(monkeypatch, fake)
    with pytest.raises(GpuUnavailable, match=re.escape(reason_part)) as info, GpuSampler(interval_s=0.001):
        pytest.fail("the with block must not run without a GPU")
    assert info.value.cause == cause
    assert reason_part in info.value.reason
    assert gpu_identity() is None
    assert sampler_threads() == []
    if fake is not None:
        assert fake.inits == fake.shutdowns  # NVML is not left initialised


def test_pynvml_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    check_unavailable(monkeypatch, None, CAUSE_NVML_MISSING, "NVML library missing: cannot import pynvml")


def test_nvml_shared_library_missing(monkeypatch, clock):
    error = FakeNvml.NVMLError_LibraryNotFound("NVML Shared Library Not Found")
    fake = FakeNvml(clock=clock, init_error=error)
    check_unavailable(monkeypatch, fake, CAUSE_NVML_MISSING, "libnvidia-ml could not be loaded")


def test_driver_not_loaded(monkeypatch, clock):
    fake = FakeNvml(clock=clock, init_error=FakeNvml.NVMLError_DriverNotLoaded("Driver Not Loaded"))
    check_unavailable(monkeypatch, fake, CAUSE_DRIVER_NOT_LOADED, "NVIDIA driver not loaded")


def test_no_device(monkeypatch, clock):
    fake = FakeNvml(clock=clock, names=())
    check_unavailable(monkeypatch, fake, CAUSE_NO_DEVICE, "NVML reports 0 NVIDIA GPUs")


@pytest.mark.parametrize("visible", ["", "-1", "7", "GPU-nope", "-1,0"])
def test_cuda_visible_devices_selecting_none(monkeypatch, clock, visible):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    fake = FakeNvml(clock=clock, names=("Fake GPU A", "Fake GPU B"))
    check_unavailable(monkeypatch, fake, CAUSE_NO_DEVICE, f"CUDA_VISIBLE_DEVICES={visible!r} selects none")


def test_permission_denied_at_init(monkeypatch, clock):
    fake = FakeNvml(clock=clock, init_error=FakeNvml.NVMLError_NoPermission("Insufficient Permissions"))
    check_unavailable(monkeypatch, fake, CAUSE_PERMISSION_DENIED, "permission denied: nvmlInit failed")


def test_permission_denied_opening_the_device(monkeypatch, clock):
    fake = FakeNvml(clock=clock, handle_error=FakeNvml.NVMLError_NoPermission("Insufficient Permissions"))
    check_unavailable(monkeypatch, fake, CAUSE_PERMISSION_DENIED, "permission denied: cannot open GPU 0")


def test_other_nvml_errors_are_not_turned_into_unavailable(monkeypatch, clock):
    # A broken driver on a GPU runner must fail, not skip.
    use(monkeypatch, FakeNvml(clock=clock, init_error=FakeNvml.NVMLError_Unknown("Unknown Error")))
    with pytest.raises(FakeNvml.NVMLError_Unknown):
        gpu_identity()


# --------------------------------------------------------------------------------------- device choice


@pytest.mark.parametrize(
    ("visible", "expected"),
    [(None, (0, 1, 2)), ("2,0", (2, 0)), (" 1 ", (1,)), ("GPU-0001", (1,)), ("0,7,1", (0,)), ("1,1", (1,))],
)
def test_selection_follows_cuda_visible_devices(clock, visible, expected):
    fake = FakeNvml(clock=clock, names=("A", "B", "C"))
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert select_devices(fake, env=env) == expected


def test_explicit_devices_override_the_environment(clock):
    fake = FakeNvml(clock=clock, names=("A", "B", "C"))
    assert select_devices(fake, devices=[2], env={"CUDA_VISIBLE_DEVICES": "0"}) == (2,)
    with pytest.raises(ValueError, match=r"expected NVML indices in 0..2, found \[5\]"):
        select_devices(fake, devices=[5])


def test_sampler_and_identity_use_the_visible_device(monkeypatch, clock):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    fake = use(monkeypatch, FakeNvml(clock=clock, names=("Fake GPU A", "Fake GPU B"), buffer=False))
    assert gpu_identity() == GpuIdentity("Fake GPU B", "555.42", cuda_driver="12.5", power_limit_w=700)
    fake.inits = fake.shutdowns = 0
    timeline = run_window(fake, ticks=4)
    assert [(d.index, d.name) for d in timeline.devices] == [(1, "Fake GPU B")]


def test_identity_of_the_first_gpu(monkeypatch, clock):
    fake = use(monkeypatch, FakeNvml(clock=clock, names=("Fake GPU A", "Fake GPU B")))
    assert gpu_identity() == GpuIdentity("Fake GPU A", "555.42", cuda_driver="12.5", power_limit_w=700)
    assert fake.inits == fake.shutdowns == 1


def test_identity_without_a_power_limit_reading(monkeypatch, clock):
    # Some boards (and vGPUs) answer "not supported": the fingerprint records None, it does not fail.
    not_supported = FakeNvml.NVMLError_NotSupported("Not Supported")
    fake = use(monkeypatch, FakeNvml(clock=clock, fail_in="nvmlDeviceGetEnforcedPowerLimit",
                                     fail_with=not_supported))
    assert gpu_identity() == GpuIdentity("Fake GPU A", "555.42", cuda_driver="12.5", power_limit_w=None)
    assert fake.inits == fake.shutdowns == 1


# ------------------------------------------------------------------------------ failures and clean-up


@pytest.mark.parametrize(
    ("fail_in", "buffer"),
    [
        ("nvmlDeviceGetUtilizationRates", False),
        ("nvmlDeviceGetMemoryInfo", False),
        ("nvmlDeviceGetSamples", True),
    ],
)
def test_nvml_error_mid_run_marks_the_timeline_incomplete(monkeypatch, clock, fail_in, buffer):
    fake = use(monkeypatch, FakeNvml(clock=clock, buffer=buffer, fail_in=fail_in, fail_at_tick=40))
    with GpuSampler(interval_s=0.001, clock=clock) as sampler:
        assert fake.failed.wait(15), "the fake never failed"
    timeline = sampler.timeline

    assert sampler_threads() == []
    assert fake.inits == fake.shutdowns == 1
    assert not timeline.complete
    assert timeline.error == "NVMLError_GpuIsLost: GPU is lost"
    series = timeline.devices[0]
    assert len(series.util) >= 30  # what was sampled before the error is kept
    assert max(series.util_timestamps) <= FakeClock.time_of(40)
    assert len(series.timestamps) == len(series.mem_used) == len(series.sm_clock)
    info = gpu_stats(timeline).extra_info()
    assert info["gpu_complete"] is False and "GpuIsLost" in info["gpu_error"]


# --------------------------------------------------------------------------- coverage, on the real clock


class StallingNvml(FakeNvml):
    """The fake NVML whose utilisation query blocks for `stall_s` at its `at_call`-th call (1-based), as an
    NVML call held up by the driver would; its other answers are the fake's at a fixed tick."""

    def __init__(self, *, stall_s: float, at_call: int):
        super().__init__(clock=FakeClock(), buffer=False)
        self.stall_s, self.at_call, self.calls = stall_s, at_call, 0
        self.stalled = threading.Event()

    def nvmlDeviceGetUtilizationRates(self, handle):
        self.calls += 1
        if self.calls == self.at_call:
            time.sleep(self.stall_s)
            self.stalled.set()
        return super().nvmlDeviceGetUtilizationRates(handle)


COVER_INTERVAL_S, STALL_INTERVALS, WINDOW_INTERVALS = 0.05, 8, 24


def stalled_window(monkeypatch, *, stall_s: float, at_call: int) -> GpuTimeline:
    """A window of WINDOW_INTERVALS sampled by the real sampler thread with the real clock (time.time)."""
    fake = use(monkeypatch, StallingNvml(stall_s=stall_s, at_call=at_call))
    with GpuSampler(interval_s=COVER_INTERVAL_S) as sampler:
        time.sleep(WINDOW_INTERVALS * COVER_INTERVAL_S)
    assert fake.calls >= at_call and (stall_s == 0 or fake.stalled.is_set())
    return sampler.timeline


def test_a_sampler_that_keeps_to_its_interval_covers_the_window(monkeypatch):
    timeline = stalled_window(monkeypatch, stall_s=0.0, at_call=5)
    coverage = utilisation.sample_coverage(timeline.devices[0].timestamps, start=timeline.start,
                                           end=timeline.end, interval_s=COVER_INTERVAL_S)
    assert timeline.complete and timeline.error is None, timeline.error
    assert coverage.covered and coverage.samples >= WINDOW_INTERVALS // 3
    assert gpu_gate_metrics(gpu_stats(timeline))["gpu_complete"] is True


@pytest.mark.parametrize("where,at_call", [("mid-window", 6), ("at the first sample", 1)])
def test_a_sampler_thread_stalled_for_several_intervals_leaves_the_window_incomplete(monkeypatch, where, at_call):
    timeline = stalled_window(monkeypatch, stall_s=STALL_INTERVALS * COVER_INTERVAL_S, at_call=at_call)
    assert not timeline.complete, where
    assert "GPU 0: the sampler's" in timeline.error and "without a sample" in timeline.error
    stamps = timeline.devices[0].timestamps
    coverage = utilisation.sample_coverage(stamps, start=timeline.start, end=timeline.end,
                                           interval_s=COVER_INTERVAL_S)
    assert coverage.longest_s >= STALL_INTERVALS * COVER_INTERVAL_S
    info = gpu_stats(timeline).extra_info()
    assert info["gpu_complete"] is False and gpu_gate_metrics(gpu_stats(timeline))["gpu_complete"] is False


def test_coverage_of_sample_times_names_each_gap():
    coverage = utilisation.sample_coverage([10.1, 10.2, 10.6, 10.7, 99.0], start=10.0, end=10.8, interval_s=0.1)
    assert coverage.samples == 4  # the stamp outside the window is not counted
    assert (coverage.first_gap_s, coverage.largest_gap_s, coverage.last_gap_s) == pytest.approx((0.1, 0.4, 0.1))
    assert not coverage.covered and "0.4 s of the 0.8 s window" in coverage.problem("GPU 3")
    none = utilisation.sample_coverage([], start=0.0, end=1.0, interval_s=0.1)
    assert none.samples == 0 and not none.covered
    assert utilisation.sample_coverage([0.1, 0.35, 0.6, 0.8], start=0.0, end=1.0, interval_s=0.1).covered


def test_thread_is_joined_when_the_body_raises(monkeypatch, clock):
    fake = use(monkeypatch, FakeNvml(clock=clock))
    sampler = GpuSampler(interval_s=0.001, clock=clock)
    with pytest.raises(KeyError, match="the measured work failed"), sampler:
        assert sampler_threads() != []
        clock.wait_for_tick(clock.tick + 5)
        raise KeyError("the measured work failed")

    assert sampler_threads() == []
    assert fake.inits == fake.shutdowns == 1
    assert sampler.timeline.complete
    assert len(sampler.timeline.devices[0].timestamps) >= 4


def test_a_hanging_nvml_call_makes_exit_raise_instead_of_hanging(monkeypatch, clock):
    fake = use(monkeypatch, FakeNvml(clock=clock, hang_in="nvmlDeviceGetMemoryInfo"))
    sampler = GpuSampler(interval_s=0.001, clock=clock, join_timeout_s=0.2)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match=r"did not stop within 0.2 s"), sampler:
        assert fake.hanging.wait(15)
    assert time.monotonic() - began < 5
    assert fake.shutdowns == 0  # NVML is not shut down under a running call
    fake.release.set()
    for thread in sampler_threads():
        thread.join(5)
    assert sampler_threads() == []


def test_a_bug_in_the_sampling_thread_is_raised_at_exit(monkeypatch, clock):
    fake = use(monkeypatch, FakeNvml(clock=clock, buffer=False, fail_in="nvmlDeviceGetMemoryInfo",
                                     fail_at_tick=3, fail_with=ZeroDivisionError("bug")))
    sampler = GpuSampler(interval_s=0.001, clock=clock)
    with pytest.raises(RuntimeError, match="sampling thread failed") as info, sampler:
        assert fake.failed.wait(15)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert fake.inits == fake.shutdowns == 1
    assert sampler.timeline.complete is False
    assert sampler.timeline.error == "sampler failed: ZeroDivisionError('bug')"


def test_timeline_only_after_exit_and_no_reentry(monkeypatch, clock):
    use(monkeypatch, FakeNvml(clock=clock))
    sampler = GpuSampler(interval_s=0.001, clock=clock)
    with pytest.raises(RuntimeError, match="only after the with block"):
        _ = sampler.timeline
    with sampler, pytest.raises(RuntimeError, match="already entered"):
        sampler.__enter__()
    with pytest.raises(RuntimeError, match="already entered"):
        sampler.__enter__()


@pytest.mark.parametrize("interval", [0, -0.1])
def test_interval_must_be_positive(interval):
    with pytest.raises(ValueError, match="interval_s: expected a positive number"):
        GpuSampler(interval_s=interval)


# ------------------------------------------------------------------------------------------------ cli


def test_cli_lists_gpus_and_samples(monkeypatch, clock, capsys):
    use(monkeypatch, FakeNvml(clock=clock, names=("Fake GPU A",), buffer=False))
    assert gpu.main(["--sample", "0.3", "--interval", "0.005"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "GPU 0: Fake GPU A, driver 555.42"
    info = json.loads(lines[1])
    assert info["gpu_name"] == "Fake GPU A" and info["gpu_source"] == SOURCE_POLLING
    assert info["gpu_samples"] >= 10


def test_cli_says_why_there_is_no_gpu(monkeypatch, clock, capsys):
    use(monkeypatch, FakeNvml(clock=clock, names=()))
    assert gpu.main([]) == 1
    assert "GPU unavailable (no-device): no device: NVML reports 0 NVIDIA GPUs" in capsys.readouterr().err


# ------------------------------------------------------------------------------- the real bindings


def test_the_fake_mirrors_the_real_bindings():
    pynvml = pytest.importorskip("pynvml")
    used = [name for name in vars(FakeNvml) if name.startswith(("nvml", "NVML"))]
    assert len(used) >= 20
    missing = [name for name in used if not hasattr(pynvml, name)]
    assert missing == []
    assert issubclass(pynvml.NVMLError_NotSupported, pynvml.NVMLError)
    for name in ("NVML_GPU_UTILIZATION_SAMPLES", "NVML_CLOCK_SM", "NVML_VALUE_TYPE_UNSIGNED_INT"):
        assert getattr(FakeNvml, name) == getattr(pynvml, name)


def test_real_nvml_here_gives_an_identity_or_none():
    identity = gpu_identity()  # None on a machine without NVIDIA driver, the first GPU's on a GPU box
    assert identity is None or (isinstance(identity.model, str) and identity.model
                                and isinstance(identity.driver, str) and identity.driver)
