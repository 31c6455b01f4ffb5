"""The one round driver: the orders of interleaved runs, and rounds added until decided within a limit."""

import ast
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.measure.rounds import (
    BUDGET_SPENT,
    DECIDED,
    MAX_ROUNDS_REACHED,
    InterleavedRounds,
    RoundsOutcome,
    alternating,
    fitting,
    interleaved,
    planned,
    rotated,
    until_decided,
)
from perfsuite.pytest_plugin import recorder as recorder_module
from perfsuite.pytest_plugin.profiles import PROFILES
from perfsuite.pytest_plugin.recorder import Recorder, SessionContext


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@given(st.integers(1, 6), st.integers(1, 5))
def test_every_run_sits_at_the_same_mean_position_over_a_pair_of_alternating_rounds(runs, pairs):
    labels = [f"r{i}" for i in range(runs)]
    orders = [alternating(labels, index) for index in range(2 * pairs)]
    for label in labels:
        assert sum(order.index(label) for order in orders) == pairs * (runs - 1)


@given(st.integers(1, 6), st.integers(1, 3))
def test_rotated_orders_put_every_run_in_every_position_equally_often(runs, cycles):
    labels = [f"r{i}" for i in range(runs)]
    orders = [rotated(labels, index) for index in range(2 * runs * cycles)]
    for label in labels:
        positions = sorted(order.index(label) for order in orders)
        assert positions == sorted(list(range(runs)) * 2 * cycles)


def test_interleaved_runs_warm_up_in_the_order_and_keeps_only_measured_rounds():
    calls = []
    runs = {label: (lambda label=label: calls.append(label) or len(calls)) for label in "abc"}
    values, orders = interleaved(runs, rounds=2, warmup_rounds=1)
    assert calls == list("abc") + list("cba") + list("abc")
    assert orders == [tuple("cba"), tuple("abc")]
    assert values == {"a": [6, 7], "b": [5, 8], "c": [4, 9]}


@given(st.integers(0, 8), st.floats(0.1, 5.0), st.floats(0.0, 60.0), st.integers(1, 40), st.integers(1, 3),
       st.integers(0, 2))
def test_rounds_never_outrun_the_limit_or_max_rounds(planned, round_s, limit_s, max_rounds, step, warmup):
    clock = FakeClock()

    def one_round(index):
        clock.now += round_s

    clock.now = planned * round_s
    start = clock.now
    most = max(max_rounds, planned)
    outcome = until_decided(one_round, decided=lambda: False, limit_s=limit_s + start, max_rounds=most,
                            planned=planned, planned_s=start, step=step, warmup_rounds=warmup, clock=clock)
    assert outcome.rounds <= most and outcome.stopped in (BUDGET_SPENT, MAX_ROUNDS_REACHED)
    first_round_blind = planned == 0 and warmup == 0  # nothing tells what a round costs before it runs
    assert outcome.seconds <= outcome.limit_s + 1e-9 or first_round_blind or outcome.added == 0
    assert outcome.rounds == planned + outcome.added


def test_decided_is_asked_only_once_min_rounds_are_measured():
    clock, asked = FakeClock(), []

    def one_round(index):
        clock.now += 1.0

    def decided():
        asked.append(clock.now)
        return True

    outcome = until_decided(one_round, decided=decided, limit_s=100.0, max_rounds=30, min_rounds=3,
                            warmup_rounds=1, clock=clock)
    assert outcome.stopped == DECIDED and outcome.rounds == 3 and outcome.added == 3
    assert asked == [4.0]  # one warm-up and three measured rounds, then the first question
    assert outcome.note is None


@given(st.sampled_from(sorted(PROFILES)), st.floats(1e-5, 30.0))
def test_a_step_round_lasts_the_profiles_round_with_the_fewest_calls_that_do(name, call_s):
    profile = PROFILES[name]
    calls = profile.calls_per_round(call_s)
    assert calls >= profile.step_calls
    assert calls * call_s >= profile.min_round_s * (1 - 1e-9)  # the round lasts the profile's round
    if calls > profile.step_calls:  # more calls only to fill the round, and no more than fill it
        assert (calls - 1) * call_s < profile.min_round_s


def test_a_steps_sizing_call_is_its_last_warm_up_call():
    # Untimed calls before a step's rounds, sizing call included, are the profile's warm-up batches
    # (at least the first call, which traces and compiles, and the sizing call).
    for profile in PROFILES.values():
        assert profile.step_warmup_calls + 1 == max(profile.warmup_batches, 2), profile.name


