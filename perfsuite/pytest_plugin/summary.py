"""The terminal summary (and its Markdown twin for CI): one row per verdict, then the notes.

Presenting only: the verdicts are decided in perfsuite.verdict and the recorder.
"""

from __future__ import annotations

from collections.abc import Sequence

from perfsuite.verdict.comparison import Decision
from perfsuite.verdict.metrics import format_number

HEADER = ("benchmark", "metric", "measured [interval] (rounds)", "threshold", "verdict")


def verdict_rows(outcome) -> list[tuple[str, ...]]:
    """One row per checked threshold of one benchmark (a row saying so when it has none)."""
    rows = [(outcome.benchmark_id, v.metric, v.evidence, f"{v.threshold.symbol} {format_number(v.threshold.value)}",
             v.label) for v in outcome.check.verdicts]
    return rows or [(outcome.benchmark_id, "-", "-", "-", "no thresholds")]


def history_row(benchmark_id: str, decision: Decision, *, alpha: float) -> tuple[str, ...]:
    """The comparison of one benchmark's samples/s with its earlier runs on this hardware."""
    c = decision.comparison
    if not c.judged:
        return (benchmark_id, f"vs {c.runs} earlier run(s)", format_number(c.current), "-", f"not judged: {c.reason}")
    noise = "beyond" if c.beyond_noise else "within"
    measured = (f"{c.change:+.1%} [{c.interval_low:+.1%}, {c.interval_high:+.1%} if unchanged] "
                f"(Holm p={decision.adjusted_p_worse:.2g}; run-to-run noise {c.noise_cv:.1%}, {noise} it)")
    verdict = decision.verdict.upper() if decision.significant_slowdown else decision.verdict
    return (benchmark_id, f"samples/s vs {c.runs} earlier runs", measured,
            f"slower by ≥ {c.min_effect:.0%}, p < {alpha:g}", verdict)


def table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(row[i])) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    return ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()
            for row in [HEADER, *rows]]


def markdown(rows: Sequence[tuple[str, ...]], notes: Sequence[str], *, title: str) -> str:
    """The same table as Markdown, for $GITHUB_STEP_SUMMARY."""
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    lines = [f"### {title}", "", line(HEADER), line(["---"] * len(HEADER)), *map(line, rows)]
    lines += [""] + [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"
