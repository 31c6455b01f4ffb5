"""What one ``perfsuite ab`` run measured and decided, as data: its settings, each benchmark's rounds
over its passes, the verdicts, what was not compared, a side's failure; JSON out and back in."""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from perfsuite.tools.ab.manager import ABError, Side, SideFailure

EXIT_OK, EXIT_SLOWER, EXIT_USAGE, EXIT_SIDE_FAILED = 0, 1, 2, 3
AB_SCHEMA_VERSION = 2  # 1: the unversioned JSON before; 2: schema_version, benchmark_failures, CPU per sample


@dataclass(frozen=True)
class Options:
    """What the controller needs besides the decision settings."""

    budget_s: float = 600.0  # measuring time over all benchmarks (their rounds)
    round_timeout_s: float = 300.0
    setup_timeout_s: float = 1800.0  # collection, fixtures, warm-up, the rest of a test

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Measured:
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

    def as_dict(self) -> dict:
        keys = ("a", "b", "order", "a_round_s", "b_round_s", "pass_rounds")
        return {**asdict(self), **{k: list(getattr(self, k)) for k in keys}}

    def passes(self) -> list:
        """One perfsuite.verdict.ab.Paired per pass (the whole as one when it ran in one pass)."""
        from perfsuite.verdict.ab import Paired

        bounds = itertools.accumulate(self.pass_rounds or (len(self.a),), initial=0)
        return [Paired(self.name, self.a[lo:hi], self.b[lo:hi], self.higher_is_better)
                for lo, hi in itertools.pairwise(bounds)]


def joined(per_pass: list[list[Measured]]) -> list[Measured]:
    """One Measured per benchmark, its passes' rounds joined in pass order (first-seen order of names)."""
    groups: dict[str, list[Measured]] = {}
    for measured in per_pass:
        for m in measured:
            groups.setdefault(m.name, []).append(m)
    out = []
    for name, group in groups.items():
        first = group[0]
        out.append(Measured(name, first.nodeid, first.metric, first.higher_is_better,
                            *(tuple(v for m in group for v in getattr(m, key))
                              for key in ("a", "b", "order", "a_round_s", "b_round_s")),
                            sum(m.elapsed_s for m in group), tuple(len(m.a) for m in group)))
    return out


@dataclass(frozen=True)
class NotCompared:
    name: str
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ABReport:
    """Everything one ``perfsuite ab`` run found: the sides, the settings, each benchmark's rounds and
    verdict, what was not compared, a side's failure, and the machine's load around the run."""

    sides: tuple[Side, Side]
    settings: object  # perfsuite.verdict.ab.ABSettings
    options: Options
    measured: tuple[Measured, ...]
    verdicts: tuple  # perfsuite.verdict.ab.ABVerdict, one per measured benchmark
    not_compared: tuple[NotCompared, ...]
    notes: tuple[str, ...]
    failure: SideFailure | None
    elapsed_s: float
    load: dict
    benchmark_failures: tuple[SideFailure, ...] = ()  # benchmarks that raised on a side

    @property
    def exit_status(self) -> int:
        """1 on a significant slowdown; else 3 when a side failed or a benchmark raised on a side."""
        if any(v.significant_slowdown for v in self.verdicts):
            return EXIT_SLOWER
        return EXIT_SIDE_FAILED if self.failure is not None or self.benchmark_failures else EXIT_OK

    def title(self) -> str:
        a, b = self.sides
        return f"perfsuite ab: {a.describe()}  vs  {b.describe()}"

    def as_dict(self) -> dict:
        return {"schema_version": AB_SCHEMA_VERSION, "sides": [s.as_dict() for s in self.sides], "settings": self.settings.as_dict(),
                "options": self.options.as_dict(),
                "benchmarks": [{**v.as_dict(), "rounds_detail": m.as_dict()} for m, v in zip(self.measured, self.verdicts)],
                "not_compared": [n.as_dict() for n in self.not_compared], "notes": list(self.notes),
                "failure": None if self.failure is None else self.failure.as_dict(),
                "benchmark_failures": [f.as_dict() for f in self.benchmark_failures],
                "elapsed_s": self.elapsed_s, "load": self.load, "exit_status": self.exit_status}




def write_json(path: Path, data: dict) -> None:
    """data as JSON at path, written to a temporary file and renamed over it (never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, allow_nan=False)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def load_json(path: Path) -> dict:
    """An ``ab --json`` file written by this version's schema; a clear ABError otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ABError(f"{path}: expected an ab JSON file, found it unreadable ({error})") from None
    found = data.get("schema_version", 1) if isinstance(data, dict) else None
    if found != AB_SCHEMA_VERSION:
        raise ABError(f"{path}: expected ab JSON schema_version {AB_SCHEMA_VERSION}, found {found!r}")
    return data

