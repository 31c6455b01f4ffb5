"""``perfsuite selftest``: its options (all under the command, parsed into Settings before anything
runs) and its run: the cost of each path said first, a progress line per trial, then the curve as a
table, the selftest_* gates decided, the JSON summary, and on request a plot (--report) and a
Markdown section appended to a results file (--results). Exit status: 0 done; 1 a plant failed or a
selftest_* gate failed; 2 a usage error; 130 interrupted (perfsuite.tools.cli).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from perfsuite.options import fraction, integer, seconds
from perfsuite.tools.detection.records import LEVELS, PATHS, SKIPPED, PathCurve, SelftestReport, Settings

DEFAULT_PATHS = ("work", "saved")
PATH_BUDGET_S = {"work": 120.0, "saved": 1200.0, "ab": 3600.0}  # each path's default seconds on a small runner
DEFAULT_TRIALS = 20
# The stored-run comparison as a user's run makes it by default: the plugin's --perfsuite-compare-runs,
# --perfsuite-compare-alpha and --perfsuite-compare-min-effect defaults.
DEFAULT_HISTORY_RUNS, DEFAULT_ALPHA, DEFAULT_MIN_EFFECT = 10, 0.01, 0.10
WEIGHTS = PATH_BUDGET_S  # each selected path's share of the budget, in proportion
DEFAULT_JSON = Path("perfsuite-selftest.json")


def paths(text: str) -> tuple[str, ...]:
    """--paths: comma-separated paths, each one of PATHS, none twice; kept in PATHS order."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in PATHS]
    if not names or unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated paths among {','.join(PATHS)}, each once, "
                                         f"found {text!r}")
    return tuple(path for path in PATHS if path in names)


def levels(text: str) -> tuple[float, ...]:
    """--levels: comma-separated planted shares, each a whole number of the plant's utterances (a multiple
    of 1/BATCH), none twice, 0 among them (the false-alarm share every curve is read against); sorted."""
    from perfsuite.tools.detection.plant import BATCH, extra_units

    try:
        shares = [float(item) for item in text.split(",") if item.strip()]
        for share in shares:
            extra_units(share)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected comma-separated shares, each a multiple of 1/{BATCH} "
                                         f"(e.g. 0,0.1), found {text!r}: {error}") from None
    if 0.0 not in shares or len(set(shares)) != len(shares):
        raise argparse.ArgumentTypeError(f"expected distinct shares including 0 (the false-alarm share), "
                                         f"found {text!r}")
    return tuple(sorted(shares))


def results_file(text: str) -> Path:
    """--results: a Markdown file (.md) whose directory exists; the run appends its section."""
    path = Path(text)
    if path.suffix != ".md" or path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a Markdown file path ending in .md, found {text!r}")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"expected a file in an existing directory, found {text!r} "
                                         f"({path.parent} is not a directory)")
    return path


