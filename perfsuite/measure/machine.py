"""Machine fingerprints: what identifies the hardware and software a baseline was recorded on.

Absolute thresholds are only meaningful on the machine that produced them. A CPU's model-name string
does not identify it (hypervisors often hide it: different CPU generations can both report the same
short name), so a fingerprint records what the kernels TensorFlow runs depend on: the CPU's vendor,
family, model number and stepping, the ISA extensions its kernels dispatch on, the usable cores and
the cache sizes, TensorFlow's version and build, oneDNN on or off, and the GPU.

``HARDWARE_KEYS`` lists the keys that must match for a baseline to apply; the other keys (memory, the
model-name string, cuDNN, the CUDA driver) are recorded for people, not compared. ``match`` is pure.

Reading is split from parsing: ``parse_cpuinfo`` takes /proc/cpuinfo's text and ``read_caches`` a
sysfs root, so tests feed fixtures. Where a source is missing (not Linux, a container without /sys)
the fields it would give are None; taking a fingerprint never raises for that. TensorFlow is not
imported here: its version and build information are read from the installed files.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.records import Record

# ISA extensions TensorFlow's CPU kernels (Eigen, oneDNN, XNNPACK) dispatch on. Only these are kept:
# the full flag list also carries kernel and hypervisor details (e.g. "hypervisor") that would make
# identical hardware look different.
X86_FEATURES = (
    "sse4_2", "avx", "avx2", "fma", "f16c",
    "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx512ifma", "avx512vbmi", "avx_vnni",
    "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
)
ARM_FEATURES = (
    "asimd", "asimdhp", "asimddp", "asimdfhm", "fphp", "bf16", "i8mm",
    "sve", "sve2", "svebf16", "svei8mm", "sme",
)

# Keys that must be equal for absolute thresholds to apply. Not memory (it does not change a step's
# speed while it suffices) and not the model-name string (hypervisors hide or shorten it).
HARDWARE_KEYS = (
    "cpu_vendor", "cpu_family", "cpu_model_number", "cpu_stepping", "isa", "cores",
    "l2_cache_kib", "l3_cache_kib", "tensorflow", "tensorflow_cuda", "onednn",
    "gpu_model", "gpu_driver", "gpu_power_limit_w",
)

# ARM's "CPU implementer" codes (from the Arm ARM, MIDR_EL1) for the vendors one meets in practice.
_ARM_IMPLEMENTERS = {
    0x41: "ARM", 0x42: "Broadcom", 0x43: "Cavium", 0x46: "Fujitsu", 0x48: "HiSilicon",
    0x4E: "NVIDIA", 0x50: "APM", 0x51: "Qualcomm", 0x61: "Apple", 0x6D: "Microsoft", 0xC0: "Ampere",
}
_X86_VENDORS = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel", "HygonGenuine": "Hygon"}


@dataclass(frozen=True)
class MachineFingerprint(Record):
    """What a baseline profile is tied to. None means "could not be read here" (or no GPU / no
    TensorFlow); two None values are equal. ``isa`` is sorted so that equal sets compare equal."""

    cpu_vendor: str | None  # "AMD", "Intel", "ARM", "Ampere", ...
    cpu_family: int | None  # x86 "cpu family"; ARM "CPU architecture"
    cpu_model_number: int | None  # x86 "model"; ARM "CPU part"
    cpu_stepping: int | None  # x86 "stepping"; ARM variant * 16 + revision (the rNpM of the part)
    cpu_model_name: str | None  # informational: hypervisors hide or shorten it
    isa: tuple[str, ...]  # present ones among X86_FEATURES / ARM_FEATURES
    cores: int  # CPUs this process may run on (affinity, taskset), not the host's total
    l2_cache_kib: int | None
    l3_cache_kib: int | None
    memory_gib: float | None  # informational
    tensorflow: str | None  # full version; compared as major.minor
    tensorflow_cuda: str | None  # CUDA version TensorFlow was built with; compared as major.minor
    tensorflow_cudnn: str | None  # informational
    onednn: bool  # TF_ENABLE_ONEDNN_OPTS: switches TensorFlow's CPU kernels
    gpu_model: str | None
    gpu_driver: str | None  # compared as the major version
    gpu_cuda_driver: str | None  # informational: follows from the driver
    gpu_power_limit_w: int | None

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], where: str | None = None) -> MachineFingerprint:
        """The inverse of ``as_dict`` (plain types, the ISA as a list, in field order: what a profile
        file holds). Every key is required and no other is allowed (a profile's ``format`` says which
        keys exist); FingerprintFieldError names the key that is wrong. ``where`` is unused: the caller
        names the file. Nested in another record, a fingerprint is read by the records' validator."""
        for key in values:
            if key not in _KINDS:
                raise FingerprintFieldError(key, f"one of {', '.join(_KINDS)}", key, unknown=True)
        checked = {key: _checked(key, values) for key in _KINDS}
        return cls(**{**checked, "isa": tuple(sorted(checked["isa"]))})


