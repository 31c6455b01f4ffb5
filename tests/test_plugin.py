"""The pytest plugin end to end, through pytester: gates, report mode, JSON, recording, comparison."""

import json
import textwrap

import pytest
import yaml

pytest_plugins = ["pytester"]

BENCHMARK = textwrap.dedent("""
    import sys
    import time

    def fast():
        time.sleep(0.002)
        return 0.002

    def slow():
        time.sleep(0.006)
        return 0.006

    def test_ratio(perfsuite):
        perfsuite.compare("fast_over_slow_ratio", a=fast, b=slow, rounds=3)

    def batches():  # batches of 4 samples, a millisecond each: the plugin without TensorFlow's import
        while True:
            time.sleep(0.001)
            yield [0, 1, 2, 3]

    def test_dataset(perfsuite):
        measurement = perfsuite.measure_dataset(batches(), name="range", samples_in=len, readback=lambda b: None)
        assert measurement.samples_per_s > 0
        assert "tensorflow" not in sys.modules  # a pure-Python pipeline pays no TensorFlow import
""")


# Inner runs: no cache, and no Hypothesis plugin (their tests use none; where bytecode is not written,
# pytest rewrites the asserts of its ~90 modules again in every process).
INNER = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")


@pytest.fixture(autouse=True)
def serial_inner_runs(monkeypatch):
    """pytest-benchmark disables itself in an xdist worker's environment; the inner runs are serial."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)


def _baselines(pytester, gate: dict) -> None:
    directory = pytester.mkdir("baselines")
    gates = {metric: {**bounds, "claim": "a test claim"} for metric, bounds in gate.items()}
    (directory / "ratios.yaml").write_text(yaml.safe_dump({"ratios": gates}))


def _run(pytester, *args):
    pytester.makepyfile(test_bench=BENCHMARK)
    # A subprocess: numpy and TensorFlow cannot be imported twice in one process.
    return pytester.runpytest_subprocess(*INNER, "--perfsuite-profile=smoke",
                                         "--perfsuite-baselines=baselines", *args)


def test_ratio_gate_passes_when_met(pytester):
    _baselines(pytester, {"fast_over_slow_ratio": {"min": 1.5}})
    result = _run(pytester)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*fast_over_slow_ratio*ok*"])


def test_ratio_gate_fails_with_metric_threshold_and_file(pytester):
    _baselines(pytester, {"fast_over_slow_ratio": {"min": 50.0}})
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    expected = ("*fast_over_slow_ratio: fail: measured * [[]*, *[]] (3 rounds, 75% interval), "
                "threshold ≥ 50 (*ratios.yaml) — a test claim*")
    result.stdout.fnmatch_lines([expected])


def test_ratio_gate_straddled_by_the_interval_is_inconclusive_and_passes(pytester):
    _baselines(pytester, {"fast_over_slow_ratio": {"min": 50.0}})
    pytester.makeconftest("""
        import perfsuite.measure.timing as timing
        real = timing.ab_result

        def straddling(*args):  # per-round ratios 10, 60, 100 around the gate at 50
            result = real(*args)
            ratios = (10.0, 60.0, 100.0)
            return timing.ABResult(a_values=result.a_values, b_values=result.b_values, unit=result.unit,
                                   ratios=ratios, order=result.order)

        timing.ab_result = straddling
    """)
    result = _run(pytester)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*fast_over_slow_ratio*60 [[]10, 100[]] (3 rounds*inconclusive*"])


UNDECIDED = textwrap.dedent("""
    def test_shares(perfsuite):
        values = [0.01, 0.09]  # straddle the gate at 0.05; smoke's max_rounds (2) allows no more
        perfsuite.more_rounds("x_input_bound", lambda: values.append(0.05), rounds=2, spent_s=0.0,
                              undecided=lambda: perfsuite.gate_undecided("x_input_bound", 0.05, values))
        perfsuite.add("x_input_bound", 0.05, rounds=values)
        perfsuite.add("y_input_bound", 0.5, rounds=[0.4, 0.6])
