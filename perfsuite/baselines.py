"""Baseline files: machine profiles, thresholds, ratio gates, checks and recording.

Layout (``benchmarks/baselines/``):

* ``<profile>.yaml`` -- one file per machine profile: the machine's fingerprint and, per benchmark id,
  absolute thresholds. They apply only on a machine whose fingerprint matches (tolerantly)::

      profile: cpu-2core                 # must equal the file's name without .yaml
      fingerprint:
        cpu_model: Intel(R) Xeon(R) CPU @ 2.20GHz
        cpu_count: 2
        gpu_model: null                  # or e.g. "NVIDIA H200"
        gpu_driver: null                 # or e.g. "550.54.15"
        tensorflow: '2.21'               # major.minor, quoted (unquoted 2.20 would read as 2.2)
        onednn: true                     # optional (default true): TF_ENABLE_ONEDNN_OPTS not 0
      margin: 0.25                       # how recorded thresholds were derived (see METRIC_RULES)
      recorded: '2026-11-22T08:00:00+00:00'
      benchmarks:
        loaders/test_loader[tf_native-wav-bs16-w2]:
          min_samples_per_s: 900.0
          max_variation_ratio: 0.35

* ``ratios.yaml`` -- machine-independent ratio gates that apply everywhere::

      ratios:
        tf_native_over_numpy_function_wav_ratio: {min: 6.0}

A threshold key is ``min_<metric>`` or ``max_<metric>`` and is checked against ``metrics[<metric>]``;
a ratio gate ``<metric>: {min: x, max: y}`` is checked against ``metrics[<metric>]`` in every benchmark
that reports that metric. Bounds are inclusive.

Recording (``record_measurements``) turns measured values into thresholds with a margin: for metrics
where higher is better ``min = measured - |measured| * margin``; where lower is better
``max = measured + max(|measured| * margin, floor)``. The floor keeps near-zero measurements (an
input-bound share of 0.3 %) from producing a threshold that ordinary noise breaks. Thresholds are then
rounded outward (looser) to 4 significant digits so the files stay readable.

TensorFlow is not imported here; its version is read only when a fingerprint is taken.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import fcntl
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import sys
import tempfile
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import yaml

RATIOS_FILE = "ratios.yaml"
UNKNOWN_MACHINE_NOTE = (
    "absolute thresholds skipped: no baseline profile matches this machine; ratio gates still applied"
)
_ROUND_DIGITS = 4
_PROFILE_KEYS = ("profile", "fingerprint", "margin", "recorded", "benchmarks")
_FINGERPRINT_KEYS = ("cpu_model", "cpu_count", "gpu_model", "gpu_driver", "tensorflow")
_THRESHOLD_KEY = re.compile(r"(min|max)_(.+)\Z", re.DOTALL)
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_FILE_HEADER = (
    "# perfsuite baseline profile (see perfsuite/baselines.py for the format).\n"
    "# Thresholds recorded from measurements: min_* = measured - |measured| * margin,\n"
    "# max_* = measured + max(|measured| * margin, floor), rounded outward to 4 significant digits.\n"
)


class BaselineError(ValueError):
    """A baseline file (or a request to record one) is wrong: names the file, the key and the problem."""

    def __init__(self, path: Path | str | None, key: str, problem: str):
        self.path = None if path is None else str(path)
        self.key = key
        self.problem = problem
        where = f"{self.path}: {key}" if self.path is not None else key
        super().__init__(f"{where}: {problem}")


# --------------------------------------------------------------------------------------------------
# Machine fingerprints


@dataclass(frozen=True)
class MachineFingerprint:
    """What a baseline profile is tied to: CPU model and count, GPU model and driver, TensorFlow and
    whether its oneDNN CPU kernels are on (TF_ENABLE_ONEDNN_OPTS; without them the quick
    profile's bs-16 step ran 1.3x (eager, XLA) to 1.6x (graph) slower on the 2-core box)."""

    cpu_model: str
    cpu_count: int
    gpu_model: str | None
    gpu_driver: str | None
    tensorflow: str | None  # "major.minor"; None when TensorFlow is not installed
    onednn: bool = True  # TensorFlow's default; optional in a profile file for that reason

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MatchResult:
    """Whether a profile's fingerprint matches this machine, and if not, each difference."""

    matched: bool
    reasons: tuple[str, ...]

    def __bool__(self) -> bool:
        return self.matched

    def as_dict(self) -> dict[str, Any]:
        return {"matched": self.matched, "reasons": list(self.reasons)}


def machine_fingerprint() -> MachineFingerprint:
    """Fingerprint of the machine this runs on."""
    gpu = _gpu_identity()
    return MachineFingerprint(
        cpu_model=_cpu_model(),
        cpu_count=_cpu_count(),
        gpu_model=None if gpu is None else gpu[0],
        gpu_driver=None if gpu is None else gpu[1],
        tensorflow=_tensorflow_version(),
        onednn=onednn_enabled(),
    )


def onednn_enabled(environ=os.environ) -> bool:
    """TensorFlow's oneDNN CPU kernels: on unless TF_ENABLE_ONEDNN_OPTS is 0 or false (TF's own rule)."""
    return environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in ("0", "false")


def _gpu_identity() -> tuple[str, str] | None:
    # Imported here: NVML is optional, and tests replace this seam.
    from perfsuite.gpu import gpu_identity

    return gpu_identity()


def _cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The 'model name' line of /proc/cpuinfo; platform.processor() or machine() where there is none."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:  # not Linux
        text = ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name" and value.strip():
            return value.strip()
    # ARM Linux kernels often print no 'model name'; the architecture is the best that is left.
    return platform.processor() or platform.machine()


def _cpu_count() -> int:
    # The CPUs this process may run on (taskset, container limits), not the host's total.
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _tensorflow_version() -> str | None:
    """TensorFlow's major.minor from its installed metadata (no import), or None when not installed."""
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        return _major_minor(tf.__version__)
    for distribution in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return _major_minor(importlib.metadata.version(distribution))
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _major_minor(version: str) -> str:
    found = re.match(r"(\d+)\.(\d+)", version.strip())
    return f"{found.group(1)}.{found.group(2)}" if found else version.strip()


def _normalise_cpu_model(name: str) -> str:
    # "Intel(R) Xeon(R) CPU @ 2.20GHz" and "intel xeon cpu @ 2.30GHz" are the same kind of machine.
    name = re.sub(r"\((?:r|tm)\)", " ", name, flags=re.IGNORECASE)
    name = re.sub(r"@?\s*\d+(?:\.\d+)?\s*[gm]hz\s*$", " ", name, flags=re.IGNORECASE)
    return " ".join(name.lower().split())


def _normalise_name(name: str | None) -> str | None:
    return None if name is None else " ".join(name.lower().split())


def _driver_major(driver: str | None) -> str | None:
    return None if driver is None else driver.strip().split(".")[0]


def match_fingerprint(*, recorded: MachineFingerprint, current: MachineFingerprint) -> MatchResult:
    """Tolerant match: CPU count equal, CPU model equal ignoring case, spaces, (R), (TM) and the clock
    suffix, GPU model equal (or both absent), driver major version equal, TensorFlow major.minor equal,
    oneDNN on or off alike."""
    reasons = []

    def differs(field: str) -> None:
        reasons.append(
            f"{field}: profile has {getattr(recorded, field)!r}, this machine has {getattr(current, field)!r}"
        )

    if _normalise_cpu_model(recorded.cpu_model) != _normalise_cpu_model(current.cpu_model):
        differs("cpu_model")
    if recorded.cpu_count != current.cpu_count:
        differs("cpu_count")
    if _normalise_name(recorded.gpu_model) != _normalise_name(current.gpu_model):
        differs("gpu_model")
    if _driver_major(recorded.gpu_driver) != _driver_major(current.gpu_driver):
        differs("gpu_driver")
    recorded_tf = None if recorded.tensorflow is None else _major_minor(recorded.tensorflow)
    current_tf = None if current.tensorflow is None else _major_minor(current.tensorflow)
    if recorded_tf != current_tf:
        differs("tensorflow")
    if recorded.onednn != current.onednn:
        differs("onednn")
    return MatchResult(matched=not reasons, reasons=tuple(reasons))


def default_profile_name(fingerprint: MachineFingerprint) -> str:
    """A file name for a new profile: 'cpu-2core', or 'gpu-nvidia-h200-16core' on a GPU machine."""
    if fingerprint.gpu_model is None:
        return f"cpu-{fingerprint.cpu_count}core"
    slug = re.sub(r"[^a-z0-9]+", "-", fingerprint.gpu_model.lower()).strip("-")
    return f"gpu-{slug}-{fingerprint.cpu_count}core"


# --------------------------------------------------------------------------------------------------
# Thresholds, profiles and ratio gates


@dataclass(frozen=True)
class Threshold:
    """One bound on one metric: kind 'min' means measured >= value passes, 'max' means <= value."""

    metric: str
    kind: str
    value: float

    @property
    def key(self) -> str:
        return f"{self.kind}_{self.metric}"

    def admits(self, measured: float) -> bool:
        return measured >= self.value if self.kind == "min" else measured <= self.value


@dataclass(frozen=True)
class Profile:
    """A loaded ``<profile>.yaml``: the fingerprint it applies to and thresholds per benchmark id."""

    path: Path
    name: str
    fingerprint: MachineFingerprint
    margin: float | None
    recorded: str | None
    benchmarks: Mapping[str, tuple[Threshold, ...]]

    def as_dict(self) -> dict[str, Any]:
        """The YAML document form (what the file holds)."""
        return {
            "profile": self.name,
            "fingerprint": self.fingerprint.as_dict(),
            "margin": self.margin,
            "recorded": self.recorded,
            "benchmarks": {
                benchmark_id: {t.key: t.value for t in thresholds}
                for benchmark_id, thresholds in self.benchmarks.items()
            },
        }


@dataclass(frozen=True)
class RatioGates:
    """The loaded ``ratios.yaml``: bounds per ratio metric, applied on every machine."""

    path: Path
    gates: Mapping[str, tuple[Threshold, ...]]


def _key_path(parts: Iterable[str]) -> str:
    # benchmarks."loaders/test_loader[x]".min_samples_per_s -- ids with odd characters are quoted.
    rendered = [p if _BARE_KEY.match(p) else json.dumps(p, ensure_ascii=False) for p in parts]
    return ".".join(rendered) or "(top level)"


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    names = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "mapping", list: "list"}
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{names.get(type(value), type(value).__name__)} {text}"


