"""Path (c): ``perfsuite ab`` with its defaults on a planted revision, run as a user runs it.

A clone of the repository gets the working tree's files (tracked and untracked, ignored ones left out)
plus one small benchmark, ``benchmarks/test_selftest_plant.py``, as its base commit; one commit on
top of it per share changes only that benchmark: its ``PLANT`` (the plant of
perfsuite.tools.detection.plant), or at 0 a comment (A/A: the source differs, the behaviour does not).
A trial runs ``perfsuite ab BASE HEAD -k test_selftest_plant`` as a subprocess, every option at ab's
default, the shares in the order measure.rounds.rotated gives each trial, each share its ``trials_at``. Flagged: at 0
any verdict slower or faster; planted, "slower" with exit 1. Each trial's verdict words are kept. The
plant is certified in work (paths.plant_work); the change ab measured (over the trials) is its time
cost, printed beside it. Each run's own report is kept where the command's ``--report`` says
(``ab/ab-trial<N>-<share>.json``); ``cost_line`` says what the path costs before anything runs.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from perfsuite.measure.rounds import InterleavedRounds, rotated
from perfsuite.tools.detection.curve import certify_plant, finish, level_rate
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


RUN_S = 75.0  # a first guess of one run's seconds (the cost line)
FULL_TRIAL_LEVELS = (0.0, 0.10)  # the shares that get every trial
OTHER_TRIALS = 2  # the trials of every other share: where the curve bends, not the claim


def trials_at(level: float, trials: int) -> int:
    """Trials at a planted share: all of them at 0 % (false alarms) and 10 % (the claim), OTHER_TRIALS
    (or fewer, if fewer are asked) elsewhere."""
    return trials if any(abs(level - full) < 1e-9 for full in FULL_TRIAL_LEVELS) else min(trials, OTHER_TRIALS)


def cost_line(levels, trials: int) -> str:
    """The ab path's cost, said before it runs."""
    runs = sum(trials_at(level, trials) for level in levels)
    return (f"ab path: {runs} runs of `perfsuite ab` (each share's trials: "
            f"{', '.join(f'{level:.0%} x{trials_at(level, trials)}' for level in levels)}), about {RUN_S:.0f} s each "
            f"by a first guess: about {runs * RUN_S / 60:.0f} min; no trial round is started that the budget "
            "cannot hold, judged by each share's runs so far")


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), "-c", "user.name=selftest", "-c", "user.email=selftest@invalid",
                             *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {repo}: {result.stderr.strip()}")
    return result.stdout.strip()


def planted_clone(root: Path, destination: Path, levels) -> dict[float, str]:
    """A clone of ``root`` whose base commit holds the working tree and the plant benchmark at 0, and one
    commit on it per share (0: a comment added, A/A); returns each share's commit and the base's ("base")."""
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
    commits = {"base": base}
    for level in levels:
        _git(destination, "checkout", "--quiet", "--detach", base)
        source = BENCHMARK_SOURCE.format(plant=float(level))
        if level == 0:  # A/A: the source differs, the behaviour does not
            source += "\n# A/A: a comment, no change of behaviour\n"
        (destination / BENCHMARK).write_text(source)
        _git(destination, "commit", "--quiet", "-am", f"planted: {level:.0%} more loader work")
        commits[level] = _git(destination, "rev-parse", "HEAD")
    _git(destination, "checkout", "--quiet", "--detach", base)
    return commits


def _run_ab(repo: Path, base: str, head: str, out: Path, data_dir: Path | None) -> tuple[str, float | None, str]:
    """One `perfsuite ab` run: (its verdict's words, the change ab measured or None, a problem or '')."""
    from perfsuite.tools.ab.results import EXIT_OK, EXIT_SLOWER, EXIT_UNDECIDED, load_report

    command = [sys.executable, "-m", "perfsuite", "ab", base, head, "-k", SELECTION, "--json", str(out)]
    if data_dir is not None:
        command += ["--data-dir", str(data_dir)]
    out.unlink(missing_ok=True)  # a report left by an earlier run must not stand for this one
    result = subprocess.run(command, cwd=repo, capture_output=True, text=True, check=False)
    if result.returncode not in (EXIT_OK, EXIT_SLOWER, EXIT_UNDECIDED) or not out.exists():
        tail = (result.stderr.strip().splitlines() or ["no message"])[-1]
        return "", None, f"perfsuite ab exited {result.returncode}: {tail}"
    report = load_report(out)
    verdict = next((v for v in report.verdicts if v.name.endswith(SELECTION)), None)
    if verdict is None:
        return "", None, f"perfsuite ab compared no {SELECTION} (selection -k {SELECTION})"
    if (result.returncode == EXIT_SLOWER) != verdict.significant_slowdown:
        return "", None, f"perfsuite ab exited {result.returncode} with the verdict {verdict.label()!r}"
    return verdict.label(), verdict.estimate.change, ""


