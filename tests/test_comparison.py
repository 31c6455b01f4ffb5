"""Run-level comparison with a benchmark's history: verdicts, Holm, multiplicity and simulated rates."""

import itertools
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from perfsuite.verdict import comparison
from perfsuite.verdict.comparison import compare_history, decide_history, holm, simulate_rates

TIGHT = [1000.0, 1010.0, 990.0, 1005.0, 995.0]  # samples/s of five earlier runs, about 1 % apart

# Integer-valued figures keep distinct runs at least 1e-5 apart, so a spread never sits at rounding level.
figure = st.integers(min_value=100, max_value=100_000).map(float)
histories = st.lists(figure, min_size=3, max_size=12)
probabilities = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=30)


def _clear_of_boundaries(result):
    """True when the verdict cannot flip by rounding: p and |change| are away from alpha and min_effect."""
    return (min(abs(result.p_worse - result.alpha), abs(result.p_better - result.alpha)) > 1e-9
            and abs(abs(result.change) - result.min_effect) > 1e-9)


def _assert_same(a, b):
    assert a.verdict == b.verdict
    assert a.runs == b.runs
    assert a.change == pytest.approx(b.change, rel=1e-9, abs=1e-12)
    assert a.p_worse == pytest.approx(b.p_worse, rel=1e-6, abs=1e-12)
    assert a.p_better == pytest.approx(b.p_better, rel=1e-6, abs=1e-12)
    assert a.interval_low == pytest.approx(b.interval_low, rel=1e-9, abs=1e-12)
    assert a.interval_high == pytest.approx(b.interval_high, rel=1e-9, abs=1e-12)
    assert a.noise_cv == pytest.approx(b.noise_cv, rel=1e-6, abs=1e-12)


