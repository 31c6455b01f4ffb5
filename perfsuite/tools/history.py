"""`perfsuite history`: each benchmark's samples/s over the runs pytest-benchmark saved on this hardware,
with the change points in it.

Input: pytest-benchmark's storage (``.benchmarks/<machine id>/*.json``, what ``--benchmark-autosave``
writes), the runs whose perfsuite fingerprint matches this machine's hardware (as the comparison with
earlier runs selects them). Per benchmark (profile and node id) and run: samples/s, the interval of its
median over the run's rounds (``samples_per_s_interval``, or computed from ``samples_per_s_rounds``),
the commit (``commit_info.id``) and date.

Change points: PELT (the ``ruptures`` library, ``history`` extra) on log samples/s with an l2 cost, a
penalty of ``PENALTY`` × σ² × ln n (σ: the robust spread of successive differences, so one step does
not inflate it) and segments of at least ``MIN_SEGMENT`` runs. A change point is kept only where the
order-statistic intervals of the two segments' medians do not overlap: the shift and its interval are
after / before − 1 from those medians and intervals. Each names the commit range: the last run before
it and the first after it.

Output: a PNG per benchmark (perfsuite.plotting) and ``history.md`` listing the benchmarks, their change
points and figures.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import numpy as np

from perfsuite.errors import PerfsuiteError, ReportUnavailable
from perfsuite.measure.stats import median_interval
from perfsuite.pytest_plugin import benchmark_adapter
from perfsuite.tables import RIGHT, Table

PENALTY = 3.0
MIN_SEGMENT = 3
MIN_RUNS = 2 * MIN_SEGMENT  # a change point needs a segment of MIN_SEGMENT runs on each side
EXTRA_HINT = "pip install 'perfsuite[history]' (the 'test' extra includes it too)"


@dataclass(frozen=True)
class Point:
    """One saved run of one benchmark."""

    commit: str  # commit_info.id ('' when the run was saved outside git)
    when: datetime
    samples_per_s: float
    low: float | None
    high: float | None
    run: str  # the saved run's file name


@dataclass(frozen=True)
class ChangePoint:
    """A shift of a benchmark's samples/s between runs ``index - 1`` and ``index`` of its series."""

    index: int
    before_commit: str
    after_commit: str
    before: float  # median samples/s of the segment before
    after: float
    shift: float  # after / before - 1
    shift_low: float
    shift_high: float

    def commits(self) -> str:
        return f"{_short(self.before_commit)}..{_short(self.after_commit)}"


@dataclass(frozen=True)
class Series:
    benchmark_id: str
    points: tuple[Point, ...]
    changes: tuple[ChangePoint, ...]

    @property
    def searched(self) -> bool:
        """Whether the series has enough runs (MIN_RUNS) to look for change points at all."""
        return len(self.points) >= MIN_RUNS

    def too_short(self) -> str:
        return f"not enough runs ({len(self.points)} of {MIN_RUNS}) to look for change points"


def _short(commit: str) -> str:
    return commit[:10] if commit else "(no commit)"


def load_points(runs: list[tuple[Path, dict]], *, since: date | None = None,
                keyword: str | None = None) -> dict[str, list[Point]]:
    """Per benchmark id (profile::node id), its points oldest first, from the runs given (path, document)."""
    from perfsuite.pytest_plugin.recorder import benchmark_id

    series: dict[str, list[Point]] = {}
    for path, run in runs:
        when = _datetime(path, run["datetime"])
        if since is not None and when.date() < since:
            continue
        commit = str((run.get("commit_info") or {}).get("id") or "")
        for bench in run["benchmarks"]:
            info = bench.get("extra_info") or {}
            figure = info.get("samples_per_s")
            if not info.get("perfsuite_profile") or not isinstance(figure, int | float) or not figure > 0:
                continue
            name = benchmark_id(info["perfsuite_profile"], str(bench.get("fullname", "")))
            if keyword and keyword not in name:
                continue
            low, high = _interval(info)
            series.setdefault(name, []).append(Point(commit, when, float(figure), low, high, path.name))
    return series


