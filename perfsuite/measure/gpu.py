"""NVML GPU sampler: a timeline of GPU utilisation taken while the measured work runs.

The project this suite replaces polled `nvidia-smi` after the work had finished. Here a background thread
samples each selected device for exactly the ``with`` block of `GpuSampler`:

- GPU utilisation comes, where the driver supports it, from the driver's own high-rate sample buffer
  (`nvmlDeviceGetSamples` with `NVML_GPU_UTILIZATION_SAMPLES`), read incrementally and clipped to the
  measured window; otherwise by polling `nvmlDeviceGetUtilizationRates`. The timeline records which.
- Memory utilisation, memory used and the SM clock are polled at the sampler's interval.

Utilisation is in percent (0-100), NVML's own unit, everywhere in this module, including the gate
metrics; the idle fraction is a fraction (0-1).

NVML is imported lazily through `_load_nvml()`, the seam tests replace with a fake module, so this module
imports without a GPU, without NVML and without TensorFlow. A missing NVML library, a driver that is not
loaded, no selected device or no permission raise `GpuUnavailable` naming the cause; the pytest side turns
that into a skip with `reason`.

`python -m perfsuite.measure.gpu` lists the selected GPUs (or says why there are none, exit status 1);
`--sample SECONDS` also samples them for that long and prints the statistics as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from perfsuite.errors import GpuUnavailable
from perfsuite.measure.utilisation import DeviceTimeline, GpuTimeline, gpu_stats, sample_coverage

DEFAULT_INTERVAL_S = 0.05

SOURCE_DRIVER_BUFFER = "driver_buffer"
SOURCE_POLLING = "polling"

CAUSE_NVML_MISSING = "nvml-missing"
CAUSE_DRIVER_NOT_LOADED = "driver-not-loaded"
CAUSE_NO_DEVICE = "no-device"
CAUSE_PERMISSION_DENIED = "permission-denied"

SAMPLER_THREAD_NAME = "perfsuite-gpu-sampler"
DEFAULT_JOIN_TIMEOUT_S = 5.0

# NVML tags each buffered sample's value with a type; the value sits in the matching union member.
_VALUE_FIELDS = {
    "NVML_VALUE_TYPE_DOUBLE": "dVal",
    "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
    "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
}




def _load_nvml() -> Any:
    """Import NVML's Python bindings. The seam tests replace (monkeypatch) with a fake module."""
    try:
        import pynvml
    except ImportError as exc:
        raise GpuUnavailable(
            cause=CAUSE_NVML_MISSING,
            reason=f"NVML library missing: cannot import pynvml ({exc}); "
            "install the gpu extra (nvidia-ml-py)",
        ) from exc
    return pynvml


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes for names and versions.
    return value.decode() if isinstance(value, bytes) else value


def _init(nvml: Any) -> None:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError_LibraryNotFound as exc:
        raise GpuUnavailable(
            cause=CAUSE_NVML_MISSING,
            reason="NVML library missing: libnvidia-ml could not be loaded, "
            f"no NVIDIA driver installed ({exc})",
        ) from exc
    except nvml.NVMLError_DriverNotLoaded as exc:
        raise GpuUnavailable(
            cause=CAUSE_DRIVER_NOT_LOADED, reason=f"NVIDIA driver not loaded: nvmlInit failed ({exc})"
        ) from exc
    except nvml.NVMLError_NoPermission as exc:
        raise GpuUnavailable(
            cause=CAUSE_PERMISSION_DENIED, reason=f"permission denied: nvmlInit failed ({exc})"
        ) from exc


def _handle(nvml: Any, index: int) -> Any:
    try:
        return nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError_NoPermission as exc:
        raise GpuUnavailable(
            cause=CAUSE_PERMISSION_DENIED,
            reason=f"permission denied: cannot open GPU {index} via NVML ({exc})",
        ) from exc


def _parse_visible_devices(visible: str, *, count: int, uuids: Callable[[], list[str]]) -> list[int]:
    """NVML indices named by CUDA_VISIBLE_DEVICES, parsed the way CUDA does: left to right, stopping at the
    first entry that names no device (so "-1" or "" selects none). Entries are indices or GPU-UUID
    prefixes."""
    selected: list[int] = []
    for entry in (part.strip() for part in visible.split(",")):
        if entry.startswith("MIG-"):
            raise GpuUnavailable(
                cause=CAUSE_NO_DEVICE,
                reason=f"no device: CUDA_VISIBLE_DEVICES={visible!r} names a MIG instance ({entry}); "
                "NVML reports no per-instance utilisation, so the sampler cannot follow it",
            )
        if entry.lstrip("-").isdigit():
            index = int(entry)
            if not 0 <= index < count:
                break
        elif entry.startswith("GPU-"):
            matches = [i for i, uuid in enumerate(uuids()) if uuid.startswith(entry)]
            if len(matches) != 1:
                break
            index = matches[0]
        else:
            break
        if index not in selected:
            selected.append(index)
    return selected