class FingerprintFieldError(ValueError):
    """One fingerprint key is missing, unknown or of the wrong type: names it, the expectation and
    the value found (baseline files turn this into an error naming the file too)."""

    def __init__(self, key: str, expected: str, found: Any, *, missing: bool = False, unknown: bool = False):
        self.key = key
        self.expected = expected
        self.found = found
        self.missing = missing
        self.unknown = unknown
        if missing:
            message = f"{key}: missing (required key)"
        elif unknown:
            message = f"{key}: unknown key; expected {expected}"
        else:
            message = f"{key}: expected {expected}, found {found!r}"
        super().__init__(message)


# key -> (accepted types, None allowed, what to say when wrong)
_TEXT = ((str,), True, "a string or null (quote numbers: '2.21')")
_COUNT = ((int,), True, "a non-negative integer or null")
_KINDS: dict[str, tuple[tuple[type, ...], bool, str]] = {
    "cpu_vendor": _TEXT,
    "cpu_family": _COUNT,
    "cpu_model_number": _COUNT,
    "cpu_stepping": _COUNT,
    "cpu_model_name": _TEXT,
    "isa": ((list, tuple), False, "a list of feature names"),
    "cores": ((int,), False, "a positive integer"),
    "l2_cache_kib": _COUNT,
    "l3_cache_kib": _COUNT,
    "memory_gib": ((int, float), True, "a number of GiB or null"),
    "tensorflow": _TEXT,
    "tensorflow_cuda": _TEXT,
    "tensorflow_cudnn": _TEXT,
    "onednn": ((bool,), False, "true or false"),
    "gpu_model": _TEXT,
    "gpu_driver": _TEXT,
    "gpu_cuda_driver": _TEXT,
    "gpu_power_limit_w": _COUNT,
}


def _checked(key: str, values: Mapping[str, Any]) -> Any:
    if key not in values:
        raise FingerprintFieldError(key, "", None, missing=True)
    value = values[key]
    types, optional, expected = _KINDS[key]
    if value is None and optional:
        return value
    wrong_bool = isinstance(value, bool) and bool not in types
    if wrong_bool or not isinstance(value, types) or not _in_range(key, value):
        raise FingerprintFieldError(key, expected, value)
    return value


def _in_range(key: str, value: Any) -> bool:
    if key == "isa":
        return all(isinstance(name, str) and name for name in value)
    if key == "cores":
        return value >= 1
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return math.isfinite(value) and value >= 0
    return True


# --------------------------------------------------------------------------------------------------
# Matching


@dataclass(frozen=True)
class Difference:
    """One hardware key whose recorded and current values differ."""

    key: str
    recorded: Any
    current: Any

    def __str__(self) -> str:
        if self.key == "isa":
            only_recorded = sorted(set(self.recorded) - set(self.current))
            only_current = sorted(set(self.current) - set(self.recorded))
            return (f"isa: only the profile has [{', '.join(only_recorded)}], "
                    f"only this machine has [{', '.join(only_current)}]")
        return f"{self.key}: profile has {self.recorded!r}, this machine has {self.current!r}"


@dataclass(frozen=True)
class MatchResult:
    """Whether a recorded fingerprint matches the current one; if not, every differing key."""

    differences: tuple[Difference, ...]

    @property
    def matched(self) -> bool:
        return not self.differences

    def __bool__(self) -> bool:
        return self.matched

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(d.key for d in self.differences)

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(str(d) for d in self.differences)


def match(recorded: MachineFingerprint, current: MachineFingerprint) -> MatchResult:
    """Compare the HARDWARE_KEYS of two fingerprints; versions compare at the stated precision
    (TensorFlow and its CUDA major.minor, the GPU driver's major), the ISA as a set."""
    differences = tuple(
        Difference(key, getattr(recorded, key), getattr(current, key))
        for key in HARDWARE_KEYS
        if _compared(key, getattr(recorded, key)) != _compared(key, getattr(current, key))
    )
    return MatchResult(differences)


def _compared(key: str, value: Any) -> Any:
    if value is None:
        return None
    if key in ("tensorflow", "tensorflow_cuda"):
        return _major_minor(value)
    if key == "gpu_driver":
        return value.strip().split(".")[0]
    if key == "isa":
        return frozenset(value)
    return value


