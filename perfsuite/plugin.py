"""pytest plugin: perfsuite options, markers, fixtures and the terminal summary.

A benchmark asks for the ``perfsuite`` fixture, measures through it (it drives pytest-benchmark's
``benchmark`` fixture, so every figure lands in ``extra_info`` and in ``--benchmark-json`` /
``--benchmark-autosave`` files) and is judged when its body has run: against the machine
profile's thresholds and the profile-free ratio gates in the baselines directory, and against the
previous saved run (``--benchmark-compare``) with a significance test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfsuite.profiles import PROFILES, RunProfile

GATE_MODES = ("enforce", "report")
SUMMARY_KEY = pytest.StashKey[list]()
CONTEXT_KEY = pytest.StashKey["SessionContext"]()
RECORDER_KEY = pytest.StashKey[object]()
REPORT_PROPERTY = "perfsuite_report_record"  # a user property, so that records travel back from xdist workers


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
    group.addoption("--perfsuite-baseline-margin", type=float, default=0.3, metavar="FRACTION",
                    help="margin between a recorded figure and its threshold. Default: 0.3")
    group.addoption("--perfsuite-baseline-profile", default=None, metavar="NAME",
                    help="profile name to record under. Default: derived from the machine (e.g. cpu-2core)")
    group.addoption("--perfsuite-compare-alpha", type=float, default=0.01, metavar="P",
                    help="significance level of the comparison with the previous saved run. Default: 0.01")
    group.addoption("--perfsuite-compare-min-effect", type=float, default=0.10, metavar="FRACTION",
                    help="smallest change of the median batch time reported as a change. Default: 0.10")
    group.addoption("--perfsuite-compare-fail", action="store_true", default=False,
                    help="fail a benchmark that is significantly slower than in the previous saved run")
    group.addoption("--perfsuite-data-dir", type=Path, default=None, metavar="DIR",
                    help="where synthetic corpora are built and reused. Default: $PERFSUITE_DATA_DIR "
                         "or ~/.cache/perfsuite")
    group.addoption("--perfsuite-report", type=Path, default=None, metavar="DIR",
                    help="write a Markdown summary and PNG plots (per-batch times with any detected period "
                         "marked, the ratios) of the benchmarks that ran to DIR; needs matplotlib (extra "
                         "'report'). Default: none")


MARKERS = {
    "gpu": "needs an NVIDIA GPU and NVML; skipped with a reason naming what is missing elsewhere",
    "service": "starts a tf.data service cluster (dispatcher and worker processes)",
    "selftest": "the regression detector's own false-alarm and detection test",
    "slow": "long; left out of the quick profile",
}


def pytest_configure(config):
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    config.stash[SUMMARY_KEY] = []
    directory = config.getoption("perfsuite_report")
    if directory is not None:
        from perfsuite.report import ReportUnavailable, require_matplotlib

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
    profile = config.getoption("perfsuite_profile")
    if profile == "full":
        return
    skip = pytest.mark.skip(reason=f"slow: runs in the full profile (this run: {profile})")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@dataclass(frozen=True)
class SessionContext:
    """What every benchmark of a session shares: the profile, the baselines and the comparison settings."""

    profile: RunProfile
    baselines_dir: Path
    baselines: object  # perfsuite.baselines.Baselines
    gates: str
    save_baselines: bool
    margin: float
    baseline_profile: str
    compare_alpha: float
    compare_min_effect: float
    compare_fail: bool


def _context(config) -> SessionContext:
    if CONTEXT_KEY not in config.stash:
        from perfsuite import baselines

        directory = config.getoption("perfsuite_baselines") or Path(config.rootpath) / "benchmarks" / "baselines"
        fingerprint = baselines.machine_fingerprint()
        config.stash[CONTEXT_KEY] = SessionContext(
            profile=PROFILES[config.getoption("perfsuite_profile")],
            baselines_dir=directory,
            baselines=baselines.load_baselines(directory, fingerprint=fingerprint),
            gates=config.getoption("perfsuite_gates"),
            save_baselines=config.getoption("perfsuite_save_baselines"),
            margin=config.getoption("perfsuite_baseline_margin"),
            baseline_profile=config.getoption("perfsuite_baseline_profile")
            or baselines.default_profile_name(fingerprint),
            compare_alpha=config.getoption("perfsuite_compare_alpha"),
            compare_min_effect=config.getoption("perfsuite_compare_min_effect"),
            compare_fail=config.getoption("perfsuite_compare_fail"),
        )
    return config.stash[CONTEXT_KEY]


@pytest.fixture(scope="session")
def perfsuite_profile(pytestconfig) -> RunProfile:
    return PROFILES[pytestconfig.getoption("perfsuite_profile")]


@pytest.fixture(scope="session")
def perfsuite_corpus(pytestconfig, perfsuite_profile) -> Path:
    """The synthetic LJSpeech-layout corpus of the run profile (built once, reused across runs)."""
    from perfsuite.corpus import PRESETS, build_corpus

    return build_corpus(PRESETS[perfsuite_profile.corpus], root=pytestconfig.getoption("perfsuite_data_dir"))


@pytest.fixture(scope="session")
def perfsuite_cache(perfsuite_corpus) -> Path:
    """The precomputed `.npy` cache of the profile's corpus."""
    from perfsuite.corpus import build_cache

    return build_cache(perfsuite_corpus)


