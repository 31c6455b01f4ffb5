"""Baseline files: machine profiles, thresholds, ratio gates, checks and recording.

Layout (``benchmarks/baselines/``):

* ``<profile>.yaml`` -- one file per machine profile: the machine's fingerprint and, per benchmark id,
  absolute thresholds. They apply only on a machine whose fingerprint matches on every key of
  ``perfsuite.measure.machine.HARDWARE_KEYS`` (``perfsuite machine`` prints this machine's)::

      format: 2                          # no format key: format 1, listed as not applicable, never applied
      profile: cpu-amd-fam26-model2-2core   # must equal the file's name without .yaml
      fingerprint:                       # every key of MachineFingerprint, none other
        cpu_vendor: AMD
        cpu_family: 26
        cpu_model_number: 2
        isa: [avx, avx2, fma, ...]
        cores: 2
        tensorflow: 2.21.0               # compared as major.minor; quote a bare major.minor ('2.21')
        ...
      margin: 0.25                       # how recorded thresholds were derived (see perfsuite.verdict.metrics)
      recorded: '<ISO 8601 time of the recording run>'
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

Fingerprints and their matching live in ``perfsuite.measure.machine``; TensorFlow is not imported here.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import fcntl
import io
import json
import math
import re
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from perfsuite.errors import BaselineError
from perfsuite.files import write_atomic
from perfsuite.measure.machine import (
    FingerprintFieldError,
    MachineFingerprint,
    MatchResult,
    default_profile_name,
    machine_fingerprint,
    match,
)
from perfsuite.verdict.gates import REGRESSION, ROLES, CheckResult, Threshold, check_benchmark
from perfsuite.verdict.metrics import is_declared
from perfsuite.verdict.metrics import lookup as lookup_metric

RATIOS_FILE = "ratios.yaml"
UNKNOWN_MACHINE_NOTE = (
    "absolute thresholds skipped: no baseline profile matches this machine; ratio gates still applied"
)
_ROUND_DIGITS = 4
PROFILE_FORMAT = 2
FORMAT_1_NOTE = (
    "not applicable: recorded in format 1, which identifies hardware by model name only; "
    "re-record it (README: Recording a baseline on a new machine)"
)
_PROFILE_KEYS = ("format", "profile", "fingerprint", "margin", "recorded", "benchmarks")
_THRESHOLD_KEY = re.compile(r"(min|max)_(.+)\Z", re.DOTALL)
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_FILE_HEADER = (
    "# perfsuite baseline profile (see perfsuite/baselines.py for the format).\n"
    "# Thresholds recorded from measurements: min_* = measured - |measured| * margin,\n"
    "# max_* = measured + max(|measured| * margin, floor), rounded outward to 4 significant digits.\n"
)




# --------------------------------------------------------------------------------------------------
# Thresholds, profiles and ratio gates


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
            "format": PROFILE_FORMAT,
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
class OutdatedProfile:
    """A profile file in an older format (no ``format`` key). It identifies no hardware, so it is
    never applied; it is listed with what to do rather than stopping the run."""

    path: Path
    format: int

    @property
    def name(self) -> str:
        return self.path.stem


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
    try:
        return MachineFingerprint.from_dict(_mapping(path, keys, value))
    except FingerprintFieldError as error:
        where = keys + (error.key,)
        if error.missing:
            raise BaselineError(path, _key_path(where), "missing (required key)") from None
        if error.unknown:
            raise BaselineError(path, _key_path(where), f"unknown key; expected {error.expected}") from None
        raise _wrong(path, where, error.expected, error.found) from None


def _check_format(path: Path, top: dict) -> None:
    found = _require(path, (), top, "format")
    if isinstance(found, bool) or found != PROFILE_FORMAT:
        raise _wrong(path, ("format",), f"{PROFILE_FORMAT} (the profile format this perfsuite reads)", found)


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
    _check_format(path, top)
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


def read_profile(path: Path | str) -> Profile | OutdatedProfile:
    """Read one ``<profile>.yaml``: a Profile, or an OutdatedProfile for a file without ``format``.
    A malformed current-format file raises BaselineError naming the file, key and problem."""
    path = Path(path)
    top = _mapping(path, (), _read_yaml(path))
    if "format" not in top:
        return OutdatedProfile(path=path, format=1)
    return _parse_profile(path, top)


def load_profile(path: Path | str) -> Profile:
    """Read and validate one current-format ``<profile>.yaml``; an outdated one is an error here
    (callers that list profiles use ``read_profile``)."""
    profile = read_profile(path)
    if isinstance(profile, OutdatedProfile):
        raise BaselineError(profile.path, "format",
                            f"expected format {PROFILE_FORMAT}, found no format key: {FORMAT_1_NOTE}")
    return profile


def load_ratios(path: Path | str) -> RatioGates:
    """Read and validate ``ratios.yaml``: ``ratios: {<metric>: {min: x, max: y, claim: "...", role: ...}}``.

    Every gate states the claim it protects: a bound without a reason cannot be reviewed or moved.
    ``role`` (optional): ``regression`` (the default) or ``context``, a contrast shown but never
    counted (perfsuite.verdict.gates)."""
    path = Path(path)
    top = _mapping(path, (), _read_yaml(path))
    _only_keys(path, (), top, ("ratios",))
    entries = _mapping(path, ("ratios",), _require(path, (), top, "ratios"))
    gates = {}
    for metric, bounds in entries.items():
        keys = ("ratios", metric)
        bounds = _mapping(path, keys, bounds)
        _only_keys(path, keys, bounds, ("min", "max", "claim", "role"))
        claim = _string(path, keys + ("claim",), _require(path, keys, bounds, "claim"))
        role = bounds.get("role", REGRESSION)
        if role not in ROLES:
            raise _wrong(path, keys + ("role",), f"one of {', '.join(ROLES)}", role)
        limits = {kind: bound for kind, bound in bounds.items() if kind in ("min", "max")}
        if not limits:
            raise BaselineError(path, _key_path(keys), "expected at least one of min, max; found neither")
        thresholds = [Threshold(metric=metric, kind=kind, value=_number(path, keys + (kind,), bound), claim=claim,
                                role=role) for kind, bound in limits.items()]
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


@dataclass(frozen=True)
class ProfileMatch:
    """How one profile file relates to a fingerprint: it matches, it differs (each key named), or it
    is outdated and applies to no machine (``profile`` and ``result`` None)."""

    path: Path
    profile: Profile | None
    result: MatchResult | None

    @property
    def matched(self) -> bool:
        return self.result is not None and self.result.matched

    def describe(self) -> str:
        if self.result is None:
            return FORMAT_1_NOTE
        if self.result:
            return "matches"
        return "differs: " + "; ".join(self.result.reasons)


def match_profiles(directory: Path | str, *, fingerprint: MachineFingerprint) -> list[ProfileMatch]:
    """Each profile file in the directory with how it relates to ``fingerprint`` (malformed files raise)."""
    matches = []
    for path in profile_paths(directory):
        profile = read_profile(path)
        if isinstance(profile, OutdatedProfile):
            matches.append(ProfileMatch(path=path, profile=None, result=None))
        else:
            matches.append(ProfileMatch(path=path, profile=profile,
                                        result=match(profile.fingerprint, fingerprint)))
    return matches


def the_match(directory: Path | str, candidates: list[ProfileMatch]) -> Profile | None:
    """The one matching profile among ``candidates``; None when none matches; an error when several do."""
    matching = [c.profile for c in candidates if c.matched]
    if len(matching) > 1:
        raise BaselineError(
            directory, "fingerprint",
            "expected one matching profile, found several: " + ", ".join(str(p.path) for p in matching),
        )
    return matching[0] if matching else None


# --------------------------------------------------------------------------------------------------
# Checks


@dataclass(frozen=True)
class Baselines:
    """Everything a session checks against: this machine's profile (or None) and the ratio gates."""

    directory: Path
    fingerprint: MachineFingerprint
    profile: Profile | None
    ratios: RatioGates
    notes: tuple[str, ...]  # one note when no profile matched: why, per file, and how to record one

    def check(self, *, benchmark_id: str, metrics: Mapping[str, Any],
              rounds: Mapping[str, Any] | None = None) -> CheckResult:
        return check_benchmark(profile=self.profile, ratios=self.ratios, benchmark_id=benchmark_id,
                               metrics=metrics, rounds=rounds)