def select_devices(
    nvml: Any, *, devices: Sequence[int] | None = None, env: Mapping[str, str] | None = None
) -> tuple[int, ...]:
    """NVML indices to sample: `devices` when given, else those CUDA_VISIBLE_DEVICES selects, else all.

    NVML numbers devices in PCI bus order; CUDA (and so TensorFlow) does too only with
    CUDA_DEVICE_ORDER=PCI_BUS_ID. On machines with mixed GPU models set it, or name GPUs by UUID.
    """
    count = nvml.nvmlDeviceGetCount()
    if count == 0:
        raise GpuUnavailable(cause=CAUSE_NO_DEVICE, reason="no device: NVML reports 0 NVIDIA GPUs")
    if devices is not None:
        bad = [index for index in devices if not 0 <= index < count]
        if not devices or bad:
            raise ValueError(f"devices: expected NVML indices in 0..{count - 1}, found {list(devices)!r}")
        return tuple(devices)
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return tuple(range(count))

    def uuids() -> list[str]:
        return [_text(nvml.nvmlDeviceGetUUID(_handle(nvml, i))) for i in range(count)]

    selected = _parse_visible_devices(visible, count=count, uuids=uuids)
    if not selected:
        raise GpuUnavailable(
            cause=CAUSE_NO_DEVICE,
            reason=f"no device: CUDA_VISIBLE_DEVICES={visible!r} selects none of the {count} GPU(s)",
        )
    return tuple(selected)


@dataclass(frozen=True)
class GpuDevice:
    index: int  # NVML index
    name: str
    driver_version: str


def visible_gpus(*, devices: Sequence[int] | None = None) -> tuple[GpuDevice, ...]:
    """The GPUs the sampler would sample; raises GpuUnavailable naming the cause when there are none."""
    nvml = _load_nvml()
    _init(nvml)
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        return tuple(
            GpuDevice(index=i, name=_text(nvml.nvmlDeviceGetName(_handle(nvml, i))), driver_version=driver)
            for i in select_devices(nvml, devices=devices)
        )
    finally:
        nvml.nvmlShutdown()


@dataclass(frozen=True)
class GpuIdentity:
    """What a machine fingerprint records about the first selected GPU. cuda_driver and power_limit_w
    are None where the driver does not report them (NVML answers "not supported")."""

    model: str
    driver: str
    cuda_driver: str | None  # the CUDA version the driver supports, "major.minor"
    power_limit_w: int | None  # the enforced power limit: the same GPU model is sold at several


def gpu_identity() -> GpuIdentity | None:
    """The first selected GPU's identity for machine fingerprints, or None.

    This is the one place where "unavailable" is a value rather than an error: a machine without a usable
    GPU is a legitimate machine profile (the CPU runners), and its fingerprint simply has no GPU part.
    Errors other than GpuUnavailable (a broken driver, say) still raise.
    """
    try:
        nvml = _load_nvml()
        _init(nvml)
    except GpuUnavailable:
        return None
    try:
        handle = _handle(nvml, select_devices(nvml)[0])
        return GpuIdentity(
            model=_text(nvml.nvmlDeviceGetName(handle)),
            driver=_text(nvml.nvmlSystemGetDriverVersion()),
            cuda_driver=_optional(nvml, lambda: _cuda_version(nvml.nvmlSystemGetCudaDriverVersion())),
            power_limit_w=_optional(nvml, lambda: round(nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000)),
        )
    except GpuUnavailable:
        return None
    finally:
        nvml.nvmlShutdown()


def _optional(nvml: Any, read: Callable[[], Any]) -> Any:
    try:
        return read()
    except nvml.NVMLError_NotSupported:
        return None


def _cuda_version(encoded: int) -> str:
    # NVML encodes CUDA versions as 1000 * major + 10 * minor (12040 is 12.4).
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


