"""The self-test's decision logic on synthetic numbers (no TensorFlow pipelines).

Marked ``selftest`` too, so ``pytest benchmarks/ tests/ -m selftest`` runs the logic with the measurements.
"""

import dataclasses
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from perfsuite.measure import stats
from perfsuite.measure.rounds import rotated
from perfsuite.tools import selftest
from perfsuite.verdict.baselines import load_ratios

pytestmark = pytest.mark.selftest


@dataclass(frozen=True)
class FakeLoaderConfig:  # the fields the loader mutants touch, without importing TensorFlow
    kind: str = "tf_native"
    prefetch: int = -1
    static_shapes: bool = True
    max_text_len: int | None = 50
    max_mel_frames: int | None = 400


def test_clopper_pearson_known_values():
    low, high = stats.clopper_pearson(successes=0, trials=20)
    assert low == 0.0
    assert high == pytest.approx(1 - 0.025 ** (1 / 20))  # 0.168: 0 of 20 cannot show ≤ 1 %
    low, high = stats.clopper_pearson(successes=20, trials=20)
    assert high == 1.0 and low == pytest.approx(0.025 ** (1 / 20))
    low, high = stats.clopper_pearson(successes=5, trials=10)
    assert low < 0.5 < high and low == pytest.approx(1 - high)
    with pytest.raises(ValueError, match="successes"):
        stats.clopper_pearson(successes=3, trials=2)


def test_rotated_orders_balance_positions():
    orders = [rotated(["a", "b", "c"], index) for index in range(6)]
    for name in "abc":
        positions = [order.index(name) for order in orders]
        assert sorted(positions) == [0, 0, 1, 1, 2, 2]


def test_loader_mutants_change_one_option():
    base = FakeLoaderConfig()
    assert selftest.mutant_loader_config(base, "numpy_function").kind == "numpy_function"
    assert selftest.mutant_loader_config(base, "no_prefetch").prefetch == 0
    dynamic = selftest.mutant_loader_config(base, "dynamic_shapes")
    assert not dynamic.static_shapes and dynamic.max_mel_frames is None
    with pytest.raises(ValueError, match="fraction: expected a positive share"):
        selftest.planted_slowdown(0.0, mel_config=None)
    with pytest.raises(ValueError, match="mutant"):
        selftest.mutant_loader_config(base, "nope")


def test_step_mutants():
    base = {"mode": "xla", "input_shapes": (None, 50, 400)}
    assert selftest.mutant_step_options(base, "eager") == {"mode": "eager", "input_shapes": (None, 50, 400)}
    assert selftest.mutant_step_options(base, "dynamic_shapes")["input_shapes"] is None
    with pytest.raises(ValueError, match="compiled"):
        selftest.mutant_step_options({"mode": "eager"}, "eager")


SHIPPED_RATIOS = load_ratios(Path(__file__).parents[1] / "benchmarks" / "baselines" / "ratios.yaml")
# A user's settings for the unit tests below; the benchmarks read theirs from the session (UserPath.of,
# tested end to end at the bottom).
PATH = selftest.UserPath(alpha=0.01, min_effect=0.10, history_runs=10, margin=0.3, ratios=SHIPPED_RATIOS)


@pytest.mark.parametrize("mutant,metric,genuine,planted", [
    ("numpy_function swap", "tf_native_over_numpy_function_wav_ratio", [2.1, 2.3, 2.2, 2.4, 2.0], [1.0, 0.97, 1.03, 1.01, 0.99]),
    ("eager step", "graph_over_eager_ratio", [2.5, 2.7, 2.6, 2.8, 2.4], [1.01, 0.98, 1.0, 1.02, 0.99]),
    ("prefetch removed", "tf_native_cache_input_wait", [0.0, 0.01, 0.0, 0.02, 0.0], [0.3, 0.33, 0.31, 0.35, 0.32]),
])
def test_planted_regressions_are_judged_by_the_shipped_gates(mutant, metric, genuine, planted):
    judgement = selftest.judge_by_gate(SHIPPED_RATIOS, mutant=mutant, metric=metric, genuine=genuine, planted=planted)
    assert (judgement.genuine, judgement.planted) == ("pass", "fail") and judgement.as_expected
    assert metric in judgement.check and str(SHIPPED_RATIOS.path) in judgement.check


