"""CI's smoke check (.ci/check_smoke.py): figures must be measurements, not merely present."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / ".ci" / "check_smoke.py"
_spec = importlib.util.spec_from_file_location("check_smoke", SCRIPT)
check_smoke = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_smoke)

VERDICTS = {"benchmark_id": "b", "passed": True, "notes": [],
            "verdicts": [{"metric": "cache_over_wav_ratio", "decision": "inconclusive"}]}
GOOD = {"perfsuite_profile": "smoke", "perfsuite_verdicts": VERDICTS, "samples_per_s": 1200.0,
        "samples_per_s_rounds": [1100.0, 1300.0], "cache_over_wav_ratio": 4.2, "tf_native_cache_input_bound": -0.01,
        "tf_native_cache_input_wait": 0.001,
        "emulated_util_median": 97.0, "emulated_idle_fraction": 0.0, "emulated_complete": 1.0, "traces": 1,
        "a_figure_no_one_declared": float("nan")}


def test_measured_figures_in_their_range_pass():
    assert check_smoke.problems(GOOD) == []
    assert check_smoke.problems({"samples_per_s": 5.0}) == []  # not through the fixture: no verdicts needed


@pytest.mark.parametrize("key,value,expected", [
    ("samples_per_s", 0.0, "samples_per_s: expected a value in (0, inf], found 0.0"),
    ("samples_per_s", math.inf, "samples_per_s: expected a finite number, found inf"),
    ("cache_over_wav_ratio", -1.0, "cache_over_wav_ratio: expected a value in (0, inf]"),
    ("tf_native_cache_input_bound", 1.5, "tf_native_cache_input_bound: expected a value in (-1, 1]"),
    ("tf_native_cache_input_wait", -0.01, "tf_native_cache_input_wait: expected a value in [0, 1]"),
    ("emulated_util_median", 120.0, "emulated_util_median: expected a value in [0, 100]"),
    ("emulated_idle_fraction", 1.2, "emulated_idle_fraction: expected a value in [0, 1]"),
    ("traces", -1, "traces: expected a value in [0, inf]"),
    ("samples_per_s", "fast", "samples_per_s: expected a finite number, found 'fast'"),
    ("samples_per_s_rounds", [1.0, math.nan], "samples_per_s_rounds[1]: expected a finite number, found nan"),
])
def test_a_figure_out_of_its_range_is_named(key, value, expected):
    found = check_smoke.problems({**GOOD, key: value})
    assert any(problem.startswith(expected) for problem in found), found


def test_missing_verdicts_or_metrics_are_problems():
    assert check_smoke.problems({k: v for k, v in GOOD.items() if k != "perfsuite_verdicts"}) == [
        "perfsuite_verdicts: expected the gate verdicts, found none"]
    undecided = {**VERDICTS, "verdicts": [{"metric": "cache_over_wav_ratio", "decision": None}]}
    assert "expected a decision" in check_smoke.problems({**GOOD, "perfsuite_verdicts": undecided})[0]
    assert check_smoke.problems({"rounds": 3}) == [
        "expected at least one declared metric (perfsuite.verdict.metrics), found none"]


def test_main_fails_a_run_with_a_problem(tmp_path, capsys):
    path = tmp_path / "run.json"
    named = {"group": "loaders, s/sample", "fullname": "b"}
    path.write_text(json.dumps({"benchmarks": [{**named, "extra_info": {**GOOD, "stats_unit": "s/sample"}}]}))
    assert check_smoke.main([str(path)]) == 0
    path.write_text(json.dumps({"benchmarks": [{**named, "extra_info": {**GOOD, "stats_unit": "s/sample",
                                                                        "samples_per_s": -3.0}}]}))
    assert check_smoke.main([str(path)]) == 1
    assert "b: samples_per_s: expected a value in (0, inf]" in capsys.readouterr().out


def test_stats_whose_unit_is_not_named_are_a_problem(tmp_path, capsys):
    named = {"fullname": "b", "group": "loaders, s/sample", "extra_info": {**GOOD, "stats_unit": "s/sample"}}
    rounds = {"fullname": "r", "group": "s/round", "extra_info": {"samples_per_s": 5.0, "stats_unit": "s/round"}}
    assert check_smoke.stats_problems(named) == [] and check_smoke.stats_problems(rounds) == []
    bare = {"fullname": "p", "group": "service", "extra_info": {"samples_per_s": 5.0}}  # pedantic called directly
    assert check_smoke.stats_problems(bare) == [
        "stats_unit: expected the unit of the stats (timed through perfsuite's benchmark_adapter), found none"]
    unnamed = {**bare, "extra_info": {"samples_per_s": 5.0, "stats_unit": "s/round"}}
    assert check_smoke.stats_problems(unnamed) == ["group: expected it to name the stats' unit 's/round', found 'service'"]
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"benchmarks": [named, bare]}))
    assert check_smoke.main([str(path)]) == 1
    assert "p: stats_unit: expected the unit" in capsys.readouterr().out