def test_module_imports_neither_tensorflow_nor_pytest_nor_higher_layers():
    code = ("import sys, perfsuite.verdict.comparison; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'pytest') "
            "or m.startswith(('perfsuite.tools', 'perfsuite.pytest_plugin'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# -------------------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize("history", [[], [1000.0], [1000.0, 1010.0]])
def test_fewer_than_min_runs_is_not_judged(history):
    result = compare_history(history, 500.0, higher_is_better=True)
    assert result.verdict == "not judged" and not result.judged
    assert result.runs == len(history)
    assert result.p_worse is None and result.change is None
    assert "3 needed" in result.reason
    json.dumps(result.as_dict(), allow_nan=False)


def test_min_runs_is_configurable_and_counts_the_runs_used():
    assert compare_history(TIGHT[:4], 500.0, higher_is_better=True, min_runs=5).verdict == "not judged"
    assert compare_history(TIGHT, 500.0, higher_is_better=True, min_runs=5).verdict == "slower"
    assert compare_history(TIGHT, 500.0, higher_is_better=True, min_runs=5, max_runs=5).runs == 5


def test_max_runs_keeps_the_newest_runs():
    old_machine = [2000.0, 2010.0, 1990.0]
    result = compare_history(old_machine + TIGHT, 1000.0, higher_is_better=True, max_runs=5)
    assert result.runs == 5 and result.centre == 1000.0 and result.verdict == "no change"
    assert compare_history(old_machine + TIGHT, 1000.0, higher_is_better=True, max_runs=None).runs == 8


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_identical_history_and_current_is_no_change(higher_is_better):
    result = compare_history([1234.5] * 4, 1234.5, higher_is_better=higher_is_better)
    assert result.verdict == "no change"
    assert result.change == 0.0 and result.noise_cv == 0.0 and not result.beyond_noise
    assert result.p_worse == result.p_better == 0.5


def test_planted_25_percent_slowdown_against_a_tight_history_is_slower():
    result = compare_history(TIGHT, 750.0, higher_is_better=True)
    assert result.verdict == "slower"
    assert result.change == pytest.approx(-0.25)
    assert result.p_worse < 1e-3 and result.p_better > 0.99
    assert result.change < result.interval_low < 0 < result.interval_high
    assert result.beyond_noise
    assert result.noise_cv == pytest.approx(0.0074, abs=0.001)  # 1.4826 * MAD of the logs
    assert "-25.0%" in result.reason
    json.dumps(result.as_dict(), allow_nan=False)


def test_times_use_the_performance_convention():
    seconds = [1 / f for f in TIGHT]
    result = compare_history(seconds, 1.25 / 1000, higher_is_better=False)  # 25 % more time
    assert result.verdict == "slower"
    assert result.change == pytest.approx(1 / 1.25 - 1)  # -20 %: worse is negative for times too
    faster = compare_history(seconds, 0.75 / 1000, higher_is_better=False)
    assert faster.verdict == "faster" and faster.change == pytest.approx(1 / 0.75 - 1)


def test_a_significant_change_below_min_effect_is_no_change():
    result = compare_history(TIGHT, 950.0, higher_is_better=True, min_effect=0.10)
    assert result.p_worse < 0.05 and result.verdict == "no change"
    assert "min_effect" in result.reason
    assert compare_history(TIGHT, 950.0, higher_is_better=True, min_effect=0.04).verdict == "slower"


def test_a_noisy_machine_does_not_flag_a_change_it_makes_by_itself():
    # Run-level figures of unchanged code on a 2-core VM move 17-37 % between runs.
    noisy = [1000.0, 820.0, 1150.0, 900.0, 1240.0]
    result = compare_history(noisy, 700.0, higher_is_better=True)
    assert result.change < -0.25 and result.verdict == "no change" and result.p_worse > 0.05


@pytest.mark.parametrize("kwargs, match", [
    ({"history": [1.0, 0.0, 1.0], "current": 1.0}, "history"),
    ({"history": [1.0, 2.0, math.nan], "current": 1.0}, "history"),
    ({"history": [1.0, 2.0, 3.0], "current": -1.0}, "current"),
    ({"history": [1.0, 2.0, 3.0], "current": 1.0, "min_runs": 1}, "min_runs"),
    ({"history": [1.0, 2.0, 3.0], "current": 1.0, "alpha": 0.0}, "alpha"),
    ({"history": [1.0, 2.0, 3.0], "current": 1.0, "min_effect": -0.1}, "min_effect"),
    ({"history": [1.0, 2.0, 3.0], "current": 1.0, "max_runs": 2}, "max_runs"),
])
def test_bad_input_is_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compare_history(higher_is_better=True, **kwargs)


@given(history=histories, factor=st.floats(min_value=1e-3, max_value=1e3), current=figure,
       higher_is_better=st.booleans())
def test_scale_invariance(history, factor, current, higher_is_better):
    plain = compare_history(history, current, higher_is_better=higher_is_better)
    assume(_clear_of_boundaries(plain))
    scaled = compare_history([factor * h for h in history], factor * current, higher_is_better=higher_is_better)
    _assert_same(plain, scaled)


@given(history=histories, current=figure)
def test_rates_and_times_give_the_same_result(history, current):
    rates = compare_history(history, current, higher_is_better=True)
    assume(_clear_of_boundaries(rates))
    times = compare_history([1 / h for h in history], 1 / current, higher_is_better=False)
    _assert_same(rates, times)


@given(history=histories, current=figure)
def test_flipping_the_direction_swaps_worse_and_better(history, current):
    up = compare_history(history, current, higher_is_better=True, min_effect=0.0)
    down = compare_history(history, current, higher_is_better=False, min_effect=0.0)
    assert up.p_worse == pytest.approx(down.p_better, rel=1e-9, abs=1e-15)
    assert {up.verdict, down.verdict} in ({"no change"}, {"slower", "faster"})


@given(history=histories, current=figure)
def test_slower_exactly_when_below_the_prediction_interval(history, current):
    result = compare_history(history, current, higher_is_better=True, min_effect=0.0)
    assume(_clear_of_boundaries(result) and result.log_sd > 1e-9)
    assume(abs(result.change - result.interval_low) > 1e-9)
    assert (result.verdict == "slower") == (result.change < result.interval_low)
    assert result.interval_low < result.interval_high


# ------------------------------------------------------------------------------------------ Holm


def test_holm_known_values():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx((0.03, 0.06, 0.06, 0.02))
    assert holm([0.5, 0.9]) == pytest.approx((1.0, 1.0))
    assert holm([]) == ()
    with pytest.raises(ValueError, match="p_values"):
        holm([0.1, 1.5])
    with pytest.raises(ValueError, match="p_values"):
        holm([math.nan])


@given(probabilities)
def test_holm_properties(p_values):
    adjusted = holm(p_values)
    m = len(p_values)
    assert len(adjusted) == m
    assert all(p <= a <= 1.0 for p, a in zip(p_values, adjusted, strict=True))
    order = np.argsort(p_values, kind="stable")
    assert all(adjusted[i] <= adjusted[j] for i, j in itertools.pairwise(order))
    assert min(adjusted) == pytest.approx(min(1.0, m * min(p_values)))


# ---------------------------------------------------------------------------------- multiplicity


def test_decide_applies_holm_across_benchmarks_and_the_effect_gate():
    history = [1000.0, 1060.0, 940.0, 1030.0, 970.0]  # about 5 % apart
    slowdown = compare_history(history, 860.0, higher_is_better=True)  # -14 %, p about 0.02
    assert slowdown.verdict == "slower" and 0.01 < slowdown.p_worse < 0.05
    alone = decide_history([slowdown])
    assert alone[0].significant_slowdown and alone[0].adjusted_p_worse == slowdown.p_worse
    unchanged = [compare_history(history, 1000.0 + i, higher_is_better=True) for i in range(19)]
    among_many = decide_history([slowdown, *unchanged])
    assert among_many[0].adjusted_p_worse == pytest.approx(min(1.0, 20 * slowdown.p_worse))
    assert not among_many[0].significant_slowdown and among_many[0].verdict == "no change"
    small = compare_history(TIGHT, 950.0, higher_is_better=True)  # significant but below min_effect
    assert [d.verdict for d in decide_history([small])] == ["no change"]


def test_decide_passes_not_judged_through_and_leaves_it_out_of_m():
    fresh = compare_history([1000.0], 500.0, higher_is_better=True)
    slowdown = compare_history(TIGHT, 750.0, higher_is_better=True)
    decisions = decide_history([fresh, slowdown, fresh])
    assert [d.verdict for d in decisions] == ["not judged", "slower", "not judged"]
    assert decisions[0].adjusted_p_worse is None and not decisions[0].significant_slowdown
    assert decisions[1].adjusted_p_worse == slowdown.p_worse  # m = 1
    json.dumps([d.as_dict() for d in decisions], allow_nan=False)
    assert decide_history([]) == ()


def test_decide_reports_faster_but_never_alarms_on_it():
    decisions = decide_history([compare_history(TIGHT, 1300.0, higher_is_better=True)])
    assert decisions[0].verdict == "faster" and not decisions[0].significant_slowdown


# ----------------------------------------------------------------------------------- simulation


def test_a_single_benchmark_a_to_a_false_alarm_rate_is_alpha():
    # No effect gate and m = 1: the bare one-sided t test, exact under log-normal noise.
    rates = simulate_rates(noise_cv=0.10, history_runs=5, benchmarks=1, trials=2000, slowdowns=(),
                           alpha=0.05, min_effect=0.0, seed=1)
    assert rates.false_alarm.ci_low <= 0.05 <= rates.false_alarm.ci_high


def test_a_to_a_runs_fail_at_most_alpha_of_the_time():
    rates = simulate_rates(noise_cv=0.20, history_runs=3, benchmarks=10, trials=300, slowdowns=(0.25,),
                           alpha=0.05, min_effect=0.0, seed=2)
    assert rates.run_false_alarm.ci_low <= 0.05  # the family-wise rate, Holm across 10 benchmarks
    assert rates.false_alarm.ci_low <= 0.05 / 10


def test_simulation_detects_a_25_percent_slowdown_on_a_quiet_machine_and_is_seeded():
    kwargs = {"noise_cv": 0.02, "history_runs": 5, "benchmarks": 10, "trials": 100, "slowdowns": (0.10, 0.25),
              "seed": 3}
    rates = simulate_rates(**kwargs)
    detection = dict(rates.detection)
    assert detection[0.25].rate >= 0.95
    assert detection[0.10].rate < detection[0.25].rate
    assert rates.run_false_alarm.rate <= 0.05
    assert simulate_rates(**kwargs) == rates
    json.dumps(rates.as_dict(), allow_nan=False)


def test_module_constants_name_the_verdicts():
    assert {comparison.SLOWER, comparison.FASTER, comparison.NO_CHANGE, comparison.NOT_JUDGED} == {
        "slower", "faster", "no change", "not judged"}
