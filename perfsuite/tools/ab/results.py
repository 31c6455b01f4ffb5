"""What one ``perfsuite ab`` run measured and decided, as data: its settings, each benchmark's rounds
over its passes, the verdicts, what was not compared, a side's failure; JSON out and back in."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from perfsuite.records import Record, RecordError, dump, migrate, migration
from perfsuite.tools.ab.manager import PRELOAD, Failure, Side
from perfsuite.verdict.ab import ABSettings, ABVerdict, Paired, nested_verdict

EXIT_OK, EXIT_SLOWER, EXIT_USAGE, EXIT_SIDE_FAILED, EXIT_UNDECIDED = 0, 1, 2, 3, 6


@dataclass(frozen=True)
class Options(Record):
    """What the controller needs besides the decision settings."""

    budget_s: float = 240.0  # measuring time over all benchmarks and passes (their rounds)
    pass_s: float = 3.0  # rounds each benchmark gets in a pass
    round_timeout_s: float = 300.0
    setup_timeout_s: float = 1800.0  # collection, fixtures, warm-up, the rest of a test
    fresh_workers: bool = False  # every worker a fresh interpreter, not forked from the fork server
    preload: tuple[str, ...] = PRELOAD  # what the fork server imports once for every worker


@dataclass(frozen=True)
class Measured(Record):
    """One benchmark's rounds on both sides (the figure: samples/s, or a compare benchmark's ratio)."""

    name: str
    nodeid: str
    metric: str
    higher_is_better: bool
    a: tuple[float, ...]
    b: tuple[float, ...]
    order: tuple[str, ...]  # "AB" or "BA" per round
    a_round_s: tuple[float, ...]
    b_round_s: tuple[float, ...]
    elapsed_s: float
    pass_rounds: tuple[int, ...] = ()  # rounds of each pass, in order (the rounds above are joined)
    a_cpu: tuple[float, ...] = ()  # process CPU seconds per sample per round (empty: not reported)
    b_cpu: tuple[float, ...] = ()
    a_parts: tuple[tuple[float, float], ...] = ()  # a ratio's numerator and denominator speeds per round
    b_parts: tuple[tuple[float, float], ...] = ()

    def cpu(self) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
        """Per pass, A's and B's CPU seconds per sample per round ([] when not reported for every round)."""
        if len(self.a_cpu) != len(self.a) or len(self.b_cpu) != len(self.b):
            return []
        return [(self.a_cpu[lo:hi], self.b_cpu[lo:hi]) for lo, hi in self._bounds()]

    def _bounds(self) -> list[tuple[int, int]]:
        return list(itertools.pairwise(itertools.accumulate(self.pass_rounds or (len(self.a),), initial=0)))

    def passes(self) -> list:
        """One perfsuite.verdict.ab.Paired per pass (the whole as one when it ran in one pass)."""
        return [Paired(self.name, self.a[lo:hi], self.b[lo:hi], self.higher_is_better) for lo, hi in self._bounds()]

    def sides_of_ratio(self) -> list[Measured]:
        """A ratio measured with its two sides' speeds: the numerator and the denominator, each as a
        benchmark of its own (samples/s, higher is better) to decide; [] otherwise."""
        if not self.a_parts or len(self.a_parts) != len(self.a) or len(self.b_parts) != len(self.b):
            return []
        return [replace(self, name=f"{self.name} [{part}]", metric=f"{part} of {self.metric}", higher_is_better=True,
                        a=tuple(p[i] for p in self.a_parts), b=tuple(p[i] for p in self.b_parts), a_parts=(),
                        b_parts=()) for i, part in enumerate(RATIO_PARTS)]


ROUND_KEYS = ("a", "b", "order", "a_round_s", "b_round_s", "a_cpu", "b_cpu", "a_parts", "b_parts")
RATIO_PARTS = ("numerator", "denominator")


def joined(per_pass: list[list[Measured]]) -> list[Measured]:
    """One Measured per benchmark, its passes' rounds joined in pass order (first-seen order of names)."""
    groups: dict[str, list[Measured]] = {}
    for measured in per_pass:
        for m in measured:
            groups.setdefault(m.name, []).append(m)
    out = []
    for group in groups.values():
        out.append(replace(group[0], **{key: tuple(v for m in group for v in getattr(m, key)) for key in ROUND_KEYS},
                           elapsed_s=sum(m.elapsed_s for m in group), pass_rounds=tuple(len(m.a) for m in group)))
    return out


