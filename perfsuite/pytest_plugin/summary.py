"""The terminal summary (and its Markdown twin for CI): how fast, then what was decided.

Per group of benchmarks (``group_of``: the ``*_ceiling`` tests, else the benchmark file's name), one
table of each benchmark's headline figures (the metrics the registry gives a ``headline`` column: e.g.
samples/s and audio-s/s with the interval of their median over rounds, p95 batch ms, first call s,
utilisation median), the benchmarks measuring only same-run ratios or shares in a table of their own,
then a table of its gates and verdicts and one of the comparison with earlier runs. Columns no
benchmark of a table has are left out, so the tables fit a 120-column terminal. Presenting only: the
verdicts are decided in perfsuite.verdict and the recorder.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest

from perfsuite.measure.stats import median_interval
from perfsuite.tables import RIGHT, Table, step_summary
from perfsuite.verdict.comparison import Decision
from perfsuite.verdict.metrics import declared, format_number, is_declared, lookup

GATE_HEADERS = ("benchmark (metric)", "measured [interval] (rounds)", "threshold", "verdict")
CEILING = re.compile(r"^test_\w+_ceiling$")


@dataclass(frozen=True)
class Figure:
    """One headline figure: the metric, its value and, when it was measured over rounds, the
    order-statistic interval of their median and the number of rounds."""

    metric: str
    value: float
    low: float | None = None
    high: float | None = None
    rounds: int = 0

    def shown(self) -> str:
        text = _number(self.metric, self.value)
        if self.low is not None:
            text += f" [{_number(self.metric, self.low)}–{_number(self.metric, self.high)}]"
        return text


def _number(metric: str, value: float) -> str:
    """Thousands as whole numbers with separators (29,605 samples/s), else the registry's display."""
    declared_metric = lookup(metric)
    if not declared_metric.percent and abs(value * declared_metric.display_scale) >= 1000:
        return f"{value * declared_metric.display_scale:,.0f}"
    return declared_metric.display(value)


def headline_figures(metrics: Mapping[str, float], rounds: Mapping[str, Sequence[float]]) -> tuple[Figure, ...]:
    """The benchmark's metrics that have a headline column, each with the interval of its rounds."""
    figures = []
    for name, value in metrics.items():
        if value is None or not is_declared(name) or not lookup(name).headline:
            continue
        per_round = rounds.get(name) or ()
        if len(per_round) >= 2:
            interval = median_interval(per_round)
            figures.append(Figure(name, float(value), interval.low, interval.high, len(per_round)))
        else:
            figures.append(Figure(name, float(value)))
    return tuple(figures)


def group_of(nodeid: str) -> str:
    """The summary's (and pytest-benchmark's table's) group: 'ceilings' for ``test_*_ceiling``, else the
    benchmark file's name without ``test_`` (loaders, step, pipeline, emulated, ...)."""
    path, _, name = nodeid.partition("::")
    function = name.split("[", 1)[0].split("::")[-1]
    if CEILING.match(function):
        return "ceilings"
    stem = path.rsplit("/", 1)[-1].removesuffix(".py")
    return stem.removeprefix("test_") or stem


def short_id(benchmark_id: str) -> str:
    """A benchmark as the summary names it: its test and parameters, without the profile and the file."""
    name = benchmark_id.split("::", 1)[-1]
    return name.split("::", 1)[-1] if "::" in name else name


def _columns(outcomes) -> list[str]:
    """The headline columns the group's benchmarks have, in the registry's order (families last)."""
    present = {lookup(f.metric).headline for o in outcomes for f in o.figures}
    order = [m.headline for m in declared() if m.headline] + ["ratio", "input-bound", "input wait"]
    return list(dict.fromkeys(column for column in order if column in present))


def figures_table(outcomes) -> Table:
    """One row per benchmark: its headline figures, '-' where it has none of a column."""
    columns = _columns(outcomes)
    rows = []
    for outcome in outcomes:
        by_column = {}
        for figure in outcome.figures:
            by_column.setdefault(lookup(figure.metric).headline, figure)
        rounds = max((f.rounds for f in outcome.figures), default=0)
        rows.append((short_id(outcome.benchmark_id), *(by_column[c].shown() if c in by_column else "-"
                                                       for c in columns), rounds or "-"))
    headers = ("benchmark", *(_header(c) for c in columns), "rounds")
    return Table.of(headers, rows, ("left", *[RIGHT] * (len(columns) + 1)))


def _header(column: str) -> str:
    return f"{column} [interval]" if column in ("samples/s", "audio-s/s", "ratio") else column


INTERVAL_NOTE = ("[interval]: the order-statistic interval of the median over the rounds (95 %, or with few "
                 "rounds their whole range: 50 % at 2, 75 % at 3)")


def verdict_rows(outcome) -> list[tuple[str, ...]]:
    """One row per checked threshold of one benchmark (none when it has no thresholds)."""
    return [(_gate_name(outcome.benchmark_id, v.metric), v.evidence,
             f"{v.bound.symbol} {format_number(v.threshold)}", v.label)
            for v in outcome.check.verdicts]


def _gate_name(benchmark_id: str, metric: str) -> str:
    """The benchmark, and the metric where the benchmark's id does not already name it (a ratio test is
    parametrized by its metric)."""
    name = short_id(benchmark_id)
    return name if metric.removesuffix("_ratio") in name else f"{name} {metric}"


