"""Path (c): ``perfsuite ab`` with its defaults on a planted revision, run as a user runs it.

A clone of the repository gets the working tree's files (tracked and untracked, ignored ones left out)
plus one small benchmark, ``benchmarks/test_selftest_plant.py``, as its base commit; one commit on
top of it per planted share changes only that benchmark's ``PLANT`` (the plant of
perfsuite.tools.detection.plant). A trial runs ``perfsuite ab BASE HEAD -k test_selftest_plant`` as a
subprocess, every option at ab's default, for each share (0: BASE against itself), the shares in
rotated order from trial to trial. Flagged: the benchmark's verdict is "slower" and ab exits 1. The
plant is checked on the change ab itself measured (the median over the trials). Each run's own report
is kept where the command's ``--report`` says (``ab/ab-trial<N>-<share>.json``). Each run costs at
least ab's --budget of measuring plus its workers' start-up: ``cost_line`` says so before anything runs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfsuite.tools.detection.curve import check_plant, finish, level_rate
from perfsuite.tools.detection.records import MEASURED, PARTIAL, SKIPPED, PathCurve

BENCHMARK = Path("benchmarks/test_selftest_plant.py")
SELECTION = "test_selftest_plant"
BENCHMARK_SOURCE = '''"""Planted by `perfsuite selftest` (its ab path) in a temporary clone; never committed to the project."""

from perfsuite.tools.detection.plant import corpus, planted_wav_dataset

PLANT = {plant!r}


def test_selftest_plant(perfsuite, pytestconfig):
    dataset_dir = corpus(pytestconfig.getoption("perfsuite_data_dir"))
    measurement = perfsuite.measure_dataset(planted_wav_dataset(dataset_dir, PLANT), name="selftest-plant")
    assert measurement.samples_per_s > 0
'''


def ab_budget_s() -> float:
    """ab's own default --budget (its measuring time per run)."""
    from perfsuite.tools.ab import DEFAULT_BUDGET_S

    return DEFAULT_BUDGET_S


def cost_line(levels, trials: int) -> str:
    """The ab path's cost, said before it runs."""
    runs = len(levels) * trials
    return (f"ab path: {runs} runs of `perfsuite ab` ({len(levels)} shares x {trials} trials), each at least ab's "
            f"--budget of {ab_budget_s():.0f} s of measuring plus its {_passes()} passes of worker start-up: at least "
            f"{runs * ab_budget_s() / 60:.0f} min; the estimate is updated after the first run")


def _passes() -> int:
    from perfsuite.tools.ab import DEFAULT_PASSES

    return DEFAULT_PASSES


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), "-c", "user.name=selftest", "-c", "user.email=selftest@invalid",
                             *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {repo}: {result.stderr.strip()}")
    return result.stdout.strip()


def planted_clone(root: Path, destination: Path, levels) -> dict[float, str]:
    """A clone of ``root`` whose base commit holds the working tree and the plant benchmark at 0, and one
    commit per planted share; returns each share's commit (0: the base)."""
    _git(root, "clone", "--quiet", "--no-checkout", str(root), str(destination))
    files = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (root / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, destination / name)
    (destination / BENCHMARK).write_text(BENCHMARK_SOURCE.format(plant=0.0))
    _git(destination, "add", "-A")
    _git(destination, "commit", "--quiet", "--allow-empty", "-m", "base: the working tree and the plant at 0")
    base = _git(destination, "rev-parse", "HEAD")
    commits = {0.0: base}
    for level in levels:
        if level == 0:
            continue
        _git(destination, "checkout", "--quiet", "--detach", base)
        (destination / BENCHMARK).write_text(BENCHMARK_SOURCE.format(plant=float(level)))
        _git(destination, "commit", "--quiet", "-am", f"planted: {level:.0%} more loader work")
        commits[level] = _git(destination, "rev-parse", "HEAD")
    _git(destination, "checkout", "--quiet", "--detach", base)
    return commits