def decided(measured: list[Measured]) -> list[Measured]:
    """What is decided: each benchmark, a ratio measured with its sides' speeds replaced by its sides."""
    return [m for whole in measured for m in (whole.sides_of_ratio() or [whole])]


@dataclass(frozen=True)
class DerivedRatio(Record):
    """A ratio's change derived from its sides' decided changes: (1 + numerator) / (1 + denominator) - 1,
    oriented like the ratio (worse is negative); the interval from the ends of the sides' intervals,
    which holds when both sides' do (coverage at least 1 - the two sides' misses). numerator,
    denominator: the rows of its sides."""

    name: str
    change: float
    low: float
    high: float
    a: tuple[float, ...]  # the ratio's rounds, as measured (empty: its sides were measured apart)
    b: tuple[float, ...]
    numerator: str = ""
    denominator: str = ""


def derived_ratios(measured: list[Measured], verdicts, named: dict[str, tuple[str, str]] | None = None
                   ) -> list[DerivedRatio]:
    """Per ratio decided by its sides, its change from theirs (``verdicts`` keyed by name): a ratio
    measured with its sides' speeds, and each compare of named sides (``named``: its sides' rows; a
    ratio of speeds, higher is better)."""
    by_name = {v.name: v.estimate for v in verdicts}
    out = []
    for m in measured:
        sides = m.sides_of_ratio()
        if sides:
            out.append(_derived(m.name, *(s.name for s in sides), by_name, higher_is_better=m.higher_is_better,
                                a=m.a, b=m.b))
    for name, (numerator, denominator) in (named or {}).items():
        if numerator in by_name and denominator in by_name:
            out.append(_derived(name, numerator, denominator, by_name, higher_is_better=True))
    return out


def _derived(name: str, numerator: str, denominator: str, by_name: dict, *, higher_is_better: bool,
             a: tuple[float, ...] = (), b: tuple[float, ...] = ()) -> DerivedRatio:
    n, d = by_name[numerator], by_name[denominator]
    ends = [(1 + n.change) / (1 + d.change), (1 + n.low) / (1 + d.high), (1 + n.high) / (1 + d.low)]
    if not higher_is_better:
        ends = [1 / e for e in ends]
    return DerivedRatio(name, ends[0] - 1, min(ends[1:]) - 1, max(ends[1:]) - 1, a, b, numerator, denominator)


@dataclass(frozen=True)
class NotCompared(Record):
    """A benchmark ab did not compare, and why."""

    name: str
    reason: str