@given(st.floats(0.0, 100.0), st.floats(-1.0, 10.0), st.integers(1, 5), st.integers(5, 50))
def test_the_rounds_that_fit_a_budget_stay_within_least_and_most(budget_s, each_s, least, most):
    count = fitting(budget_s, each_s, least=least, most=most)
    assert least <= count <= most
    if not each_s > 0:
        assert count == most  # nothing says what a round costs
    elif least < count < most:  # as many as fit, and no more
        assert count * each_s <= budget_s * (1 + 1e-9) and (count + 1) * each_s > budget_s * (1 - 1e-9)


def test_planned_rounds_fill_in_what_the_instrument_did_not_run_and_keep_counting():
    seen, ran = [], []

    def once(target, rounds):  # a disabled pytest-benchmark runs the target once
        ran.append(rounds)
        target()

    results = planned(lambda index: seen.append(index) or index * 10, 4, start=3, instrument=once)
    assert ran == [4] and seen == [3, 4, 5, 6] and results == [30, 40, 50, 60]
    assert planned(lambda index: index, 0, instrument=once) == [] and ran == [4]  # no rounds: no instrument


@given(st.integers(0, 3), st.integers(1, 4), st.integers(1, 4))
def test_interleaved_rounds_that_continue_earlier_ones_continue_their_order(warmup, first, more):
    runs = {label: (lambda label=label: label) for label in "abc"}
    _, whole = interleaved(runs, rounds=first + more, warmup_rounds=warmup)
    _, head = interleaved(runs, rounds=first, warmup_rounds=warmup)
    _, tail = interleaved(runs, rounds=more, start=warmup + first)
    assert head + tail == whole


class NoGates:
    """Baselines whose every gate is decided (undecided=False) or never (True)."""

    def __init__(self, undecided: bool):
        self.undecided = undecided

    def check(self, **_):
        return SimpleNamespace(undecided=("a gate",) if self.undecided else ())


class Benchmark:
    disabled = True

    def __init__(self):
        self.extra_info = {}

    def pedantic(self, target, **_):
        return target()


def _recorder(profile, *, undecided: bool) -> Recorder:
    context = SessionContext(profile=profile, baselines_dir=Path("."), baselines=NoGates(undecided), gates="report",
                             save_baselines=False, margin=0.3, baseline_profile="x", history={}, compare_alpha=0.01,
                             compare_min_effect=0.1, compare_mode="report")
    return Recorder(benchmark=Benchmark(), context=context, nodeid="benchmarks/test_x.py::t")


def _compare_order(recorder, *, warm: bool) -> tuple[list[str], list[str]]:
    """The compare's rounds on a fake clock that each side moves by its seconds: the budget's arithmetic,
    not this machine's load, decides how many rounds run."""
    calls, clock = [], FakeClock()

    def side(label, seconds):
        def run():
            calls.append(label)
            clock.now += seconds
            return seconds
        return run

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recorder_module, "time", SimpleNamespace(perf_counter=clock))
        result = recorder.compare("xla_over_graph_ratio", a=side("a", 0.002), b=side("b", 0.004), warm=warm)
    return ["".join(calls[i:i + 2]).upper() for i in range(0, len(calls), 2)], list(result.order)


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("undecided", [False, True])
def test_a_compares_rounds_alternate_from_its_first_round_to_its_last(warm, undecided):
    profile = replace(PROFILES["smoke"], budget_s=0.02, min_rounds=3, max_rounds=9)
    orders, measured = _compare_order(_recorder(profile, undecided=undecided), warm=warm)
    assert orders == [alternating(("A", "B"), index)[0] + alternating(("A", "B"), index)[1]
                      for index in range(len(orders))]
    assert measured == orders[0 if warm else 1:]  # a warm-up round first unless each side warms up itself
    assert len(measured) >= profile.min_rounds + (2 if undecided else 0)  # pairs added while undecided


