"""The self-test's records: what was asked (Settings), what each plant cost (PlantCheck), what each path
flagged per planted share (Level, PathCurve), how ratios.yaml's selftest_* gates were decided
(GateDecision), and the run as a whole (SelftestReport, a versioned file read back by ``load_report``).

A path is ``measured`` (every level has a rate or says why not), ``partial`` (the budget ran out before
all trials; the rates stand on the trials done) or ``skipped`` (no rate: ``reason`` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from perfsuite.records import Record, dump, load, migration

PATHS = ("work", "saved", "ab")
LEVELS = (0.0, 0.05, 0.10, 0.20, 0.40)
MEASURED, PARTIAL, SKIPPED = "measured", "partial", "skipped"
STATUSES = (MEASURED, PARTIAL, SKIPPED)


@dataclass(frozen=True)
class Settings(Record):
    """What the run was asked: the paths, the planted shares, trials per share (the ab path runs them at
    0 and 10 %, a quarter as many at the other shares), the time budget in seconds, the run profile of
    the measured rounds and the user's stored-run comparison settings (history_runs, alpha, min_effect)."""

    paths: tuple[str, ...]
    levels: tuple[float, ...]
    trials: int
    budget_s: float
    profile: str
    history_runs: int
    alpha: float
    min_effect: float

    def __post_init__(self):
        unknown = [path for path in self.paths if path not in PATHS]
        if not self.paths or unknown:
            raise self.invalid(("paths",), f"one or more of {', '.join(PATHS)}", repr(self.paths))
        if self.trials < 1:
            raise self.invalid(("trials",), "an integer >= 1", repr(self.trials))
        if not (self.levels and self.levels[0] == 0 and list(self.levels) == sorted(set(self.levels))):
            raise self.invalid(("levels",), "increasing shares starting at 0", repr(self.levels))


PLANT_OK, PLANT_UNRESOLVED, PLANT_FAILED = "ok", "unresolved", "failed"
PLANT_STATES = (PLANT_OK, PLANT_UNRESOLVED, PLANT_FAILED)


@dataclass(frozen=True)
class PlantCheck(Record):
    """A planted share ``level``, certified in work: ``work`` the planted pipeline's float ops per sample
    over the genuine one's, minus one (the work fingerprint's figure; exact on any machine); ``state``
    ``ok`` when it is ``level``, ``failed`` otherwise (``reason`` says so). Beside it, what it cost in
    time on this machine: ``measured`` the slowdown (more time per sample) over ``pairs`` figures,
    ``low``..``high`` its interval (curve.INTERVAL_COVERAGE; None where too few give one); reported,
    never a band to meet."""

    level: float
    measured: float | None
    pairs: int
    state: str
    low: float | None = None
    high: float | None = None
    reason: str = ""
    work: float | None = None

    def __post_init__(self):
        if self.state not in PLANT_STATES:
            raise self.invalid(("state",), f"one of {', '.join(PLANT_STATES)}", repr(self.state))

    @property
    def ok(self) -> bool:
        return self.state == PLANT_OK

    @property
    def failed(self) -> bool:
        return self.state == PLANT_FAILED


@dataclass(frozen=True)
class Level(Record):
    """One planted share on one path: ``flagged`` of ``trials`` and the share with its 95 %
    Clopper-Pearson interval (None without trials). ``plant`` the plant's check (None at 0: nothing is
    planted). ``withheld``: why no rate is given (a failed plant), else empty. A rate over an unresolved
    plant is given, and no claim rests on it (curve.smallest_caught, curve.decide_gates)."""

    level: float
    trials: int
    flagged: int
    rate: float | None
    ci_low: float | None
    ci_high: float | None
    plant: PlantCheck | None = None
    withheld: str = ""
    verdicts: tuple[str, ...] = ()  # per trial, the verdict's own words where the path has them (ab's labels)

    @property
    def reported(self) -> bool:
        """A rate that may be read: trials ran and the plant (if any) held."""
        return self.trials > 0 and not self.withheld


@dataclass(frozen=True)
class PathCurve(Record):
    """One path's detection curve: ``how`` the path judges a trial (one line), the levels, the smallest
    planted share caught (curve.smallest_caught) and the smallest its interval shows (smallest_shown),
    the false-alarm reading at 0 %, the seconds spent and the status (module docstring)."""

    path: str
    status: str
    reason: str
    how: str
    levels: tuple[Level, ...] = ()
    smallest_caught: float | None = None
    smallest_shown: float | None = None
    false_alarm: str = ""
    seconds: float = 0.0

    def __post_init__(self):
        if self.status not in STATUSES:
            raise self.invalid(("status",), f"one of {', '.join(STATUSES)}", repr(self.status))
        if self.status == SKIPPED and not self.reason:
            raise self.invalid(("reason",), "why the path was skipped", "nothing")


@dataclass(frozen=True)
class GateDecision(Record):
    """A selftest_* gate of ratios.yaml decided on the path it gates: ``decision`` pass, fail or
    inconclusive by the 95 % Clopper-Pearson interval of the share, or ``skipped`` with ``reason``."""

    metric: str
    bound: str
    decision: str
    rate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    reason: str = ""


@dataclass(frozen=True)
class SelftestReport(Record):
    """A whole ``perfsuite selftest`` run, written as the run's JSON summary."""

    SCHEMA_VERSION = 3

    settings: Settings
    machine: dict
    started: str
    elapsed_s: float
    curves: tuple[PathCurve, ...]
    gates: tuple[GateDecision, ...] = ()

    def curve(self, path: str) -> PathCurve | None:
        return next((curve for curve in self.curves if curve.path == path), None)


@migration(SelftestReport, 1, 2)
def migrate_1_to_2(data: dict) -> dict:
    """Version 1 decided a plant by its median alone (``ok``); version 2 by its interval (``state``)."""
    for curve in data.get("curves", []):
        for level in curve.get("levels", []):
            plant = level.get("plant")
            if isinstance(plant, dict) and "ok" in plant:
                plant["state"] = PLANT_OK if plant.pop("ok") else PLANT_FAILED
    return data


@migration(SelftestReport, 2, 3)
def migrate_2_to_3(data: dict) -> dict:
    """Version 3 left the gates path out of the detection curve (the mutant checks keep it), certified
    plants in work (no tolerance band), and added the work path and each trial's verdict words."""
    settings = data.get("settings", {})
    settings.pop("tolerance", None)
    if "paths" in settings:
        settings["paths"] = [path for path in settings["paths"] if path != "gates"] or ["saved"]
    data["curves"] = [curve for curve in data.get("curves", []) if curve.get("path") != "gates"]
    data["gates"] = [gate for gate in data.get("gates", []) if not str(gate.get("metric")).startswith("selftest_gates_")]
    return data


def write_report(report: SelftestReport, path: Path) -> Path:
    """The report as versioned JSON at ``path`` (atomically); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    dump(report, path)
    return path


def load_report(path: Path) -> SelftestReport:
    """A report written by write_report; RecordError naming the file and field otherwise."""
    return load(path, SelftestReport)
