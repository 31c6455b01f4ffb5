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
from perfsuite.records import R, Record, RecordError, found_text, key_path
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
_THRESHOLD_KEY = re.compile(r"(min|max)_(.+)\Z", re.DOTALL)
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


def _is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_margin(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1


def _check_thresholds(record: Record, parts: tuple[str, ...], thresholds: Iterable[Threshold], *,
                      by_kind: bool = False) -> None:
    """Each bound finite, and no min above the max of the same metric (no value could pass). A bound's
    key is its kind (``by_kind``, a ratio gate's ``min``) or ``<kind>_<metric>`` (a profile's)."""
    lows = {}
    for t in thresholds:
        if not _is_finite(t.value):
            raise record.invalid((*parts, t.kind if by_kind else t.key), "a finite number", found_text(t.value))
        if t.kind == "min":
            lows[t.metric] = t.value
    for t in thresholds:
        if t.kind == "max" and t.metric in lows and lows[t.metric] > t.value:
            raise record.invalid(parts, "min ≤ max" if by_kind else f"min ≤ max for {t.metric!r}",
                                 f"min {lows[t.metric]} above max {t.value}: no value could pass")


@dataclass(frozen=True, kw_only=True)
class ProfileFile(Record):
    """What a current-format ``<profile>.yaml`` holds. Its format, the profile's name against the file's
    and the fingerprint (``MachineFingerprint.from_dict``) are checked by ``read_profile``."""

    format: int
    profile: str
    fingerprint: dict
    margin: float | None = None
    recorded: str | None = None
    benchmarks: dict[str, dict[str, float]]

    def __post_init__(self):
        for name in ("profile", "recorded"):
            if getattr(self, name) is not None and not getattr(self, name).strip():
                raise self.invalid((name,), "a non-empty string", found_text(getattr(self, name)))
        if self.margin is not None and not _is_margin(self.margin):
            raise self.invalid(("margin",), "a margin in [0, 1)", found_text(self.margin))
        for benchmark_id, thresholds in self.thresholds().items():
            _check_thresholds(self, ("benchmarks", benchmark_id), thresholds)

    def thresholds(self) -> dict[str, tuple[Threshold, ...]]:
        """Per benchmark id, its thresholds in file order."""
        result = {}
        for benchmark_id, entries in self.benchmarks.items():
            thresholds = []
            for key, value in entries.items():
                found = _THRESHOLD_KEY.match(key)
                if not found:
                    raise self.invalid(("benchmarks", benchmark_id, key), "min_<metric> or max_<metric>",
                                       "an unknown threshold key")
                thresholds.append(Threshold(metric=found.group(2), kind=found.group(1), value=value))
            result[benchmark_id] = tuple(thresholds)
        return result


@dataclass(frozen=True, kw_only=True)
class RatioGate(Record):
    """One gate of ``ratios.yaml``: at least one bound, and the claim it protects."""

    min: float | None = None
    max: float | None = None
    claim: str
    role: str = REGRESSION

    def __post_init__(self):
        if not self.claim.strip():
            raise self.invalid(("claim",), "a non-empty string", found_text(self.claim))
        if self.role not in ROLES:
            raise self.invalid(("role",), f"one of {', '.join(ROLES)}", found_text(self.role))
        if self.min is None and self.max is None:
            raise self.invalid((), "at least one of min, max", "neither")
        _check_thresholds(self, (), self.thresholds("metric"), by_kind=True)

    def thresholds(self, metric: str) -> tuple[Threshold, ...]:
        bounds = (("min", self.min), ("max", self.max))
        return tuple(Threshold(metric=metric, kind=kind, value=value, claim=self.claim, role=self.role)
                     for kind, value in bounds if value is not None)


@dataclass(frozen=True)
class RatiosFile(Record):
    """What ``ratios.yaml`` holds."""

    ratios: dict[str, RatioGate]


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


def _read_yaml(path: Path) -> dict:
    """The file's YAML document, which must be a mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BaselineError(path, "(file)", "expected a baseline file, found no such file") from None
    except UnicodeDecodeError as error:
        raise BaselineError(path, "(file)", f"expected UTF-8 text, found {error.reason}") from None
    try:
        document = yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(document)"
        raise BaselineError(path, where, f"invalid YAML: {error.problem or error.context}") from None
    except yaml.YAMLError as error:
        raise BaselineError(path, "(document)", f"invalid YAML: {error}") from None
    if not isinstance(document, dict):
        found = "an empty document" if document is None else found_text(document)
        raise BaselineError(path, "(top level)", f"expected a mapping, found {found}")
    return document


def _from_document(cls: type[R], path: Path, document: dict) -> R:
    """``cls.from_dict(document)``, its RecordError as a BaselineError naming the file and key path."""
    try:
        return cls.from_dict(document, str(path))
    except RecordError as error:
        raise _baseline_error(path, error.parts, error.expected, error.found) from None


def _baseline_error(path: Path, parts: tuple, expected: str, found: str) -> BaselineError:
    return BaselineError(path, key_path(parts) or "(top level)", f"expected {expected}, found {found}")


def _fingerprint(path: Path, values: dict) -> MachineFingerprint:
    try:
        return MachineFingerprint.from_dict(values)
    except FingerprintFieldError as error:
        if error.missing:
            expected, found = "a value (required key)", "no such key"
        else:
            expected, found = error.expected, "an unknown key" if error.unknown else found_text(error.found)
        raise _baseline_error(path, ("fingerprint", error.key), expected, found) from None


def _parse_profile(path: Path, document: dict) -> Profile:
    recorded = document.get("recorded")
    if isinstance(recorded, (datetime.date, datetime.datetime)):  # an unquoted YAML timestamp
        document = {**document, "recorded": recorded.isoformat()}
    found = document.get("format")
    if found != PROFILE_FORMAT or isinstance(found, bool):  # first: another format lacks other fields
        raise _baseline_error(path, ("format",), f"{PROFILE_FORMAT} (the profile format this perfsuite reads)",
                              found_text(found))
    record = _from_document(ProfileFile, path, document)
    if record.profile != path.stem:
        raise BaselineError(path, "profile", f"expected the file's name without .yaml ({path.stem!r}), "
                                             f"found {record.profile!r}")
    fingerprint = _fingerprint(path, record.fingerprint)
    return Profile(path=path, name=record.profile, fingerprint=fingerprint, margin=record.margin,
                   recorded=record.recorded, benchmarks=record.thresholds())


def read_profile(path: Path | str) -> Profile | OutdatedProfile:
    """Read one ``<profile>.yaml``: a Profile, or an OutdatedProfile for a file without ``format``.
    A malformed current-format file raises BaselineError naming the file, key and problem."""
    path = Path(path)
    document = _read_yaml(path)
    if "format" not in document:
        return OutdatedProfile(path=path, format=1)
    return _parse_profile(path, document)


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
    record = _from_document(RatiosFile, path, _read_yaml(path))
    return RatioGates(path=path, gates={metric: gate.thresholds(metric) for metric, gate in record.ratios.items()})


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
    parts = ("benchmarks", benchmark_id)
    if not metrics:
        raise _baseline_error(path, parts, "at least one metric to record", "none")
    thresholds = {}
    for metric, measured in metrics.items():
        if not is_declared(metric):
            raise _baseline_error(path, (*parts, metric), "a metric declared in perfsuite.verdict.metrics",
                                  repr(metric))
        if not _is_finite(measured):
            raise _baseline_error(path, (*parts, metric), "a finite number", found_text(measured))
        threshold = threshold_from_measurement(metric=metric, measured=float(measured), margin=margin)
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
        raise _baseline_error(path, ("benchmarks",), "a benchmark id", found_text(benchmark_id))
    if not _is_margin(margin):
        raise _baseline_error(path, ("margin",), "a margin in [0, 1)", found_text(margin))
    margin = float(margin)
    new_thresholds = _thresholds_from_metrics(path, benchmark_id, metrics, margin)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(path):
        benchmarks = {}
        if path.exists():
            existing = load_profile(path)
            _check_same_recording(existing, fingerprint=fingerprint, margin=margin)
            fingerprint = existing.fingerprint
            benchmarks = {bid: {t.key: t.value for t in ts} for bid, ts in existing.benchmarks.items()}
        benchmarks[benchmark_id] = {**benchmarks.get(benchmark_id, {}), **new_thresholds}
        document = ProfileFile(
            format=PROFILE_FORMAT, profile=profile_name, fingerprint=fingerprint.as_dict(), margin=margin,
            recorded=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            benchmarks=dict(sorted(benchmarks.items())),  # stable order, readable diffs
        ).as_dict()
        profile = _parse_profile(path, document)  # never write what could not be read back
        _write_atomic(path, document)
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