def history_row(benchmark_id: str, decision: Decision, *, alpha: float) -> tuple[str, ...]:
    """The comparison of one benchmark's samples/s with its earlier runs on this hardware."""
    c = decision.comparison
    if not c.judged:
        return (short_id(benchmark_id), "-", "-", "-", "-", str(c.runs), f"not judged: {c.reason}")
    verdict = decision.verdict.upper() if decision.significant_slowdown else decision.verdict
    return (short_id(benchmark_id), f"{c.change:+.1%}", f"{c.interval_low:+.1%}..{c.interval_high:+.1%}",
            f"{decision.adjusted_p_worse:.2g}", f"{c.noise_cv:.1%}", str(c.runs), verdict)


def history_headers(*, alpha: float, min_effect: float) -> tuple[str, ...]:
    return ("benchmark", "samples/s change", "if unchanged", f"Holm p (<{alpha:g})", "run noise", "runs",
            f"verdict (slower ≥ {min_effect:.0%})")


def sections(outcomes, decisions=(), *, alpha: float = 0.01) -> list[tuple[str, Table]]:
    """Per group, in the order the groups first ran: (title, figures table); the benchmarks whose figures
    are all same-run ratios or shares in a table of their own; where the group has them, (title, gates
    table) and (title, comparison with earlier runs)."""
    groups: dict[str, list] = {}
    for outcome in outcomes:
        groups.setdefault(group_of(outcome.benchmark_id.split("::", 1)[-1]), []).append(outcome)
    compared = {id(o): d for o, d in decisions}
    result = []
    for group, members in groups.items():
        same_run = [o for o in members if o.figures and all(lookup(f.metric).same_run for f in o.figures)]
        measured = [o for o in members if o.figures and o not in same_run]
        if measured:
            result.append((f"{group}: how fast", figures_table(measured)))
        if same_run:
            result.append((f"{group}: same-run ratios and shares", figures_table(same_run)))
        rows = [row for o in members for row in verdict_rows(o)]
        if rows:
            result.append((f"{group}: gates", Table.of(GATE_HEADERS, rows)))
        judged = [o for o in members if id(o) in compared]
        if judged:
            min_effect = judged[0].comparison.min_effect
            rows = [history_row(o.benchmark_id, compared[id(o)], alpha=alpha) for o in judged]
            result.append((f"{group}: vs earlier runs on this hardware",
                           Table.of(history_headers(alpha=alpha, min_effect=min_effect), rows)))
    return result


def terminal(sections_: Sequence[tuple[str, Table]]) -> list[str]:
    lines = []
    for title, table in sections_:
        lines += ["", title, *table.terminal()]
    return lines[1:]


def markdown(sections_: Sequence[tuple[str, Table]], notes: Sequence[str], *, title: str) -> str:
    """The same tables as Markdown, for $GITHUB_STEP_SUMMARY."""
    return step_summary(title, sections_, notes)


# ------------------------------------------------------------------ the work fingerprints beside the timing

WORK_KEY = pytest.StashKey[list]()
WORK_HEADERS = ("benchmark", "work (deterministic)", "timed", "together")


def record_work_verdict(config, verdict) -> None:
    """A work verdict (perfsuite.verdict.work.WorkVerdict) for this session's summary."""
    config.stash.setdefault(WORK_KEY, []).append(verdict)


def work_versions(config) -> str | None:
    """The line that says this run's work snapshots came from other library versions, or None."""
    from perfsuite.verdict.work import versions_note

    return versions_note(config.stash.get(WORK_KEY, []))


def _timed_decision(outcome) -> str:
    """A timed benchmark's decision: 'fail' if a gate failed or its run is significantly slower than its
    earlier runs, else 'inconclusive' if a gate was, else 'pass' (gates or earlier runs judged it),
    else 'not judged' (no gate and no earlier run)."""
    decisions = [v.decision for v in outcome.check.verdicts]
    if "fail" in decisions:
        return "fail"
    if "inconclusive" in decisions:
        return "inconclusive"
    return "pass" if decisions else "not judged"


def _measures(benchmark: str, name: str) -> bool:
    """Whether a timed benchmark (``test_step[xla-bs8-cpu-fp32]``) measures what a work fingerprint names
    (``xla-bs8-fp32``): every part of the name among its parameters, or the name in its test's name
    (``raw_read``: ``test_raw_read_ceiling[...]``)."""
    function, _, params = benchmark.partition("[")
    return set(name.split("-")) <= set(params.rstrip("]").split("-")) or f"test_{name}_" in f"{function}_"


def work_section(verdicts, outcomes) -> list[tuple[str, Table]]:
    """The deterministic verdicts and the timed ones side by side: each work fingerprint with the timed
    benchmark measuring the same loader or step (its name within the benchmark's id), if one ran."""
    from perfsuite.verdict.work import timed_reading

    if not verdicts:
        return []
    rows = []
    for verdict in verdicts:
        timed = [o for o in outcomes if _measures(short_id(o.benchmark_id), verdict.name)]
        decision = None
        if timed:
            found = [_timed_decision(o) for o in timed]
            decision = next(d for d in ("fail", "inconclusive", "pass", "not judged") if d in found)
        work = verdict.headline()
        rows.append((verdict.name, work, decision or "-", timed_reading(verdict, decision)))
    return [("work: deterministic verdicts beside the timed ones", Table.of(WORK_HEADERS, rows))]