""")


def test_a_gate_left_undecided_says_why_and_a_context_gate_is_shown_as_context(pytester):
    (pytester.mkdir("baselines") / "ratios.yaml").write_text(yaml.safe_dump({"ratios": {
        "x_input_bound": {"max": 0.05, "claim": "x is fed"},
        "y_input_bound": {"min": 0.05, "claim": "y starves", "role": "context"}}}))
    pytester.makepyfile(test_bench=UNDECIDED)
    result = pytester.runpytest_subprocess(*INNER, "--perfsuite-profile=smoke",
                                           "--perfsuite-baselines=baselines")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*x_input_bound*inconclusive*", "*y_input_bound*context: holds*",
                                 ("note: *x_input_bound: max_rounds reached with a gate still inconclusive after 2 "
                                 "rounds (0 added*")])


def test_report_mode_prints_the_failed_gate_without_failing(pytester):
    _baselines(pytester, {"fast_over_slow_ratio": {"min": 50.0}})
    result = _run(pytester, "--perfsuite-gates=report")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*fast_over_slow_ratio*FAILED*"])


def test_metrics_land_in_the_benchmark_json(pytester):
    _baselines(pytester, {})
    result = _run(pytester, "--benchmark-json=out.json")
    result.assert_outcomes(passed=2)
    benchmarks = {b["name"]: b for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]}
    dataset = benchmarks["test_dataset"]["extra_info"]
    assert dataset["samples_per_s"] > 0
    assert dataset["batches"] == 3 * 2  # smoke: measure_batches x rounds
    assert {"variation_ratio", "batch_p95_s", "cycle_significant", "warnings", "perfsuite_verdicts"} <= set(dataset)
    ratio = benchmarks["test_ratio"]["extra_info"]
    assert 2.0 < ratio["fast_over_slow_ratio"] < 4.0
    assert len(ratio["fast_over_slow_ratio_detail"]["ratios"]) == 3


def test_a_malformed_gate_file_stops_the_run_with_one_line_naming_it(pytester):
    directory = pytester.mkdir("baselines")
    (directory / "ratios.yaml").write_text("ratios:\n  fast_over_slow_ratio: {min: 1.5}\n")
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(
        ["*perfsuite: baselines/ratios.yaml: ratios.fast_over_slow_ratio.claim: expected a value (required key)*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_unknown_machine_skips_absolute_thresholds_with_a_note(pytester):
    _baselines(pytester, {})
    result = _run(pytester)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*no baseline profile*matches this machine*ratio gates still applied*"])


def test_save_baselines_records_then_enforces(pytester):
    _baselines(pytester, {})
    # A 0.9 margin puts the threshold at a tenth of the first run: the second run on this (possibly busy)
    # machine checks against it without being judged on the box's run-to-run noise.
    _run(pytester, "--perfsuite-save-baselines", "--perfsuite-baseline-profile=here",
         "--perfsuite-baseline-margin=0.9").assert_outcomes(passed=2)
    recorded = yaml.safe_load((pytester.path / "baselines" / "here.yaml").read_text())
    thresholds = recorded["benchmarks"]["smoke::test_bench.py::test_dataset"]
    assert thresholds["min_samples_per_s"] > 0
    # The recorded profile matches this machine, so a second run checks against it.
    result = _run(pytester)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_dataset*samples_per_s*≥*ok*"])


def _saved_runs(pytester) -> list:
    return sorted((pytester.path / ".benchmarks").rglob("*.json"))


def test_compare_needs_three_earlier_runs_on_this_hardware(pytester):
    _baselines(pytester, {})
    first = _run(pytester, "--benchmark-autosave", "--benchmark-compare")
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(["*no earlier run of these benchmarks was saved on this hardware*"])
    second = _run(pytester, "--benchmark-autosave", "--benchmark-compare")
    assert second.ret == 0
    second.stdout.fnmatch_lines(["*test_dataset*-*-*-*-*1*not judged: *"])
    saved = json.loads(_saved_runs(pytester)[0].read_text())
    assert saved["machine_info"]["perfsuite_fingerprint"]["cores"] >= 1


def _plant_history(pytester, factors) -> None:
    """The one saved run replaced by copies with test_dataset's samples/s multiplied by each factor."""
    (source,) = _saved_runs(pytester)
    original = source.read_text()
    source.unlink()
    for index, factor in enumerate(factors, start=1):
        run = json.loads(original)
        for bench in run["benchmarks"]:
            if "samples_per_s" in bench["extra_info"]:
                bench["extra_info"]["samples_per_s"] *= factor
        (source.parent / f"{index:04d}_planted.json").write_text(json.dumps(run))


