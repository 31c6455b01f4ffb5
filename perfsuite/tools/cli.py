"""The ``perfsuite`` command line.

Exit codes: 0 all good; 1 problems found in the data (each listed; ``diagnose`` still measures the
readable rest, or measures nothing when no file is readable); 2 usage error (a bad option, or an input
such as a baseline profile that perfsuite refuses, or a missing extra); 130 interrupted (Ctrl-C).
``main`` returns the code rather than exiting. Options are checked by argparse before anything is
measured; a PerfsuiteError raised later is caught in ``main`` alone and printed as one line naming the
file or option, never as a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

from perfsuite._tensorflow import LOGS_VARIABLE
from perfsuite.errors import DataError, PerfsuiteError
from perfsuite.files import write_atomic
from perfsuite.options import batch_spec, check_outputs, frame_hop, integer, seconds

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "verbose", False):  # TensorFlow's start-up lines, kept out otherwise
            os.environ[LOGS_VARIABLE] = "1"
        return args.run(args, parser)
    except SystemExit as exit:  # argparse's way out: --help (0) or a usage error (2), message printed
        return exit.code if isinstance(exit.code, int) else EXIT_USAGE
    except PerfsuiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return _exit_code(error)
    except KeyboardInterrupt:
        print("perfsuite: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _exit_code(error: PerfsuiteError) -> int:
    """1 for a dataset perfsuite cannot use (no metadata.csv, nothing readable); 2 for any other refused input."""
    return EXIT_PROBLEMS if isinstance(error, DataError) else EXIT_USAGE


def _mel_config(text: str):
    """An argparse type: the MelConfig of a --sample-rate."""
    from perfsuite.data.audio import MelConfig

    try:
        return MelConfig(sample_rate=integer(1)(text))
    except ValueError as error:  # e.g. fmax above the Nyquist frequency of that rate
        raise argparse.ArgumentTypeError(str(error)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfsuite", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser(
        "check-data", help="list every file of an LJSpeech-layout dataset the TF-native loaders cannot read"
    )
    check.add_argument("path", type=Path, metavar="PATH", help="dataset directory (metadata.csv, wavs/)")
    check.add_argument("--cache", type=Path, metavar="DIR",
                       help="cache directory to check too (default: PATH/cache/mel-<key> when present)")
    check.add_argument("--sample-rate", type=_mel_config, default="22050", metavar="HZ", dest="mel_config",
                       help="sample rate the loaders expect (default: %(default)s)")
    check.set_defaults(run=_check_data)
    _add_diagnose(commands)
    _add_machine(commands)
    _add_ab(commands)
    _add_history(commands)
    _add_selftest(commands)
    verbose = {"action": "store_true", "help": "also show TensorFlow's start-up lines (kept out otherwise)"}
    parser.add_argument("-v", "--verbose", **verbose)
    for command in commands.choices.values():  # after the command too: `perfsuite check-data DIR -v`
        with contextlib.suppress(argparse.ArgumentError):  # a command with its own -v keeps it
            command.add_argument("-v", "--verbose", default=argparse.SUPPRESS, **verbose)
    return parser


def _date(text: str):
    """An argparse type: a date, YYYY-MM-DD."""
    from datetime import date

    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, found {text!r}") from None


def _add_history(commands) -> None:
    history = commands.add_parser(
        "history", help="each benchmark's samples/s over the runs saved on this hardware, with change points",
        description="Reads the runs pytest-benchmark saved (--benchmark-autosave) on this machine's hardware and "
                    "writes, per benchmark, a PNG of its samples/s per run (with intervals and change points) "
                    "and history.md listing them. Needs the 'history' extra (matplotlib, ruptures).")
    history.add_argument("--storage", type=Path, default=Path(".benchmarks"), metavar="DIR",
                         help="pytest-benchmark's storage directory (default: %(default)s)")
    history.add_argument("--out", type=Path, default=Path("history"), metavar="DIR",
                         help="where the PNGs and history.md go (default: %(default)s)")
    history.add_argument("--since", type=_date, metavar="DATE", help="only runs saved on or after DATE (YYYY-MM-DD)")
    history.add_argument("-k", dest="keyword", metavar="SUBSTRING",
                         help="only benchmarks whose id (profile::file::test[params]) contains SUBSTRING")
    history.set_defaults(run=_history)


def _history(args, parser) -> int:
    if not args.storage.is_dir():
        parser.error(f"--storage: expected pytest-benchmark's storage directory, found {_describe(args.storage)}")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out: expected a directory (or a path to create one), found {_describe(args.out)}")
    from perfsuite.measure.machine import machine_fingerprint
    from perfsuite.plotting import require_matplotlib
    from perfsuite.tools.history import build_history, summary_table, write_history

    require_matplotlib("perfsuite history")
    history = build_history(args.storage, machine_fingerprint(), since=args.since, keyword=args.keyword)
    if not history:
        print(f"no saved run in {args.storage} on this hardware holds a perfsuite benchmark"
              + (" matching the filters" if args.since or args.keyword else ""))
        return EXIT_OK
    print("\n".join(summary_table(history).terminal()))
    for series in history:
        if not series.searched:
            print(f"{series.benchmark_id}: {series.too_short()}")
        for change in series.changes:
            print(f"{series.benchmark_id}: {change.shift:+.1%} [{change.shift_low:+.1%}, {change.shift_high:+.1%}] "
                  f"between {change.commits()}")
    print(f"history: {write_history(history, args.out, storage=args.storage)}")
    return EXIT_OK


def _add_diagnose(commands) -> None:
    from perfsuite.measure.emulated import DEFAULT_STEP_PRESET  # no TensorFlow
    from perfsuite.verdict.diagnosis_figures import DEFAULT_BUDGET_S  # no TensorFlow: records and constants

    diagnose = commands.add_parser(
        "diagnose", help="measure a pipeline (yours, or perfsuite's loaders over a dataset) and its step within a "
                         "time budget; what to change first, verdicts with evidence and intervals",
        description="Measures a tf.data pipeline as it is in stages (throughput, input-bound share, bottleneck, "
                    "capacity, fixes and alternatives ranked by measured gain, feed rate), each until its figures "
                    "are decided or its share of --budget is spent, and inspects its graph. With --pipeline: your "
                    "own dataset factory (and --step). On a dataset PATH: check-data first, then perfsuite's "
                    "TF-native loader and its training step (--model; 'default' is a realistic step, 'tiny' "
                    "quicker), the other loaders and step modes measured as alternatives, and a sweep of workers "
                    "and batch size.")
    diagnose.add_argument("path", type=Path, metavar="PATH", nargs="?",
                          help="dataset directory (metadata.csv, wavs/); or give --pipeline instead")
    diagnose.add_argument("--budget", type=seconds, default=DEFAULT_BUDGET_S, metavar="SECONDS",
                          help="time for the whole run, check-data included, split across the stages "
                               "(default: %(default).0f)")
    diagnose.add_argument("--pipeline", metavar="MODULE:FUNCTION",
                          help="your dataset factory (MODULE: a module name or a .py file); it must return a "
                               "tf.data.Dataset")
    diagnose.add_argument("--step", metavar="MODULE:FUNCTION",
                          help="with --pipeline: your training step, step(batch) returning a tensor such as the "
                               "loss, or a zero-argument factory returning it (told apart by signature); "
                               "without it only throughput is measured")
    diagnose.add_argument("--arg", type=_key_value, action="append", metavar="KEY=VALUE",
                          help="with --pipeline: a keyword argument for the factory, passed as a string; repeatable")
    diagnose.add_argument("--batch-spec", type=batch_spec, metavar="mel=PATH[,mel_len=PATH]",
                          help="with --pipeline: which batch component is the audio/mel and which its lengths, by "
                               "tuple index or dict key joined by '/' (e.g. mel=1,mel_len=3 or mel=features/mel); "
                               "default: the largest float tensor with a time axis and the length tensor beside it")
    diagnose.add_argument("--frame-hop-s", type=frame_hop, metavar="SECONDS|HOP/RATE",
                          help="with --pipeline: seconds of audio per frame of the audio component, e.g. 0.0125 or "
                               "256/22050 (default: perfsuite's mel definition, hop 256 at 22050 Hz)")
    diagnose.add_argument("--batch-size", type=integer(1), metavar="N", help="batch size (default: 16)")
    diagnose.add_argument("--workers", type=integer(1, autotune=True), metavar="N",
                          help="parallel map calls, -1 for AUTOTUNE (default: 2)")
    diagnose.add_argument("--cache", type=Path, metavar="DIR",
                          help="the .npy cache (default: PATH/cache/mel-<key>, else one built in a temporary dir)")
    diagnose.add_argument("--json", type=Path, metavar="FILE",
                          help="write every figure as JSON to FILE, after every stage (complete: false until the end)")
    diagnose.add_argument("--report", type=Path, metavar="DIR",
                          help="write PNG plots and summary.md to DIR (needs matplotlib: extra 'report')")
    diagnose.add_argument("--trace", type=Path, metavar="DIR", help="write a TensorBoard profiler trace of the step to DIR "
                          "(with a PATH or --step)")
    diagnose.add_argument("--model", choices=("tiny", "default"),
                          help="perfsuite.workload.model preset for the step (default: default)")
    diagnose.add_argument("--step-time", type=_step_time, metavar="SECONDS|PRESET",
                          help="the GPU step to judge each pipeline against on an emulated accelerator: seconds, or "
                               f"a preset of published GPU step times (default: {DEFAULT_STEP_PRESET}; "
                               "docs/emulated.md lists them)")
    diagnose.add_argument("--cores", type=integer(1), metavar="K",
                          help="the cores of the machine you train on; the capacity model gives the "
                               "pipeline's ceiling and the parallel calls per stage there (default: none, this "
                               "machine's only)")
    diagnose.add_argument("--batches", type=integer(1), metavar="N",
                          help="steady batches per loader and sweep round (default: 16)")
    diagnose.set_defaults(run=_diagnose)


DATASET_OPTIONS = ("batch_size", "workers", "model", "batches", "cache")  # the preset's: its loaders and step


def _step_time(text: str) -> str:
    """An argparse type: a step time perfsuite.measure.emulated.parse_step_time accepts, kept as given."""
    from perfsuite.measure.emulated import parse_step_time  # no TensorFlow

    try:
        parse_step_time(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _key_value(text: str) -> tuple[str, str]:
    """An argparse type: KEY=VALUE, KEY a Python identifier (a keyword argument)."""
    key, equals, value = text.partition("=")
    if not equals or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY a Python identifier, found {text!r}")
    return key, value


def _diagnose(args, parser) -> int:
    """`diagnose PATH` (the dataset preset) or `diagnose --pipeline` (the user's own factory and step): one run,
    one record, one printer."""
    if args.pipeline is None:
        for name in ("step", "arg", "batch_spec", "frame_hop_s"):
            if getattr(args, name):
                parser.error(f"--{name.replace('_', '-')}: expected with --pipeline MODULE:FUNCTION, found no "
                             "--pipeline (a dataset PATH's loaders set their own)")
    if args.path is None and args.pipeline is None:
        parser.error("PATH: expected a dataset directory (or --pipeline MODULE:FUNCTION), found neither")
    if args.path is not None and args.pipeline is not None:
        parser.error(f"PATH: expected either a dataset directory or --pipeline, found both ({args.path} and "
                     f"{args.pipeline})")
    if args.path is not None:
        if not args.path.is_dir():
            parser.error(f"PATH: expected a dataset directory, found {_describe(args.path)}")
    else:
        for name in DATASET_OPTIONS:
            if getattr(args, name) is not None:
                parser.error(f"--{name.replace('_', '-')}: applies to a dataset PATH, not to --pipeline (the pipeline "
                             "sets its own)")
        if args.trace is not None and args.step is None:
            parser.error("--trace: expected with --step MODULE:FUNCTION (a trace follows the step), found none")
        keys = [key for key, _ in args.arg or []]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            parser.error(f"--arg: expected each KEY once, found {', '.join(repeated)} more than once")
    if args.cache is not None and not args.cache.is_dir():
        parser.error(f"--cache: expected a cache directory, found {_describe(args.cache)}")
    _check_outputs(args, parser)
    from perfsuite.measure.batch_spec import BatchSpec
    from perfsuite.tools.diagnose.preset import preset_target
    from perfsuite.tools.diagnose.quiet import log_path_for, user_output_to
    from perfsuite.tools.diagnose.run import diagnose  # TensorFlow: only once diagnose() runs
    from perfsuite.verdict.diagnosis_figures import DiagnoseSettings, Target

    settings = DiagnoseSettings(budget_s=args.budget, batch_spec=BatchSpec(**(args.batch_spec or {})), **_given(
        step_time=args.step_time, frame_s=args.frame_hop_s, cores=args.cores, batch_size=args.batch_size,
        workers=args.workers, model=args.model, batches=args.batches))
    target = (preset_target(args.path, settings) if args.path is not None else
              Target(pipeline=args.pipeline, step=args.step, args=dict(args.arg or [])))
    log = log_path_for(args.json)
    print(f"perfsuite diagnose: the pipeline's own output and TensorFlow's warnings go to {log}", file=sys.stderr,
          flush=True)
    with _interruptible(args.json), user_output_to(log) as terminal:
        diagnosis = diagnose(target=target, settings=settings, cache_dir=args.cache, trace_dir=args.trace,
                             progress=lambda event: print(progress_line(event), file=terminal, flush=True),
                             checkpoint=_json_checkpoint(args.json))
    _print_outcome(diagnosis, log)
    if args.json is not None:
        print(f"json: {args.json}")
    if args.report is not None:
        from perfsuite.tools.report import write_report

        print(f"report: {write_report(diagnosis, args.report)}")
    return EXIT_PROBLEMS if diagnosis.data is not None and diagnosis.data.problems else EXIT_OK


def _given(**options) -> dict:
    """The options the user gave (not None): the settings' defaults stand for the rest."""
    return {name: value for name, value in options.items() if value is not None}


def _check_outputs(args, parser) -> None:
    """--report, --trace and --json are usable before minutes of measuring, not after."""
    check_outputs(parser, json_file=args.json,
                  directories={"--report": args.report, "--trace": getattr(args, "trace", None)})


def _print_outcome(diagnosis, log: Path) -> None:
    """A diagnosis' outcome: the data's problems (the preset's), what to change first (the changes measured on the
    pipeline, ranked by gain), the pipeline, the other findings, the stages and the time spent."""
    from perfsuite.verdict.capacity import change_first_lines
    from perfsuite.verdict.diagnosis import CHANGE_FIRST, change_first_words, ranked_changes

    if (data := diagnosis.data) is not None:
        for problem in data.problems:
            print(f"{problem.path}: {problem.reason}")
        print(f"checked {data.checked} utterance(s): {data.skipped} unreadable file(s) skipped, measured on "
              f"{data.usable}")
    changes, rest = ranked_changes(list(diagnosis.verdicts))
    print(f"{CHANGE_FIRST}: {change_first_words(changes)}")
    for rank, change in enumerate(changes, 1):
        first, *more = change.lines()
        print("\n".join([f"{rank}. {first}", *more]))
    for line in change_first_lines(diagnosis.capacity):
        print(line)
    print(f"pipeline {diagnosis.target.pipeline}: {' -> '.join(diagnosis.graph.transformations)}")
    print(f"log: {log} (the pipeline's and the step's own output, TensorFlow's warnings)")
    print("the other findings:")
    for verdict in rest:
        print("\n".join(verdict.lines()))
    stages = ", ".join(f"{s.name} {s.status} ({s.rounds} rounds, {s.spent_s:.0f} of {s.share_s:.0f} s)"
                       for s in diagnosis.stages)
    print(f"stages: {stages}; {diagnosis.elapsed_s:.0f} s of the {diagnosis.settings.budget_s:.0f} s budget")


def _json_checkpoint(path: Path | None):
    """checkpoint(diagnosis) for diagnose(): the JSON rewritten (atomically) after every stage."""
    if path is None:
        return None
    from perfsuite.records import versioned

    return lambda diagnosis: _write_json(path, versioned(diagnosis))


def progress_line(event) -> str:
    """One stderr line of a diagnose progress Event: the stage, what happens, its share and the time left."""
    if event.share_s is None:
        return f"perfsuite diagnose [{event.stage}] {event.message} ({event.left_s:.0f} s of the budget left)"
    return (f"perfsuite diagnose [{event.stage}] {event.message} | {event.spent_s:.0f}/{event.share_s:.0f} s of its "
            f"share, {max(event.left_s, 0):.0f} s of the budget left")


def _print_progress(event) -> None:
    print(progress_line(event), file=sys.stderr, flush=True)


@contextlib.contextmanager
def _interruptible(json_path: Path | None):
    """SIGTERM (what `timeout` sends) interrupts like Ctrl-C, so the interrupted stage is checkpointed;
    an interrupt says where the figures measured so far are."""
    previous = signal.getsignal(signal.SIGTERM)

    def terminate(signum, frame):
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread: keep the default
        previous = None
    try:
        yield
    except KeyboardInterrupt:
        if json_path is not None and json_path.exists():
            print(f"perfsuite diagnose: interrupted; the figures measured so far are in {json_path} "
                  "(complete: false)", file=sys.stderr)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _write_json(path: Path, data: dict) -> None:
    """data as JSON at path, atomically (files.write_atomic): a reader never sees half a file and an
    interrupted write leaves the previous one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1, allow_nan=False))


def _check_data(args, parser) -> int:
    if not args.path.is_dir():
        parser.error(f"PATH: expected a dataset directory, found {_describe(args.path)}")
    if args.cache is not None and not args.cache.is_dir():
        parser.error(f"--cache: expected a cache directory, found {_describe(args.cache)}")
    from perfsuite.data.loaders import check_dataset  # imports TensorFlow: only once the arguments are good

    report = check_dataset(args.path, cache_dir=args.cache, mel_config=args.mel_config)
    for problem in report.problems:
        print(f"{problem.path}: {problem.reason}")
    print(report.summary())
    return EXIT_PROBLEMS if report.problems else EXIT_OK


def _add_machine(commands) -> None:
    machine = commands.add_parser(
        "machine", help="print this machine's fingerprint and which baseline profiles match it",
        description="Prints the fingerprint baseline profiles are matched on (one key: value per line), then "
                    "for each profile in the baselines directory whether it matches, or which keys differ.")
    machine.add_argument("--baselines", type=Path, metavar="DIR",
                         help="baselines directory (default: benchmarks/baselines, where present)")
    machine.set_defaults(run=_machine)


def _machine(args, parser) -> int:
    """Exit 0 whether or not a profile matches (a new machine is not a fault); 2 for a malformed
    profile or several matching ones, which would stop a benchmark run."""
    if args.baselines is not None and not args.baselines.is_dir():
        parser.error(f"--baselines: expected a baselines directory, found {_describe(args.baselines)}")
    from perfsuite.errors import BaselineError
    from perfsuite.measure.machine import HARDWARE_KEYS, default_profile_name, machine_fingerprint
    from perfsuite.verdict.baselines import match_profiles, record_command, the_match

    fingerprint = machine_fingerprint()
    values = fingerprint.as_dict()
    for key, value in values.items():
        print(f"{key}: {_plain(value)}")
    print(f"(not compared: {', '.join(key for key in values if key not in HARDWARE_KEYS)})")
    print(f"profile name: {default_profile_name(fingerprint)}")
    directory = args.baselines or Path("benchmarks") / "baselines"
    if not directory.is_dir():
        print(f"no baselines directory at {directory}: run from the repository root, or pass --baselines DIR")
        return EXIT_OK
    try:
        candidates = match_profiles(directory, fingerprint=fingerprint)
        for candidate in candidates:
            print(f"{candidate.path}: {candidate.describe()}")
        the_match(directory, candidates)
    except BaselineError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not any(candidate.matched for candidate in candidates):
        print(f"no profile in {directory} matches this machine; to record one: {record_command(directory)}")
    return EXIT_OK


def _add_ab(commands) -> None:
    """``perfsuite ab``: its options and its run live in perfsuite.tools.ab (exit codes in its docstring)."""
    from perfsuite.tools import ab

    parser = commands.add_parser(
        "ab", help="compare two git revisions' benchmarks on this machine, interleaved round by round",
        description=ab.__doc__.split("\n\n")[1].replace("\n", " "))
    ab.add_arguments(parser)
    parser.set_defaults(run=ab.run)


def _add_selftest(commands) -> None:
    """``perfsuite selftest``: its options and its run live in perfsuite.tools.detection.command."""
    from perfsuite.tools.detection import command

    parser = commands.add_parser(
        "selftest", help="what a green run rules out on this machine: planted slowdowns of 0-40 %% through the "
                         "same-run gates, the comparison with saved runs and perfsuite ab",
        description="Plants exact slowdowns (more of the loader's own work, in whole utterances) of 0, 5, 10, 20 "
                    "and 40 %, checks each plant's measured cost against its share, and measures per path the "
                    "share of trials flagged with its interval and the smallest slowdown caught >= 95 % of the "
                    "time. docs/selftest.md says how to read it.")
    command.add_arguments(parser)
    parser.set_defaults(run=command.run)


def _plain(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(value) if value else "(none)"
    return str(value)


def _describe(path: Path) -> str:
    if not path.exists():
        return "nothing at that path"
    return "a file" if path.is_file() else "something that is not a directory"


if __name__ == "__main__":
    sys.exit(main())
