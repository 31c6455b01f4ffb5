"""Gates decided with their interval: fail only when the whole interval is on the wrong side."""

import math
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from perfsuite.measure.stats import median_interval
from perfsuite.verdict.baselines import RatioGates
from perfsuite.verdict.gates import FAIL, INCONCLUSIVE, PASS, Threshold, check_benchmark, judge

GATE = Threshold(metric="a_over_b_ratio", kind="min", value=1.5, claim="A is at least 1.5x B")
rounds_st = st.lists(st.floats(min_value=0.1, max_value=10.0), min_size=2, max_size=30)


def test_order_statistic_interval_coverage_and_bounds():
    assert median_interval([3.0, 1.0, 2.0]).coverage == 0.75  # [min, max] of 3 rounds
    five = median_interval([1, 2, 3, 4, 5])
    assert (five.low, five.high, five.coverage) == (1, 5, 1 - 2 / 32)
    twenty = median_interval(list(range(20)))
    assert twenty.coverage >= 0.95 and (twenty.low, twenty.high) == (5, 14)


@given(rounds_st)
def test_interval_holds_the_median_and_lies_within_the_rounds(values):
    interval = median_interval(values)
    assert min(values) <= interval.low <= interval.median <= interval.high <= max(values)


@given(rounds_st)
def test_decision_follows_where_the_interval_lies(values):
    verdict = judge("b", GATE, {GATE.metric: float(sorted(values)[len(values) // 2])}, "ratios.yaml", values)
    low, high = verdict.interval.low, verdict.interval.high
    expected = PASS if low >= GATE.value else FAIL if high < GATE.value else INCONCLUSIVE
    assert verdict.decision == expected
    assert verdict.passed == (expected != FAIL)


def test_all_rounds_below_fails_straddling_is_inconclusive_and_above_passes():
    assert judge("b", GATE, {GATE.metric: 1.2}, "f", [1.1, 1.2, 1.3, 1.2, 1.25]).decision == FAIL
    straddling = judge("b", GATE, {GATE.metric: 1.6}, "f", [1.2, 1.6, 1.9, 1.4, 1.7])
    assert straddling.decision == INCONCLUSIVE and straddling.passed
    assert "inconclusive" in straddling.message and "A is at least 1.5x B" in straddling.message
    assert judge("b", GATE, {GATE.metric: 2.0}, "f", [1.8, 2.0, 2.2, 1.9, 2.1]).decision == PASS


def test_a_max_gate_mirrors_a_min_gate():
    share = Threshold(metric="x_input_bound", kind="max", value=0.05)
    assert judge("b", share, {share.metric: 0.01}, "f", [0.0, 0.01, 0.02]).decision == PASS
    assert judge("b", share, {share.metric: 0.2}, "f", [0.1, 0.2, 0.3]).decision == FAIL
    assert judge("b", share, {share.metric: 0.04}, "f", [0.0, 0.04, 0.09]).decision == INCONCLUSIVE


def test_without_rounds_a_single_value_decides_and_a_missing_one_fails():
    assert judge("b", GATE, {GATE.metric: 1.5}, "f").decision == PASS
    assert judge("b", GATE, {GATE.metric: 1.49}, "f").decision == FAIL
    missing = judge("b", GATE, {}, "f")
    assert (missing.decision, missing.note) == (FAIL, "not measured")
    assert judge("b", GATE, {GATE.metric: math.nan}, "f").decision == FAIL


def test_check_applies_only_the_gates_whose_metric_was_measured():
    gates = RatioGates(path=Path("ratios.yaml"), gates={GATE.metric: (GATE,), "other_ratio": (GATE,)})
    result = check_benchmark(profile=None, ratios=gates, benchmark_id="b", metrics={GATE.metric: 1.0},
                             rounds={GATE.metric: [0.9, 1.0, 1.1]})
    assert [v.decision for v in result.verdicts] == [FAIL]
    assert result.verdicts[0].interval.n == 3
