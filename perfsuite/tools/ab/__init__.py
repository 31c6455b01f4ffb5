"""``perfsuite ab BASE [HEAD]``: two revisions' benchmarks measured side by side on this machine, round by round.

A stored earlier run only shows changes larger than the machine's run-to-run noise (docs/ab.md).
Here both revisions run in the same job, each side in its own git worktree (HEAD defaults to the
working tree itself) and its own long-lived worker process; the controller drives every measurement
round, A then B, the order reversed every round, in passes of fresh workers, and decides over them.

The package is split as pyperf's is: ``manager`` (worktrees and worker processes), ``runner`` (the
controller's loop over passes and benchmarks), ``results`` (what was measured and decided, JSON),
``present`` (table, Markdown, plots); the worker's own loop is perfsuite.pytest_plugin.ab_worker and
the decision perfsuite.verdict.ab. This module is the command line. No process or worktree outlives
the command.

Exit status: 0 every benchmark decided, none slower; 1 a significant slowdown beyond the minimum effect;
2 a usage error (a bad revision, option or path); 3 a side could not be measured (it failed to start,
crashed or hung) or a benchmark raised on one side: the message names the side (base/head), the
benchmark and the worker's log; 6 a benchmark undecided within the budget (no slowdown shown, none ruled
out); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from perfsuite.options import check_outputs, fraction, integer, seconds
from perfsuite.tools.ab.manager import PRELOAD, repository_root
from perfsuite.tools.ab.present import failures_with_logs, footnotes, markdown, plot, table
from perfsuite.tools.ab.results import ABReport, Options, write_json
from perfsuite.tools.ab.runner import compare_revisions

# --------------------------------------------------------------------------------------------- run


def pytest_args(args) -> list[str]:
    """The worker's pytest command line: the benchmarks, the selection and the profile passed through;
    pytest-benchmark's own timing off (the rounds are the controller's), gates reported only, the
    session's order kept, nothing cached in the trees, and no Hypothesis plugin: benchmarks are not
    property tests, and where bytecode is not written (PYTHONDONTWRITEBYTECODE, common in containers)
    pytest rewrites the asserts of its modules again in every worker of every pass."""
    command = [args.benchmarks, f"--perfsuite-profile={args.profile}", "--perfsuite-gates=report",
               "--benchmark-disable", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:hypothesispytest",
               "--continue-on-collection-errors", "-q"]
    if args.keyword:
        command += ["-k", args.keyword]
    if args.markexpr:
        command += ["-m", args.markexpr]
    if args.data_dir is not None:
        command += [f"--perfsuite-data-dir={args.data_dir.resolve()}"]
    return command
# --------------------------------------------------------------------------------------------- CLI


# The defaults are sized for a pull request on a small CI runner: many short passes, sequential, since a
# process's own speed can outweigh the rounds' noise within it (docs/ab.md, "Where the noise lives": the
# measurements behind these values).
DEFAULT_BUDGET_S = 240.0
DEFAULT_PASS_S = 3.0
DEFAULT_MIN_ROUNDS = 4
DEFAULT_PASSES = 6
DEFAULT_MAX_PASSES = 24


def add_arguments(parser) -> None:
    """The ``perfsuite ab`` options (cli.py's _add_ab registers the command)."""
    from perfsuite.pytest_plugin.profiles import PROFILES

    parser.add_argument("base", metavar="BASE", help="git revision of side A (e.g. HEAD~1, origin/main, a merge base)")
    parser.add_argument("head", metavar="HEAD", nargs="?", default=None,
                        help="git revision of side B (default: the working tree, uncommitted changes included)")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="pytest -k selection, on both sides")
    parser.add_argument("-m", dest="markexpr", metavar="EXPR", help="pytest -m selection, on both sides")
    parser.add_argument("--benchmarks", default="benchmarks", metavar="PATH",
                        help="benchmark path inside each revision (default: %(default)s)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick",
                        help="run profile of both sides: corpus and round length (default: %(default)s)")
    parser.add_argument("--budget", type=seconds, default=DEFAULT_BUDGET_S, metavar="SECONDS",
                        help="measuring time over all benchmarks and passes: no pass is started that it cannot "
                             "hold; a benchmark still undecided then is 'undecided' (default: %(default)g)")
    parser.add_argument("--pass-seconds", dest="pass_s", type=seconds, default=DEFAULT_PASS_S, metavar="SECONDS",
                        help="rounds each benchmark gets in one pass, at least --min-rounds (default: %(default)g)")
    parser.add_argument("--alpha", type=fraction, default=0.01, metavar="P",
                        help="false-alarm rate over all benchmarks compared (default: %(default)g)")
    parser.add_argument("--min-effect", type=fraction, default=0.02, metavar="FRACTION",
                        help="least change that counts; it grows with the noise to 3 standard errors "
                             "(default: %(default)g)")
    parser.add_argument("--no-change-within", type=fraction, default=0.05, metavar="FRACTION",
                        help="'no change' when the change's interval lies within ± this (default: %(default)g)")
    parser.add_argument("--min-rounds", type=integer(1), default=DEFAULT_MIN_ROUNDS, metavar="N",
                        help="rounds per benchmark at least, even (default: %(default)s)")
    parser.add_argument("--max-rounds", type=integer(1), default=96, metavar="N",
                        help="rounds per benchmark at most, even (default: %(default)s)")
    parser.add_argument("--passes", type=integer(1), default=DEFAULT_PASSES, metavar="N",
                        help="passes (fresh workers on both sides) every benchmark gets before its first look; with "
                             "2 or more the pass is the unit of the decision (a difference between two processes "
                             "of the same code is no change of the code); 1 trusts one pair of processes "
                             "(default: %(default)s)")
    parser.add_argument("--max-passes", type=integer(1), default=DEFAULT_MAX_PASSES, metavar="N",
                        help="passes at most for a benchmark still undecided (looked at after --passes, then each "
                             "time the count grows by half), within --budget (default: %(default)s)")
    parser.add_argument("--round-timeout", type=seconds, default=300.0, metavar="SECONDS",
                        help="a round taking longer is a hung side (default: %(default)g)")
    parser.add_argument("--setup-timeout", type=seconds, default=1800.0, metavar="SECONDS",
                        help="the longest a side may take outside its rounds between two steps: start-up, "
                             "collection, fixtures, warm-up (default: %(default)g)")
    parser.add_argument("--fresh-workers", action="store_true",
                        help="start every worker as a fresh interpreter instead of forking it from the fork server "
                             "(for a pipeline that cannot run in a forked process; each pass then pays the imports)")
    parser.add_argument("--preload", type=_modules, default=PRELOAD, metavar="MODULES",
                        help="comma-separated modules the fork server imports once for every worker "
                             f"(default: {','.join(PRELOAD)})")
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="where both sides build and reuse corpora")
    parser.add_argument("--repo", type=Path, default=Path("."), metavar="DIR",
                        help="the git repository (default: the one holding the current directory)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every round and verdict as JSON to FILE")
    parser.add_argument("--report", type=Path, metavar="DIR",
                        help="write summary.md, per-round plots and both workers' logs to DIR (needs matplotlib)")