# ----------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ABReport(Record):
    """Everything one ``perfsuite ab`` run found: the sides, the settings, each benchmark's rounds and
    verdict, what was not compared, a side's failure, and the machine's load around the run.

    Its JSON (``write_json``, ``load_report``) holds each benchmark as one entry, its verdict's keys and
    its rounds under ``rounds_detail``; ``derived`` as ``derived_ratios``; and the exit status."""

    SCHEMA_VERSION: ClassVar[int] = 4  # 1: unversioned, without benchmark_failures and CPU per sample
    DERIVED: ClassVar[tuple[str, ...]] = ("exit_status",)

    sides: tuple[Side, Side]
    settings: ABSettings
    options: Options
    measured: tuple[Measured, ...]
    verdicts: tuple[ABVerdict, ...]  # one per measured benchmark
    not_compared: tuple[NotCompared, ...]
    notes: tuple[str, ...]
    failure: Failure | None
    elapsed_s: float
    load: dict
    benchmark_failures: tuple[Failure, ...] = ()  # benchmarks that raised on a side
    derived: tuple[DerivedRatio, ...] = ()  # ratios decided by their sides

    @property
    def exit_status(self) -> int:
        """1 on a significant slowdown; else 3 when a side failed or a benchmark raised on a side; else 6
        when a benchmark is undecided (neither "no change" nor a pass: its budget did not decide it)."""
        from perfsuite.verdict.ab import UNDECIDED

        if any(v.significant_slowdown for v in self.verdicts):
            return EXIT_SLOWER
        if self.failure is not None or self.benchmark_failures:
            return EXIT_SIDE_FAILED
        return EXIT_UNDECIDED if any(v.verdict == UNDECIDED for v in self.verdicts) else EXIT_OK

    def title(self) -> str:
        a, b = self.sides
        return f"perfsuite ab: {a.describe()}  vs  {b.describe()}"

    def as_dict(self) -> dict:
        """The JSON's form: each benchmark's verdict (flat) with its rounds under rounds_detail."""
        data = super().as_dict()
        benchmarks = [{**v, "rounds_detail": m} for m, v in zip(data.pop("measured"), data.pop("verdicts"))]
        derived = data.pop("derived")
        return {**data, "benchmarks": benchmarks, "derived_ratios": derived}

    @classmethod
    def from_dict(cls, data: Any, where: str | None = None) -> ABReport:
        """Read back what as_dict() wrote; RecordError names the field that does not match."""
        where = where or cls.__name__
        if isinstance(data, dict) and isinstance(data.get("benchmarks"), list):
            data = dict(data)
            entries = data.pop("benchmarks")
            data["measured"] = [e.get("rounds_detail") if isinstance(e, dict) else e for e in entries]
            data["verdicts"] = [nested_verdict({k: v for k, v in e.items() if k != "rounds_detail"})
                                if isinstance(e, dict) else e for e in entries]
            if "derived_ratios" in data:
                data["derived"] = data.pop("derived_ratios")
        return super().from_dict(data, where)


@migration(ABReport, 1, 2)
def migrate_1_to_2(data: dict) -> dict:
    """Schema 2 added benchmark_failures, each failure's log, and CPU per sample; each has a default,
    so schema 1's keys read as they are."""
    return data


@migration(ABReport, 2, 3)
def migrate_2_to_3(data: dict) -> dict:
    """Schema 3 added the options fresh_workers and preload. A schema-2 run started fresh interpreters
    and preloaded nothing: said so, not left to the defaults."""
    data["options"] = {**data.get("options", {}), "fresh_workers": True, "preload": []}
    return data


@migration(ABReport, 3, 4)
def migrate_3_to_4(data: dict) -> dict:
    """Schema 4 named the verdict "inconclusive" "undecided" and added the trimmed mean's cut and the CPU
    test's figures (each with a default: a schema-3 run tested neither); its passes were a fixed count,
    its budget shared by them (pass_s: that share, not known per benchmark here, left to the default)."""
    for entry in data.get("benchmarks", []):
        if isinstance(entry, dict) and entry.get("verdict") == "inconclusive":
            entry["verdict"] = "undecided"
    return data


def write_json(path: Path, report: ABReport) -> None:
    """The report as versioned JSON at path, atomically (never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    dump(report, path)


def load_report(path: Path) -> ABReport:
    """An ``ab --json`` file as the report, an unversioned (schema 1) one through its migration; a
    RecordError naming the file, the field, what was expected and what was found otherwise."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise RecordError(str(path), "(file)", "a readable ab JSON file", str(error)) from None
    if isinstance(data, dict) and "schema_version" not in data:
        data = {**data, "schema_version": 1}
    return ABReport.from_dict(migrate(ABReport, data, str(path)), str(path))
