"""pytest plugin: perfsuite options, markers, fixtures, verdicts and the terminal summary.

A benchmark asks for the ``perfsuite`` fixture (perfsuite.pytest_plugin.recorder.Recorder), measures
through it and is judged when its body has run: against the same-run gates and the profile matching
this hardware in the baselines directory. With ``--benchmark-compare`` each benchmark's samples/s is
also judged against its earlier saved runs on this hardware, all benchmarks together (Holm), at the
end of the session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.options import fraction, integer, named
from perfsuite.pytest_plugin.profiles import PROFILES, RunProfile

GATE_MODES = ("enforce", "report")
COMPARE_MODES = ("fail", "report")
SUMMARY_KEY = pytest.StashKey[list]()
CONTEXT_KEY = pytest.StashKey[object]()
DECISIONS_KEY = pytest.StashKey[list]()
RECORDER_KEY = pytest.StashKey[object]()
REPORT_PROPERTY = "perfsuite_report_record"  # a user property, so that records travel back from xdist workers


def pytest_addhooks(pluginmanager):
    from perfsuite.pytest_plugin import hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser):
    group = parser.getgroup("perfsuite", "perfsuite: input-pipeline and training-step benchmarks")
    group.addoption("--perfsuite-profile", choices=sorted(PROFILES), default="quick", metavar="NAME",
                    help="run profile: smoke (CI: do they run), quick (≤ 10 min on 2 cores), full (nightly). "
                         "Default: quick")
    group.addoption("--perfsuite-baselines", type=Path, default=None, metavar="DIR",
                    help="baselines directory (machine profiles + ratios.yaml). Default: benchmarks/baselines")
    group.addoption("--perfsuite-gates", choices=GATE_MODES, default="enforce", metavar="MODE",
                    help="enforce: a failed threshold fails the test; report: print verdicts only "
                         "(for smoke runs on noisy machines). Default: enforce")
    group.addoption("--perfsuite-save-baselines", action="store_true", default=False,
                    help="record this run's figures as this machine's thresholds (with the margin)")
    group.addoption("--perfsuite-baseline-margin", type=named("--perfsuite-baseline-margin", fraction), default=0.3,
                    metavar="FRACTION", help="margin between a recorded figure and its threshold. Default: 0.3")
    group.addoption("--perfsuite-baseline-profile", default=None, metavar="NAME",
                    help="profile name to record under. Default: derived from the hardware "
                         "(e.g. cpu-amd-fam26-model2-2core)")
    group.addoption("--perfsuite-compare", choices=COMPARE_MODES, default="fail", metavar="MODE",
                    help="with --benchmark-compare, each benchmark's samples/s is judged against its earlier "
                         "runs on this hardware: fail (a significant slowdown fails the run) or report. "
                         "Default: fail")
    group.addoption("--perfsuite-compare-runs", type=named("--perfsuite-compare-runs", integer(1)), default=10, metavar="N",
                    help="how many of the newest earlier runs on this hardware form the history. Default: 10")
    group.addoption("--perfsuite-compare-alpha", type=named("--perfsuite-compare-alpha", fraction), default=0.01,
                    metavar="P", help="family-wise significance level over all benchmarks compared (Holm). "
                                      "Default: 0.01")
    group.addoption("--perfsuite-compare-min-effect", type=named("--perfsuite-compare-min-effect", fraction),
                    default=0.10, metavar="FRACTION",
                    help="smallest slowdown that counts as a regression. Default: 0.10")
    group.addoption("--perfsuite-data-dir", type=Path, default=None, metavar="DIR",
                    help="where synthetic corpora are built and reused. Default: $PERFSUITE_DATA_DIR "
                         "or ~/.cache/perfsuite")
    group.addoption("--perfsuite-report", type=Path, default=None, metavar="DIR",
                    help="write a Markdown summary and PNG plots (per-batch times with any detected period "
                         "marked, the ratios) of the benchmarks that ran to DIR; needs matplotlib (extra "
                         "'report'). Default: none")
    group.addoption("--perfsuite-ab", default=None, metavar="BASE",
                    help="instead of this run: git revision BASE against the working tree, side by side on this "
                         "machine, round by round (`perfsuite ab BASE` with this run's path, -k, -m, profile and "
                         "data dir; docs/ab.md). Exit 1 on a significant slowdown")
    group.addoption("--perfsuite-ab-passes", type=named("--perfsuite-ab-passes", integer(1)), default=None, metavar="N",
                    help="with --perfsuite-ab: passes of fresh workers (`perfsuite ab --passes`; default: ab's, 8)")


MARKERS = {
    "gpu": "needs an NVIDIA GPU and NVML; skipped with a reason naming what is missing elsewhere",
    "service": "starts a tf.data service cluster (dispatcher and worker processes)",
    "selftest": "the regression detector's own tests; run in the full profile or with -m selftest",
    "slow": "minutes long; runs in the full profile or when selected with -m slow",
    "not_in_ab": "not_in_ab(reason): a same-run figure `perfsuite ab` cannot compare across revisions; ab "
                 "leaves it out (it says so, with the reason) rather than paying for its set-up",
}


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """--perfsuite-ab BASE hands the run to `perfsuite ab` (a process of its own: the command sits above
    this plugin, and it starts its own pytest on each side); its exit status is the run's."""
    base = config.getoption("perfsuite_ab")
    if base is None:
        return None
    return subprocess.call(ab_command(config, base))