def test_compare_flags_a_slowdown_beyond_the_history_and_fails_the_run(pytester):
    _baselines(pytester, {})
    _run(pytester, "--benchmark-autosave").assert_outcomes(passed=2)
    _plant_history(pytester, [100.0, 101.0, 99.0, 100.5])  # earlier runs were 100x faster
    result = _run(pytester, "--benchmark-compare")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*benchmark*samples/s change*Holm p*runs*verdict*", "*test_dataset*-*%*4*SLOWER*",
                                 "*significantly slower than their earlier runs (fails the run)*test_dataset*"])
    report = _run(pytester, "--benchmark-compare", "--perfsuite-compare=report")
    assert report.ret == 0
    report.stdout.fnmatch_lines(["*reported only*"])


def test_report_option_writes_summary_timelines_and_ratios(pytester):
    _baselines(pytester, {})
    result = _run(pytester, "--perfsuite-report=report")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*perfsuite report (2 benchmark(s)): *summary.md"])
    report = pytester.path / "report"
    summary = (report / "summary.md").read_text()
    assert "smoke::test_bench.py::test_dataset" in summary and "fast_over_slow_ratio" in summary
    pngs = sorted(p.name for p in report.glob("*.png"))
    assert pngs == ["ratios.png", "timeline-01-test_bench.py-test_dataset.png"]  # test_ratio has no timeline
    for name in pngs:
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({name})" in summary


def test_report_option_without_matplotlib_is_a_usage_error_naming_the_extra(pytester, monkeypatch):
    hidden = pytester.mkdir("hide_matplotlib") / "matplotlib"
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'matplotlib'\")\n")
    monkeypatch.setenv("PYTHONPATH", str(hidden.parent))
    result = _run(pytester, "--perfsuite-report=report")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--perfsuite-report needs matplotlib*perfsuite[[]report[]]*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "report").exists()


def test_markers_are_registered():
    from perfsuite.pytest_plugin.plugin import MARKERS

    assert set(MARKERS) == {"gpu", "service", "selftest", "slow", "not_in_ab"}


DRIVEN = textwrap.dedent("""
    import time

    def batches():
        while True:
            time.sleep(0.001)
            yield [0, 1, 2, 3]

    def test_dataset(perfsuite):
        perfsuite.measure_dataset(batches(), name="range", samples_in=len, readback=lambda b: None)
        assert perfsuite.benchmark.extra_info["rounds"] == 7  # the driver's, not the budget's
""")


def test_another_plugin_drives_the_rounds_through_the_public_hook(pytester):
    _baselines(pytester, {})
    pytester.makeconftest("""
        import pytest

        class SevenRounds:
            def rounds(self, one_round, *, side=None):
                return [one_round() for _ in range(7)]

            def pairs(self, a, b, *, name, sides=None):
                raise AssertionError("no compare here")

        @pytest.hookimpl
        def pytest_perfsuite_round_driver(config):
            return SevenRounds()
    """)
    pytester.makepyfile(test_bench=DRIVEN)
    result = pytester.runpytest_subprocess(*INNER, "--perfsuite-profile=smoke", "--perfsuite-baselines=baselines")
    result.assert_outcomes(passed=1)


RATIO_RUNS_OUT = textwrap.dedent("""
    import time

    def test_ratio(perfsuite):
        perfsuite.compare("fast_over_slow_ratio", a=lambda: time.sleep(0.002) or 0.002,
                          b=lambda: time.sleep(0.006) or 0.006)
""")


def test_a_ratio_gate_whose_rounds_run_out_undecided_leaves_the_budget_note_in_the_summary(pytester):
    _baselines(pytester, {"fast_over_slow_ratio": {"min": 50.0}})
    pytester.makeconftest("""
        import perfsuite.measure.timing as timing
        real = timing.ab_result

        def straddling(*args):  # per-round ratios 100, 10, 100, ... around the gate at 50
            result = real(*args)
            ratios = tuple(10.0 if i % 2 else 100.0 for i in range(len(result.ratios)))
            return timing.ABResult(a_values=result.a_values, b_values=result.b_values, unit=result.unit,
                                   ratios=ratios, order=result.order)

        timing.ab_result = straddling
    """)
    pytester.makepyfile(test_bench=RATIO_RUNS_OUT)
    result = pytester.runpytest_subprocess(*INNER, "--perfsuite-profile=smoke", "--perfsuite-baselines=baselines")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*fast_over_slow_ratio*inconclusive*",
                                 ("note: *fast_over_slow_ratio: max_rounds reached with a gate still inconclusive "
                                 "after 2 rounds (0 added*")])