def _run_ab(repo: Path, base: str, head: str, out: Path, data_dir: Path | None) -> tuple[bool, float | None, str]:
    """One `perfsuite ab` run: (flagged, the change ab measured or None, a problem or '')."""
    from perfsuite.tools.ab.results import load_report

    command = [sys.executable, "-m", "perfsuite", "ab", base, head, "-k", SELECTION, "--json", str(out)]
    if data_dir is not None:
        command += ["--data-dir", str(data_dir)]
    out.unlink(missing_ok=True)  # a report left by an earlier run must not stand for this one
    result = subprocess.run(command, cwd=repo, capture_output=True, text=True, check=False)
    if result.returncode not in (0, 1) or not out.exists():
        tail = (result.stderr.strip().splitlines() or ["no message"])[-1]
        return False, None, f"perfsuite ab exited {result.returncode}: {tail}"
    report = load_report(out)
    verdict = next((v for v in report.verdicts if v.name.endswith(SELECTION)), None)
    if verdict is None:
        return False, None, f"perfsuite ab compared no {SELECTION} (selection -k {SELECTION})"
    return verdict.significant_slowdown and result.returncode == 1, verdict.estimate.change, ""


def ab(context, budget_s: float, *, root: Path) -> PathCurve:
    """Path (c) within ``budget_s``: trials of every share until the trials or the budget run out."""
    settings = context.settings
    how = (f"`perfsuite ab BASE HEAD -k {SELECTION}` with ab's defaults (its --budget {ab_budget_s():.0f} s, "
           f"{_passes()} passes), HEAD planting the share in the benchmark; flagged: verdict slower and exit 1")
    started = time.perf_counter()
    if budget_s < len(settings.levels) * ab_budget_s():
        return PathCurve(path="ab", status=SKIPPED, how=how,
                         reason=f"its share of the budget ({budget_s:.0f} s) holds no trial: "
                                f"{cost_line(settings.levels, 1)}")
    flags = {level: [] for level in settings.levels}
    changes = {level: [] for level in settings.levels}
    with tempfile.TemporaryDirectory(prefix="perfsuite-selftest-ab-") as scratch:
        repo = Path(scratch) / "repo"
        try:
            commits = planted_clone(root, repo, settings.levels)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as error:
            return PathCurve(path="ab", status=SKIPPED, how=how, reason=f"no planted clone of {root}: {error}")
        kept = Path(scratch) if context.kept is None else context.kept
        kept.mkdir(parents=True, exist_ok=True)
        trials, run_s = 0, 0.0
        for trial in range(settings.trials):
            order = list(settings.levels)
            order = order[trial % len(order):] + order[:trial % len(order)]
            if time.perf_counter() - started + run_s * len(order) > budget_s:
                break
            for level in order:
                begun = time.perf_counter()
                flagged, change, problem = _run_ab(repo, commits[0.0], commits[level],
                                                   kept / f"ab-trial{trial + 1}-{level:.0%}.json", context.data_dir)
                run_s = max(run_s, time.perf_counter() - begun)
                if problem:
                    return PathCurve(path="ab", status=SKIPPED, how=how, reason=problem,
                                     seconds=time.perf_counter() - started)
                flags[level].append(flagged)
                changes[level].append(change)
                context.progress(f"ab trial {trial + 1}/{settings.trials}, {level:.0%}: "
                                 f"{'SLOWER' if flagged else 'not flagged'} (ab measured {change:+.1%}) "
                                 f"[{time.perf_counter() - begun:.0f} s]")
            trials += 1
    levels = []
    for level in settings.levels:
        # ab's change is in throughput; as time per sample: 1 / (1 + change) - 1, one value per trial.
        time_ratios = [1 / (1 + change) for change in changes[level] if change is not None and change > -1]
        plant = check_plant(level, time_ratios, tolerance=settings.tolerance) if level > 0 else None
        levels.append(level_rate(level, flags[level], plant))
    if trials == 0:
        return PathCurve(path="ab", status=SKIPPED, how=how, seconds=time.perf_counter() - started,
                         reason=f"its share of the budget ({budget_s:.0f} s) held no whole trial")
    return finish(PathCurve(path="ab", status=MEASURED if trials >= settings.trials else PARTIAL,
                            reason="" if trials >= settings.trials else f"the budget allowed {trials} trial(s)",
                            how=how, levels=tuple(levels), seconds=time.perf_counter() - started))