def _datetime(path: Path, text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise PerfsuiteError(f"{path}: datetime: expected an ISO 8601 date and time, found {text!r}") from None


def _interval(info: dict) -> tuple[float | None, float | None]:
    """The run's interval of samples/s; older runs named the rounds ``round_samples_per_s``."""
    given = info.get("samples_per_s_interval")
    if isinstance(given, list) and len(given) == 2:
        return float(given[0]), float(given[1])
    rounds = info.get("samples_per_s_rounds") or info.get("round_samples_per_s")
    if isinstance(rounds, list) and len(rounds) >= 2:
        interval = median_interval(rounds)
        return interval.low, interval.high
    return None, None


def change_points(points: list[Point]) -> tuple[ChangePoint, ...]:
    """The shifts in a series (see the module docstring); none with fewer than MIN_RUNS runs (not looked
    for: ``Series.searched`` says so)."""
    values = np.log([p.samples_per_s for p in points])
    if len(values) < MIN_RUNS:
        return ()
    try:
        import ruptures
    except ImportError as error:
        raise ReportUnavailable(f"perfsuite history needs ruptures, which cannot be imported ({error}): "
                                f"{EXTRA_HINT}") from None
    steps = np.diff(values)
    sigma = 1.4826 * np.median(np.abs(steps - np.median(steps))) / math.sqrt(2)
    sigma = max(sigma, 1e-3)  # identical runs: a floor of 0.1 % so the penalty is not zero
    ends = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(values.reshape(-1, 1)).predict(
        pen=PENALTY * sigma**2 * math.log(len(values)))
    bounds = [0, *ends]
    found = []
    for start, cut, end in zip(bounds, bounds[1:], bounds[2:]):
        before = median_interval([p.samples_per_s for p in points[start:cut]])
        after = median_interval([p.samples_per_s for p in points[cut:end]])
        if after.low > before.high or after.high < before.low:  # the medians' intervals do not overlap
            found.append(ChangePoint(cut, points[cut - 1].commit, points[cut].commit, before.median,
                                     after.median, after.median / before.median - 1,
                                     after.low / before.high - 1, after.high / before.low - 1))
    return tuple(found)


def build_history(storage: Path, fingerprint, *, since: date | None = None,
                  keyword: str | None = None) -> list[Series]:
    """Every benchmark's series from the storage's runs on ``fingerprint``'s hardware, with its changes."""
    runs = benchmark_adapter.on_hardware(benchmark_adapter.stored_runs(storage), fingerprint)
    points = load_points(runs, since=since, keyword=keyword)
    return [Series(name, tuple(series), change_points(series)) for name, series in sorted(points.items())]


# ------------------------------------------------------------------------------------------ output


def plot_series(series: Series, path: Path) -> Path:
    """samples/s per run (grey: its interval), the segments' medians, a line at each change point;
    runs labelled by commit and date."""
    from perfsuite.plotting import pyplot, save

    plt = pyplot()
    points = series.points
    xs = list(range(len(points)))
    values = [p.samples_per_s for p in points]
    figure, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(points) + 3), 3.2))
    spans = [(x, p.low, p.high) for x, p in zip(xs, points) if p.low is not None]
    if spans:  # the run's interval (of its rounds' median), which need not hold its overall figure
        ax.vlines([x for x, _, _ in spans], [lo for _, lo, _ in spans], [hi for _, _, hi in spans], color="grey")
    ax.plot(xs, values, "o", markersize=4, color="tab:blue")
    bounds = [0, *(c.index for c in series.changes), len(points)]
    for start, end in itertools.pairwise(bounds):
        ax.hlines(float(np.median(values[start:end])), start - 0.3, end - 0.7, color="tab:orange", linewidth=1.2)
    for change in series.changes:
        ax.axvline(change.index - 0.5, color="red", linestyle="--", linewidth=0.9)
        ax.annotate(f"{change.shift:+.0%}", (change.index - 0.5, max(values)), fontsize=8, color="red",
                    ha="center", va="bottom")
    ax.set_xticks(xs, [f"{_short(p.commit)[:7]}\n{p.when:%m-%d}" for p in points], fontsize=6)
    ax.set_ylabel("samples/s")
    ax.set_title(series.benchmark_id, fontsize=8)
    return save(plt, figure, path)


def summary_table(history: list[Series]) -> Table:
    rows = []
    for s in history:
        last = s.points[-1]
        interval = "-" if last.low is None else f"[{last.low:,.0f}, {last.high:,.0f}]"
        changes = len(s.changes) if s.searched else f"not looked for ({len(s.points)} of {MIN_RUNS} runs)"
        rows.append((s.benchmark_id, len(s.points), f"{last.samples_per_s:,.0f} {interval}", changes))
    return Table.of(("benchmark", "runs", "latest samples/s [interval]", "change points"), rows,
                    ("left", RIGHT, RIGHT, RIGHT))


def changes_table(series: Series) -> Table:
    rows = [(change.commits(), f"{change.before:,.0f}", f"{change.after:,.0f}",
             f"{change.shift:+.1%} [{change.shift_low:+.1%}, {change.shift_high:+.1%}]") for change in series.changes]
    return Table.of(("commits (last before..first after)", "samples/s before", "after", "shift [interval]"), rows,
                    ("left", RIGHT, RIGHT, RIGHT))


def write_history(history: list[Series], directory: Path, *, storage: Path) -> Path:
    """A PNG per benchmark and history.md listing them, their change points and figures; returns
    history.md's path."""
    from perfsuite.plotting import file_stem

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["# Benchmark history", "",
             (f"{len(history)} benchmark(s) from the runs saved in {storage} on this hardware. Change points: "
             f"PELT (ruptures) on log samples/s, kept where the intervals of the medians before and after do "
             f"not overlap."), "", summary_table(history).markdown()]
    for index, series in enumerate(history):
        name = plot_series(series, directory / f"history-{index:02d}-{file_stem(series.benchmark_id)}.png").name
        lines += ["", f"## {series.benchmark_id}", ""]
        if not series.searched:
            lines += [f"{series.too_short().capitalize()}.", ""]
        elif series.changes:
            lines += [changes_table(series).markdown(), ""]
        else:
            lines += [f"No change point over {len(series.points)} run(s).", ""]
        lines.append(f"![{series.benchmark_id}]({name})")
    page = directory / "history.md"
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return page