def test_a_ratio_gate_whose_budget_runs_out_leaves_the_same_note_as_every_undecided_gate():
    profile = replace(PROFILES["smoke"], budget_s=0.02, min_rounds=2, max_rounds=10_000)
    recorder = _recorder(profile, undecided=True)
    _compare_order(recorder, warm=False)
    outcome = RoundsOutcome.from_dict(recorder.benchmark.extra_info["xla_over_graph_ratio_rounds_outcome"])
    assert outcome.stopped == BUDGET_SPENT and outcome.added >= 2
    assert recorder.notes == [f"xla_over_graph_ratio: {outcome.note}"]
    assert recorder.notes[0].startswith("xla_over_graph_ratio: budget spent with a gate still inconclusive after")
    # the overshoot of the budget is the engine's, tested on a fake clock
    # (test_rounds_never_outrun_the_limit_or_max_rounds): this run's wall clock decides nothing here
    decided = _recorder(profile, undecided=False)
    _compare_order(decided, warm=False)
    assert decided.notes == []


def test_a_limit_that_bounds_when_rounds_start_lets_the_last_one_end_past_it():
    clock = FakeClock()

    def one_round(index):
        clock.now += 10.0

    fitting = until_decided(one_round, decided=lambda: False, limit_s=15.0, max_rounds=9, clock=clock)
    clock.now = 0.0
    started = until_decided(one_round, decided=lambda: False, limit_s=15.0, max_rounds=9, clock=clock, fit=False)
    assert (fitting.rounds, started.rounds) == (1, 2)  # the second round starts at 10 s, ends at 20 s
    assert fitting.stopped == started.stopped == BUDGET_SPENT


def test_a_callers_estimate_of_the_next_step_decides_whether_it_fits():
    # Rounds of 10 s, then 2 s (the self-test's trials: fewer shares later). The longest round so far would
    # stop after the first; the caller's estimate lets the short rounds fill the limit, never past it.
    clock, lengths = FakeClock(), [10.0, 2.0, 2.0, 2.0, 2.0, 2.0]

    def outcome(*, estimate: bool):
        clock.now, ran = 0.0, []

        def one_round(index):
            ran.append(index)
            clock.now += lengths[index]

        return until_decided(one_round, decided=lambda: False, limit_s=17.0, max_rounds=6, clock=clock,
                             next_step_s=(lambda: lengths[len(ran)]) if estimate else None)

    assert (outcome(estimate=False).rounds, clock.now) == (1, 10.0)
    assert (outcome(estimate=True).rounds, clock.now) == (4, 16.0)


# ------------------------------------------------------------------------------------------- the engine


def _engine(calls, labels="abc", **options):
    return InterleavedRounds({label: (lambda label=label: calls.append(label) or len(calls)) for label in labels},
                             **options)


def test_the_engine_alternates_forwards_and_backwards_across_calls_and_passes():
    calls = []
    engine = _engine(calls)
    engine.one_round()
    engine.run(2)
    assert engine.until_decided(lambda: engine.rounds_run >= 4, limit_s=60.0, max_rounds=9).stopped == DECIDED
    assert calls == [*"abc", *"cba", *"abc", *"cba"]
    assert engine.orders == [tuple("abc"), tuple("cba"), tuple("abc"), tuple("cba")]
    assert engine.values == {"a": [1, 6, 7, 12], "b": [2, 5, 8, 11], "c": [3, 4, 9, 10]}


def test_a_subset_runs_in_this_rounds_order_and_keeps_the_others_results_as_they_were():
    calls = []
    engine = _engine(calls)
    engine.one_round()
    assert list(engine.one_round(("a", "c"))) == ["c", "a"]  # round 1: backwards, whatever the subset
    assert list(engine.one_round(("c", "a"))) == ["c", "a"]  # round 2: forwards, in the order given
    assert engine.values == {"a": [1, 5, 7], "b": [2], "c": [3, 4, 6]}
    with pytest.raises(KeyError, match="expected runs of"):
        engine.one_round(("d",))


def test_warm_up_rounds_are_kept_apart_and_count_in_the_order_unless_asked_not_to():
    calls = []
    engine = _engine(calls, labels="ab", warmup_rounds=1)
    assert engine.warming_up and engine.warmup_left == 1
    engine.run(4)  # the warm-up round among them
    assert calls == [*"ab", *"ba", *"ab", *"ba"] and engine.orders == [tuple("ba"), tuple("ab"), tuple("ba")]
    assert engine.warmups == {"a": [1], "b": [2]} and engine.values == {"a": [4, 5, 8], "b": [3, 6, 7]}
    calls.clear()
    measured_order = _engine(calls, labels="ab", warmup_rounds=1, count_warmup=False)
    measured_order.run(3)
    assert calls == [*"ab", *"ab", *"ba"]  # the warm-up takes the first measured round's order