def ab_command(config, base: str) -> list[str]:
    """The `perfsuite ab` command line for this pytest invocation: its one benchmark path, if given (else
    ab's default, benchmarks/), within its git repository; -k, -m, profile, data dir and passes."""
    given = config.args if config.args_source == pytest.Config.ArgsSource.ARGS else []
    if len(given) > 1:
        raise pytest.UsageError(f"--perfsuite-ab: expected one benchmark path, found {len(given)}: {', '.join(given)}")
    path = Path(given[0].split("::")[0]).resolve() if given else config.invocation_params.dir
    where = path if path.is_dir() else path.parent
    found = subprocess.run(["git", "-C", str(where), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                           check=False)
    if found.returncode != 0:
        raise pytest.UsageError(f"--perfsuite-ab: expected the benchmarks inside a git repository, found {where} "
                                f"outside one ({found.stderr.strip()})")
    repo = Path(found.stdout.strip()).resolve()
    command = [sys.executable, "-m", "perfsuite", "ab", base, "--repo", str(repo),
               "--profile", config.getoption("perfsuite_profile")]
    if given:
        command += ["--benchmarks", str(path.relative_to(repo))]
    for flag, value in (("-k", config.option.keyword), ("-m", config.option.markexpr),
                        ("--data-dir", config.getoption("perfsuite_data_dir")),
                        ("--passes", config.getoption("perfsuite_ab_passes"))):
        if value:
            command += [flag, str(value)]
    return command


def pytest_configure(config):
    from perfsuite.pytest_plugin.benchmark_adapter import compatibility_problems, table_defaults

    problems = compatibility_problems()
    if problems:
        raise pytest.UsageError("perfsuite needs pytest-benchmark features this release lacks: " + "; ".join(problems))
    table_defaults(config)  # before pytest-benchmark's own pytest_configure (trylast) reads its options
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    config.stash[SUMMARY_KEY] = []
    directory = config.getoption("perfsuite_report")
    if directory is not None:
        from perfsuite.errors import ReportUnavailable
        from perfsuite.plotting import require_matplotlib

        try:
            require_matplotlib("--perfsuite-report")
        except ReportUnavailable as error:
            raise pytest.UsageError(str(error)) from None
        if directory.exists() and not directory.is_dir():
            raise pytest.UsageError(f"--perfsuite-report: expected a directory (or a path to create one), "
                                    f"found a file: {directory}")
        config.pluginmanager.register(ReportWriter(directory, is_worker=hasattr(config, "workerinput")),
                                      "perfsuite-report-writer")


def pytest_collection_modifyitems(config, items):
    """slow and selftest benchmarks run in the full profile, or when -m names their marker: the self-test
    checks the detector, not the code under test, and needs minutes of rounds. Unit tests always run."""
    profile = config.getoption("perfsuite_profile")
    selected = config.getoption("markexpr") or ""
    for marker in ("slow", "selftest"):
        if profile == "full" or marker in selected:
            continue
        skip = pytest.mark.skip(reason=f"{marker}: runs in the full profile or with -m {marker} (this run: {profile})")
        for item in items:
            if marker in item.keywords and _is_benchmark(item):
                item.add_marker(skip)


def _is_benchmark(item) -> bool:
    """A benchmark lives under a benchmarks/ directory; a unit test of the same marker (tests/) is not one."""
    return "benchmarks" in item.path.parts


def _context(config):
    if CONTEXT_KEY not in config.stash:
        from perfsuite.measure.machine import default_profile_name, machine_fingerprint
        from perfsuite.pytest_plugin.recorder import SessionContext
        from perfsuite.verdict import baselines

        directory = config.getoption("perfsuite_baselines") or Path(config.rootpath) / "benchmarks" / "baselines"
        fingerprint = machine_fingerprint()
        config.stash[CONTEXT_KEY] = SessionContext(
            profile=PROFILES[config.getoption("perfsuite_profile")],
            baselines_dir=directory,
            baselines=baselines.load_baselines(directory, fingerprint=fingerprint),
            gates=config.getoption("perfsuite_gates"),
            save_baselines=config.getoption("perfsuite_save_baselines"),
            margin=config.getoption("perfsuite_baseline_margin"),
            baseline_profile=config.getoption("perfsuite_baseline_profile") or default_profile_name(fingerprint),
            history=_history(config, fingerprint),
            compare_alpha=config.getoption("perfsuite_compare_alpha"),
            compare_min_effect=config.getoption("perfsuite_compare_min_effect"),
            compare_mode=config.getoption("perfsuite_compare"),
            round_driver=config.hook.pytest_perfsuite_round_driver(config=config),
        )
    return config.stash[CONTEXT_KEY]


def _history(config, fingerprint) -> dict[str, list[float]]:
    """Per benchmark id, the samples/s of the newest --perfsuite-compare-runs saved runs recorded on
    this hardware (by the fingerprint each saved run carries), oldest first; empty without
    --benchmark-compare. Runs on other hardware are never compared: their figures mean nothing here."""
    from perfsuite.pytest_plugin import benchmark_adapter
    from perfsuite.pytest_plugin.recorder import benchmark_id

    if not benchmark_adapter.compare_requested(config):
        return {}
    runs = benchmark_adapter.on_hardware(benchmark_adapter.saved_runs(config), fingerprint)
    history: dict[str, list[float]] = {}
    for run in runs[-config.getoption("perfsuite_compare_runs"):]:
        for bench in run.get("benchmarks", []):
            info = bench.get("extra_info") or {}
            figure = info.get("samples_per_s")
            if info.get("perfsuite_profile") and isinstance(figure, int | float) and figure > 0:
                history.setdefault(benchmark_id(info["perfsuite_profile"], bench["fullname"]), []).append(figure)
    return history


def pytest_benchmark_update_machine_info(config, machine_info):
    """Saved runs carry this machine's fingerprint, so later runs compare only with the same hardware."""
    from perfsuite.pytest_plugin.benchmark_adapter import FINGERPRINT_INFO

    machine_info[FINGERPRINT_INFO] = _context(config).baselines.fingerprint.as_dict()


@pytest.fixture(scope="session")
def perfsuite_profile(pytestconfig) -> RunProfile:
    return PROFILES[pytestconfig.getoption("perfsuite_profile")]


@pytest.fixture(scope="session")
def perfsuite_corpus(pytestconfig, perfsuite_profile) -> Path:
    """The synthetic LJSpeech-layout corpus of the run profile (built once, reused across runs)."""
    from perfsuite.data.corpus import PRESETS, build_corpus

    return build_corpus(PRESETS[perfsuite_profile.corpus], root=pytestconfig.getoption("perfsuite_data_dir"))


@pytest.fixture(scope="session")
def perfsuite_cache(perfsuite_corpus) -> Path:
    """The precomputed `.npy` cache of the profile's corpus."""
    from perfsuite.data.corpus import build_cache

    return build_cache(perfsuite_corpus)


@pytest.fixture
def perfsuite(request, benchmark):
    """Measures through pytest-benchmark and judges the figures when the test body has run. A malformed
    baselines directory stops the run with its one-line message (file, key, problem)."""
    from perfsuite.errors import PerfsuiteError
    from perfsuite.pytest_plugin import benchmark_adapter
    from perfsuite.pytest_plugin.recorder import Recorder
    from perfsuite.pytest_plugin.summary import group_of

    try:
        context = _context(request.config)
    except PerfsuiteError as error:
        pytest.exit(f"perfsuite: {error}", returncode=pytest.ExitCode.USAGE_ERROR)
    benchmark_adapter.default_group(benchmark, group_of(request.node.nodeid))
    recorder = Recorder(benchmark=benchmark, context=context, nodeid=request.node.nodeid)
    request.node.stash[RECORDER_KEY] = recorder
    return recorder



@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield  # a body that raised is reported as it is; its figures are not judged
    recorder = item.stash.get(RECORDER_KEY, None)
    if recorder is not None:
        outcome = recorder.judge()
        item.config.stash[SUMMARY_KEY].append(outcome)
        if item.config.getoption("perfsuite_report") is not None:
            item.user_properties.append((REPORT_PROPERTY, recorder.report_record(outcome.check)))
        outcome.raise_for_failures()
    return result


class ReportWriter:
    """--perfsuite-report: collects each benchmark's record from its test report (a user property, so
    that records travel back from xdist workers to the controller), writes the report at the end of
    the session and names it in the terminal summary."""

    def __init__(self, directory: Path, *, is_worker: bool):
        self.directory = directory
        self.is_worker = is_worker
        self.records: list = []  # report.BenchmarkRecord
        self.written: Path | None = None

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == REPORT_PROPERTY:
                from perfsuite.pytest_plugin.report import BenchmarkRecord

                self.records.append(BenchmarkRecord.from_dict({**value, "outcome": report.outcome}))

    def pytest_sessionfinish(self):
        if self.is_worker or not self.records:  # an xdist worker: the controller writes the report
            return
        from perfsuite.pytest_plugin.report import write_benchmark_report

        self.written = write_benchmark_report(self.records, self.directory)

    def pytest_terminal_summary(self, terminalreporter):
        if self.is_worker:
            return
        if self.written is not None:
            terminalreporter.write_line(f"perfsuite report ({len(self.records)} benchmark(s)): {self.written}")
        else:
            terminalreporter.write_line("perfsuite report: no benchmark measured through the perfsuite fixture "
                                        "ran; nothing written")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """The comparison with earlier runs, decided for every benchmark together (Holm); with
    --perfsuite-compare=fail a significant slowdown beyond the minimum effect fails the run."""
    from perfsuite.verdict.comparison import decide_history

    outcomes = [o for o in session.config.stash.get(SUMMARY_KEY, []) if o.comparison is not None]
    if not outcomes:
        return
    context = _context(session.config)
    decisions = decide_history([o.comparison for o in outcomes], alpha=context.compare_alpha)
    session.config.stash[DECISIONS_KEY] = list(zip(outcomes, decisions))
    if context.compare_mode == "fail" and any(d.significant_slowdown for d in decisions):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _work_sections(terminalreporter, config, outcomes) -> list:
    """The work fingerprints' verdicts beside the timed ones (benchmarks/test_work.py); printed here
    alone when no benchmark measured through the perfsuite fixture ran."""
    from perfsuite.pytest_plugin import summary

    sections = summary.work_section(config.stash.get(summary.WORK_KEY, []), outcomes)
    if sections and not outcomes:
        terminalreporter.section("perfsuite (work fingerprints)")
        versions = summary.work_versions(config)
        for line in ([f"note: {versions}"] if versions else []) + summary.terminal(sections):
            terminalreporter.write_line(line)
    return sections


def pytest_terminal_summary(terminalreporter, config):
    outcomes = config.stash.get(SUMMARY_KEY, [])
    work = _work_sections(terminalreporter, config, outcomes)
    if not outcomes:
        return
    from perfsuite.pytest_plugin import benchmark_adapter, summary
    from perfsuite.verdict.gates import gates_not_measured

    context = _context(config)
    decisions = config.stash.get(DECISIONS_KEY, [])
    sections = summary.sections(outcomes, decisions, alpha=context.compare_alpha) + work
    versions = summary.work_versions(config)
    notes = [*([versions] if versions else []), summary.INTERVAL_NOTE, *context.baselines.notes]
    if not any(o.check.verdicts for o in outcomes):
        notes.append("no benchmark of this run has a threshold (benchmarks/baselines: ratios.yaml and machine "
                     "profiles)")
    if benchmark_adapter.compare_requested(config) and not decisions:
        notes.append("--benchmark-compare: no earlier run of these benchmarks was saved on this hardware "
                     "(--benchmark-autosave saves one)")
    slower = [o.benchmark_id for o, d in decisions if d.significant_slowdown]
    if slower:
        effect = "fails the run" if context.compare_mode == "fail" else "reported only (--perfsuite-compare=report)"
        notes.append(f"significantly slower than their earlier runs ({effect}): {', '.join(slower)}")
    missing = gates_not_measured(context.baselines.ratios, [o.check for o in outcomes])
    if missing:
        notes.append(f"same-run gates no benchmark of this run measured: {', '.join(missing)}")
    notes += _benchmark_notes(outcomes)
    if config.getoption("perfsuite_report") is not None:
        notes.append(f"plots and summary: {config.getoption('perfsuite_report') / 'summary.md'}")
    title = f"perfsuite ({context.profile.name} profile, gates: {context.gates})"
    terminalreporter.section(title)
    for line in ([f"note: {versions}"] if versions else []) + summary.terminal(sections):
        terminalreporter.write_line(line)
    for note in notes:
        terminalreporter.write_line(f"note: {note}")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as stream:
            stream.write(summary.markdown(sections, notes, title=title))


def _benchmark_notes(outcomes) -> list[str]:
    common = set.intersection(*(set(outcome.notes) for outcome in outcomes))
    lines = [f"every benchmark: {note}" for note in sorted(common)]
    lines += [f"{o.benchmark_id}: {note}" for o in outcomes for note in o.notes if note not in common]
    return lines
