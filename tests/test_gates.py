"""Gates decided with their interval: fail only when the whole interval is on the wrong side."""

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.errors import BaselineError
from perfsuite.measure.rounds import BUDGET_SPENT, MAX_ROUNDS_REACHED, until_decided
from perfsuite.measure.stats import median_interval
from perfsuite.pytest_plugin.recorder import UNDECIDED_BUDGET_FACTOR
from perfsuite.verdict.baselines import RatioGates, load_ratios
from perfsuite.verdict.gates import (
    CONTEXT,
    FAIL,
    INCONCLUSIVE,
    PASS,
    REGRESSION,
    Threshold,
    check_benchmark,
    judge,
)

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


# ------------------------------------------------------------------------------------------ roles

SHIPPED_RATIOS = Path(__file__).parents[1] / "benchmarks" / "baselines" / "ratios.yaml"


def test_a_context_verdict_is_shown_never_fails_and_never_counts_as_passed():
    context = Threshold(metric="slow_input_bound", kind="min", value=0.05, claim="the slow path is slow", role=CONTEXT)
    ratios = RatioGates(path=Path("ratios.yaml"), gates={"slow_input_bound": (context,)})
    holds = check_benchmark(profile=None, ratios=ratios, benchmark_id="b", metrics={"slow_input_bound": 0.4},
                            rounds={"slow_input_bound": [0.3, 0.4, 0.5]})
    broken = check_benchmark(profile=None, ratios=ratios, benchmark_id="b", metrics={"slow_input_bound": 0.01},
                             rounds={"slow_input_bound": [0.0, 0.01, 0.02]})
    assert holds.verdicts[0].decision == PASS and holds.verdicts[0].label == "context: holds"
    assert broken.verdicts[0].decision == FAIL and broken.verdicts[0].label == "context: does not hold"
    assert broken.passed and not broken.failures  # a contrast that no longer holds fails no run
    assert "context fail" in broken.verdicts[0].message and broken.verdicts[0].as_dict()["role"] == CONTEXT
    regression = judge("b", GATE, {GATE.metric: 1.0}, "ratios.yaml", [0.9, 1.0, 1.1])
    assert regression.label == "FAILED" and not regression.passed


def test_roles_in_a_gate_file_are_read_and_a_wrong_one_is_refused_naming_it(tmp_path):
    path = tmp_path / "ratios.yaml"
    path.write_text("ratios:\n  a_ratio: {min: 2.0, claim: c}\n  b_ratio: {min: 3.0, claim: d, role: context}\n")
    gates = load_ratios(path).gates
    assert gates["a_ratio"][0].role == REGRESSION and gates["b_ratio"][0].role == CONTEXT
    path.write_text("ratios:\n  a_ratio: {min: 2.0, claim: c, role: contrast}\n")
    with pytest.raises(BaselineError, match=r"ratios.a_ratio.role: expected one of regression, context, found "
                                            r"str 'contrast'"):
        load_ratios(path)
    with pytest.raises(ValueError, match="Threshold.role"):
        Threshold(metric="a_ratio", kind="min", value=1.0, role="contrast")


def test_the_shipped_contrasts_are_context_and_every_other_gate_a_regression_gate():
    roles = {metric: {t.role for t in gates} for metric, gates in load_ratios(SHIPPED_RATIOS).gates.items()}
    context = {metric for metric, found in roles.items() if found == {CONTEXT}}
    assert context == {"numpy_function_wav_input_bound", "emulated_starved_util_median",
                       "emulated_starved_idle_fraction", "emulated_starved_oscillation",
                       "emulated_starved_period_over_cycle", "emulated_fed_over_starved_busy_ratio"}
    assert all(found in ({CONTEXT}, {REGRESSION}) for found in roles.values())


# ------------------------------------------------------------------------------------ more rounds


class FakeRounds:
    """Rounds of a fake measurement on a fake clock: each round takes `round_s` and appends the next
    value; the gate (min 1.5) is judged on the values so far, as the benchmarks judge theirs."""

    def __init__(self, values, *, round_s=1.0, planned=5):
        self.pending, self.round_s, self.now = list(values), round_s, 0.0
        self.values = [self.pending.pop(0) for _ in range(planned)]
        self.now = planned * round_s

    def clock(self):
        return self.now

    def one_round(self):
        self.values.append(self.pending.pop(0))
        self.now += self.round_s

    def undecided(self):
        return judge("b", GATE, {GATE.metric: 1.0}, "ratios.yaml", self.values).decision == INCONCLUSIVE

    def add(self, *, budget_s=100.0, max_rounds=40, step=1):
        # as the fixture adds rounds to an undecided gate (Recorder.more_rounds)
        return until_decided(lambda index: self.one_round(), decided=lambda: not self.undecided(),
                             planned=len(self.values), planned_s=self.now, max_rounds=max_rounds, step=step,
                             limit_s=UNDECIDED_BUDGET_FACTOR * max(budget_s, self.now), clock=self.clock)


def test_a_straddling_interval_gets_more_rounds_until_it_is_decided():
    # Five planned rounds straddle 1.5 (one low outlier); the added rounds all lie above it, and the
    # interval leaves the outlier out once there are enough rounds (k = 2 from 9 rounds).
    fake = FakeRounds([1.4, 1.8, 1.9, 1.7, 2.0] + [1.8] * 30)
    outcome = fake.add()
    assert outcome.decided and outcome.note is None
    assert outcome.rounds == len(fake.values) == 9 and outcome.added == 4
    assert not fake.undecided()


def test_a_decided_gate_gets_no_more_rounds():
    fake = FakeRounds([1.8, 1.9, 1.7, 2.0, 1.6] + [1.8] * 10)
    outcome = fake.add()
    assert outcome.decided and outcome.added == 0 and len(fake.values) == 5


def test_the_budget_and_max_rounds_bound_an_undecided_gate_and_the_note_says_so():
    straddling = [1.4, 1.6] * 40
    by_budget = FakeRounds(straddling, round_s=1.0, planned=5)
    outcome = by_budget.add(budget_s=4.0)  # 5 planned rounds took 5 s: at most 2 x 5 s in all
    assert outcome.stopped == BUDGET_SPENT and outcome.rounds == 10 and outcome.seconds <= outcome.limit_s == 10.0
    assert "budget spent with a gate still inconclusive after 10 rounds (5 added" in outcome.note
    by_count = FakeRounds(straddling, round_s=1.0, planned=5)
    outcome = by_count.add(budget_s=100.0, max_rounds=12, step=2)
    assert outcome.stopped == MAX_ROUNDS_REACHED and outcome.rounds == 11 and len(by_count.values) == 11
    assert outcome.as_dict()["added"] == 6


@given(st.integers(1, 20), st.floats(0.01, 5.0), st.floats(0.0, 50.0), st.integers(2, 60))
def test_added_rounds_never_outrun_the_limit_or_max_rounds(planned, round_s, budget_s, max_rounds):
    fake = FakeRounds([1.4, 1.6] * 60, round_s=round_s, planned=planned)
    outcome = fake.add(budget_s=budget_s, max_rounds=max(max_rounds, planned))
    assert outcome.rounds == len(fake.values) <= max(max_rounds, planned)
    assert outcome.seconds <= outcome.limit_s + 1e-9 or outcome.added == 0
