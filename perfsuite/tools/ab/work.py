"""The two revisions' work fingerprints, diffed before any timing (``perfsuite ab`` prints them first).

Each side's own ``test_work.py`` (beside its benchmarks) runs once in a subprocess in that side's
worktree, with its own perfsuite, writing every fingerprint it takes as JSON (``PERFSUITE_WORK_OUT``);
both sides run at once (nothing is timed). The fingerprints are then compared name by name with
perfsuite.verdict.work: a change of work shows here whatever the machine's noise does to the timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from perfsuite.verdict.work import compare_sets

OUT_VARIABLE = "PERFSUITE_WORK_OUT"  # benchmarks/test_work.py writes each fingerprint there when set
WORK_FILE = "test_work.py"
TIMEOUT_S = 600.0


def work_file(side_root: Path, benchmarks: str) -> Path:
    """The side's test_work.py: in its benchmark directory (or beside a benchmark file)."""
    path = side_root / benchmarks
    return (path if path.is_dir() or not path.suffix else path.parent) / WORK_FILE


def fingerprint_diff(sides: Sequence, pytest_arguments: Sequence[str], scratch: Path,
                     progress: Callable[[str], None]) -> list[str]:
    """Lines saying how each fingerprint of head (side B) differs from base's (side A), or why there is
    none to compare; computed before any round is timed."""
    runs = {}
    for side in sides:
        path = work_file(Path(side.root), pytest_arguments[0])
        if not path.is_file():
            missing = path.relative_to(side.root)
            return [f"work: side {side.name} ({side.revision}) has no {missing}: no fingerprints compared"]
        out = scratch / f"work-{side.name}"
        out.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **{OUT_VARIABLE: str(out)},
                   PYTHONPATH=os.pathsep.join(p for p in (str(side.root), os.environ.get("PYTHONPATH")) if p))
        log = open(scratch / f"work-{side.name}.log", "wb")  # noqa: SIM115 (closed below)
        runs[side.name] = (subprocess.Popen([sys.executable, "-m", "pytest", str(path), *pytest_arguments[1:]],
                                            cwd=side.root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT), log, out)
    progress("work fingerprints: both sides' test_work.py, before any timing")
    found, why = {}, {}
    for name, (process, log, out) in runs.items():
        try:
            process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        found[name] = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(out.glob("*.json"))}
        no_tests = process.returncode == pytest.ExitCode.NO_TESTS_COLLECTED
        why[name] = (f"no test of its {WORK_FILE} matches the selection" if no_tests
                     else f"its {WORK_FILE} exited {process.returncode} (log: {log.name})")
    names = list(found)
    base, head = found[names[0]], found[names[1]]
    if not base or not head:
        empty = [n for n in names if not found[n]]
        return ["work: " + "; ".join(f"side {n} wrote no fingerprint ({why[n]})" for n in empty) + ": none compared"]
    verdicts = compare_sets(base, head)
    lines = [line for v in verdicts if v.failed for line in v.changes]
    unchanged = sum(not v.failed for v in verdicts)
    lines.append(f"work: {len(verdicts) - unchanged} of {len(verdicts)} fingerprint(s) changed, {unchanged} the same")
    return lines