def add_arguments(parser) -> None:
    """The ``perfsuite selftest`` options (cli.py registers the command)."""
    from perfsuite.pytest_plugin.profiles import PROFILES

    parser.add_argument("--paths", type=paths, default=DEFAULT_PATHS, metavar="LIST",
                        help="which paths to measure, comma-separated among work,saved,ab (default: "
                             f"{','.join(DEFAULT_PATHS)}; ab runs `perfsuite ab` many times: its cost is printed first)")
    parser.add_argument("--budget", type=seconds, metavar="SECONDS",
                        help="time for the whole run, shared by the paths in proportion to their defaults; a path "
                             "stops starting trials when its share is spent (default: the selected paths' defaults "
                             f"added up: {', '.join(f'{p} {s:.0f} s' for p, s in PATH_BUDGET_S.items())})")
    parser.add_argument("--levels", type=levels, default=LEVELS, metavar="LIST",
                        help="planted shares, comma-separated, 0 among them (default: "
                             f"{','.join(f'{level:g}' for level in LEVELS)}; fewer shares cost less, e.g. for ab)")
    parser.add_argument("--trials", type=integer(1), default=DEFAULT_TRIALS, metavar="N",
                        help="trials per planted share and path (default: %(default)s)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick",
                        help="run profile of the measured rounds (default: %(default)s)")
    parser.add_argument("--history-runs", type=integer(3), default=DEFAULT_HISTORY_RUNS, metavar="N",
                        help="saved runs each trial run is compared with, as --perfsuite-compare-runs "
                             "(default: %(default)s)")
    parser.add_argument("--alpha", type=fraction, default=DEFAULT_ALPHA, metavar="P",
                        help="the comparison's alpha, as --perfsuite-compare-alpha (default: %(default)g)")
    parser.add_argument("--min-effect", type=fraction, default=DEFAULT_MIN_EFFECT, metavar="FRACTION",
                        help="the comparison's minimum effect, as --perfsuite-compare-min-effect (default: %(default)g)")
    parser.add_argument("--baselines", type=Path, default=Path("benchmarks") / "baselines", metavar="DIR",
                        help="the directory holding ratios.yaml (default: %(default)s)")
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="where the self-test's corpus is built and reused")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, metavar="FILE",
                        help="the run's summary, versioned JSON (default: %(default)s)")
    parser.add_argument("--report", type=Path, metavar="DIR",
                        help="write detection-curve.png and summary.md to DIR (needs matplotlib), and each "
                             "`perfsuite ab` run's own report to DIR/ab/")
    parser.add_argument("--results", type=results_file, metavar="FILE.md",
                        help="append the table as a Markdown section to FILE.md (e.g. docs/results/DATE-machine.md)")


def settings_of(args) -> Settings:
    """The parsed options as Settings."""
    budget = args.budget if args.budget is not None else sum(PATH_BUDGET_S[path] for path in args.paths)
    return Settings(paths=args.paths, levels=args.levels, trials=args.trials, budget_s=budget, profile=args.profile,
                    history_runs=args.history_runs, alpha=args.alpha, min_effect=args.min_effect)


def budget_shares(settings: Settings) -> dict[str, float]:
    """Each selected path's seconds of the budget, by WEIGHTS, before any runs (a path that spends less
    leaves the rest to the next, see measure)."""
    total = sum(WEIGHTS[path] for path in settings.paths)
    return {path: settings.budget_s * WEIGHTS[path] / total for path in settings.paths}


def run(args, parser) -> int:
    """``perfsuite selftest``: options checked, then the paths, the table and the files."""
    from perfsuite.options import check_outputs

    check_outputs(parser, json_file=args.json, directories={"--report": args.report, "--data-dir": args.data_dir})
    ratios = args.baselines / "ratios.yaml"
    if not ratios.is_file():
        parser.error(f"--baselines: expected a directory holding ratios.yaml, found no {ratios}")
    settings = settings_of(args)
    start = time.monotonic()

    def progress(line: str) -> None:
        print(f"perfsuite selftest [{time.monotonic() - start:5.0f} s] {line}", file=sys.stderr, flush=True)

    report = measure(settings, ratios=ratios, data_dir=args.data_dir, progress=progress,
                     kept=args.report / "ab" if args.report is not None else None)
    return present(report, args, ratios)


def announce(settings: Settings, progress) -> None:
    """What each path will cost, before anything runs (the ab path's cost above all)."""
    from perfsuite.tools.detection.ab_path import cost_line

    for path, share in budget_shares(settings).items():
        trials = {"work": "1 trial", "ab": "the trials below"}.get(path, f"{settings.trials} trials")
        progress(f"{path}: up to {share:.0f} s of the budget, {trials} x {len(settings.levels)} shares")
    line = cost_line(settings.levels, settings.trials)
    progress(line if "ab" in settings.paths else f"ab not selected (--paths ...,ab to add it); {line}")