def _major_minor(version: str) -> str:
    found = re.match(r"(\d+)\.(\d+)", version.strip())
    return f"{found.group(1)}.{found.group(2)}" if found else version.strip()


def default_profile_name(fingerprint: MachineFingerprint) -> str:
    """A profile file name that identifies the hardware: 'cpu-<vendor>-fam<F>-model<M>-<N>core', and
    on a GPU machine 'gpu-<gpu model>-<the same CPU part>' (the host CPU feeds the GPU)."""
    cpu = [_slug(fingerprint.cpu_vendor or "unknown")]
    if fingerprint.cpu_family is not None:
        cpu.append(f"fam{fingerprint.cpu_family}")
    if fingerprint.cpu_model_number is not None:
        cpu.append(f"model{fingerprint.cpu_model_number}")
    cpu.append(f"{fingerprint.cores}core")
    if fingerprint.gpu_model is None:
        return "-".join(["cpu", *cpu])
    return "-".join(["gpu", _slug(fingerprint.gpu_model), *cpu])


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


# --------------------------------------------------------------------------------------------------
# Parsing (pure: text or a directory in, values out)


@dataclass(frozen=True)
class CpuInfo:
    """The identifying part of /proc/cpuinfo's first processor; None where the text has no such line."""

    vendor: str | None
    family: int | None
    model_number: int | None
    stepping: int | None
    model_name: str | None
    isa: tuple[str, ...]


def parse_cpuinfo(text: str) -> CpuInfo:
    """Parse /proc/cpuinfo (x86 or ARM layout). Only the first processor block is read: a fingerprint
    describes the CPU the process starts on, and the blocks of one package repeat each other."""
    fields_ = _first_block(text)
    if "vendor_id" in fields_ or "flags" in fields_:
        return _x86(fields_)
    if "CPU implementer" in fields_ or "Features" in fields_:
        return _arm(fields_)
    return CpuInfo(None, None, None, None, fields_.get("model name") or None, ())


def _first_block(text: str) -> dict[str, str]:
    block: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if block:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            block.setdefault(key.strip(), value.strip())
    return block


def _x86(block: dict[str, str]) -> CpuInfo:
    vendor = block.get("vendor_id")
    present = set(block.get("flags", "").split())
    return CpuInfo(
        vendor=_X86_VENDORS.get(vendor, vendor) if vendor else None,
        family=_integer(block.get("cpu family")),
        model_number=_integer(block.get("model")),
        stepping=_integer(block.get("stepping")),
        model_name=block.get("model name") or None,
        isa=tuple(sorted(f for f in X86_FEATURES if f in present)),
    )


def _arm(block: dict[str, str]) -> CpuInfo:
    implementer = _integer(block.get("CPU implementer"))
    vendor = None if implementer is None else _ARM_IMPLEMENTERS.get(implementer, f"arm-{implementer:#04x}")
    variant, revision = _integer(block.get("CPU variant")), _integer(block.get("CPU revision"))
    present = set(block.get("Features", "").split())
    return CpuInfo(
        vendor=vendor,
        family=_integer(block.get("CPU architecture")),
        model_number=_integer(block.get("CPU part")),
        stepping=None if variant is None or revision is None else variant * 16 + revision,
        model_name=block.get("model name") or None,
        isa=tuple(sorted(f for f in ARM_FEATURES if f in present)),
    )


def _integer(text: str | None) -> int | None:
    """'26' or '0x41' as an int; None for anything else (e.g. an old ARM kernel's 'AArch64')."""
    if text is None:
        return None
    text = text.strip().lower()
    try:
        return int(text, 16) if text.startswith("0x") else int(text, 10)
    except ValueError:
        return None


def read_caches(sys_root: Path | str = Path("/sys")) -> tuple[int | None, int | None]:
    """(L2, L3) data-cache sizes in KiB of cpu0, from ``<sys_root>/devices/system/cpu/cpu0/cache``.
    A level the directory does not describe (or no directory at all) gives None."""
    cache_dir = Path(sys_root) / "devices" / "system" / "cpu" / "cpu0" / "cache"
    sizes: dict[int, int] = {}
    for index in sorted(cache_dir.glob("index*")):
        level = _integer(_read(index / "level"))
        kind = (_read(index / "type") or "").strip()
        size = _kib(_read(index / "size"))
        if level is not None and size is not None and kind in ("Data", "Unified"):
            sizes.setdefault(level, size)
    return sizes.get(2), sizes.get(3)


