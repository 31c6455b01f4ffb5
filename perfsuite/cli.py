"""The ``perfsuite`` command line.

Exit codes: 0 all good; 1 problems found in the data (each listed; ``diagnose`` still measures the
readable rest, or measures nothing when no file is readable); 2 usage error; 130 interrupted (Ctrl-C).
``main`` returns the code (also for usage errors) rather than exiting. Errors are printed as one
line naming the file, never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        return args.run(args, parser)
    except SystemExit as exit:  # argparse's way out: --help (0) or a usage error (2), message printed
        return exit.code if isinstance(exit.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        print("perfsuite: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfsuite", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser(
        "check-data", help="list every file of an LJSpeech-layout dataset the TF-native loaders cannot read"
    )
    check.add_argument("path", type=Path, metavar="PATH", help="dataset directory (metadata.csv, wavs/)")
    check.add_argument("--cache", type=Path, metavar="DIR",
                       help="cache directory to check too (default: PATH/cache/mel-<key> when present)")
    check.add_argument("--sample-rate", type=int, default=22050, metavar="HZ",
                       help="sample rate the loaders expect (default: %(default)s)")
    check.set_defaults(run=_check_data)
    _add_diagnose(commands)
    return parser


def _add_diagnose(commands) -> None:
    diagnose = commands.add_parser(
        "diagnose", help="measure loaders, training step and input-bound share on a dataset; verdicts with evidence",
        description="Runs check-data, then measures on the readable files. The default model is 'default' (a "
                    "realistic step, so the input-bound share means something); --model tiny is quicker.")
    diagnose.add_argument("path", type=Path, metavar="PATH", help="dataset directory (metadata.csv, wavs/)")
    diagnose.add_argument("--batch-size", type=int, default=16, metavar="N", help="batch size (default: %(default)s)")
    diagnose.add_argument("--workers", type=int, default=2, metavar="N",
                          help="parallel map calls, -1 for AUTOTUNE (default: %(default)s)")
    diagnose.add_argument("--cache", type=Path, metavar="DIR",
                          help="the .npy cache (default: PATH/cache/mel-<key>, else one built in a temporary dir)")
    diagnose.add_argument("--json", type=Path, metavar="FILE", help="write every figure as JSON to FILE")
    diagnose.add_argument("--report", type=Path, metavar="DIR",
                          help="write PNG plots and summary.md to DIR (needs matplotlib: extra 'report')")
    diagnose.add_argument("--trace", type=Path, metavar="DIR", help="write a TensorBoard profiler trace to DIR")
    diagnose.add_argument("--model", choices=("tiny", "default"), default="default",
                          help="perfsuite.model preset for the step (default: %(default)s)")
    diagnose.add_argument("--batches", type=int, default=16, metavar="N",
                          help="steady batches per measurement round (default: %(default)s)")
    diagnose.add_argument("--rounds", type=int, default=3, metavar="N",
                          help="interleaved rounds per comparison: loader pairs, and the workers / batch-size "
                               "sweep, whose recommendation needs >= 2 (default: %(default)s)")
    diagnose.set_defaults(run=_diagnose)


def _diagnose(args, parser) -> int:
    if not args.path.is_dir():
        parser.error(f"PATH: expected a dataset directory, found {_describe(args.path)}")
    if args.cache is not None and not args.cache.is_dir():
        parser.error(f"--cache: expected a cache directory, found {_describe(args.cache)}")
    for option, directory in (("--report", args.report), ("--trace", args.trace)):
        if directory is not None and directory.exists() and not directory.is_dir():
            parser.error(f"{option}: expected a directory (or a path to create one), found a file")
    if args.json is not None and args.json.is_dir():
        parser.error("--json: expected a file path, found a directory")
    if args.report is not None:  # before minutes of measuring, not after
        from perfsuite.report import ReportUnavailable, require_matplotlib

        try:
            require_matplotlib("--report")
        except ReportUnavailable as error:
            parser.error(str(error))
    from perfsuite.diagnose import DiagnoseSettings

    try:
        settings = DiagnoseSettings(batch_size=args.batch_size, workers=args.workers, model=args.model,
                                    batches=args.batches, rounds=args.rounds)
    except ValueError as error:
        parser.error(f"--{str(error).replace('_', '-', 1)}")  # "batch_size: ..." names --batch-size
    from perfsuite.diagnose import diagnose  # imports TensorFlow: only once the arguments are good
    from perfsuite.wav import DataError

    import time

    stage, start = [0], time.monotonic()

    def progress(message: str) -> None:
        stage[0] += 1
        elapsed = time.monotonic() - start
        print(f"perfsuite diagnose [{stage[0]}] {message} (at {elapsed:.0f} s)", file=sys.stderr, flush=True)

    try:
        result = diagnose(dataset_dir=args.path, settings=settings, cache_dir=args.cache, trace_dir=args.trace,
                          progress=progress)
    except DataError as error:  # no metadata.csv, or nothing readable
        print(f"error: {error}", file=sys.stderr)
        return EXIT_PROBLEMS
    for problem in result["data"]["problems"]:
        print(f"{problem['path']}: {problem['reason']}")
    print(f"checked {result['data']['checked']} utterance(s): {result['data']['skipped']} unreadable file(s) "
          f"skipped, measured on {result['data']['usable']}")
    from perfsuite.diagnose import Verdict

    for verdict in result["verdicts"]:
        print("\n".join(Verdict(**verdict).lines()))
    if args.json is not None:
        import json

        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, allow_nan=False), encoding="utf-8")
    if args.report is not None:
        from perfsuite.report import write_report

        print(f"report: {write_report(result, args.report)}")
    return EXIT_PROBLEMS if result["data"]["problems"] else EXIT_OK


def _check_data(args, parser) -> int:
    if not args.path.is_dir():
        parser.error(f"PATH: expected a dataset directory, found {_describe(args.path)}")
    if args.cache is not None and not args.cache.is_dir():
        parser.error(f"--cache: expected a cache directory, found {_describe(args.cache)}")
    from perfsuite.audio import MelConfig

    try:
        mel_config = MelConfig(sample_rate=args.sample_rate)
    except ValueError as error:
        parser.error(f"--sample-rate: {error}")
    from perfsuite.loaders import check_dataset  # imports TensorFlow: only once the arguments are good
    from perfsuite.wav import DataError

    try:
        report = check_dataset(args.path, cache_dir=args.cache, mel_config=mel_config)
    except DataError as error:  # the dataset as a whole is unusable (e.g. no metadata.csv)
        print(f"error: {error}", file=sys.stderr)
        return EXIT_PROBLEMS
    for problem in report.problems:
        print(f"{problem.path}: {problem.reason}")
    print(report.summary())
    return EXIT_PROBLEMS if report.problems else EXIT_OK


def _describe(path: Path) -> str:
    if not path.exists():
        return "nothing at that path"
    return "a file" if path.is_file() else "something that is not a directory"


if __name__ == "__main__":
    sys.exit(main())