@pytest.fixture
def perfsuite(request, benchmark):
    """Measures through pytest-benchmark and judges the figures when the test body has run."""
    from perfsuite.recorder import Recorder

    recorder = Recorder(benchmark=benchmark, context=_context(request.config), nodeid=request.node.nodeid)
    request.node.stash[RECORDER_KEY] = recorder
    return recorder



@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield  # a body that raised is reported as it is; its figures are not judged
    recorder = item.stash.get(RECORDER_KEY, None)
    if recorder is not None:
        outcome = recorder.judge(previous=_previous_run(item), compared=bool(_compared_runs(item.config)))
        item.config.stash[SUMMARY_KEY].append(outcome)
        if item.config.getoption("perfsuite_report") is not None:
            item.user_properties.append((REPORT_PROPERTY, recorder.report_record()))
        outcome.raise_for_failures()
    return result


class ReportWriter:
    """--perfsuite-report: collects each benchmark's record from its test report (a user property, so
    that records travel back from xdist workers to the controller), writes the report at the end of
    the session and names it in the terminal summary."""

    def __init__(self, directory: Path, *, is_worker: bool):
        self.directory = directory
        self.is_worker = is_worker
        self.records: list[dict] = []
        self.written: Path | None = None

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == REPORT_PROPERTY:
                self.records.append({**value, "outcome": report.outcome})

    def pytest_sessionfinish(self):
        if self.is_worker or not self.records:  # an xdist worker: the controller writes the report
            return
        from perfsuite.report import write_benchmark_report

        self.written = write_benchmark_report(self.records, self.directory)

    def pytest_terminal_summary(self, terminalreporter):
        if self.is_worker:
            return
        if self.written is not None:
            terminalreporter.write_line(f"perfsuite report ({len(self.records)} benchmark(s)): {self.written}")
        else:
            terminalreporter.write_line("perfsuite report: no benchmark measured through the perfsuite fixture "
                                        "ran; nothing written")


def _compared_runs(config) -> dict:
    """The saved runs ``--benchmark-compare`` loaded: {path: {fullname: benchmark}} (empty if none)."""
    session = getattr(config, "_benchmarksession", None)
    return getattr(session, "compared_mapping", None) or {}


def _previous_run(item) -> dict | None:
    """This benchmark in the run ``--benchmark-compare`` loaded, or None."""
    for benchmarks in _compared_runs(item.config).values():
        if item.nodeid in benchmarks:
            return benchmarks[item.nodeid]
    return None


def pytest_terminal_summary(terminalreporter, config):
    outcomes = config.stash.get(SUMMARY_KEY, [])
    if not outcomes:
        return
    context = _context(config)
    write = terminalreporter.write_line
    terminalreporter.section(f"perfsuite ({context.profile.name} profile, gates: {context.gates})")
    for note in context.baselines.notes:
        write(f"note: {note}")
    session = getattr(config, "_benchmarksession", None)
    if getattr(session, "compare", None) and not _compared_runs(config):
        write("note: --benchmark-compare found no saved run to compare with; baselines are still enforced")
    rows = [row for outcome in outcomes for row in outcome.rows()]
    widths = [max(len(str(row[i])) for row in rows + [_HEADER]) for i in range(len(_HEADER))]
    for row in [_HEADER] + rows:
        write("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))
    common = set.intersection(*(set(outcome.notes) for outcome in outcomes))
    for note in sorted(common):
        write(f"note (every benchmark): {note}")
    for outcome in outcomes:
        for line in outcome.notes:
            if line not in common:
                write(f"{outcome.benchmark_id}: {line}")


_HEADER = ("benchmark", "metric", "measured", "threshold", "verdict")


def format_number(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)