def test_an_engine_made_afresh_continues_earlier_values_and_order():
    calls, values = [], {"a": [0], "b": [0]}
    engine = _engine(calls, labels="ab", start=1, values=values)
    engine.run(2)
    assert calls == [*"ba", *"ab"] and values == {"a": [0, 2, 3], "b": [0, 1, 4]}


def test_until_decided_hands_the_round_body_to_a_callers_driver_with_the_warm_up_left():
    calls, asked = [], []
    engine = _engine(calls, labels="ab", warmup_rounds=2)
    engine.one_round()

    def driver(one_round, *, decided, warmup_rounds, share_s):  # a diagnose Stage's rounds_until_decided
        asked.append((warmup_rounds, share_s))
        for index in range(3):
            one_round(index)
        return decided()

    assert engine.until_decided(lambda: True, driver=driver, share_s=5.0, labels=lambda: ("b",))
    assert asked == [(1, 5.0)] and calls == ["a", "b"] + ["b"] * 3 and engine.values["b"] == [4, 5]


def _reverses(node: ast.AST) -> bool:
    """Whether node holds a reversal: a [::-1] slice or a reversed() call."""
    return any((isinstance(n, ast.Slice) and n.lower is None and n.upper is None and isinstance(n.step, ast.UnaryOp)
                and ast.literal_eval(n.step) == -1)
               or (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "reversed")
               for n in ast.walk(node))


def _rotation_or_alternation(node: ast.AST) -> str | None:
    """What a node writes by hand of a round's order, or None: a rotation (x[k:] + x[:k]), an order reversed on
    every other round (a test of `% 2` choosing a reversal), or a loop over alternating()/rotated()."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = node.left, node.right
        if all(isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Slice) for n in (left, right)):
            (head, tail) = left.slice, right.slice
            if ast.dump(left.value) == ast.dump(right.value) and (
                    (head.lower is not None and ast.dump(head.lower) == ast.dump(tail.upper or ast.Pass()))
                    or (head.upper is not None and ast.dump(head.upper) == ast.dump(tail.lower or ast.Pass()))):
                return "a rotation by slicing"
    if isinstance(node, ast.If | ast.IfExp):
        parity = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and isinstance(n.right, ast.Constant)
                     and n.right.value == 2 for n in ast.walk(node.test))
        branches = [node.body, node.orelse] if isinstance(node, ast.IfExp) else [*node.body, *node.orelse]
        if parity and any(_reverses(branch) for branch in branches):
            return "an order reversed on every other round"
    if isinstance(node, ast.For | ast.comprehension) and isinstance(node.iter, ast.Call) and \
            getattr(node.iter.func, "id", getattr(node.iter.func, "attr", None)) in ("alternating", "rotated"):
        return "a loop over a round's order"
    return None


def test_no_caller_writes_a_rounds_order_itself():
    root = Path(__file__).resolve().parent.parent
    found = [f"{path.relative_to(root)}:{node.lineno}: {what}" for folder in ("perfsuite", "benchmarks", "scripts", "examples")
             for path in sorted((root / folder).rglob("*.py"))
             if path != root / "perfsuite" / "measure" / "rounds.py"
             for node in ast.walk(ast.parse(path.read_text()))
             if (what := _rotation_or_alternation(node)) is not None]
    assert found == []  # each hands its runs to measure.rounds.InterleavedRounds (or interleaved)


def test_the_guard_catches_hand_written_rotations_and_alternations():
    written = {
        "labels[shift:] + labels[:shift]": "a rotation by slicing",
        "runs[:i % n] + runs[i % n:]": "a rotation by slicing",
        "order = labels if index % 2 == 0 else labels[::-1]": "an order reversed on every other round",
        "if trial % 2:\n    order = list(reversed(order))": "an order reversed on every other round",
        "for label in rotated(labels, index):\n    pass": "a loop over a round's order",
        "results = [run() for run in rounds.alternating(runs, index)]": "a loop over a round's order",
    }
    for source, what in written.items():
        assert [w for n in ast.walk(ast.parse(source)) if (w := _rotation_or_alternation(n))] == [what], source
    for fine in ("values[-rounds:]", "a[:n] + b[:n]", "median = ordered[middle] if size % 2 else mean",
                 "order = rotated(levels, trial)"):
        assert not [n for n in ast.walk(ast.parse(fine)) if _rotation_or_alternation(n)], fine