def _wrong(path: Path, keys: Iterable[str], expected: str, found: Any) -> BaselineError:
    return BaselineError(path, _key_path(keys), f"expected {expected}, found {_describe(found)}")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen: set = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, Hashable) and key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r}", key_node.start_mark,
                    )
                if isinstance(key, Hashable):
                    seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BaselineError(path, "(file)", "expected a baseline file, found no such file") from None
    except UnicodeDecodeError as error:
        raise BaselineError(path, "(file)", f"expected UTF-8 text, found {error.reason}") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(document)"
        raise BaselineError(path, where, f"invalid YAML: {error.problem or error.context}") from None
    except yaml.YAMLError as error:
        raise BaselineError(path, "(document)", f"invalid YAML: {error}") from None


def _mapping(path: Path, keys: tuple[str, ...], value: Any) -> dict:
    if value is None and not keys:
        raise BaselineError(path, "(top level)", "expected a mapping, found an empty document")
    if not isinstance(value, dict):
        raise _wrong(path, keys, "a mapping", value)
    for key in value:
        if not isinstance(key, str):
            raise _wrong(path, keys, "string keys", key)
    return value


def _require(path: Path, keys: tuple[str, ...], mapping: dict, key: str) -> Any:
    if key not in mapping:
        raise BaselineError(path, _key_path(keys + (key,)), "missing (required key)")
    return mapping[key]


