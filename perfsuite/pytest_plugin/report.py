"""The report of a benchmark run: what ``--perfsuite-report DIR`` writes at the end of a session.

Per benchmark measured through the perfsuite fixture, a PNG of its per-batch (per-call) times; one PNG
of every ratio metric; summary.md linking them. Input: the plugin's BenchmarkRecord of each benchmark
(Recorder.report_record; its as_dict() travels back from xdist workers and is read back with from_dict).
matplotlib is reached through perfsuite.plotting only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from perfsuite.measure.stats import median_interval
from perfsuite.plotting import draw_timeline, file_stem, pyplot, save
from perfsuite.pytest_plugin.summary import short_id
from perfsuite.records import Record
from perfsuite.tables import Table
from perfsuite.verdict.metrics import is_declared, lookup


@dataclass(frozen=True)
class GateMark(Record):
    """A gate's verdict on one of the benchmark's metrics: its kind ('min' or 'max') and threshold."""

    metric: str
    kind: str
    threshold: float
    decision: str


@dataclass(frozen=True)
class TimelineFigures(Record):
    """What the report shows of a benchmark's primary measurement: its per-batch (per-call) seconds and
    their figures; cycle_period is None when no significant cycle was found."""

    batch_s: tuple[float, ...]
    samples_per_s: float | None
    batch_median_s: float | None
    variation_ratio: float | None
    cycle_period: int | None

    @classmethod
    def of(cls, measurement) -> TimelineFigures:
        """From a perfsuite.measure.timing.Measurement."""
        info = measurement.extra_info()
        return cls(batch_s=tuple(info.get("batch_s") or ()), samples_per_s=info["samples_per_s"],
                   batch_median_s=info["batch_median_s"], variation_ratio=info["variation_ratio"],
                   cycle_period=info["cycle_period"] if info["cycle_significant"] else None)


@dataclass(frozen=True)
class BenchmarkRecord(Record):
    """What --perfsuite-report shows of one benchmark: its gated figures (metrics), the gates' verdicts,
    its primary measurement (None when it had none), the unit of its timeline and the lengths of its
    rounds, the per-round values of its same-run ratios, and the test's outcome (set by the plugin)."""

    benchmark_id: str
    nodeid: str
    metrics: dict[str, float | None]
    gates: tuple[GateMark, ...] = ()
    measurement: TimelineFigures | None = None
    unit: str | None = None
    round_lengths: tuple[int, ...] | None = None
    ratio_rounds: dict[str, tuple[float, ...]] | None = None
    outcome: str = "-"


@dataclass(frozen=True)
class RatioRow:
    """One ratio metric of a benchmark, with its rounds and the gates on it."""

    benchmark_id: str
    metric: str
    value: float
    rounds: tuple[float, ...]
    gates: tuple[GateMark, ...]


def write_benchmark_report(records: list[BenchmarkRecord], directory: Path, *,
                           title: str = "perfsuite benchmark run") -> Path:
    """The report of a benchmark run: per benchmark with a primary measurement, a PNG of its per-batch
    (per-call) times with any detected period marked; one PNG of every ratio metric (median and, where
    interleaved rounds were recorded, their range); summary.md linking them. Returns summary.md's path.

    records: the plugin's BenchmarkRecord of each benchmark.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    timelines = {}
    for index, record in enumerate(records):
        if record.measurement is not None and record.measurement.batch_s:
            path = directory / f"timeline-{index:02d}-{file_stem(record.benchmark_id.split('::', 1)[-1])}.png"
            timelines[record.benchmark_id] = plot_benchmark_timeline(record, path).name
    ratios = _ratio_rows(records)
    ratio_plot = plot_ratios(ratios, directory / "ratios.png").name if ratios else None
    summary = directory / "summary.md"
    summary.write_text(benchmark_summary(records, timelines, ratios, ratio_plot, title=title), encoding="utf-8")
    return summary


def plot_benchmark_timeline(record: BenchmarkRecord, path: Path) -> Path:
    plt = pyplot()
    measurement = record.measurement
    unit = record.unit or "batch"
    figure, ax = plt.subplots(figsize=(9, 2.6))
    draw_timeline(ax, record.benchmark_id, list(measurement.batch_s), measurement.samples_per_s,
                  measurement.cycle_period, unit=unit,
                  round_lengths=None if record.round_lengths is None else list(record.round_lengths))
    ax.set_xlabel(f"steady {unit} (rounds joined" + ("; grey lines: round boundaries)" if record.round_lengths
                                                     else ")"))
    return save(plt, figure, path)


def _ratio_rows(records: list[BenchmarkRecord]) -> list[RatioRow]:
    rows = []
    for record in records:
        for metric, value in record.metrics.items():
            if value is None or not (is_declared(metric) and lookup(metric).is_ratio):
                continue
            rows.append(RatioRow(benchmark_id=record.benchmark_id, metric=metric, value=value,
                                 rounds=tuple((record.ratio_rounds or {}).get(metric) or ()),
                                 gates=tuple(g for g in record.gates if g.metric == metric)))
    return rows


def _labels(rows: list[RatioRow]) -> list[str]:
    """Each ratio by its metric (without '_ratio'); the benchmark's test added where a metric repeats."""
    names = [row.metric.removesuffix("_ratio") for row in rows]
    return [name if names.count(name) == 1 else f"{name} · {short_id(row.benchmark_id)[:40]}"
            for name, row in zip(names, rows)]