def _kib(text: str | None) -> int | None:
    found = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text or "")
    if not found:
        return None
    number, unit = int(found.group(1)), found.group(2)
    return {"": number // 1024, "K": number, "M": number * 1024, "G": number * 1024 * 1024}[unit]


def parse_memory_gib(meminfo: str) -> float | None:
    """MemTotal of /proc/meminfo in GiB, to one decimal; None when the line is missing."""
    found = re.search(r"^MemTotal:\s*(\d+)\s*kB", meminfo, flags=re.MULTILINE)
    return None if found is None else round(int(found.group(1)) / 2**20, 1)


def onednn_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """TensorFlow's oneDNN CPU kernels: on unless TF_ENABLE_ONEDNN_OPTS is 0 or false (TF's own rule)."""
    return environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in ("0", "false")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:  # missing (not Linux), unreadable (a locked-down container)
        return None


# --------------------------------------------------------------------------------------------------
# This machine


def machine_fingerprint(
    *, proc_root: Path | str = Path("/proc"), sys_root: Path | str = Path("/sys"),
    environ: Mapping[str, str] | None = None,
) -> MachineFingerprint:
    """The fingerprint of the machine this runs on (the roots are seams for tests). Never raises for
    a missing source; an NVML error other than "no GPU here" (a broken driver) does raise."""
    proc_root = Path(proc_root)
    cpu = parse_cpuinfo(_read(proc_root / "cpuinfo") or "")
    l2, l3 = read_caches(sys_root)
    cuda, cudnn = _tensorflow_build()
    gpu = _gpu_identity()
    return MachineFingerprint(
        cpu_vendor=cpu.vendor,
        cpu_family=cpu.family,
        cpu_model_number=cpu.model_number,
        cpu_stepping=cpu.stepping,
        cpu_model_name=cpu.model_name,
        isa=cpu.isa,
        cores=_usable_cores(),
        l2_cache_kib=l2,
        l3_cache_kib=l3,
        memory_gib=parse_memory_gib(_read(proc_root / "meminfo") or ""),
        tensorflow=_tensorflow_version(),
        tensorflow_cuda=cuda,
        tensorflow_cudnn=cudnn,
        onednn=onednn_enabled(os.environ if environ is None else environ),
        gpu_model=None if gpu is None else gpu.model,
        gpu_driver=None if gpu is None else gpu.driver,
        gpu_cuda_driver=None if gpu is None else gpu.cuda_driver,
        gpu_power_limit_w=None if gpu is None else gpu.power_limit_w,
    )


def _usable_cores() -> int:
    # The CPUs this process may run on (taskset, container cpusets), not the host's total.
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _gpu_identity():
    # Imported here: NVML is optional, and tests replace this seam.
    from perfsuite.measure.gpu import gpu_identity

    return gpu_identity()


def _tensorflow_version() -> str | None:
    """TensorFlow's version from the imported module or its installed metadata (no import)."""
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "__version__"):
        return str(tf.__version__)
    for distribution in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _tensorflow_build() -> tuple[str | None, str | None]:
    """(CUDA, cuDNN) versions TensorFlow was built with; None for a CPU-only build or no TensorFlow.

    tf.sysconfig.get_build_info() when TensorFlow is already imported; otherwise the same dictionary
    is read from the installed build_info.py without running it (importing TensorFlow takes seconds).
    """
    tf = sys.modules.get("tensorflow")
    info = None
    if tf is not None and hasattr(tf, "sysconfig"):
        try:
            info = dict(tf.sysconfig.get_build_info())
        except Exception:  # noqa: BLE001 -- a stub or partial module: fall back to the file
            info = None
    if info is None:
        info = _build_info_file()
    cuda, cudnn = info.get("cuda_version"), info.get("cudnn_version")
    return (str(cuda) if cuda else None), (str(cudnn) if cudnn else None)


def _build_info_file() -> dict[str, Any]:
    try:
        spec = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    for location in spec.submodule_search_locations:
        text = _read(Path(location) / "python" / "platform" / "build_info.py")
        if text is not None:
            return parse_build_info(text)
    return {}


def parse_build_info(text: str) -> dict[str, Any]:
    """The ``build_info`` dictionary of TensorFlow's generated build_info.py, read as literals
    (``build_info = collections.OrderedDict([...])`` or a dict display); {} when it is not there."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "build_info" for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call) and value.args:  # OrderedDict([...]) or dict([...])
                value = value.args[0]
            try:
                return dict(ast.literal_eval(value))
            except (ValueError, TypeError, SyntaxError):
                return {}
    return {}