def _only_keys(path: Path, keys: tuple[str, ...], mapping: dict, allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    for key in mapping:
        if key not in allowed:
            raise BaselineError(
                path, _key_path(keys + (key,)), f"unknown key; expected one of {', '.join(allowed)}"
            )


def _string(path: Path, keys: tuple[str, ...], value: Any, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        what = "a non-empty string (quote numbers: '2.21')" + (" or null" if optional else "")
        raise _wrong(path, keys, what, value)
    return value


def _number(path: Path, keys: tuple[str, ...], value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _wrong(path, keys, "a finite number", value)
    return float(value)


def _margin(path: Path | None, keys: tuple[str, ...], value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise BaselineError(
            path, _key_path(keys), f"expected a margin in [0, 1), found {_describe(value)}"
        )
    return float(value)


def _parse_fingerprint(path: Path, value: Any) -> MachineFingerprint:
    keys = ("fingerprint",)
    fields = _mapping(path, keys, value)
    _only_keys(path, keys, fields, _FINGERPRINT_KEYS + ("onednn",))
    for key in _FINGERPRINT_KEYS:
        _require(path, keys, fields, key)
    cpu_count = fields["cpu_count"]
    if isinstance(cpu_count, bool) or not isinstance(cpu_count, int) or cpu_count < 1:
        raise _wrong(path, keys + ("cpu_count",), "a positive integer", cpu_count)
    return MachineFingerprint(
        cpu_model=_string(path, keys + ("cpu_model",), fields["cpu_model"]),
        cpu_count=cpu_count,
        gpu_model=_string(path, keys + ("gpu_model",), fields["gpu_model"], optional=True),
        gpu_driver=_string(path, keys + ("gpu_driver",), fields["gpu_driver"], optional=True),
        tensorflow=_string(path, keys + ("tensorflow",), fields["tensorflow"], optional=True),
        onednn=_flag(path, keys + ("onednn",), fields.get("onednn", True)),
    )


def _flag(path: Path, keys: tuple[str, ...], value: Any) -> bool:
    if not isinstance(value, bool):
        raise _wrong(path, keys, "true or false", value)
    return value


def _check_band(path: Path, keys: tuple[str, ...], thresholds: list[Threshold]) -> None:
    lows = {t.metric: t.value for t in thresholds if t.kind == "min"}
    for t in thresholds:
        if t.kind == "max" and t.metric in lows and lows[t.metric] > t.value:
            raise BaselineError(
                path, _key_path(keys),
                f"min {lows[t.metric]} is above max {t.value} for {t.metric!r}; no value could pass",
            )


def _parse_thresholds(path: Path, keys: tuple[str, ...], value: Any) -> tuple[Threshold, ...]:
    entries = _mapping(path, keys, value)
    thresholds = []
    for key, bound in entries.items():
        found = _THRESHOLD_KEY.match(key)
        if not found:
            raise BaselineError(
                path, _key_path(keys + (key,)),
                "unknown threshold key; expected min_<metric> or max_<metric>",
            )
        thresholds.append(Threshold(metric=found.group(2), kind=found.group(1),
                                    value=_number(path, keys + (key,), bound)))
    _check_band(path, keys, thresholds)
    return tuple(thresholds)


def _parse_profile(path: Path, document: Any) -> Profile:
    top = _mapping(path, (), document)
    _only_keys(path, (), top, _PROFILE_KEYS)
    name = _string(path, ("profile",), _require(path, (), top, "profile"))
    if name != path.stem:
        raise BaselineError(
            path, "profile", f"expected the file's name without .yaml ({path.stem!r}), found {name!r}"
        )
    fingerprint = _parse_fingerprint(path, _require(path, (), top, "fingerprint"))
    margin = None if top.get("margin") is None else _margin(path, ("margin",), top["margin"])
    recorded = top.get("recorded")
    if isinstance(recorded, (datetime.date, datetime.datetime)):  # an unquoted YAML timestamp
        recorded = recorded.isoformat()
    recorded = _string(path, ("recorded",), recorded, optional=True)
    benchmarks = _mapping(path, ("benchmarks",), _require(path, (), top, "benchmarks"))
    return Profile(
        path=path,
        name=name,
        fingerprint=fingerprint,
        margin=margin,
        recorded=recorded,
        benchmarks={
            benchmark_id: _parse_thresholds(path, ("benchmarks", benchmark_id), entries)
            for benchmark_id, entries in benchmarks.items()
        },
    )


def load_profile(path: Path | str) -> Profile:
    """Read and validate one ``<profile>.yaml``; BaselineError names the file, key and problem."""
    path = Path(path)
    return _parse_profile(path, _read_yaml(path))


def load_ratios(path: Path | str) -> RatioGates:
    """Read and validate ``ratios.yaml``: ``ratios: {<metric>: {min: x, max: y}}``."""
    path = Path(path)
    top = _mapping(path, (), _read_yaml(path))
    _only_keys(path, (), top, ("ratios",))
    entries = _mapping(path, ("ratios",), _require(path, (), top, "ratios"))
    gates = {}
    for metric, bounds in entries.items():
        keys = ("ratios", metric)
        bounds = _mapping(path, keys, bounds)
        _only_keys(path, keys, bounds, ("min", "max"))
        if not bounds:
            raise BaselineError(path, _key_path(keys), "expected at least one of min, max; found neither")
        thresholds = [Threshold(metric=metric, kind=kind, value=_number(path, keys + (kind,), bound))
                      for kind, bound in bounds.items()]
        _check_band(path, keys, thresholds)
        gates[metric] = tuple(thresholds)
    return RatioGates(path=path, gates=gates)


def profile_paths(directory: Path | str) -> list[Path]:
    """Every profile file in a baselines directory (all ``*.yaml`` but ratios.yaml), sorted."""
    directory = Path(directory)
    if not directory.is_dir():
        raise BaselineError(directory, "(directory)", "expected a baselines directory, found none")
    return sorted(
        p for p in directory.glob("*.yaml") if p.name != RATIOS_FILE and not p.name.startswith(".")
    )


def match_profiles(
    directory: Path | str, *, fingerprint: MachineFingerprint
) -> list[tuple[Profile, MatchResult]]:
    """Each profile in the directory with how it matches ``fingerprint`` (malformed files raise)."""
    profiles = [load_profile(p) for p in profile_paths(directory)]
    return [(p, match_fingerprint(recorded=p.fingerprint, current=fingerprint)) for p in profiles]


def find_profile(directory: Path | str, *, fingerprint: MachineFingerprint) -> Profile | None:
    """The one profile matching ``fingerprint``; None when none does; an error when several do."""
    return _the_match(directory, match_profiles(directory, fingerprint=fingerprint))


def _the_match(directory: Path | str, candidates: list[tuple[Profile, MatchResult]]) -> Profile | None:
    matching = [p for p, match in candidates if match]
    if len(matching) > 1:
        raise BaselineError(
            directory, "fingerprint",
            "expected one matching profile, found several: " + ", ".join(str(p.path) for p in matching),
        )
    return matching[0] if matching else None


# --------------------------------------------------------------------------------------------------
# Checks


@dataclass(frozen=True)
class Verdict:
    """One threshold checked against one measurement."""

    benchmark_id: str
    metric: str
    kind: str  # "min" or "max"
    threshold: float
    measured: float | None  # None: not measured, or not a number (see note)
    source: str  # the baseline file the threshold came from
    passed: bool
    note: str = ""

    @property
    def message(self) -> str:
        symbol = "≥" if self.kind == "min" else "≤"
        bound = f"threshold {symbol} {_format(self.threshold)} ({self.source})"
        if self.measured is None:
            return f"{self.metric}: {self.note}, {bound}"
        return f"{self.metric}: measured {_format(self.measured)}, {bound}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message}


def _format(value: float) -> str:
    return f"{value:.6g}"


@dataclass(frozen=True)
class CheckResult:
    """All verdicts for one benchmark, and notes on what was not checked and why."""

    benchmark_id: str
    verdicts: tuple[Verdict, ...]
    notes: tuple[str, ...]

    @property
    def failures(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if not v.passed)

    @property
    def passed(self) -> bool:
        return not self.failures

    def raise_for_failures(self) -> None:
        if self.failures:
            raise BaselineFailure(self.failures)

    def as_dict(self) -> dict[str, Any]:
        return {
            "benchmark_id": self.benchmark_id,
            "passed": self.passed,
            "verdicts": [v.as_dict() for v in self.verdicts],
            "notes": list(self.notes),
        }


class BaselineFailure(AssertionError):
    """Failed verdicts, reported together (one line each)."""

    def __init__(self, verdicts: Iterable[Verdict]):
        self.verdicts = tuple(verdicts)
        lines = [f"{len(self.verdicts)} baseline check(s) failed:"]
        lines += [f"  {v.benchmark_id}: {v.message}" for v in self.verdicts]
        super().__init__("\n".join(lines))


def _judge(benchmark_id: str, threshold: Threshold, metrics: Mapping[str, Any], source: Path) -> Verdict:
    def verdict(measured: float | None, passed: bool, note: str = "") -> Verdict:
        return Verdict(benchmark_id=benchmark_id, metric=threshold.metric, kind=threshold.kind,
                       threshold=threshold.value, measured=measured, source=str(source),
                       passed=passed, note=note)

    if threshold.metric not in metrics:
        return verdict(None, False, "not measured")
    value = metrics[threshold.metric]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return verdict(None, False, f"not a number ({_describe(value)})")
    if not math.isfinite(value):
        return verdict(None, False, f"not a finite number ({value!r})")
    return verdict(float(value), threshold.admits(value))


def check_benchmark(
    *, profile: Profile | None, ratios: RatioGates, benchmark_id: str, metrics: Mapping[str, Any]
) -> CheckResult:
    """Check one benchmark's metrics against the profile's thresholds for its id (if a profile
    matched this machine) and against every ratio gate whose metric it reports.

    A threshold whose metric is missing from ``metrics`` fails ("not measured"); it never passes
    silently. Ratio gates apply only where the benchmark reports the ratio; see
    ``ratio_gates_not_measured`` for gates no benchmark reported.
    """
    verdicts, notes = [], []
    if profile is None:
        notes.append(UNKNOWN_MACHINE_NOTE)
    elif benchmark_id not in profile.benchmarks:
        notes.append(f"no absolute thresholds for {benchmark_id!r} in {profile.path}")
    else:
        verdicts += [_judge(benchmark_id, t, metrics, profile.path) for t in profile.benchmarks[benchmark_id]]
    for metric, gates in ratios.gates.items():
        if metric in metrics:
            verdicts += [_judge(benchmark_id, t, metrics, ratios.path) for t in gates]
    return CheckResult(benchmark_id=benchmark_id, verdicts=tuple(verdicts), notes=tuple(notes))


def ratio_gates_not_measured(ratios: RatioGates, results: Iterable[CheckResult]) -> tuple[str, ...]:
    """Ratio gates that no checked benchmark reported (e.g. deselected, or a peer not installed)."""
    checked = {v.metric for result in results for v in result.verdicts if v.source == str(ratios.path)}
    return tuple(metric for metric in ratios.gates if metric not in checked)


@dataclass(frozen=True)
class Baselines:
    """Everything a session checks against: this machine's profile (or None) and the ratio gates."""

    directory: Path
    fingerprint: MachineFingerprint
    profile: Profile | None
    ratios: RatioGates
    notes: tuple[str, ...]  # why no profile matched, per profile file

    def check(self, *, benchmark_id: str, metrics: Mapping[str, Any]) -> CheckResult:
        return check_benchmark(profile=self.profile, ratios=self.ratios,
                               benchmark_id=benchmark_id, metrics=metrics)


def load_baselines(directory: Path | str, *, fingerprint: MachineFingerprint | None = None) -> Baselines:
    """Load ``directory/ratios.yaml`` (required) and the profile matching ``fingerprint``
    (this machine's when None)."""
    directory = Path(directory)
    fingerprint = machine_fingerprint() if fingerprint is None else fingerprint
    candidates = match_profiles(directory, fingerprint=fingerprint)
    profile = _the_match(directory, candidates)
    notes = []
    if profile is None:
        notes.append(f"no baseline profile in {directory} matches this machine "
                     f"({_describe_fingerprint(fingerprint)}): {UNKNOWN_MACHINE_NOTE}")
        notes += [f"{p.path.name}: " + "; ".join(match.reasons) for p, match in candidates]
    return Baselines(directory=directory, fingerprint=fingerprint,
                     profile=profile,
                     ratios=load_ratios(directory / RATIOS_FILE), notes=tuple(notes))


def _describe_fingerprint(fingerprint: MachineFingerprint) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in fingerprint.as_dict().items())


# --------------------------------------------------------------------------------------------------
# Recording


@dataclass(frozen=True)
class MetricRule:
    """How a measured metric becomes a threshold: its direction and an absolute floor on the allowance."""

    kind: str  # "min": higher is better; "max": lower is better
    floor: float = 0.0


# Only these metrics can be recorded; extend the table when a new metric earns a threshold.
METRIC_RULES: Mapping[str, MetricRule] = {
    "samples_per_s": MetricRule("min"),
    "batches_per_s": MetricRule("min"),
    "gpu_util_median": MetricRule("min"),
    "gpu_util_mean": MetricRule("min"),
    # Fractions near zero: allow at least 2 percentage points, or noise alone fails the gate.
    "variation_ratio": MetricRule("max", floor=0.02),
    "robust_cv": MetricRule("max", floor=0.02),
    "input_bound": MetricRule("max", floor=0.02),
    "gpu_idle_fraction": MetricRule("max", floor=0.02),
    "retraces": MetricRule("max"),
}


def threshold_from_measurement(*, metric: str, measured: float, margin: float) -> Threshold:
    """The threshold recorded for one measured value (see the module notes for the rule)."""
    rule = METRIC_RULES[metric]
    # Exact decimal arithmetic on the shortest reprs: 0.01 + 0.02 gives 0.03, not 0.030000000000000002.
    with decimal.localcontext() as context:
        context.prec = 80
        value = decimal.Decimal(repr(float(measured)))
        allowance = max(abs(value) * decimal.Decimal(repr(float(margin))), decimal.Decimal(repr(rule.floor)))
        bound = value - allowance if rule.kind == "min" else value + allowance
        return Threshold(metric=metric, kind=rule.kind, value=_round_outward(bound, rule.kind))


def _round_outward(value: decimal.Decimal, kind: str) -> float:
    """Round to _ROUND_DIGITS significant digits, down for a min and up for a max (never tighter)."""
    if value == 0:
        return 0.0
    quantum = decimal.Decimal(1).scaleb(value.adjusted() - (_ROUND_DIGITS - 1))
    rounding = decimal.ROUND_FLOOR if kind == "min" else decimal.ROUND_CEILING
    # float() rounds to nearest, which keeps the order: a measured value that passed still passes.
    return float(value.quantize(quantum, rounding=rounding))


def _thresholds_from_metrics(
    path: Path, benchmark_id: str, metrics: Mapping[str, Any], margin: float
) -> dict[str, float]:
    keys = ("benchmarks", benchmark_id)
    if not metrics:
        raise BaselineError(path, _key_path(keys), "expected at least one metric to record, found none")
    thresholds = {}
    for metric, measured in metrics.items():
        if metric not in METRIC_RULES:
            raise BaselineError(
                path, _key_path(keys + (metric,)),
                f"expected a metric with a known direction ({', '.join(METRIC_RULES)}), found {metric!r}",
            )
        measured = _number(path, keys + (metric,), measured)
        threshold = threshold_from_measurement(metric=metric, measured=measured, margin=margin)
        thresholds[threshold.key] = threshold.value
    return thresholds


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    # A sidecar lock file, never deleted: deleting it would let two writers lock different inodes.
    lock_path = path.with_name(f".{path.name}.lock")
    with open(lock_path, "a") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)


def _dump_yaml(document: dict, stream: IO[str]) -> None:
    yaml.safe_dump(document, stream, sort_keys=False, default_flow_style=False,
                   allow_unicode=True, width=1000)


def _write_atomic(path: Path, document: dict) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``: readers
    see the old file or the new one, never a part-written one."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would make the committed file private
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(_FILE_HEADER)
            _dump_yaml(document, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    directory_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory_fd)  # make the rename itself durable
    finally:
        os.close(directory_fd)


def record_measurements(
    path: Path | str,
    *,
    profile_name: str,
    fingerprint: MachineFingerprint,
    benchmark_id: str,
    metrics: Mapping[str, float],
    margin: float,
) -> Profile:
    """Record thresholds derived from ``metrics`` for ``benchmark_id`` into the profile file ``path``.

    Creates the file if needed. Other benchmarks' entries, and this benchmark's thresholds on other
    metrics, are kept. Refuses a file recorded for another machine or with another margin, and a
    malformed file (it is not overwritten). Safe against concurrent writers (a lock around the
    read-modify-write) and crashes (atomic replace). Returns the profile as written.
    """
    path = Path(path)
    if path.suffix != ".yaml" or path.stem != profile_name:
        raise BaselineError(path, "profile",
                            f"expected a file named {profile_name}.yaml for profile {profile_name!r}")
    if not isinstance(benchmark_id, str) or not benchmark_id:
        raise BaselineError(path, "benchmarks", f"expected a benchmark id, found {_describe(benchmark_id)}")
    margin = _margin(path, ("margin",), margin)
    new_thresholds = _thresholds_from_metrics(path, benchmark_id, metrics, margin)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(path):
        if path.exists():
            existing = load_profile(path)
            _check_same_recording(existing, fingerprint=fingerprint, margin=margin)
            document = existing.as_dict()
        else:
            document = {"profile": profile_name, "fingerprint": fingerprint.as_dict(), "benchmarks": {}}
        benchmarks = document["benchmarks"]
        benchmarks[benchmark_id] = {**benchmarks.get(benchmark_id, {}), **new_thresholds}
        document["margin"] = margin
        document["recorded"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        document["benchmarks"] = dict(sorted(benchmarks.items()))  # stable order, readable diffs
        profile = _parse_profile(path, document)  # never write what could not be read back
        _write_atomic(path, profile.as_dict())
    return profile


def _check_same_recording(existing: Profile, *, fingerprint: MachineFingerprint, margin: float) -> None:
    match = match_fingerprint(recorded=existing.fingerprint, current=fingerprint)
    if not match:
        raise BaselineError(
            existing.path, "fingerprint",
            "recorded for another machine; not overwriting it: " + "; ".join(match.reasons),
        )
    if existing.margin is not None and existing.margin != margin:
        raise BaselineError(
            existing.path, "margin",
            f"expected margin {existing.margin} (as already recorded), found {margin}; "
            "re-record every benchmark into a new file to change the margin",
        )