def measure(settings: Settings, *, ratios: Path, data_dir: Path | None, progress,
            kept: Path | None = None) -> SelftestReport:
    """Every selected path measured within its share of the budget; the others reported as skipped.
    ``kept``: where each `perfsuite ab` run's report is kept."""
    from perfsuite.measure.machine import machine_fingerprint
    from perfsuite.tools.detection import plant
    from perfsuite.tools.detection.ab_path import cost_line
    from perfsuite.tools.detection.curve import decide_gates
    from perfsuite.tools.detection.paths import Context, plant_work
    from perfsuite.verdict.baselines import load_ratios

    started = datetime.now(UTC)
    announce(settings, progress)
    context = Context(settings=settings, dataset_dir=plant.corpus(data_dir), ratios=ratios, progress=progress,
                      data_dir=data_dir, kept=kept)
    context = replace(context, work=plant_work(context))  # every path's plants certified once, in work
    not_run = {path: f"not selected (--paths); {cost_line(settings.levels, settings.trials)}" if path == "ab"
               else "not selected (--paths)" for path in PATHS if path not in settings.paths}
    curves, clock = [], time.monotonic()
    for path in PATHS:
        if path not in settings.paths:
            curves.append(PathCurve(path=path, status=SKIPPED, how="", reason=not_run[path]))
            continue
        left = settings.budget_s - (time.monotonic() - clock)  # a path's unspent share goes to the next
        weights = sum(WEIGHTS[later] for later in settings.paths if PATHS.index(later) >= PATHS.index(path))
        curves.append(_measure_path(path, context, max(left, 0.0) * WEIGHTS[path] / weights))
    gates = decide_gates(load_ratios(ratios), curves, not_run)
    return SelftestReport(settings=settings, machine=machine_fingerprint().as_dict(),
                          started=started.strftime("%Y-%m-%d %H:%M UTC"),
                          elapsed_s=(datetime.now(UTC) - started).total_seconds(), curves=tuple(curves),
                          gates=gates)


def _measure_path(path: str, context, budget_s: float) -> PathCurve:
    """One path's curve; a worker or ab run that fails makes it a skip naming the failure."""
    from perfsuite.tools.detection import ab_path
    from perfsuite.tools.detection import paths as measured

    try:
        if path == "work":
            return measured.work(context, budget_s)
        if path == "saved":
            return measured.saved(context, budget_s)
        return ab_path.ab(context, budget_s, root=_repository_root())
    except (measured.WorkerFailed, ValueError, OSError) as error:
        return PathCurve(path=path, status=SKIPPED, how="", reason=f"{path} could not be measured here: {error}")


def _repository_root() -> Path:
    """The git repository holding the current directory (the ab path clones it)."""
    import subprocess

    found = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise OSError(f"the ab path needs a git repository, found none at {Path.cwd()}")
    return Path(found.stdout.strip())


def present(report: SelftestReport, args, ratios: Path) -> int:
    """The table and readings printed; the JSON, the report and the results section written."""
    from perfsuite.tools.detection.present import curve_table, markdown, plot, summary_lines
    from perfsuite.tools.detection.records import write_report

    print("\n".join(curve_table(report).terminal()))
    print("\n".join(summary_lines(report)))
    print(f"json: {write_report(report, args.json)}")
    text = markdown(report)
    if args.report is not None:
        args.report.mkdir(parents=True, exist_ok=True)
        (args.report / "summary.md").write_text(text, encoding="utf-8")
        print(f"plot: {plot(report, args.report)}")
    if args.results is not None:
        with args.results.open("a", encoding="utf-8") as stream:
            stream.write("\n" + text)
        print(f"results: appended to {args.results}")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as stream:
            stream.write(text)
    return exit_status(report)


def exit_status(report: SelftestReport) -> int:
    """1 when a plant failed or a selftest_* gate failed, else 0."""
    failed_plant = any(level.plant is not None and level.plant.failed and level.trials
                       for curve in report.curves for level in curve.levels)
    return 1 if failed_plant or any(gate.decision == "fail" for gate in report.gates) else 0
