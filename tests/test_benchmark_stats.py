"""pytest-benchmark's stats mean speed: two autosaved runs of trivial datasets of known speeds, ranked by
the `pytest-benchmark compare` command line, and `stats.ops` agreeing with perfsuite's samples/s."""

import json
import shutil
import statistics
import subprocess
import textwrap

import pytest

from perfsuite.pytest_plugin import benchmark_adapter

pytest_plugins = ["pytester"]

# Three endless "datasets" of numpy batches of 8 samples, each batch slower than the last kind's: the
# fastest is first in samples/s, and their names sort the other way, so a table sorted by name alone
# would not pass for one ranked by speed.
DATASETS = textwrap.dedent("""
    import time

    import numpy as np
    import pytest

    PAUSE_S = {"a_slow": 0.006, "b_middle": 0.003, "c_fast": 0.001}

    def batches(pause):
        while True:
            time.sleep(pause)
            yield np.zeros((8, 2))

    @pytest.mark.parametrize("kind", list(PAUSE_S))
    def test_dataset(perfsuite, kind):
        perfsuite.measure_dataset(batches(PAUSE_S[kind]), name=kind)
""")


# Inner runs: no cache, and no Hypothesis plugin (their tests use none; where bytecode is not written,
# pytest rewrites the asserts of its ~90 modules again in every process).
INNER = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")


@pytest.fixture(autouse=True)
def serial_inner_runs(monkeypatch):
    """pytest-benchmark disables itself in an xdist worker's environment; the inner runs are serial."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)


def _autosaved_runs(pytester, count: int) -> list:
    pytester.makepyfile(test_bench=DATASETS)
    directory = pytester.mkdir("baselines")
    (directory / "ratios.yaml").write_text("ratios: {}\n")
    for _ in range(count):
        result = pytester.runpytest_subprocess(*INNER, "-p", "no:randomly",
                                               "--perfsuite-profile=smoke", "--perfsuite-baselines=baselines",
                                               "--benchmark-autosave")
        result.assert_outcomes(passed=3)
    return sorted((pytester.path / ".benchmarks").rglob("*.json"))


def test_saved_stats_are_seconds_per_sample_and_compare_ranks_by_samples_per_s(pytester):
    saved = _autosaved_runs(pytester, 2)
    assert len(saved) == 2
    for path in saved:
        for bench in json.loads(path.read_text())["benchmarks"]:
            info, stats = bench["extra_info"], bench["stats"]
            assert info[benchmark_adapter.STATS_UNIT] == "s/sample"
            assert bench["group"] == "bench, s/sample"  # perfsuite's group (the file's name) and the unit
            assert stats["rounds"] == info["rounds"] == len(info["samples_per_s_rounds"])
            # ops is the rounds' samples/s through their mean time per sample: their harmonic mean, exactly
            # (a wrong unit, per batch of 8 or per second, would be 8x off or inverted)
            assert stats["ops"] == pytest.approx(statistics.harmonic_mean(info["samples_per_s_rounds"]),
                                                 rel=1e-6), bench["name"]
            assert info["samples_per_s_interval"][0] <= info["samples_per_s"] * 1.05
    command = shutil.which("pytest-benchmark") or shutil.which("py.test-benchmark")
    assert command, "pytest-benchmark's command line is installed with pytest-benchmark"
    shown = subprocess.run([command, "compare", "--columns=ops,median", "--sort=mean", *map(str, saved)],
                           capture_output=True, text=True, check=True, cwd=pytester.path).stdout
    rows = [line.split()[0] for line in shown.splitlines() if line.startswith("test_dataset[")]
    kinds = [row.split("[", 1)[1].split("]", 1)[0] for row in rows]
    assert kinds == ["c_fast"] * 2 + ["b_middle"] * 2 + ["a_slow"] * 2, shown
    saved_speed = {bench["param"]: bench["extra_info"]["samples_per_s"]
                   for bench in json.loads(saved[-1].read_text())["benchmarks"]}
    assert sorted(saved_speed, key=saved_speed.get, reverse=True) == ["c_fast", "b_middle", "a_slow"]


def test_the_plugins_table_shows_ops_first_ranked_fastest_first_unless_the_user_chose(pytester):
    pytester.makepyfile(test_bench=DATASETS)
    directory = pytester.mkdir("baselines")
    (directory / "ratios.yaml").write_text("ratios: {}\n")
    common = (*INNER, "-p", "no:randomly", "--perfsuite-profile=smoke",
              "--perfsuite-baselines=baselines")
    header, ranked = _benchmark_table(pytester.runpytest_subprocess(*common).outlines)
    assert header.index("OPS") < header.index("Median") < header.index("IQR") < header.index("Rounds")
    assert "Min" not in header and "Outliers" not in header
    assert ranked == ["test_dataset[c_fast]", "test_dataset[b_middle]", "test_dataset[a_slow]"]
    header, ranked = _benchmark_table(pytester.runpytest_subprocess(*common, "--benchmark-columns=min,max",
                                                                    "--benchmark-sort=name").outlines)
    assert "OPS" not in header and "Min" in header
    assert ranked == ["test_dataset[a_slow]", "test_dataset[b_middle]", "test_dataset[c_fast]"]


def _benchmark_table(lines: list[str]) -> tuple[str, list[str]]:
    """pytest-benchmark's table in a run's output: its header line and its rows' names, in order."""
    start = next(index for index, line in enumerate(lines) if line.startswith("Name (time in"))
    end = next(index for index, line in enumerate(lines) if line.startswith("Legend:"))
    return lines[start], [line.split()[0] for line in lines[start:end] if line.startswith("test_dataset[")]