def load_baselines(directory: Path | str, *, fingerprint: MachineFingerprint | None = None) -> Baselines:
    """Load ``directory/ratios.yaml`` (required) and the profile matching ``fingerprint``
    (this machine's when None). When none matches, ``notes`` holds one note saying why, per file."""
    directory = Path(directory)
    fingerprint = machine_fingerprint() if fingerprint is None else fingerprint
    candidates = match_profiles(directory, fingerprint=fingerprint)
    profile = the_match(directory, candidates)
    notes = () if profile is not None else (unmatched_note(directory, fingerprint, candidates),)
    return Baselines(directory=directory, fingerprint=fingerprint, profile=profile,
                     ratios=load_ratios(directory / RATIOS_FILE), notes=notes)


def unmatched_note(directory: Path, fingerprint: MachineFingerprint, candidates: list[ProfileMatch]) -> str:
    """The one note of a run on a machine no profile matches: each file's differences, and how to
    record a profile for this machine."""
    name = default_profile_name(fingerprint)
    lines = [f"{UNKNOWN_MACHINE_NOTE}. Profiles in {directory}:"]
    lines += [f"  {c.path.name}: {c.describe()}" for c in candidates]
    if not candidates:
        lines.append("  (the directory holds no profile)")
    lines.append(f"  to record one ({directory / name}.yaml): {record_command(directory)}")
    return "\n".join(lines)