def test_an_inconclusive_genuine_run_is_no_pass():
    straddling = [1.0, 1.3, 1.5, 1.25, 1.4]  # around graph_over_eager_ratio's 1.2
    judgement = selftest.judge_by_gate(SHIPPED_RATIOS, mutant="eager step", metric="graph_over_eager_ratio",
                                       genuine=straddling, planted=[1.0] * 5)
    assert judgement.genuine == "inconclusive" and not judgement.as_expected
    assert "expected the genuine configuration to pass and the planted one to fail, found inconclusive and fail" in (
        judgement.message)
    missed = selftest.judge_by_gate(SHIPPED_RATIOS, mutant="eager step", metric="graph_over_eager_ratio",
                                    genuine=[2.5] * 5, planted=[2.4] * 5)  # a mutant the gate cannot see
    assert missed.planted == "pass" and not missed.as_expected


def test_a_context_gate_or_no_gate_cannot_judge_a_planted_regression():
    with pytest.raises(ValueError, match="expected a regression gate on 'numpy_function_wav_input_bound'"):
        selftest.judge_by_gate(SHIPPED_RATIOS, mutant="x", metric="numpy_function_wav_input_bound", genuine=[0.3],
                               planted=[0.3])
    with pytest.raises(ValueError, match="found none"):
        selftest.judge_by_gate(SHIPPED_RATIOS, mutant="x", metric="no_such_ratio", genuine=[1.0], planted=[1.0])


def test_dynamic_shapes_are_judged_by_a_recorded_retraces_threshold():
    judgement = selftest.judge_by_recorded_threshold(mutant="dynamic shapes", metric="retraces", recorded=0,
                                                     genuine=0, planted=3, margin=PATH.margin)
    assert judgement.as_expected and "max_retraces ≤ 0" in judgement.check
    assert f"margin {PATH.margin:g}" in judgement.check
    assert not selftest.judge_by_recorded_threshold(mutant="dynamic shapes", metric="retraces", recorded=0,
                                                    genuine=0, planted=0, margin=PATH.margin).as_expected


def test_a_slowdown_is_judged_by_the_stored_run_comparison_with_the_user_s_settings():
    history = [100.0, 102.0, 99.0, 101.0, 100.5]
    slower = selftest.judge_by_history(mutant="13% more step work", history=history, genuine=100.2, planted=87.0,
                                       path=PATH)
    assert slower.as_expected and "5 earlier runs" in slower.check
    hidden = selftest.judge_by_history(mutant="3% more step work", history=history, genuine=100.2, planted=97.0,
                                       path=PATH)
    assert hidden.planted == "pass" and not hidden.as_expected  # below the comparison's minimum effect
    # A user whose minimum effect is 20 % is not alarmed by 13 %: the self-test judges with the user's.
    lenient = dataclasses.replace(PATH, min_effect=0.20)
    assert selftest.judge_by_history(mutant="13%", history=history, genuine=100.2, planted=87.0,
                                     path=lenient).planted == "pass"
    newest = dataclasses.replace(PATH, history_runs=3)
    assert "3 earlier runs" in selftest.judge_by_history(mutant="13%", history=history, genuine=100.2,
                                                         planted=87.0, path=newest).check
    with pytest.raises(ValueError, match="enough earlier runs"):
        selftest.judge_by_history(mutant="x", history=[100.0, 101.0], genuine=100.0, planted=80.0, path=PATH)


def test_fortran_cache_copy(tmp_path):
    cache = tmp_path / "cache"
    (cache / "mels").mkdir(parents=True)
    mel = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.save(cache / "mels" / "u1.npy", mel)
    path = selftest.write_fortran_cache_copy(cache_dir=cache, dest=tmp_path / "copy", utt_id="u1")
    assert path == tmp_path / "copy" / "mels" / "u1.npy"
    assert np.load(path).flags.f_contiguous and not np.load(path).flags.c_contiguous
    np.testing.assert_array_equal(np.load(path), mel)
    assert np.load(cache / "mels" / "u1.npy").flags.c_contiguous  # original untouched
    with pytest.raises(FileExistsError):
        selftest.write_fortran_cache_copy(cache_dir=cache, dest=tmp_path / "copy", utt_id="u1")