def test_time_per_unit_replaces_round_times_once_and_refuses_non_positive_times():
    class Probe:  # what time_per_unit reaches of pytest-benchmark's fixture
        fullname = "probe"

        def __init__(self):
            from pytest_benchmark.stats import Metadata

            self.extra_info, self.name, self.group, self.param, self.params = {}, "probe", None, None, None
            self.cprofile_stats = None
            self.stats = Metadata(self, iterations=1, options={})
            self.stats.update(2.0)  # a round time, as pedantic records it

    probe = Probe()
    assert benchmark_adapter.time_per_unit(probe, [0.001, 0.003], unit="s/sample")
    assert probe.stats.stats.data == [0.001, 0.003]
    assert probe.stats.stats.ops == pytest.approx(500.0)
    assert probe.stats.group == "s/sample"
    assert not benchmark_adapter.time_per_unit(probe, [1.0], unit="s/step")  # the first measurement owns them
    assert probe.extra_info[benchmark_adapter.STATS_UNIT] == "s/sample"
    with pytest.raises(ValueError, match="probe.*positive"):
        benchmark_adapter.time_per_unit(Probe(), [0.0], unit="s/sample")


def test_compatibility_problems_are_none_with_the_installed_release():
    assert benchmark_adapter.compatibility_problems() == []


ROUNDS_ONLY = textwrap.dedent("""
    import time

    from perfsuite.pytest_plugin import benchmark_adapter

    def test_rounds(perfsuite):  # work whose unit is the round: an emulated round, a calibration
        benchmark_adapter.time_rounds(perfsuite.benchmark, lambda: time.sleep(0.001), rounds=3)
        perfsuite.add("samples_per_s", 1.0)

    def test_per_sample(perfsuite):
        seconds = benchmark_adapter.time_rounds(perfsuite.benchmark, lambda: 0.002, rounds=2)
        benchmark_adapter.time_per_unit(perfsuite.benchmark, [seconds / 4] * 2, unit="s/sample")
        perfsuite.add("samples_per_s", 2000.0)
""")


def test_round_times_are_named_so_in_the_group_and_a_smaller_unit_replaces_the_name(pytester):
    pytester.makepyfile(test_bench=ROUNDS_ONLY)
    directory = pytester.mkdir("baselines")
    (directory / "ratios.yaml").write_text("ratios: {}\n")
    result = pytester.runpytest_subprocess(*INNER, "-p", "no:randomly", "--perfsuite-profile=smoke",
                                           "--perfsuite-baselines=baselines", "--benchmark-json=run.json")
    result.assert_outcomes(passed=2)
    groups = {bench["name"]: (bench["group"], bench["extra_info"][benchmark_adapter.STATS_UNIT])
              for bench in json.loads((pytester.path / "run.json").read_text())["benchmarks"]}
    assert groups == {"test_rounds": ("bench, s/round", "s/round"), "test_per_sample": ("bench, s/sample", "s/sample")}


def test_the_group_names_one_unit():
    assert benchmark_adapter._with_unit(None, "s/round") == "s/round"
    assert benchmark_adapter._with_unit("loaders", "s/round") == "loaders, s/round"
    assert benchmark_adapter._with_unit("loaders, s/round", "s/sample") == "loaders, s/sample"
    assert benchmark_adapter._with_unit("s/round", "s/step") == "s/step"
