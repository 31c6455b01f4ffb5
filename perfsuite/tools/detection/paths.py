"""The work and saved paths, measured through fresh worker processes (perfsuite.tools.detection.worker).

``Context`` carries what both need: the settings, the corpus, the ratios.yaml path and a ``progress``
callback that receives one line per trial. Each function returns a PathCurve; a path that cannot be
measured here returns one with status ``skipped`` and the reason, never raises for it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from perfsuite.tools.detection.curve import certify_plant, finish, level_rate
from perfsuite.tools.detection.records import MEASURED, PARTIAL, SKIPPED, PathCurve, Settings
from perfsuite.verdict.comparison import compare_history, decide_history


@dataclass(frozen=True)
class Context:
    """settings; dataset_dir the self-test's corpus; ratios the ratios.yaml path; progress(line);
    data_dir where corpora are built (passed on to ab's sides); kept where each `perfsuite ab` run's own
    report is kept (None: they go with a temporary directory)."""

    settings: Settings
    dataset_dir: Path
    ratios: Path
    progress: Callable[[str], None]
    data_dir: Path | None = None
    kept: Path | None = None
    work: tuple[dict, dict] | None = None  # plant_work's answer, once read


class WorkerFailed(RuntimeError):
    """A worker process exited without its result: carries its exit status and the tail of its stderr."""


def _worker(kind: str, spec: dict, *, timeout_s: float | None = None) -> Iterator[dict]:
    """The JSON lines a worker prints, as they come; WorkerFailed when it exits non-zero."""
    command = [sys.executable, "-m", "perfsuite.tools.detection.worker", kind, json.dumps(spec)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as process:
        try:
            for line in process.stdout:
                if line.startswith("{"):
                    yield json.loads(line)
            _, stderr = process.communicate(timeout=timeout_s)
        finally:
            if process.poll() is None:
                process.kill()
    if process.returncode != 0:
        raise WorkerFailed(f"the {kind} worker exited with status {process.returncode}: "
                           f"{stderr.strip().splitlines()[-1] if stderr.strip() else 'no message'}")


def _curve(path: str, how: str, settings: Settings, flags: dict, ratios: dict, work: dict, *, trials_done: int,
           spent_s: float, partial_reason: str) -> PathCurve:
    """The levels (plant certified in ``work``, its time cost from ``ratios`` beside it, then the share
    flagged) of flags and paired time ratios per level."""
    levels = []
    for level in settings.levels:
        plant = certify_plant(level, work.get(level), ratios.get(level, [])) if level > 0 else None
        levels.append(level_rate(level, flags.get(level, []), plant))
    status = MEASURED if trials_done >= settings.trials else PARTIAL
    return finish(PathCurve(path=path, status=status, reason=partial_reason if status == PARTIAL else "", how=how,
                            levels=tuple(levels), seconds=spent_s))


def plant_work(context: Context) -> tuple[dict[float, float], dict[float, dict]]:
    """Every level's work fingerprint against the genuine one's (the worker's ``work`` kind, a fresh
    process): its certified size (float ops per sample, planted over genuine, minus one) and what the
    fingerprint's comparison said."""
    (line,) = list(_worker("work", {"dataset_dir": str(context.dataset_dir), "levels": list(context.settings.levels)}))
    found = {float(level): figures for level, figures in line["levels"].items()}
    return {level: figures["work"] for level, figures in found.items()}, found


def work(context: Context, budget_s: float) -> PathCurve:
    """Path: the work fingerprint. Deterministic: one trial per level, x % more work caught or not, no
    timing at all, so one trial says all there is (the rates' intervals stay wide by construction)."""
    settings = context.settings
    how = ("the work fingerprint of the planted pipeline (float ops per sample, the Python bodies' work, the "
           "structure) against the genuine one's, as test_work.py compares them; flagged: the comparison fails")
    started = time.perf_counter()
    certified, found = context.work or plant_work(context)
    flags = {level: [bool(found[level]["flagged"])] for level in settings.levels}
    for level in settings.levels:
        context.progress(f"work {level:.0%}: {'FLAGGED' if flags[level][0] else 'not flagged'} "
                         f"(float ops per sample {certified[level]:+.2%})")
    curve = _curve("work", how, replace(settings, trials=1), flags, {}, certified, trials_done=1,
                   spent_s=time.perf_counter() - started, partial_reason="")
    return curve


def saved(context: Context, budget_s: float) -> PathCurve:
    """Path (b): the comparison with saved runs. Every run is a fresh worker process measuring every
    level; the first ``history_runs`` runs are the saved ones, then each trial run's figure at each
    level is judged (compare_history, then decide_history, with the user's alpha and minimum effect)
    against the genuine figures of the ``history_runs`` runs before it, as a nightly job's run is."""
    settings = context.settings
    how = (f"each run a fresh process ({settings.profile} profile rounds, figure: median samples/s), judged against the "
           f"{settings.history_runs} runs before it (alpha {settings.alpha:g}, min effect {settings.min_effect:.0%}, "
           "one benchmark); flagged: a significant slowdown")
    started = time.perf_counter()
    genuine: list[float] = []
    flags: dict[float, list[bool]] = {level: [] for level in settings.levels}
    ratios: dict[float, list[float]] = {level: [] for level in settings.levels}
    spec = {"dataset_dir": str(context.dataset_dir), "levels": list(settings.levels), "profile": settings.profile}
    wanted, last_s, trials = settings.history_runs + settings.trials, 0.0, 0
    for run in range(wanted):
        spent = time.perf_counter() - started
        if spent + last_s > budget_s:
            break
        begun = time.perf_counter()
        (line,) = list(_worker("saved", {**spec, "run_index": run}))
        last_s = time.perf_counter() - begun
        figures = {float(level): value for level, value in line["figures"].items()}
        for level, values in line["time_ratios"].items():
            ratios[float(level)] += values
        if len(genuine) == settings.history_runs and trials == 0:
            floor = smallest_flaggable(genuine, settings)
            context.progress(f"saved: the smallest slowdown these {len(genuine)} runs can flag: {floor:.0%} more time "
                             f"per sample (their run-to-run SD {float(np.std(np.log(genuine), ddof=1)):.1%}, alpha "
                             f"{settings.alpha:g}, min effect {settings.min_effect:.0%})")
            if floor > max(settings.levels):
                return PathCurve(path="saved", status=SKIPPED, how=how, seconds=time.perf_counter() - started,
                                 reason=f"no trial can succeed: the smallest slowdown the saved runs can flag is "
                                        f"{floor:.0%}, above the largest planted share {max(settings.levels):.0%}")
        if len(genuine) >= settings.history_runs:
            trials += 1
            verdicts = _judge_run(genuine[-settings.history_runs:], figures, settings)
            for level, flagged in verdicts.items():
                flags[level].append(flagged)
            context.progress(f"saved trial {trials}/{settings.trials}: " + ", ".join(
                f"{level:.0%} {'SLOWER' if flagged else 'ok'}" for level, flagged in verdicts.items())
                + f" [run {run + 1}, {last_s:.0f} s]")
        else:
            context.progress(f"saved run {run + 1}/{settings.history_runs} (history): "
                             f"{figures[0.0]:.1f} samples/s [{last_s:.0f} s]")
        genuine.append(figures[0.0])
    if len(genuine) < settings.history_runs + 1:
        return PathCurve(path="saved", status=SKIPPED, how=how, seconds=time.perf_counter() - started,
                         reason=f"its share of the budget ({budget_s:.0f} s) held {len(genuine)} run(s) of about "
                                f"{last_s:.0f} s; {settings.history_runs} saved runs and one trial run are needed")
    certified, _ = context.work or plant_work(context)
    curve = _curve("saved", how, settings, flags, ratios, certified, trials_done=trials,
                   spent_s=time.perf_counter() - started,
                   partial_reason=f"the budget of {budget_s:.0f} s allowed {trials} trial run(s)")
    return replace(curve, how=how)


def smallest_flaggable(history: list[float], settings: Settings) -> float:
    """The smallest slowdown (more time per sample) a run can be flagged for against ``history`` (the saved
    runs' figures, samples/s): the larger of the minimum effect and the change whose Student-t p
    (compare_history's, one benchmark) reaches alpha at the runs' spread."""
    from scipy import special

    logs = np.log(np.asarray(history, dtype=float))
    runs = logs.size
    scale = float(np.std(logs, ddof=1)) * math.sqrt(1 + 1 / runs)
    effect = 1 / (1 - settings.min_effect) - 1  # the minimum effect is a fall of samples/s
    return max(effect, math.expm1(float(special.stdtrit(runs - 1, 1 - settings.alpha)) * scale))


def _judge_run(history: list[float], figures: dict[float, float], settings: Settings) -> dict[float, bool]:
    """Each level's figure of one run against the saved runs: a significant slowdown or not."""
    verdicts = {}
    for level, figure in figures.items():
        comparison = compare_history(history, figure, higher_is_better=True, min_effect=settings.min_effect,
                                     alpha=settings.alpha, max_runs=settings.history_runs)
        (decision,) = decide_history([comparison], alpha=settings.alpha)
        verdicts[level] = decision.significant_slowdown
    return dict(sorted(verdicts.items()))
