"""The self-test's report for people: the curve as a table (terminal, Markdown), the plant checks, the
gates' decisions, a Markdown section for docs/results/, and a plot. Measuring is elsewhere."""

from __future__ import annotations

from pathlib import Path

from perfsuite.tables import RIGHT, Table
from perfsuite.tools.detection.records import SKIPPED, Level, PathCurve, SelftestReport


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _cell(level: Level) -> str:
    """'flagged/trials (share, 95 % interval)', or why there is no rate."""
    if not level.reported:
        return f"no rate: {level.withheld}"
    return f"{level.flagged}/{level.trials} ({level.rate:.0%}, {level.ci_low:.0%}-{level.ci_high:.0%})"


def _plant(level: Level) -> str:
    if level.plant is None:
        return "-"
    plant = level.plant
    work = "work ?" if plant.work is None else f"work {plant.work:+.1%}"
    measured = "time -" if plant.measured is None else f"time {plant.measured:+.1%}"
    interval = "" if plant.low is None else f" [{plant.low:+.1%}, {plant.high:+.1%}]"
    return f"{work} {'FAILED' if plant.failed else plant.state}; {measured}{interval}"


def curve_table(report: SelftestReport) -> Table:
    """One row per planted share; per measured path the share flagged with its interval and the
    plant's measured cost beside it."""
    curves = [curve for curve in report.curves if curve.status != SKIPPED]
    headers = ["planted"] + [f"{c.path}: flagged (share, 95% CI)" for c in curves] + [f"{c.path}: plant (work; time)" for c in curves]
    rows = []
    for index, level in enumerate(report.settings.levels):
        rows.append([f"{level:.0%}"] + [_cell(c.levels[index]) for c in curves]
                    + [_plant(c.levels[index]) for c in curves])
    return Table.of(headers, rows, [RIGHT] * len(headers))


def summary_lines(report: SelftestReport) -> list[str]:
    """Per path: status, how it was measured, the smallest share caught, the false-alarm reading; then
    the selftest_* gates."""
    lines = []
    for curve in report.curves:
        if curve.status == SKIPPED:
            lines.append(f"{curve.path}: skipped: {curve.reason}")
            continue
        partial = f" ({curve.status}: {curve.reason})" if curve.reason else ""
        lines.append(f"{curve.path}{partial}: {curve.how}")
        lines.append(f"{curve.path}: smallest slowdown caught >= 95 % of the time: {_caught(curve)}; "
                     f"{curve.false_alarm}")
        lines += [f"{curve.path} {level.level:.0%}: verdicts {_verdicts(level.verdicts)}"
                  for level in curve.levels if level.verdicts]
    for gate in report.gates:
        detail = (f"{gate.rate:.0%} [{gate.ci_low:.0%}, {gate.ci_high:.0%}], {gate.reason}" if gate.rate is not None
                  else gate.reason)
        lines.append(f"gate {gate.metric} {gate.bound}: {gate.decision} ({detail})")
    return lines


def _verdicts(labels) -> str:
    """Each verdict's words with its count, most frequent first."""
    from collections import Counter

    return ", ".join(f"{count} {label}" for label, count in Counter(labels).most_common())


def _caught(curve: PathCurve) -> str:
    if curve.smallest_caught is None:
        return f"none of the planted shares up to {curve.levels[-1].level:.0%}" if curve.levels else "not measured"
    shown = (f"; the interval shows it from {curve.smallest_shown:.0%}" if curve.smallest_shown is not None
             else "; no interval shows it with these trials")
    return f"{curve.smallest_caught:.0%} (point share){shown}"


def markdown(report: SelftestReport) -> str:
    """A Markdown section: the command's settings, the machine, the table and the readings."""
    settings = report.settings
    machine = report.machine
    cpu = ", ".join(f"{key} {machine[key]}" for key in ("cpu_vendor", "cpu_family", "cpu_model_number", "cores")
                    if machine.get(key) is not None)
    lines = [f"### perfsuite selftest, {report.started}", "",
             (f"Machine: {cpu or 'unknown'}. Paths {', '.join(settings.paths)}; {settings.trials} trials per share; "
             f"profile {settings.profile}; saved runs {settings.history_runs} (alpha {settings.alpha:g}, min effect "
             f"{settings.min_effect:.0%}); {report.elapsed_s:.0f} s of a {settings.budget_s:.0f} s budget."), "",
             curve_table(report).markdown(), ""]
    lines += [f"- {line}" for line in summary_lines(report)]
    return "\n".join(lines) + "\n"


def plot(report: SelftestReport, directory: Path) -> Path:
    """detection-curve.png in ``directory``: per path the share flagged against the planted share, with
    its interval, and a line at CAUGHT_SHARE."""
    from perfsuite.plotting import pyplot, save

    plt = pyplot()
    figure, ax = plt.subplots(figsize=(6, 4))
    for curve in report.curves:
        points = [level for level in curve.levels if level.reported]
        if curve.status == SKIPPED or not points:
            continue
        xs = [100 * level.level for level in points]
        ys = [100 * level.rate for level in points]
        errors = [[100 * (level.rate - level.ci_low) for level in points],
                  [100 * (level.ci_high - level.rate) for level in points]]
        ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=curve.path)
    ax.axhline(95, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel("planted slowdown (%)")
    ax.set_ylabel("trials flagged (%)")
    ax.set_ylim(-5, 105)
    ax.set_title("perfsuite selftest: detection per path", fontsize=9)
    ax.legend(fontsize=8)
    directory.mkdir(parents=True, exist_ok=True)
    return save(plt, figure, directory / "detection-curve.png")