def _expected_s(run_s: dict[float, list[float]], level: float) -> float:
    """A run's expected seconds at ``level``: the mean of its runs so far, else of every run so far."""
    done = run_s[level] or [s for runs in run_s.values() for s in runs]
    return sum(done) / len(done) if done else 0.0


def flagged(level: float, label: str) -> bool:
    """A trial's flag: at 0 % any row slower or faster (a false alarm either way); planted, slower."""
    from perfsuite.verdict.ab import FASTER, SLOWER

    words = label.split(" ", 1)[0]
    return words in (SLOWER, FASTER) if level == 0 else words == SLOWER


class _Problem(Exception):
    """A trial's `perfsuite ab` run that gave no verdict: the path stops there."""


def ab(context, budget_s: float, *, root: Path) -> PathCurve:
    """Path (c) within ``budget_s``: trial rounds of every share (each share its ``trials_at``) until the
    trials or the budget run out; the plants certified in work (paths.plant_work)."""
    from perfsuite.tools.detection.paths import plant_work

    settings = context.settings
    how = (f"`perfsuite ab BASE HEAD -k {SELECTION}` with ab's defaults, HEAD planting the share in the benchmark "
           "(A/A: HEAD differs from BASE by a comment only); flagged: at 0 % any verdict slower or faster, planted: "
           "slower (exit 1)")
    started = time.perf_counter()
    certified, _ = context.work or plant_work(context)
    labels = {level: [] for level in settings.levels}
    changes = {level: [] for level in settings.levels}
    with tempfile.TemporaryDirectory(prefix="perfsuite-selftest-ab-") as scratch:
        repo = Path(scratch) / "repo"
        try:
            commits = planted_clone(root, repo, settings.levels)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as error:
            return PathCurve(path="ab", status=SKIPPED, how=how, reason=f"no planted clone of {root}: {error}")
        kept = Path(scratch) if context.kept is None else context.kept
        kept.mkdir(parents=True, exist_ok=True)
        run_s = {level: [] for level in settings.levels}

        def run(level: float) -> None:  # one trial of a share: one `perfsuite ab` run
            begun, trial = time.perf_counter(), len(run_s[level])
            label, change, problem = _run_ab(repo, commits["base"], commits[level],
                                             kept / f"ab-trial{trial + 1}-{level:.0%}.json", context.data_dir)
            run_s[level].append(time.perf_counter() - begun)
            if problem:
                raise _Problem(problem)
            labels[level].append(label)
            changes[level].append(change)
            context.progress(f"ab trial {trial + 1}/{trials_at(level, settings.trials)}, {level:.0%}: {label} "
                             f"(ab measured {change:+.1%}) [{time.perf_counter() - begun:.0f} s]")

        engine = InterleavedRounds({level: functools.partial(run, level) for level in settings.levels}, order=rotated)

        def shares() -> list[float]:  # the shares of the next trial round
            return [level for level in settings.levels if engine.index < trials_at(level, settings.trials)]

        try:
            engine.until_decided(lambda: False, labels=shares, max_rounds=settings.trials, clock=time.perf_counter,
                                 limit_s=budget_s - (time.perf_counter() - started),
                                 next_step_s=lambda: sum(_expected_s(run_s, level) for level in shares()))
        except _Problem as problem:
            return PathCurve(path="ab", status=SKIPPED, how=how, reason=str(problem),
                             seconds=time.perf_counter() - started)
    trials = engine.rounds_run
    if trials == 0:
        return PathCurve(path="ab", status=SKIPPED, how=how, seconds=time.perf_counter() - started,
                         reason=f"its share of the budget ({budget_s:.0f} s) held no whole trial")
    levels = []
    for level in settings.levels:
        # ab's change is in throughput; as time per sample: 1 / (1 + change) - 1, one value per trial.
        time_ratios = [1 / (1 + change) for change in changes[level] if change is not None and change > -1]
        plant = certify_plant(level, certified.get(level), time_ratios) if level > 0 else None
        rate = level_rate(level, [flagged(level, label) for label in labels[level]], plant)
        levels.append(replace(rate, verdicts=tuple(labels[level])))
    return finish(PathCurve(path="ab", status=MEASURED if trials >= settings.trials else PARTIAL,
                            reason="" if trials >= settings.trials else f"the budget allowed {trials} trial(s)",
                            how=how, levels=tuple(levels), seconds=time.perf_counter() - started))