def plot_ratios(rows: list[RatioRow], path: Path) -> Path:
    """Every ratio metric of the run: the recorded value (the median of its rounds), the order-statistic
    interval of that median (thick bar), each round's ratio (ticks) and each gate on it (red: ≥ min,
    purple: ≤ max)."""
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.2))
    ys = list(range(len(rows)))[::-1]
    for y, row in zip(ys, rows):
        if row.rounds:
            ax.plot(row.rounds, [y] * len(row.rounds), "|", color="grey", markersize=10)
            interval = median_interval(row.rounds)
            ax.plot([interval.low, interval.high], [y, y], color="tab:blue", linewidth=3, alpha=0.4,
                    solid_capstyle="butt")
        ax.plot([row.value], [y], "o", color="tab:blue")
        for gate in row.gates:
            ax.plot([gate.threshold] * 2, [y - 0.4, y + 0.4], color="red" if gate.kind == "min" else "purple",
                    linewidth=1.6)
    ax.axvline(1.0, color="black", linewidth=0.8)
    values = [v for row in rows for v in [row.value, *row.rounds, *(g.threshold for g in row.gates)]]
    values.append(1.0)
    if all(v > 0 for v in values):  # ratios of 0.3 and 9 side by side: a log axis, plain tick labels
        from matplotlib.ticker import FormatStrFormatter, NullFormatter

        low, high = min(values) / 1.3, max(values) * 1.3
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        ax.set_xticks([t * 10.0**e for e in range(-3, 4) for t in (1, 2, 5) if low <= t * 10.0**e <= high])
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(ys, _labels(rows), fontsize=7)
    ax.set_xlabel("ratio (dot: recorded median; bar: its interval; ticks: per round; red/purple: gate min/max)")
    ax.set_title("same-run ratios", fontsize=9)
    return save(plt, figure, path)


def benchmark_summary(records: list[BenchmarkRecord], timelines: dict, ratios: list[RatioRow],
                      ratio_plot: str | None, *, title: str) -> str:
    def number(value):
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
        return str(value)

    rows = []
    for record in records:
        m = record.measurement
        cycle = "-" if m is None else (f"every {m.cycle_period}" if m.cycle_period is not None else "none")
        others = ", ".join(f"{k} {number(v)}" for k, v in record.metrics.items()
                           if k not in ("samples_per_s", "batches_per_s", "variation_ratio", "robust_cv"))
        figures = ("-", "-", "-") if m is None else (number(m.samples_per_s), number(m.batch_median_s),
                                                     number(m.variation_ratio))
        rows.append((record.benchmark_id, record.outcome, *figures, cycle, others or "-"))
    table = Table.of(("benchmark", "outcome", "samples/s", "median batch s", "variation", "cycle", "other metrics"),
                     rows)
    lines = [f"# {title}", "", f"{len(records)} benchmark(s) measured through the perfsuite fixture.", "",
             table.markdown()]
    if ratios:
        ratio_rows = [(row.benchmark_id, row.metric, number(row.value),
                       f"{min(row.rounds):.3g}–{max(row.rounds):.3g}" if row.rounds else "-",
                       ", ".join(f"{'≥' if g.kind == 'min' else '≤'} {number(g.threshold)}: {g.decision}"
                                 for g in row.gates) or "-")
                      for row in ratios]
        ratio_table = Table.of(("benchmark", "metric", "value", "per-round range", "gates"), ratio_rows)
        lines += ["", "## Ratios", "", ratio_table.markdown(), "", f"![ratios]({ratio_plot})"]
    if timelines:
        lines += ["", "## Per-batch times", ""]
        for benchmark_id, name in timelines.items():
            lines += [f"### {benchmark_id}", "", f"![{benchmark_id}]({name})", ""]
    return "\n".join(lines) + "\n"