def record_command(directory: Path | str) -> str:
    """The command that records this machine's profile into ``directory``."""
    return (f"pytest benchmarks/ --perfsuite-baselines {directory} --perfsuite-save-baselines "
            "--perfsuite-gates=report")


# --------------------------------------------------------------------------------------------------
# Recording


def threshold_from_measurement(*, metric: str, measured: float, margin: float) -> Threshold:
    """The threshold recorded for one measured value (see the module notes for the rule)."""
    rule = lookup_metric(metric)
    # Exact decimal arithmetic on the shortest reprs: 0.01 + 0.02 gives 0.03, not 0.030000000000000002.
    with decimal.localcontext() as context:
        context.prec = 80
        value = decimal.Decimal(repr(float(measured)))
        allowance = max(abs(value) * decimal.Decimal(repr(float(margin))), decimal.Decimal(repr(rule.floor)))
        kind = rule.threshold_kind
        bound = value - allowance if kind == "min" else value + allowance
        return Threshold(metric=metric, kind=kind, value=_round_outward(bound, kind))


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
        if not is_declared(metric):
            raise BaselineError(path, _key_path(keys + (metric,)),
                                f"expected a metric declared in perfsuite.verdict.metrics, found {metric!r}")
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
    """The header and the document as YAML, replacing ``path`` atomically (files.write_atomic):
    readers see the old file or the new one, never a part-written one."""
    stream = io.StringIO()
    stream.write(_FILE_HEADER)
    _dump_yaml(document, stream)
    write_atomic(path, stream.getvalue())


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
            document = {"format": PROFILE_FORMAT, "profile": profile_name,
                        "fingerprint": fingerprint.as_dict(), "benchmarks": {}}
        benchmarks = document["benchmarks"]
        benchmarks[benchmark_id] = {**benchmarks.get(benchmark_id, {}), **new_thresholds}
        document["margin"] = margin
        document["recorded"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        document["benchmarks"] = dict(sorted(benchmarks.items()))  # stable order, readable diffs
        profile = _parse_profile(path, document)  # never write what could not be read back
        _write_atomic(path, profile.as_dict())
    return profile


def _check_same_recording(existing: Profile, *, fingerprint: MachineFingerprint, margin: float) -> None:
    result = match(existing.fingerprint, fingerprint)
    if not result:
        raise BaselineError(
            existing.path, "fingerprint",
            "recorded for other hardware; not overwriting it: " + "; ".join(result.reasons),
        )
    if existing.margin is not None and existing.margin != margin:
        raise BaselineError(
            existing.path, "margin",
            f"expected margin {existing.margin} (as already recorded), found {margin}; "
            "re-record every benchmark into a new file to change the margin",
        )