@dataclass
class _DeviceBuffers:
    """Mutable per-device buffers, written only by the sampler thread until it is joined."""

    index: int
    name: str
    handle: Any
    source: str | None
    last_seen_us: int
    util_timestamps: list[float] = field(default_factory=list)
    util: list[float] = field(default_factory=list)
    timestamps: list[float] = field(default_factory=list)
    mem_util: list[float] = field(default_factory=list)
    mem_used: list[int] = field(default_factory=list)
    sm_clock: list[int] = field(default_factory=list)

    def clipped(self, *, start: float, end: float) -> DeviceTimeline:
        util = sorted(p for p in zip(self.util_timestamps, self.util) if start <= p[0] <= end)
        rows = zip(self.timestamps, self.mem_util, self.mem_used, self.sm_clock)
        polled = sorted(p for p in rows if start <= p[0] <= end)
        util_ts, util_values = (tuple(c) for c in zip(*util)) if util else ((), ())
        ts, mem_util, mem_used, sm_clock = (tuple(c) for c in zip(*polled)) if polled else ((), (), (), ())
        return DeviceTimeline(
            index=self.index,
            name=self.name,
            source=self.source,
            util_timestamps=util_ts,
            util=util_values,
            timestamps=ts,
            mem_util=mem_util,
            mem_used=mem_used,
            sm_clock=sm_clock,
        )


