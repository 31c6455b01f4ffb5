"""How a ``perfsuite ab`` report reads (pyperf's ``_compare``): the terminal table, its notes, the
Markdown summary and the per-round plots; measuring and deciding happen elsewhere."""

from __future__ import annotations

import math
from pathlib import Path

from perfsuite.tables import LEFT, RIGHT, Table
from perfsuite.tools.ab.results import ABReport, Measured

HEADER = ("benchmark", "change of B vs A [interval]", "p", "CPU/sample B vs A", "rounds", "verdict")
ALIGNMENTS = (LEFT, RIGHT, RIGHT, RIGHT, RIGHT, LEFT)


def rows(report: ABReport) -> list[tuple[str, ...]]:
    lines = []
    for verdict in report.verdicts:
        e = verdict.estimate
        change = f"{e.change:+.1%} [{e.low:+.1%}, {e.high:+.1%}]"
        verdict_text = verdict.label().upper() if verdict.significant_slowdown else verdict.label()
        rounds = str(e.rounds) if e.passes == 1 else f"{e.rounds} in {e.passes} passes"
        cpu = "-" if e.cpu_change is None else f"{e.cpu_change:+.1%}" + (
            "" if e.cpu_low is None else f" [{e.cpu_low:+.1%}, {e.cpu_high:+.1%}]")
        lines.append((verdict.name, change, f"{verdict.p:.2g}", cpu, rounds, verdict_text))
    return lines


def verdict_table(report: ABReport) -> Table:
    """One row per benchmark compared: its change, p, CPU per sample, rounds and verdict."""
    return Table.of(HEADER, rows(report), ALIGNMENTS)


def table(report: ABReport) -> list[str]:
    """The verdict table for a terminal, one string per line."""
    return verdict_table(report).terminal()


def footnotes(report: ABReport) -> list[str]:
    s = report.settings
    if s.passes > 1:
        rule = (f"trimmed mean ({s.trim:.0%} cut at each end) over the passes ({s.passes} at least, up to "
                f"{s.max_passes} while undecided and the budget holds; fresh workers each) of each pass's median "
                f"paired-round change, Yuen interval at {s.confidence(s.passes):.1%}; p: two-sided trimmed t-test "
                f"over the passes, corrected for {len(s.pass_looks)} look(s) ({', '.join(map(str, s.pass_looks))}), "
                "Holm")
    else:
        rule = (f"median of the paired rounds of one pass, interval at {s.interval_confidence:.1%}; p: one-sided "
                f"sign test, corrected for {s.look_count} looks and Holm")
    lines = [(f"change: B's figure against A's (samples/s, or a compare benchmark's ratio; worse is negative), "
              f"{rule} over {len(report.verdicts)} benchmark(s); slower/faster: p < {s.alpha:g} and beyond "
              f"max({s.min_effect:.0%}, {s.noise_multiple:g} SE); no change: interval within "
              f"±{s.no_change_within:.0%}")]
    lines.append(f"CPU/sample: the worker process's CPU time per sample (all threads), B against A, tested over "
                 "the passes as the change is and in the same Holm family: a significant rise beyond its minimum "
                 "effect is a slowdown the wall time may hide ('slower (CPU per sample ...)'); 'machine busy': "
                 f"processes of both sides spent more CPU per sample than their side's median by over "
                 f"{s.busy_cpu_excess:.0%} and {s.busy_spread_multiple:g} of the run's own process SDs (a slow state "
                 "of waiting), so no slower/faster is claimed; 'undecided' (exit status 6): neither shown nor ruled "
                 "out within the budget")
    lines += [f"ratio {d.name}: {d.change:+.1%} [{d.low:+.1%}, {d.high:+.1%}], derived from "
              f"{d.numerator or 'its [numerator]'} over {d.denominator or 'its [denominator]'} above (decided on "
              "their own)" for d in report.derived]
    lines += [f"not compared: {n.name}: {n.reason}" for n in report.not_compared]
    lines += list(report.notes)
    if report.failure is not None:
        lines.append(f"FAILED: {report.failure}")
    lines += [f"FAILED: side {f.side} ({f.role}) in {f.benchmark}: {f.problem} (log: {f.log})"
              for f in report.benchmark_failures]
    lines.append(f"took {report.elapsed_s:.0f} s; load average {report.load.get('before')} before, "
                 f"{report.load.get('after')} after, {report.load.get('cpus')} CPU(s)")
    return lines


def markdown(report: ABReport) -> str:
    text = [f"### {report.title()}", "", verdict_table(report).markdown(), ""]
    text += [f"- {note}" for note in footnotes(report)]
    for failure in failures_with_logs(report):
        text += ["", f"Last lines of side {failure.side}'s log ({failure.log}):", "", "```", failure.log_tail, "```"]
    return "\n".join(text) + "\n"


PLOTS_PER_PAGE = 12


def plot(report: ABReport, directory: Path) -> list[Path]:
    """Per benchmark, each round's change of B against A (A-first and B-first rounds marked apart), the
    median change, its interval and the minimum effect; PLOTS_PER_PAGE benchmarks to a PNG."""
    from perfsuite.plotting import pyplot, save

    plt = pyplot()
    pairs = list(zip(report.measured, report.verdicts))
    paths = []
    for page in range(0, len(pairs), PLOTS_PER_PAGE):
        chunk = pairs[page:page + PLOTS_PER_PAGE]
        columns = min(3, len(chunk))
        lines = math.ceil(len(chunk) / columns)
        figure, axes = plt.subplots(lines, columns, figsize=(5 * columns, 3 * lines), squeeze=False)
        for ax, (measured, verdict) in zip(axes.flat, chunk):
            _plot_one(ax, measured, verdict)
        for ax in list(axes.flat)[len(chunk):]:
            ax.axis("off")
        paths.append(save(plt, figure, directory / f"ab-rounds-{page // PLOTS_PER_PAGE + 1}.png"))
    return paths


def _plot_one(ax, measured: Measured, verdict) -> None:
    from perfsuite.verdict.ab import Paired

    e = verdict.estimate
    changes = [math.expm1(v) * 100 for v in Paired(measured.name, measured.a, measured.b,
                                                     measured.higher_is_better).log_changes()]
    for kind, marker in (("AB", "o"), ("BA", "s")):
        points = [(i + 1, c) for i, (c, o) in enumerate(zip(changes, measured.order)) if o == kind]
        if points:
            ax.plot(*zip(*points), marker, markersize=4, linestyle="none", label=f"{kind[0]} first")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.axhspan(-e.min_effect * 100, e.min_effect * 100, color="grey", alpha=0.15, label="min effect")
    ax.axhspan(e.low * 100, e.high * 100, color="tab:orange", alpha=0.25, label="interval")
    ax.axhline(e.change * 100, color="tab:orange", linewidth=1.2)
    ax.set_title(f"{measured.name[:60]}\n{verdict.label()} ({e.change:+.1%})", fontsize=8)
    ax.set_xlabel("round")
    ax.set_ylabel(f"B vs A, % ({measured.metric})", fontsize=8)
    ax.legend(fontsize=6, loc="best")


def failures_with_logs(report: ABReport) -> list:
    """The side failure and the benchmarks that raised, those with a log tail to show."""
    return [f for f in (report.failure, *report.benchmark_failures) if f is not None and f.log_tail]