def _modules(text: str) -> tuple[str, ...]:
    """--preload: comma-separated dotted module names (perfsuite itself is each side's own)."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise argparse.ArgumentTypeError(f"expected dotted module names separated by commas, found {name!r}")
        if name.split(".")[0] == "perfsuite":
            raise argparse.ArgumentTypeError(f"expected third-party modules, found {name!r}: each worker imports "
                                             "its own side's perfsuite")
    return names


def run(args, parser) -> int:
    """``perfsuite ab``: options checked first, then the comparison, the table and the files."""
    from perfsuite.verdict.ab import ABSettings

    check_outputs(parser, json_file=args.json, directories={"--report": args.report, "--data-dir": args.data_dir})
    try:
        settings = ABSettings(alpha=args.alpha, min_effect=args.min_effect, no_change_within=args.no_change_within,
                              min_rounds=args.min_rounds, max_rounds=args.max_rounds, passes=args.passes,
                              max_passes=max(args.max_passes, args.passes))
    except ValueError as error:  # "min_rounds: expected ..." said of the option that set it
        name, _, problem = str(error).partition(": ")
        parser.error(f"--{name.replace('_', '-')}: {problem}")
    options = Options(budget_s=args.budget, pass_s=args.pass_s, round_timeout_s=args.round_timeout,
                      setup_timeout_s=args.setup_timeout,
                      fresh_workers=args.fresh_workers, preload=args.preload)
    start = time.monotonic()

    def progress(message: str) -> None:
        print(f"perfsuite ab [{time.monotonic() - start:5.0f} s] {message}", file=sys.stderr, flush=True)

    report = compare_revisions(repo=repository_root(args.repo), base=args.base, head=args.head,
                               pytest_arguments=pytest_args(args), settings=settings, options=options,
                               progress=progress, logs_to=args.report)
    print(report.title())
    for line in table(report):
        print(line)
    for line in footnotes(report):
        print(f"note: {line}")
    for failure in failures_with_logs(report):
        print(f"last lines of side {failure.side}'s log ({failure.log}):\n{failure.log_tail}", file=sys.stderr)
    _write_outputs(report, args)
    return report.exit_status


def _write_outputs(report: ABReport, args) -> None:
    if args.json is not None:
        write_json(args.json, report)
        print(f"json: {args.json}")
    if args.report is not None:
        args.report.mkdir(parents=True, exist_ok=True)
        (args.report / "summary.md").write_text(markdown(report), encoding="utf-8")
        for path in plot(report, args.report):
            print(f"plot: {path}")
        print(f"report: {args.report / 'summary.md'}")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as stream:
            stream.write(markdown(report))