class GpuSampler:
    """Samples the selected GPUs on a background thread for the duration of the ``with`` block.

        with GpuSampler(interval_s=0.05) as sampler:
            run_the_work()
        stats = gpu_stats(sampler.timeline)

    `clock` must be wall-clock seconds since the epoch (time.time): the driver buffer stamps its samples
    in epoch microseconds, and the window they are clipped to is taken with this clock.
    An NVML error while sampling stops the sampling and marks the timeline incomplete with the error text;
    the block itself is not disturbed. So does a window the sampler's own samples do not cover
    (`utilisation.sample_coverage` of each device's polled sample times: a sampler held up for a few
    intervals, by a blocking NVML call or a starved thread, leaves a gap). The thread is stopped and joined on every exit; if it does not stop
    within `join_timeout_s` (an NVML call hanging), __exit__ raises.
    """

    def __init__(
        self,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        devices: Sequence[int] | None = None,
        use_driver_buffer: bool = True,
        clock: Callable[[], float] = time.time,
        join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S,
    ):
        if not interval_s > 0:
            raise ValueError(f"interval_s: expected a positive number of seconds, found {interval_s!r}")
        self.interval_s = interval_s
        self.devices = None if devices is None else tuple(devices)
        self.use_driver_buffer = use_driver_buffer
        self.join_timeout_s = join_timeout_s
        self._clock = clock
        self._nvml: Any = None
        self._recorders: list[_DeviceBuffers] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._start = 0.0
        self._end = 0.0
        self._error: str | None = None
        self._crash: BaseException | None = None
        self._timeline: GpuTimeline | None = None

    def __enter__(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("GpuSampler: already entered; use a new sampler for each window")
        nvml = _load_nvml()
        _init(nvml)
        try:
            self._recorders = [self._recorder(nvml, i) for i in select_devices(nvml, devices=self.devices)]
        except BaseException:
            nvml.nvmlShutdown()
            raise
        self._nvml = nvml
        self._start = self._clock()
        for recorder in self._recorders:
            recorder.last_seen_us = int(self._start * 1e6)
        self._thread = threading.Thread(target=self._run, name=SAMPLER_THREAD_NAME, daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        assert self._thread is not None
        self._end = self._clock()
        self._stop.set()
        self._thread.join(self.join_timeout_s)
        if self._thread.is_alive():
            # A thread cannot be killed; it is a daemon, so it will not keep the process alive. NVML is
            # left initialised because shutting it down under a running call is undefined.
            raise RuntimeError(
                f"GpuSampler: the sampling thread did not stop within {self.join_timeout_s} s "
                "(an NVML call is hanging)"
            )
        self._nvml.nvmlShutdown()
        devices = tuple(r.clipped(start=self._start, end=self._end) for r in self._recorders)
        error = self._error if self._crash is None else f"sampler failed: {self._crash!r}"
        if error is None:
            error = self._gap(devices)
        self._timeline = GpuTimeline(
            start=self._start,
            end=self._end,
            interval_s=self.interval_s,
            devices=devices,
            complete=error is None,
            error=error,
        )
        if self._crash is not None and exc_type is None:
            raise RuntimeError("GpuSampler: the sampling thread failed") from self._crash
        return False

    def _gap(self, devices: Sequence[DeviceTimeline]) -> str | None:
        """Why the sampler's own sample times do not cover the window, for the devices that miss it."""
        problems = [sample_coverage(d.timestamps, start=self._start, end=self._end, interval_s=self.interval_s)
                    .problem(f"GPU {d.index}") for d in devices]
        return "; ".join(p for p in problems if p) or None

    @property
    def timeline(self) -> GpuTimeline:
        if self._timeline is None:
            raise RuntimeError("GpuSampler.timeline: available only after the with block has exited")
        return self._timeline

    def _recorder(self, nvml: Any, index: int) -> _DeviceBuffers:
        handle = _handle(nvml, index)
        return _DeviceBuffers(
            index=index,
            name=_text(nvml.nvmlDeviceGetName(handle)),
            handle=handle,
            source=None if self.use_driver_buffer else SOURCE_POLLING,
            last_seen_us=0,
        )

    def _run(self) -> None:
        try:
            while True:
                for recorder in self._recorders:
                    self._sample(recorder)
                if self._stop.wait(self.interval_s):
                    break
            # The driver buffer may hold samples from the end of the window that have not been read yet.
            for recorder in self._recorders:
                if recorder.source == SOURCE_DRIVER_BUFFER:
                    self._read_buffer(recorder)
        except self._nvml.NVMLError as exc:
            self._error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 -- a bug, not an NVML failure: re-raised by __exit__
            self._crash = exc

    def _sample(self, recorder: _DeviceBuffers) -> None:
        nvml = self._nvml
        if recorder.source != SOURCE_POLLING:
            self._read_buffer(recorder)
        now = self._clock()
        # Read everything before appending so the series stay aligned if a call fails.
        rates = nvml.nvmlDeviceGetUtilizationRates(recorder.handle)
        memory = nvml.nvmlDeviceGetMemoryInfo(recorder.handle)
        sm_clock = nvml.nvmlDeviceGetClockInfo(recorder.handle, nvml.NVML_CLOCK_SM)
        recorder.timestamps.append(now)
        recorder.mem_util.append(float(rates.memory))
        recorder.mem_used.append(int(memory.used))
        recorder.sm_clock.append(int(sm_clock))
        if recorder.source == SOURCE_POLLING:
            recorder.util_timestamps.append(now)
            recorder.util.append(float(rates.gpu))

    def _read_buffer(self, recorder: _DeviceBuffers) -> None:
        """Append the driver-buffer utilisation samples newer than the last one read."""
        nvml = self._nvml
        try:
            value_type, samples = nvml.nvmlDeviceGetSamples(
                recorder.handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, recorder.last_seen_us
            )
        except nvml.NVMLError_NotSupported:
            if recorder.source is not None:
                raise  # it worked before: this is a failure, not a capability answer
            recorder.source = SOURCE_POLLING
            return
        except nvml.NVMLError_NotFound:
            # NVML's answer when no sample is newer than last_seen_us.
            recorder.source = SOURCE_DRIVER_BUFFER
            return
        recorder.source = SOURCE_DRIVER_BUFFER
        value_field = _value_field(nvml, value_type)
        for sample in samples:
            recorder.util_timestamps.append(sample.timeStamp / 1e6)
            recorder.util.append(float(getattr(sample.sampleValue, value_field)))
            recorder.last_seen_us = max(recorder.last_seen_us, int(sample.timeStamp))


def _value_field(nvml: Any, value_type: int) -> str:
    for constant, member in _VALUE_FIELDS.items():
        if getattr(nvml, constant, None) == value_type:
            return member
    raise ValueError(f"nvmlDeviceGetSamples: expected a numeric sample value type, found type {value_type!r}")


# ---------------------------------------------------------------------------------------------------- cli


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfsuite.measure.gpu", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sample", type=float, metavar="SECONDS", help="also sample the GPUs for this long and print stats"
    )
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, metavar="SECONDS",
                        help=f"sampling interval (default: {DEFAULT_INTERVAL_S})")
    args = parser.parse_args(argv)
    try:
        for gpu in visible_gpus():
            print(f"GPU {gpu.index}: {gpu.name}, driver {gpu.driver_version}")
        if args.sample is None:
            return 0
        with GpuSampler(interval_s=args.interval) as sampler:
            time.sleep(args.sample)
    except GpuUnavailable as exc:
        print(f"GPU unavailable ({exc.cause}): {exc.reason}", file=sys.stderr)
        return 1
    for series in sampler.timeline.devices:
        print(json.dumps(gpu_stats(sampler.timeline, device=series.index).extra_info(), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