def _draw(rng, seconds, n=20 * 32, cv=0.01):
    return list(np.exp(rng.normal(np.log(seconds), cv, n)))


def test_a_noisy_history_makes_a_planted_step_slowdown_unmeasurable_with_the_figure():
    quiet = [100.0, 100.5, 99.5, 100.2, 99.8]
    assert selftest.history_unmeasurable_reason(quiet, slowdown=0.13, alpha=0.01) is None
    noisy = [100.0, 125.0, 80.0, 110.0, 90.0]
    reason = selftest.history_unmeasurable_reason(noisy, slowdown=0.13, alpha=0.01)
    assert reason is not None and "unmeasurable" in reason and "not the planted 13%" in reason


# ------------------------------------------------------------- the self-test reads the user's run's settings

pytest_plugins = ["pytester"]

READS = textwrap.dedent("""
    import json

    from perfsuite.tools.selftest import UserPath

    def test_reads(perfsuite, pytestconfig):
        path = UserPath.of(perfsuite.context, pytestconfig)
        gates = {metric: [[t.symbol, t.value] for t in thresholds] for metric, thresholds in path.ratios.gates.items()}
        options = {name: pytestconfig.getoption(name) for name in ("perfsuite_compare_alpha",
                   "perfsuite_compare_min_effect", "perfsuite_compare_runs", "perfsuite_baseline_margin")}
        with open("read.json", "w") as out:
            json.dump({"alpha": path.alpha, "min_effect": path.min_effect, "history_runs": path.history_runs,
                       "margin": path.margin, "gates": gates, "options": options}, out)

    def test_rate(perfsuite):
        perfsuite.add("selftest_ab_detection_10pct_rate", 0.9)
""")


def _inner(pytester, *args):
    pytester.makepyfile(test_reads=READS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                                           "--perfsuite-profile=smoke", *args)
    return result, json.loads((pytester.path / "read.json").read_text())


def test_the_self_test_reads_the_plugin_s_defaults_and_the_shipped_ratios(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    shipped = Path(__file__).parents[1] / "benchmarks" / "baselines"
    result, read = _inner(pytester, f"--perfsuite-baselines={shipped}")
    options = read["options"]
    assert (read["alpha"], read["min_effect"], read["history_runs"], read["margin"]) == (
        options["perfsuite_compare_alpha"], options["perfsuite_compare_min_effect"],
        options["perfsuite_compare_runs"], options["perfsuite_baseline_margin"])
    assert read["gates"]["selftest_ab_detection_10pct_rate"] == [
        [t.symbol, t.value] for t in SHIPPED_RATIOS.gates["selftest_ab_detection_10pct_rate"]]
    # The shipped target (ratios.yaml) judges the self-test's rate: 90 % is below it.
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*selftest_ab_detection_10pct_rate*fail*"])


def test_a_planted_change_of_the_settings_and_of_ratios_yaml_is_seen_by_the_self_test(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    planted = pytester.mkdir("planted")
    (planted / "ratios.yaml").write_text(textwrap.dedent("""
        ratios:
          selftest_ab_detection_10pct_rate:
            min: 0.85
            claim: a planted target
    """))
    result, read = _inner(pytester, "--perfsuite-baselines=planted", "--perfsuite-compare-alpha=0.02",
                          "--perfsuite-compare-min-effect=0.2", "--perfsuite-compare-runs=7",
                          "--perfsuite-baseline-margin=0.4")
    assert (read["alpha"], read["min_effect"], read["history_runs"], read["margin"]) == (0.02, 0.2, 7, 0.4)
    assert read["gates"] == {"selftest_ab_detection_10pct_rate": [["≥", 0.85]]}
    result.assert_outcomes(passed=2)  # 90 % meets the planted 85 %
