"""perfsuite ab: the decision on synthetic rounds, the worker's round driver and the Recorder seam
with fake channels, the report, and end to end on tiny git repositories (busy-loop benchmarks, no
TensorFlow): a planted slowdown, a crash, a hang and a side that cannot start."""

import argparse
import dataclasses
import itertools
import json
import math
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from perfsuite import records
from perfsuite.pytest_plugin import ab_worker
from perfsuite.pytest_plugin.profiles import PROFILES
from perfsuite.pytest_plugin.recorder import Recorder, SessionContext
from perfsuite.tools.ab import manager, present, results, runner
from perfsuite.verdict import ab
from perfsuite.verdict.ab import FASTER, NO_CHANGE, SLOWER, UNDECIDED, ABSettings, Paired

SETTINGS = ABSettings()


def _rounds(rng, n, *, change=0.0, noise=0.03, name="bench"):
    """n paired rounds of a figure around 100 (higher is better); B's is ``change`` away from A's."""
    a = 100 * np.exp(rng.normal(0, noise / np.sqrt(2), n))
    b = 100 * (1 + change) * np.exp(rng.normal(0, noise / np.sqrt(2), n))
    return Paired(name, tuple(a), tuple(b))


def _adaptive(rng, *, change, noise, benchmarks=1):
    """Rounds added two at a time until settled or max_rounds, as the controller takes them."""
    a, b = [], []
    while True:
        more = _rounds(rng, 2, change=change, noise=noise)
        a += more.a
        b += more.b
        paired = Paired("bench", tuple(a), tuple(b))
        if len(a) >= SETTINGS.max_rounds or (len(a) >= SETTINGS.min_rounds
                                             and ab.settled(paired, SETTINGS, benchmarks=benchmarks)):
            return paired


# ------------------------------------------------------------------------------------------ decision


def test_settings_refuse_odd_or_small_round_counts_and_list_the_looks():
    assert SETTINGS.looks == (12, 24, 48, 96) and SETTINGS.look_count == 5
    with pytest.raises(ValueError, match="min_rounds: expected an even number >= 4, found 7"):
        ABSettings(min_rounds=7)
    with pytest.raises(ValueError, match="max_rounds"):
        ABSettings(min_rounds=12, max_rounds=10)
    with pytest.raises(ValueError, match="alpha: expected a number between 0 and 1, found 1.5"):
        ABSettings(alpha=1.5)


def test_sign_test_is_the_exact_binomial_tail():
    assert ab.sign_test(12, 12) == pytest.approx(2 ** -12)
    assert ab.sign_test(0, 12) == 1.0
    assert ab.sign_test(0, 0) == 1.0


def test_paired_rounds_refuse_unequal_counts_and_non_positive_figures():
    with pytest.raises(ValueError, match="expected as many rounds of B as of A, found 1 and 2"):
        Paired("x", (1.0, 2.0), (1.0,))
    with pytest.raises(ValueError, match="expected positive figures from side B, found 0.0"):
        Paired("x", (1.0,), (0.0,))


@pytest.mark.parametrize("change,expected", [(-0.10, SLOWER), (-0.25, SLOWER), (0.10, FASTER), (0.0, NO_CHANGE)])
def test_a_clear_change_or_none_is_decided(change, expected):
    rng = np.random.default_rng(1)
    [verdict] = ab.decide_revisions([ab.estimate(_rounds(rng, 48, change=change), SETTINGS)], SETTINGS)
    assert verdict.verdict == expected
    assert verdict.estimate.low <= verdict.estimate.change <= verdict.estimate.high
    assert verdict.significant_slowdown == (expected == SLOWER)


def test_a_lower_is_better_figure_counts_a_rise_as_worse():
    rng = np.random.default_rng(2)
    times = _rounds(rng, 48, change=0.12)
    [verdict] = ab.decide_revisions([ab.estimate(dataclasses.replace(times, higher_is_better=False), SETTINGS)], SETTINGS)
    assert verdict.verdict == SLOWER and verdict.estimate.change < 0


def test_few_noisy_rounds_are_inconclusive_with_an_estimate_of_the_rounds_needed():
    rng = np.random.default_rng(3)
    [verdict] = ab.decide_revisions([ab.estimate(_rounds(rng, 12, noise=0.10), SETTINGS)], SETTINGS)
    assert verdict.verdict == UNDECIDED
    assert verdict.more_rounds is not None and verdict.more_rounds >= 2 and verdict.more_rounds % 2 == 0
    assert f"needs ~{verdict.more_rounds} more rounds" in verdict.label()


def test_a_significant_change_below_the_minimum_effect_is_not_a_slowdown():
    logs = np.full(48, np.log(0.99)) + np.linspace(-1e-3, 1e-3, 48)  # 1 % slower in every round
    paired = Paired("x", tuple(np.ones(48)), tuple(np.exp(logs)))
    [verdict] = ab.decide_revisions([ab.estimate(paired, SETTINGS)], SETTINGS)
    assert verdict.p_slower < 1e-6 and verdict.verdict == NO_CHANGE


def test_the_minimum_effect_grows_with_the_noise():
    rng = np.random.default_rng(4)
    quiet, noisy = (ab.estimate(_rounds(rng, 24, noise=n), SETTINGS) for n in (0.01, 0.30))
    assert quiet.min_effect == SETTINGS.min_effect
    assert noisy.min_effect > 0.05


def test_holm_keeps_one_slowdown_among_unchanged_benchmarks_and_only_it():
    rng = np.random.default_rng(5)
    rounds = [_rounds(rng, 48, change=-0.10, name="slow")] + [_rounds(rng, 48, name=f"same{i}") for i in range(9)]
    verdicts = ab.decide_revisions([ab.estimate(r, SETTINGS) for r in rounds], SETTINGS)
    assert [v.name for v in verdicts if v.verdict == SLOWER] == ["slow"]
    assert all(v.p_slower >= v.estimate.p_slower for v in verdicts)


def test_settled_only_at_a_look():
    rng = np.random.default_rng(6)
    clear = _rounds(rng, 26, change=-0.3)
    assert ab.settled(Paired("x", clear.a[:24], clear.b[:24]), SETTINGS, benchmarks=1)
    assert not ab.settled(clear, SETTINGS, benchmarks=1)  # 26 rounds: not a look


def test_adaptive_rounds_keep_false_alarms_below_alpha_and_catch_ten_percent():
    rng = np.random.default_rng(7)
    alarms = sum(ab.decide_revisions([ab.estimate(_adaptive(rng, change=0.0, noise=0.07), SETTINGS)], SETTINGS)[0].verdict
                 in (SLOWER, FASTER) for _ in range(300))
    caught = sum(ab.decide_revisions([ab.estimate(_adaptive(rng, change=-0.10, noise=0.07), SETTINGS)], SETTINGS)[0].verdict
                 == SLOWER for _ in range(100))
    assert alarms <= 6  # alpha 1 %: 3 expected at most; 6 of 300 has probability < 8 % even at 1 %
    assert caught >= 95


def _passes(rng, *, change, process_sd, count=SETTINGS.passes, rounds=24, noise=0.03):
    """``count`` passes, each a fresh pair of processes: B's figure off A's by ``change`` plus an
    offset of that pair (normal, SD process_sd) that lasts the whole pass, as measured on fast benchmarks."""
    return [_rounds(rng, rounds, change=math.expm1(math.log1p(change) + rng.normal(0, process_sd)), noise=noise)
            for _ in range(count)]


def test_a_difference_between_processes_fools_the_rounds_but_not_the_passes():
    # Process offsets of SD 7 % (the TF-native cache loader's A/A runs on the 2-core VM): one pass's
    # rounds call most runs slower or faster; over 6 passes the false alarms stay near alpha.
    rng = np.random.default_rng(11)
    runs = [_passes(rng, change=0.0, process_sd=0.07) for _ in range(300)]
    by_rounds = sum(ab.decide_revisions([ab.estimate(r[0], SETTINGS)], SETTINGS)[0].verdict in (SLOWER, FASTER) for r in runs)
    by_passes = sum(ab.decide_revisions([ab.estimate_passes(r, SETTINGS)], SETTINGS)[0].verdict in (SLOWER, FASTER)
                    for r in runs)
    assert by_rounds >= 150
    assert by_passes <= 6  # alpha 1 % over both directions: 3 expected


def test_passes_catch_ten_percent_where_processes_differ_little():
    # A loader whose processes differ by SD 1.5 % (the TF-native WAV loader's A/A runs), passes added
    # until decided.
    rng = np.random.default_rng(12)
    caught = sum(ab.decide_revisions([ab.estimate_passes(_adaptive_passes(rng, change=-0.10, process_sd=0.015,
                                                                          noise=0.03), SETTINGS)],
                                     SETTINGS)[0].verdict == SLOWER for _ in range(200))
    assert caught >= 190


def test_an_estimate_over_passes_says_so():
    rng = np.random.default_rng(13)
    e = ab.estimate_passes(_passes(rng, change=0.0, process_sd=0.07), SETTINGS)
    assert e.passes == SETTINGS.passes and e.rounds == 24 * SETTINGS.passes and e.low < e.change < e.high
    verdict = ab.decide_revisions([e], SETTINGS)[0]
    if verdict.verdict == UNDECIDED:
        assert verdict.more_rounds is None and "would narrow it" in verdict.label()
    with pytest.raises(ValueError, match="expected at least 2 passes, found 1"):
        ab.estimate_passes(_passes(rng, change=0.0, process_sd=0.0, count=1), SETTINGS)
    with pytest.raises(ValueError, match="passes: expected an integer >= 1, found 0"):
        ABSettings(passes=0)


def _adaptive_passes(rng, *, change, process_sd, settings=SETTINGS, noise=0.10):
    """Passes added one at a time until passes_settled, as compare_revisions adds them (rounds of
    noise 10 %, the TF-native cache loader's within a pass)."""
    passes = []
    while not passes or not ab.passes_settled(passes, settings, benchmarks=1):
        passes += _passes(rng, change=change, process_sd=process_sd, count=1, noise=noise)
    return passes


def test_pass_looks_grow_by_half_up_to_max_passes_and_widen_the_interval():
    assert SETTINGS.pass_looks == (6, 9, 14, 21, 24)
    assert ABSettings(passes=5, max_passes=12).pass_looks == (5, 8, 12)
    assert ABSettings(passes=6, max_passes=6).pass_looks == (6,)
    assert ABSettings(passes=1).pass_looks == (1,)
    assert SETTINGS.confidence(6) == pytest.approx(1 - 0.1 / 5)
    assert ABSettings(max_passes=6).confidence(6) == pytest.approx(0.9)  # fixed passes: no looks to pay for
    with pytest.raises(ValueError, match="max_passes: expected an integer >= passes \\(6\\), found 4"):
        ABSettings(max_passes=4)


def test_more_passes_reach_no_change_where_processes_differ_without_more_false_alarms():
    # Process offsets of SD 4.6 % and rounds of 10 % (the cache loader's A/A run over 12 passes,
    # docs/ab.md): fixed 6 passes rarely say "no change"; passes added up to 24 mostly do, and the
    # looks they take keep the false alarms within alpha.
    rng = np.random.default_rng(21)
    fixed = ABSettings(max_passes=6)
    six = [ab.decide_revisions([ab.estimate_passes(_passes(rng, change=0.0, process_sd=0.046, noise=0.10), fixed)], fixed)[0]
           for _ in range(300)]
    runs = [_adaptive_passes(rng, change=0.0, process_sd=0.046) for _ in range(300)]
    adaptive = [ab.decide_revisions([ab.estimate_passes(r, SETTINGS)], SETTINGS)[0] for r in runs]
    assert sum(v.verdict == NO_CHANGE for v in six) <= 150
    assert sum(v.verdict == NO_CHANGE for v in adaptive) >= 255
    assert sum(v.verdict in (SLOWER, FASTER) for v in adaptive) <= 6  # alpha 1 %: 3 expected
    assert all(len(r) in SETTINGS.pass_looks for r in runs)


def test_adaptive_passes_stop_at_an_early_look_where_processes_differ_little():
    rng = np.random.default_rng(22)
    quiet = [_adaptive_passes(rng, change=0.0, process_sd=0.015, noise=0.03) for _ in range(100)]
    slower = [_adaptive_passes(rng, change=-0.10, process_sd=0.015, noise=0.03) for _ in range(100)]
    assert sum(len(r) <= SETTINGS.pass_looks[1] for r in quiet) >= 95
    assert sum(ab.decide_revisions([ab.estimate_passes(r, SETTINGS)], SETTINGS)[0].verdict == SLOWER for r in slower) >= 95


def _offset_run(rng, *, change, settings=SETTINGS, slow_share=1 / 3, slow=0.6, process_sd=0.04, rounds=6,
                noise=0.14):
    """Passes added as compare_revisions adds them. Each pass a fresh worker pair, and each worker keeps a
    constant speed offset of its own for its whole life: with probability slow_share it is in a slow
    mode (speed x slow), on either side at random, besides a normal offset of SD process_sd (the
    spread a 2-core AMD box showed between fresh processes: docs/ab.md, "Where the noise lives")."""
    passes = []
    while not passes or not ab.passes_settled(passes, settings, benchmarks=1):
        a_offset, b_offset = (rng.normal(0, process_sd) + (math.log(slow) if rng.random() < slow_share else 0.0)
                              for _ in range(2))
        passes.append(_rounds(rng, rounds, change=math.expm1(math.log1p(change) + b_offset - a_offset), noise=noise))
    return ab.decide_revisions([ab.estimate_passes(passes, settings)], settings)[0]


def test_a_constant_offset_of_one_side_s_process_is_not_called_a_change():
    # A third of the processes in a slow mode 40 % down for their life, on either side at random: the
    # trimmed test over the passes drops the outlying passes; the false alarms stay within alpha (1 %).
    rng = np.random.default_rng(50)
    same = [_offset_run(rng, change=0.0, settings=ABSettings(max_passes=32)) for _ in range(300)]
    assert sum(v.verdict in (SLOWER, FASTER) for v in same) <= 6  # 3 expected at alpha 1 %
    untrimmed = ABSettings(max_passes=32, trim=0.0)
    plain = [_offset_run(rng, change=0.0, settings=untrimmed) for _ in range(300)]
    assert sum(v.verdict == NO_CHANGE for v in same) > sum(v.verdict == NO_CHANGE for v in plain)


def test_a_slow_mode_of_a_third_of_the_processes_leaves_ten_percent_undecided_never_reversed():
    # What the passes cannot do: with a third of the processes 40 % down for their life, a 10 % change
    # stays undecided within 32 passes (the pairing of two processes cannot cancel it: docs/ab.md),
    # and is never called faster or no change.
    rng = np.random.default_rng(51)
    planted = [_offset_run(rng, change=-1 / 11, settings=ABSettings(max_passes=32)) for _ in range(100)]
    assert not any(v.verdict in (FASTER, NO_CHANGE) for v in planted)
    assert sum(v.verdict == UNDECIDED for v in planted) >= 80


def _process(rng, *, work, load, rounds, hog):
    """One worker process's rounds: wall samples/s and CPU seconds per sample. ``work``: 1.10 for 10 %
    more work (wall down, CPU per sample up alike). load "light": the process falls, for its whole life
    and with probability 0.3, into a slow state (wall about -33 %, CPU per sample about +45 %: waiting
    busily). ``hog``: a competing CPU hog's per-round slowdown shared by both sides of a pair (wall only)."""
    slow = load == "light" and rng.random() < 0.3
    wall = 1900 / work * math.exp(rng.normal(0, 0.02)) * (0.67 if slow else 1.0)
    cpu = 1e-3 * work * math.exp(rng.normal(0, 0.02)) * (1.45 if slow else 1.0)
    walls = wall * hog * np.exp(rng.normal(0, 0.05, rounds))
    cpus = cpu * np.exp(rng.normal(0.03 if load == "hog" else 0.0, 0.02, rounds))
    return tuple(walls), tuple(cpus)


def _busy_run(rng, *, load, work_b=1.0, rounds=12):
    """Passes of fresh process pairs added as compare_revisions adds them; the verdict over them."""
    passes, cpu = [], []
    while not passes or not ab.passes_settled(passes, SETTINGS, benchmarks=1, cpu=cpu):
        hog = rng.uniform(0.40, 0.65, rounds) if load == "hog" else np.ones(rounds)
        (a, a_cpu), (b, b_cpu) = (_process(rng, work=w, load=load, rounds=rounds, hog=hog) for w in (1.0, work_b))
        passes.append(Paired("bench", a, b))
        cpu.append((a_cpu, b_cpu))
    return ab.decide_revisions([ab.estimate_passes(passes, SETTINGS, cpu)], SETTINGS)[0]


def test_the_slow_state_is_counted_per_side_and_a_change_of_the_code_is_not():
    rng = np.random.default_rng(30)
    lean, waiting = (tuple(rng.normal(1e-3, 1e-5, 12)), tuple(rng.normal(1.45e-3, 1e-5, 12)))
    more_work = tuple(1.1 * np.array(lean))
    assert ab.slow_processes([(lean, more_work)] * 6, SETTINGS) == (0, 0)
    assert ab.cpu_change([(lean, more_work)] * 6) == pytest.approx(0.10, abs=0.01)
    assert ab.slow_processes([(lean, lean)] * 4 + [(waiting, lean), (lean, waiting)], SETTINGS) == (1, 1)
    assert ab.machine_busy((1, 1)) and not ab.machine_busy((2, 0))
    # A pass whose two processes were both slow met a shared disturbance, which its pairing cancels.
    assert ab.slow_processes([(lean, lean)] * 4 + [(waiting, waiting)] * 2, SETTINGS) == (0, 0)
    assert ab.slow_processes([(lean, lean)], SETTINGS) == (0, 0)  # one pass: nothing to compare within a side
    assert ab.cpu_change([(lean, ())]) is None


@pytest.mark.parametrize("scatter", [0.02, 0.10, 0.20])
def test_the_busy_rule_never_fires_on_a_machine_s_ordinary_scatter(scatter):
    # Processes whose CPU per sample scatters normally (SD 2, 10 or 20 % between processes, no slow mode):
    # the rule's bar is the run's own scatter, so at most 1 % of runs are called busy, whatever its size.
    rng = np.random.default_rng(int(scatter * 1000))
    runs = [[(tuple(1e-3 * np.exp(rng.normal(0, scatter) + rng.normal(0, 0.02, 6))),
              tuple(1e-3 * np.exp(rng.normal(0, scatter) + rng.normal(0, 0.02, 6)))) for _ in range(24)]
            for _ in range(200)]
    assert sum(ab.machine_busy(ab.slow_processes(cpu, SETTINGS)) for cpu in runs) <= 2


@pytest.mark.parametrize("load", ["quiet", "light", "hog"])
def test_under_load_false_alarms_stay_within_one_percent_and_a_planted_ten_percent_is_found(load):
    # Simulated noise of the kinds docs/ab.md describes: quiet, a light load putting some processes in
    # a slow state (CPU per sample up with wall time down), a full hog (wall down, CPU per sample flat).
    rng = np.random.default_rng({"quiet": 31, "light": 32, "hog": 33}[load])
    same = [_busy_run(rng, load=load) for _ in range(200)]
    planted = [_busy_run(rng, load=load, work_b=1.10) for _ in range(100)]
    assert sum(v.verdict in (SLOWER, FASTER) for v in same) <= 2  # 1 % of 200 verdicts
    assert all(v.verdict != FASTER for v in planted)
    if load == "light":  # slowed or said to be busy, at worst inconclusive: never "no change"
        assert all(v.verdict != NO_CHANGE for v in planted)
        assert sum(v.verdict == SLOWER or v.estimate.busy for v in planted) >= 90
        assert sum(v.estimate.busy for v in same) >= 100  # the disturbance is seen, not decided through
        assert all("machine busy" in v.label() for v in same if v.estimate.busy and v.verdict == UNDECIDED)
    else:
        assert sum(v.verdict == SLOWER for v in planted) >= 95
        assert not any(v.estimate.busy for v in same + planted)
    assert all(v.estimate.cpu_change is not None for v in planted)
    assert np.median([v.estimate.cpu_change for v in planted if not v.estimate.busy]) == pytest.approx(0.10, abs=0.02)


def _ratio_pass(rng, *, numerator_change=0.0, offset_sd=0.033, rounds=24, noise=0.05):
    """One pass of a ratio benchmark: per side, the numerator's and denominator's speeds per round, each
    pipeline with a process offset of its own (normal, SD offset_sd) lasting the pass."""
    sides = []
    for change in (0.0, numerator_change):
        n, d = (np.exp(rng.normal(0, offset_sd) + rng.normal(0, noise / np.sqrt(2), rounds)) for _ in range(2))
        sides.append(tuple(zip(100 * (1 + change) * n, 50 * d)))
    return sides


def _ratio_run(rng, *, by_sides, numerator_change=0.0):
    """Passes added as compare_revisions adds them, the ratio judged whole or by its sides."""
    a_parts, b_parts, pass_rounds = (), (), ()
    while True:
        a, b = _ratio_pass(rng, numerator_change=numerator_change)
        a_parts, b_parts, pass_rounds = a_parts + a, b_parts + b, (*pass_rounds, len(a))
        whole = results.Measured("r", "benchmarks/r", "x_ratio", True, tuple(n / d for n, d in a_parts),
                                 tuple(n / d for n, d in b_parts), ("AB",) * len(a_parts), (), (), 0.0, pass_rounds,
                                 a_parts=a_parts, b_parts=b_parts)
        judged = results.decided([whole]) if by_sides else [dataclasses.replace(whole, a_parts=(), b_parts=())]
        if not runner._undecided(judged, SETTINGS):
            verdicts = ab.decide_revisions([runner._estimate(m, SETTINGS) for m in judged], SETTINGS)
            return len(pass_rounds), verdicts, results.derived_ratios([whole], verdicts) if by_sides else []


def test_a_ratio_decided_by_its_sides_takes_fewer_passes_without_more_false_alarms():
    # Each pipeline of the ratio has process offsets of its own: a pass's ratio carries both (its
    # spread is the sides' combined), while each side carries one.
    rng = np.random.default_rng(40)
    whole = [_ratio_run(rng, by_sides=False) for _ in range(100)]
    sides = [_ratio_run(rng, by_sides=True) for _ in range(100)]
    assert sum(n for n, _, _ in sides) < 0.95 * sum(n for n, _, _ in whole)
    assert sum(any(v.verdict in (SLOWER, FASTER) for v in verdicts) for _, verdicts, _ in sides) <= 2
    assert all([v.name for v in verdicts] == ["r [numerator]", "r [denominator]"] for _, verdicts, _ in sides)
    planted = [_ratio_run(rng, by_sides=True, numerator_change=-0.10) for _ in range(50)]
    assert sum(verdicts[0].verdict == SLOWER for _, verdicts, _ in planted) >= 48
    for _, verdicts, [derived] in planted:
        n, d = (v.estimate for v in verdicts)
        assert derived.change == pytest.approx((1 + n.change) / (1 + d.change) - 1)
        assert derived.low <= derived.change <= derived.high


# ------------------------------------------------------------------------------- worker round driver


class FakeChannel:
    def __init__(self, commands):
        self.commands = list(commands)
        self.events = []

    def send(self, event, **fields):
        self.events.append({"event": event, **fields})

    send_and_freeze = send

    def receive(self):
        return self.commands.pop(0)


class FakeBenchmark:
    disabled = True

    def __init__(self):
        self.extra_info = {}

    def pedantic(self, target, **_):  # a disabled pytest-benchmark runs the target once
        return target()


class Busy:
    def __iter__(self):
        while True:
            yield 1


NO_GATES = types.SimpleNamespace(check=lambda **_: types.SimpleNamespace(undecided=()))  # baselines without gates


def _recorder(driver, context_type=SessionContext):
    fields = {"profile": PROFILES["smoke"], "baselines_dir": Path("."), "baselines": NO_GATES, "gates": "report",
              "save_baselines": False, "margin": 0.3, "baseline_profile": "x", "history": {},
              "compare_alpha": 0.01, "compare_min_effect": 0.1, "compare_mode": "report"}
    if driver is not None:
        fields["round_driver"] = driver
    return Recorder(benchmark=FakeBenchmark(), context=context_type(**fields), nodeid="benchmarks/test_x.py::t")


def _dataset_rounds(recorder):
    return recorder.measure_dataset(Busy(), name="busy", samples_in=lambda b: 1, readback=lambda b: None)


def test_the_recorder_runs_the_rounds_its_driver_asks_for_and_reports_each_figure():
    channel = FakeChannel([{"cmd": "go"}] * 3 + [{"cmd": "stop"}])
    driver = ab_worker.RoundDriver(channel)
    driver.start("benchmarks/test_x.py::t")
    recorder = _recorder(driver)
    _dataset_rounds(recorder)
    assert [e["event"] for e in channel.events] == ["ready", "round", "round", "round"]
    assert len(driver.kept) == 1  # the round function, and so its iterator, kept until the worker ends
    assert channel.events[0] == {"event": "ready", "nodeid": "benchmarks/test_x.py::t", "index": 0,
                                 "kind": "rounds", "metric": "samples_per_s"}
    assert recorder.rounds["samples_per_s"] == tuple(e["value"] for e in channel.events[1:])
    assert all(e["cpu_s"] >= 0 and e["cpu_per_unit"] == pytest.approx(e["cpu_s"] / (e["value"] * e["seconds"]))
               for e in channel.events[1:])


def _counted_step(calls):
    def step(batch):
        if isinstance(batch, np.ndarray):  # not the work fingerprint's trace (a symbolic batch), after the rounds
            calls.append(batch)
        return np.zeros(1)

    return step


def test_step_rounds_take_a_warm_up_call_each_only_under_the_driver():
    # Alone, rounds follow each other: the warm-up's last call sizes them and each round is only its
    # measured calls. Under ab the other side runs in between, so there a round warms up again.
    calls = []
    alone = _recorder(None).measure_step(_counted_step(calls), batches=itertools.repeat(np.zeros((4, 1))), name="s")
    smoke = PROFILES["smoke"]
    assert len(calls) == smoke.step_warmup_calls + 1 + smoke.min_rounds * smoke.step_calls
    assert alone.batches == smoke.min_rounds * smoke.step_calls and alone.first_s is not None
    calls.clear()
    driver = ab_worker.RoundDriver(FakeChannel([{"cmd": "go"}] * 3 + [{"cmd": "stop"}]))
    driver.start("benchmarks/test_x.py::t")
    _recorder(driver).measure_step(_counted_step(calls), batches=itertools.repeat(np.zeros((4, 1))), name="s")
    assert len(calls) == smoke.step_warmup_calls + 1 + (1 + 3) * (1 + smoke.step_calls)  # a calibration round too


@pytest.mark.parametrize("rounds", [None, 3])
@pytest.mark.parametrize("warm", [False, True])
def test_a_compare_of_sides_that_warm_up_in_every_round_takes_no_warm_up_round(warm, rounds):
    calls = []
    result = _recorder(None).compare("xla_over_graph_ratio", a=lambda: calls.append("a") or 0.01,
                                     b=lambda: calls.append("b") or 0.02, rounds=rounds, warm=warm)
    assert len(result.ratios) == (rounds or PROFILES["smoke"].max_rounds)
    assert len(calls) == 2 * (len(result.ratios) + (0 if warm else 1))


def test_a_compare_under_the_driver_alternates_the_order_and_reports_each_ratio():
    channel = FakeChannel([{"cmd": "go"}] * 4 + [{"cmd": "stop"}])
    driver = ab_worker.RoundDriver(channel)
    calls = []

    def side(name, seconds):
        return lambda: calls.append(name) or seconds

    result = _recorder(driver).compare("cache_over_wav_ratio", a=side("a", 1.0), b=side("b", 2.0))
    assert calls[:2] == ["a", "b"]  # one warm-up pair, discarded
    assert list(result.order) == ["AB", "BA", "AB", "BA"] and calls[2:] == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert [e["value"] for e in channel.events if e["event"] == "round"] == [2.0] * 4  # A twice as fast as B
    assert [e["parts"] for e in channel.events if e["event"] == "round"] == [[1.0, 0.5]] * 4  # 1 / seconds
    assert channel.events[0]["metric"] == "cache_over_wav_ratio"


def test_a_compare_of_named_sides_measures_each_side_once_per_worker():
    # Two compares share side "n": the second measures only its new side and reuses n's rounds.
    channel = FakeChannel([{"cmd": "go"}] * 2 + [{"cmd": "stop"}] + [{"cmd": "go"}] * 2 + [{"cmd": "stop"}]
                          + [{"cmd": "go"}] * 3 + [{"cmd": "stop"}])
    driver = ab_worker.RoundDriver(channel)
    driver.start("benchmarks/test_x.py::t[first]")
    calls = []

    def side(name, seconds):
        return lambda: calls.append(name) or seconds

    first = _recorder(driver).compare("cache_over_wav_ratio", a=side("n", 1.0), b=side("d1", 2.0), sides=("n", "d1"))
    driver.start("benchmarks/test_x.py::t[second]")
    second = _recorder(driver).compare("cache_over_wav_ratio", a=side("n", 1.0), b=side("d2", 4.0), sides=("n", "d2"))
    assert calls == ["n"] * 3 + ["d1"] * 3 + ["d2"] * 4  # a warm-up call each, then its rounds
    ready = [(e["nodeid"], e["side"], e["metric"]) for e in channel.events if e["event"] == "ready"]
    assert ready == [("benchmarks/test_x.py::t[first]", "n", "calls_per_s"),
                     ("benchmarks/test_x.py::t[first]", "d1", "calls_per_s"),
                     ("benchmarks/test_x.py::t[second]", "d2", "calls_per_s")]
    rounds = [e["value"] for e in channel.events if e["event"] == "round"]
    assert rounds == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.25]  # each side's speed, 1 / seconds
    ratios = [e for e in channel.events if e["event"] == "ratio"]
    assert [(e["nodeid"], e["sides"]) for e in ratios] == [("benchmarks/test_x.py::t[first]", ["n", "d1"]),
                                                           ("benchmarks/test_x.py::t[second]", ["n", "d2"])]
    assert first.ratios == (2.0, 2.0) and second.ratios == (4.0, 4.0)  # n's two rounds stand in for it


def test_a_dataset_measurement_naming_a_side_gives_its_rounds_to_a_later_compare_of_that_side():
    channel = FakeChannel([{"cmd": "go"}] * 2 + [{"cmd": "stop"}] + [{"cmd": "go"}] * 2 + [{"cmd": "stop"}])
    driver = ab_worker.RoundDriver(channel)
    driver.start("benchmarks/test_x.py::plain[w2]")
    _recorder(driver).measure_dataset(CountedBatches(), name="plain", side="n")

    def never_built():
        raise AssertionError("a side measured before was built again")

    driver.start("benchmarks/test_x.py::ratio[r]")
    result = _recorder(driver).compare_datasets("cache_over_wav_ratio", a=never_built, b=CountedBatches(),
                                                sides=("n", "d"))
    ready = [(e["nodeid"], e.get("side")) for e in channel.events if e["event"] == "ready"]
    assert ready == [("benchmarks/test_x.py::plain[w2]", None), ("benchmarks/test_x.py::ratio[r]", "d")]
    [ratio] = [e for e in channel.events if e["event"] == "ratio"]
    assert ratio["measured_by"] == [{"nodeid": "benchmarks/test_x.py::plain[w2]", "index": 0}, None]
    assert runner.ratio_rows(ratio) == ("test_x.py::plain[w2]", "test_x.py::ratio side d")
    plain_rounds = [e["value"] for e in channel.events if e["event"] == "round"][:2]
    assert result.a_values == tuple(plain_rounds) and len(result.ratios) == 2  # n: the plain rounds


class CountedBatches:
    """An endless iterable of one-sample batches that counts the iterators drawn from it."""

    def __init__(self):
        self.iterators = 0

    def __iter__(self):
        self.iterators += 1
        while True:
            yield np.zeros((1, 2), np.float32)


def test_named_dataset_sides_under_the_driver_continue_one_iterator_each_and_say_so():
    channel = FakeChannel([{"cmd": "go"}] * 3 + [{"cmd": "stop"}] + [{"cmd": "go"}] * 3 + [{"cmd": "stop"}])
    driver = ab_worker.RoundDriver(channel)
    driver.start("benchmarks/test_x.py::t")
    a, b = CountedBatches(), CountedBatches()
    result = _recorder(driver).compare_datasets("cache_over_wav_ratio", a=a, b=b, sides=("a", "b"))
    assert (a.iterators, b.iterators) == (1, 1)  # warm-up and three rounds each from one iterator
    assert [e["continues"] for e in channel.events if e["event"] == "ready"] == [True, True]
    assert [side.dataset for side in driver.kept] == [a, b]  # kept, their iterators alive, until the worker ends
    assert len(result.ratios) == 3


def test_dataset_sides_interleaved_in_one_process_draw_a_fresh_iterator_every_round():
    a, b = CountedBatches(), CountedBatches()
    result = _recorder(None).compare_datasets("cache_over_wav_ratio", a=a, b=b, sides=("a", "b"))
    assert a.iterators == b.iterators == len(result.ratios) + 1  # the warm-up pair and every round


def test_a_dataset_side_given_as_a_builder_is_built_once_and_not_when_ab_measured_it_before():
    built = []

    def builder(name):
        return lambda: built.append(name) or CountedBatches()

    channel = FakeChannel(([{"cmd": "go"}] * 2 + [{"cmd": "stop"}]) * 3)
    driver = ab_worker.RoundDriver(channel)
    driver.start("benchmarks/test_x.py::t[first]")
    _recorder(driver).compare_datasets("cache_over_wav_ratio", a=builder("n"), b=builder("d1"), sides=("n", "d1"))
    driver.start("benchmarks/test_x.py::t[second]")
    _recorder(driver).compare_datasets("cache_over_wav_ratio", a=builder("n"), b=builder("d2"), sides=("n", "d2"))
    assert built == ["n", "d1", "d2"]  # the second compare reuses n's rounds: its n is never built

    built.clear()
    result = _recorder(None).compare_datasets("cache_over_wav_ratio", a=builder("a"), b=builder("b"))
    assert built == ["a", "b"] and len(result.ratios) >= 2  # interleaved: built once, a fresh iterator each round


def test_the_fork_server_forks_workers_this_process_adopts_with_their_side_s_tree_and_environment(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent("""\
        import json, os, sys
        state = {"cwd": os.getcwd(), "path": sys.path[:2], "side": os.environ.get("SIDE"), "ppid": os.getppid(),
                 "preloaded": "colorsys" in sys.modules, "args": sys.argv[3:], "session": os.getsid(0) == os.getpid()}
        os.write(int(sys.argv[1]), json.dumps(state).encode())
        sys.exit(7)
        """))
    server = manager.ForkServer.start(("colorsys", "no_such_module_here"), tmp_path / "fork-server.log",
                                      timeout_s=60)
    assert server is not None and "no_such_module_here" in server.preloaded["failed"]
    events_read, events_write = os.pipe()
    commands_read, commands_write = os.pipe()
    try:
        with open(tmp_path / "worker.log", "wb") as log:
            pid = server.fork({"root": str(tmp_path), "env": {"SIDE": "B"}, "script": str(probe), "args": ["-q"]},
                              [events_write, commands_read, log.fileno()], timeout_s=60)
        os.close(events_write)
        assert manager.Adopted(pid).wait(timeout=60) == 7  # adopted: this process waits for it and reaps it
        state = json.loads(os.read(events_read, 1 << 16))
    finally:
        server.close()
        for fd in (events_read, commands_read, commands_write):
            os.close(fd)
    assert state == {"cwd": str(tmp_path), "path": ["", str(tmp_path)], "side": "B", "ppid": os.getpid(),
                     "preloaded": True, "args": ["-q"], "session": True}


def test_the_fork_server_refuses_a_preload_that_imports_perfsuite(tmp_path):
    with pytest.raises(manager.ABError, match="imported perfsuite.*its own side's"):
        manager.ForkServer.start(("perfsuite.records",), tmp_path / "fork-server.log", timeout_s=60)
    from perfsuite.tools import ab as ab_cli

    with pytest.raises(argparse.ArgumentTypeError, match="expected third-party modules, found 'perfsuite.measure'"):
        ab_cli._modules("numpy, perfsuite.measure")


def test_a_ratio_of_named_sides_is_derived_from_its_side_rows():
    def verdict(name, change, low, high):
        return types.SimpleNamespace(name=name, estimate=types.SimpleNamespace(change=change, low=low, high=high))

    verdicts = [verdict("t side n", -0.10, -0.12, -0.08), verdict("t side d", 0.0, -0.02, 0.02)]
    [derived] = results.derived_ratios([], verdicts, {"t[r]": ("t side n", "t side d"), "t[s]": ("t side n", "x")})
    assert (derived.name, derived.numerator, derived.denominator) == ("t[r]", "t side n", "t side d")
    assert derived.change == pytest.approx(-0.10)
    assert derived.low == pytest.approx(0.88 / 1.02 - 1) and derived.high == pytest.approx(0.92 / 0.98 - 1)


def test_a_skip_from_the_controller_skips_the_benchmark():
    driver = ab_worker.RoundDriver(FakeChannel([{"cmd": "skip", "reason": "side B failed"}]))
    with pytest.raises(pytest.skip.Exception, match="perfsuite ab: side B failed"):
        _dataset_rounds(_recorder(driver))


def test_a_side_with_the_plugins_hook_gets_the_worker_s_driver_through_it():
    from perfsuite.pytest_plugin import hooks

    plugin = ab_worker.WorkerPlugin(FakeChannel([]))
    config = types.SimpleNamespace(hook=types.SimpleNamespace(pytest_perfsuite_round_driver=None))
    assert ab_worker.install(config) == ab_worker.HOOK
    assert hasattr(hooks, "pytest_perfsuite_round_driver")  # the hook the worker implements is the plugin's
    assert plugin.pytest_perfsuite_round_driver(config=config) is plugin.driver


def test_a_side_older_than_the_hook_is_refused_and_its_fixture_left_alone():
    config = types.SimpleNamespace(hook=types.SimpleNamespace())  # a side's plugin without the hook
    with pytest.raises(RuntimeError, match="expected the hook pytest_perfsuite_round_driver.*too old"):
        ab_worker.install(config)
    plugin = ab_worker.WorkerPlugin(FakeChannel([]))
    assert not hasattr(plugin, "pytest_fixture_setup")  # the driver reaches the fixture through the hook only
    source = Path(ab_worker.__file__).read_text()
    assert "__dataclass_fields__" not in source and "recorder.context" not in source


class FakeWorker:
    """A side whose every round gives ``value`` (its benchmark raising in round ``fails_in``, if given)."""

    def __init__(self, log, name, value, fails_in=None):
        self.log, self.name, self.value, self.fails_in, self.rounds = log, name, value, fails_in, 0

    def send(self, command, **fields):
        self.log.append((self.name, command))

    def receive(self, **_):
        self.rounds += 1
        if self.rounds == self.fails_in:
            return {"event": "done", "outcome": "failed", "message": "boom"}
        return {"event": "round", "value": self.value, "seconds": 0.01}

    def wait_frozen(self, **_):
        pass

    def failure(self, problem, **_):
        return types.SimpleNamespace(problem=problem)


def _drive(budget_s, fails_in=None):
    log = []
    pool = {"A": FakeWorker(log, "A", 100.0), "B": FakeWorker(log, "B", 100.0 * (1 + 1e-9), fails_in)}
    controller = runner.Controller(pool, SETTINGS, results.Options(), lambda message: None, per_benchmark_s=budget_s)
    ready = {"nodeid": "benchmarks/test_x.py::t", "metric": "samples_per_s", "index": 0}
    return controller, controller.drive(dict(ready), dict(ready), count=1), log


def test_the_controller_alternates_the_sides_and_stops_at_min_rounds_once_its_share_is_spent():
    controller, ended, log = _drive(budget_s=0.0)
    [measured] = controller.measured
    assert ended == {} and measured.order == tuple(("AB", "BA")[i % 2] for i in range(SETTINGS.min_rounds))
    goes = [side for side, command in log if command == "go"]
    assert "".join(goes) == "".join(measured.order)
    assert [command for _, command in log[-2:]] == ["stop", "stop"]


def test_a_benchmark_that_fails_during_a_round_ends_the_measurement_there():
    controller, ended, log = _drive(budget_s=1e9, fails_in=3)
    assert ended["B"]["outcome"] == "failed" and controller.measured == []
    assert ("A", "skip") in log and not any(command == "stop" for _, command in log)
    assert [f.problem for f in controller.failures] == ["the benchmark failed during round 3: boom"]


# ------------------------------------------------------------------------------------------ report


def _report(verdicts, measured, **extra):
    sides = (manager.Side("A", "HEAD~1", "a" * 40, Path("/tmp/a"), "base"),
             manager.Side("B", "working tree", None, Path(".")))
    fields = {"sides": sides, "settings": SETTINGS, "options": results.Options(), "measured": tuple(measured),
              "verdicts": tuple(verdicts), "not_compared": (results.NotCompared("test_y.py::t", "only on side B"),),
              "notes": (), "failure": None, "elapsed_s": 12.0, "load": {"before": 1.0, "after": 1.5, "cpus": 2}}
    return results.ABReport(**{**fields, **extra})


def _measured(paired):
    n = len(paired.a)
    return results.Measured(paired.name, f"benchmarks/{paired.name}", "samples_per_s", True, paired.a, paired.b,
                         tuple("AB" if i % 2 == 0 else "BA" for i in range(n)), (0.1,) * n, (0.1,) * n, 1.0)


def test_the_report_table_json_and_markdown_say_what_was_decided(tmp_path):
    rng = np.random.default_rng(8)
    rounds = [_rounds(rng, 48, change=-0.10, name="test_x.py::slow"), _rounds(rng, 48, name="test_x.py::same")]
    report = _report(ab.decide_revisions([ab.estimate(r, SETTINGS) for r in rounds], SETTINGS), [_measured(r) for r in rounds])
    lines = present.table(report)
    assert lines[0].split()[:2] == ["benchmark", "change"] and set(lines[1]) <= {"-", " "}
    assert "SLOWER" in lines[2] and "no change" in lines[3]
    assert report.exit_status == results.EXIT_SLOWER
    results.write_json(tmp_path / "ab.json", report)
    data = json.loads((tmp_path / "ab.json").read_text())
    assert data["schema_version"] == results.ABReport.SCHEMA_VERSION
    assert [b["verdict"] for b in data["benchmarks"]] == [SLOWER, NO_CHANGE]
    assert len(data["benchmarks"][0]["rounds_detail"]["a"]) == 48 and data["exit_status"] == 1
    assert not {"measured", "verdicts", "derived"} & set(data)  # each written once, under its JSON name
    assert results.load_report(tmp_path / "ab.json") == report
    text = present.markdown(report)
    assert text.startswith("### perfsuite ab: A = HEAD~1") and "| test_x.py::slow |" in text
    piped = _report(ab.decide_revisions([ab.estimate(dataclasses.replace(rounds[0], name="a|b"), SETTINGS)],
                                        SETTINGS), [])
    assert "| a\\|b " in present.markdown(piped)  # a '|' in a cell is escaped, not a column
    assert "not compared: test_y.py::t: only on side B" in text


def test_only_benchmarks_not_settled_over_their_passes_get_another_pass():
    rng = np.random.default_rng(10)

    def measured(name, passes):
        joined = _measured(Paired(name, sum((p.a for p in passes), ()), sum((p.b for p in passes), ())))
        return dataclasses.replace(joined, pass_rounds=tuple(len(p.a) for p in passes))

    decided = measured("test_x.py::decided", _passes(rng, change=-0.10, process_sd=0.01))
    undecided = measured("test_x.py::undecided", _passes(rng, change=0.0, process_sd=0.10))
    early = measured("test_x.py::early", _passes(rng, change=-0.10, process_sd=0.01, count=3))
    assert runner._undecided([decided, undecided, early], SETTINGS) == {"benchmarks/test_x.py::undecided",
                                                                       "benchmarks/test_x.py::early"}
    assert runner._undecided([undecided], ABSettings(max_passes=6)) == set()  # at max_passes: no more


def test_the_plot_draws_every_benchmark(tmp_path):
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(9)
    rounds = [_rounds(rng, 24, name=f"b{i}") for i in range(2)]
    report = _report(ab.decide_revisions([ab.estimate(r, SETTINGS) for r in rounds], SETTINGS), [_measured(r) for r in rounds])
    [path] = present.plot(report, tmp_path)
    assert path.stat().st_size > 1000


def test_undecided_is_an_exit_status_of_its_own_neither_0_nor_1():
    rng = np.random.default_rng(14)
    few = [_rounds(rng, 4, noise=0.30)]  # four noisy rounds decide nothing
    (verdict,) = ab.decide_revisions([ab.estimate(few[0], SETTINGS)], SETTINGS)
    assert verdict.verdict == ab.UNDECIDED
    report = _report((verdict,), [_measured(few[0])])
    assert report.exit_status == results.EXIT_UNDECIDED and report.exit_status not in (0, 1)
    decided = [_rounds(rng, 48, name="test_x.py::same")]
    assert _report(ab.decide_revisions([ab.estimate(decided[0], SETTINGS)], SETTINGS),
                   [_measured(decided[0])]).exit_status == results.EXIT_OK


def test_a_side_failure_gives_exit_status_3_unless_a_slowdown_was_found():
    failure = manager.SideFailure("B", "the worker was killed by signal 9 while measuring round 3",
                               benchmark="test_x.py::t")
    assert str(failure) == "side B in test_x.py::t: the worker was killed by signal 9 while measuring round 3"
    assert _report((), (), failure=failure.record()).exit_status == results.EXIT_SIDE_FAILED


# ----------------------------------------------------------------------------------- end to end

BENCHMARK = '''
import os
import time

WORK_S = {work}
CRASH_AT, HANG_AT = {crash}, {hang}


class Busy:
    def __init__(self, seconds):
        self.seconds, self.count = seconds, 0

    def __iter__(self):
        while True:
            self.count += 1
            if self.count == CRASH_AT:
                os._exit(3)
            if self.count == HANG_AT:
                time.sleep(600)
            end = time.perf_counter() + self.seconds
            while time.perf_counter() < end:
                pass
            yield 1


def _measure(perfsuite, seconds):
    perfsuite.measure_dataset(Busy(seconds), name="busy", samples_in=lambda b: 1, readback=lambda b: None)


def test_changed(perfsuite):
    _measure(perfsuite, WORK_S)


def test_same(perfsuite):
    _measure(perfsuite, 0.001)


def test_no_rounds():
    pass
'''


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _commit(repo, message, *, work=0.001, crash=0, hang=0, extra=""):
    (repo / "benchmarks").mkdir(exist_ok=True)
    (repo / "benchmarks" / "baselines").mkdir(exist_ok=True)
    (repo / "benchmarks" / "baselines" / "ratios.yaml").write_text("ratios: {}\n")
    text = BENCHMARK.format(work=work, crash=crash, hang=hang) + textwrap.dedent(extra)
    (repo / "benchmarks" / "test_tiny.py").write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)


AB_TIMEOUT_S = 600  # a hang guard, not a speed check: on a slow runner under -n a run of 8 passes took over 240 s


def _ab(repo, *args, timeout=AB_TIMEOUT_S, path=None):
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    if path is not None:  # an extra import path for the controller, its fork server and workers
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path), env.get("PYTHONPATH")) if p)
    env["PERFSUITE_AB_TEST_TAG"] = str(repo.parent)  # inherited by the workers: how _leftovers finds them
    passes = [] if "--passes" in args else ["--passes", "1"]  # one pass is quicker where passes are not tested
    # The tiny benchmarks import no TensorFlow: a fork server importing it would only add its 10 s.
    preload = [] if "--preload" in args or "--fresh-workers" in args else ["--preload", "pytest"]
    return subprocess.run([sys.executable, "-m", "perfsuite.tools.cli", "ab", *args, *passes, *preload,
                           "--profile", "smoke",
                           "--json", str(repo.parent / "ab.json")], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _leftovers(repo):
    worktrees = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True,
                               text=True, check=True).stdout.count("worktree ")
    tag, workers = f"PERFSUITE_AB_TEST_TAG={repo.parent}\0".encode(), []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and tag in (entry / "environ").read_bytes():
                workers.append(entry.name)
        except OSError:
            continue
    return worktrees - 1, workers


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q")
    _commit(path, "base")
    return path


@pytest.mark.slow  # a whole `perfsuite ab` run of two revisions
def test_a_planted_slowdown_is_flagged_and_only_it(repo):
    _commit(repo, "slower", work=0.002, extra="\n\ndef test_only_b(perfsuite):\n    _measure(perfsuite, 0.001)\n")
    # 4 passes: at 3 (2 degrees of freedom) a halved rate measured under load missed alpha (p 0.014).
    # Up to 8 for one still undecided: the passes after the first 4 run only those.
    result = _ab(repo, "HEAD~1", "HEAD", "--budget", "20", "--passes", "4", "--max-passes", "8")
    assert result.returncode == 1, result.stdout + result.stderr
    data = json.loads((repo.parent / "ab.json").read_text())
    [changed] = [b for b in data["benchmarks"] if b["name"] == "test_tiny.py::test_changed"]
    assert changed["passes"] in (4, 8) and len(changed["rounds_detail"]["pass_rounds"]) == changed["passes"]
    assert f"in {changed['passes']} passes" in result.stdout
    assert all(b["passes"] in (4, 8) for b in data["benchmarks"])
    verdicts = {b["name"]: b["verdict"] for b in data["benchmarks"]}
    assert verdicts["test_tiny.py::test_changed"] == SLOWER
    assert verdicts["test_tiny.py::test_same"] not in (SLOWER, FASTER)
    reasons = {n["name"]: n["reason"] for n in data["not_compared"]}
    assert reasons["test_tiny.py::test_only_b"] == "only on side B (not collected on A)"
    assert reasons["test_tiny.py::test_no_rounds"].startswith("no controller-driven rounds")
    assert "SLOWER" in result.stdout and "test_tiny.py::test_changed" in result.stdout
    assert _leftovers(repo) == (0, [])


def test_a_benchmark_marked_not_in_ab_is_left_out_with_its_reason_before_it_runs(repo):
    marked = """

@pytest.mark.not_in_ab(reason="a same-run figure")
def test_marked(perfsuite):
    raise AssertionError("ab ran a benchmark marked not_in_ab")
"""
    _commit(repo, "base", extra="\n\nimport pytest\n" + marked)
    _commit(repo, "head", work=0.0011, extra="\n\nimport pytest\n" + marked)
    result = _ab(repo, "HEAD~1", "HEAD", "-k", "marked or same", "--budget", "10")
    # no change, or undecided where a loaded machine's 10 s do not decide it: what was left out is the point
    assert result.returncode in (0, results.EXIT_UNDECIDED), result.stdout + result.stderr
    data = json.loads((repo.parent / "ab.json").read_text())
    reasons = {n["name"]: n["reason"] for n in data["not_compared"]}
    assert reasons == {"test_tiny.py::test_marked": "not_in_ab: a same-run figure"}
    assert [b["name"] for b in data["benchmarks"]] == ["test_tiny.py::test_same"]


def test_a_crash_during_a_round_names_the_side_and_the_benchmark(repo):
    _commit(repo, "crashes", crash=40)
    result = _ab(repo, "HEAD~1", "HEAD", "--budget", "20", "--min-rounds", "16")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "FAILED: side B in test_tiny.py::test_changed: the worker exited with status 3 while measuring round" \
        in result.stdout
    assert _leftovers(repo) == (0, [])


def test_a_benchmark_that_raises_on_one_side_fails_the_run_naming_side_benchmark_and_log(repo):
    _commit(repo, "base", extra="\n\ndef test_raises(perfsuite):\n    _measure(perfsuite, 0.001)\n")
    _commit(repo, "raises", extra="\n\ndef test_raises(perfsuite):\n    raise ValueError('broken on head')\n")
    result = _ab(repo, "HEAD~1", "HEAD", "-k", "raises or same", "--budget", "10")
    assert result.returncode == 3, result.stdout + result.stderr
    assert ("FAILED: side B (head) in test_tiny.py::test_raises: the benchmark failed: call: ValueError: "
            "broken on head (log: worker-B.log)") in result.stdout
    assert "last lines of side B's log (worker-B.log)" in result.stderr
    data = json.loads((repo.parent / "ab.json").read_text())
    [failure] = data["benchmark_failures"]
    assert (failure["side"], failure["role"], failure["benchmark"]) == ("B", "head", "test_tiny.py::test_raises")
    assert "broken on head" in failure["log_tail"] and data["exit_status"] == 3
    report = results.load_report(repo.parent / "ab.json")
    assert [m.name for m in report.measured] == ["test_tiny.py::test_same"] and report.exit_status == 3
    assert _leftovers(repo) == (0, [])


def test_a_worker_exits_after_its_last_benchmark_without_the_session_summary_unless_one_failed(repo, tmp_path):
    _commit(repo, "base", extra="\n\ndef test_raises(perfsuite):\n    _measure(perfsuite, 0.001)\n")
    _commit(repo, "raises", extra="\n\ndef test_raises(perfsuite):\n    raise ValueError('broken on head')\n")
    result = _ab(repo, "HEAD~1", "HEAD", "-k", "raises or same", "--budget", "5", "--report", str(tmp_path / "logs"))
    assert result.returncode == 3, result.stdout + result.stderr
    logs = {side: (tmp_path / "logs" / f"worker-{side}.log").read_text() for side in "AB"}
    assert "perfsuite (smoke profile" not in logs["A"]  # every benchmark passed: no summary, no teardown
    assert "perfsuite (smoke profile" in logs["B"] and "ValueError: broken on head" in logs["B"]
    assert _leftovers(repo) == (0, [])


def test_the_json_loader_reads_schema_1_through_its_migrations_and_names_what_it_refuses(tmp_path):
    path = tmp_path / "ab.json"
    report = _report((), (), failure=manager.SideFailure("B", "crashed", benchmark="test_x.py::t").record())
    schema_1 = {k: v for k, v in json.loads(records.dumps(report)).items()
                if k not in ("schema_version", "benchmark_failures")}
    schema_1["failure"].pop("log")
    path.write_text(json.dumps(schema_1))
    # Schema 1 and 2 runs started fresh interpreters, preloading nothing (migrate_2_to_3 says so).
    before_fork_server = dataclasses.replace(report.options, fresh_workers=True, preload=())
    assert results.load_report(path) == dataclasses.replace(report, options=before_fork_server)
    path.write_text(json.dumps({"benchmarks": []}))
    with pytest.raises(records.RecordError, match="ab.json: sides: expected a value"):
        results.load_report(path)
    path.write_text(json.dumps({**schema_1, "schema_version": 5}))
    with pytest.raises(records.RecordError, match=r"ab.json: schema_version: expected one of \[1, 2, 3, 4\], found 5"):
        results.load_report(path)
    path.write_text("{")
    with pytest.raises(records.RecordError, match="ab.json: \\(file\\): expected a readable ab JSON file"):
        results.load_report(path)


def test_a_schema_3_report_reads_its_inconclusive_verdict_as_undecided(tmp_path):
    rng = np.random.default_rng(15)
    few = _rounds(rng, 4, noise=0.30)
    report = _report(ab.decide_revisions([ab.estimate(few, SETTINGS)], SETTINGS), [_measured(few)])
    data = json.loads(records.dumps(report))
    data["schema_version"] = 3
    data["benchmarks"][0]["verdict"] = "inconclusive"
    (tmp_path / "ab.json").write_text(json.dumps(data))
    read = results.load_report(tmp_path / "ab.json")
    assert read.verdicts[0].verdict == UNDECIDED and read.exit_status == results.EXIT_UNDECIDED


def test_a_hung_round_is_stopped_at_its_deadline(repo):
    _commit(repo, "hangs", hang=40)
    result = _ab(repo, "HEAD~1", "--round-timeout", "2", "--budget", "20", "--min-rounds", "16")  # B: the working tree, at "hangs"
    assert result.returncode == 3, result.stdout + result.stderr
    assert "side B in test_tiny.py::test_changed: no answer within 2 s while measuring round" in result.stdout
    assert _leftovers(repo) == (0, [])


def test_a_side_that_cannot_start_is_named(repo):
    (repo / "benchmarks" / "conftest.py").write_text("raise ImportError('no module named missing_dependency')\n")
    result = _ab(repo, "HEAD")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "FAILED: side B: " in result.stdout and "missing_dependency" in result.stdout + result.stderr
    assert _leftovers(repo) == (0, [])


def test_a_worker_whose_fork_fails_closes_its_pipes_and_names_the_side(tmp_path):
    class Failing:  # a fork server that takes the request and forks nothing
        def fork(self, request, fds, *, timeout_s):
            raise manager.SideFailure("B", "the fork server failed while forking a worker")

    open_before = len(os.listdir("/proc/self/fd"))
    side = manager.Side("B", "HEAD", None, tmp_path)
    for _ in range(3):
        with pytest.raises(manager.SideFailure, match="forking a worker"):
            manager.Worker(side, [], tmp_path / "worker-B.log", Failing())
    assert len(os.listdir("/proc/self/fd")) == open_before  # its four pipe ends closed each time


def test_a_fork_server_that_dies_while_preloading_fails_the_run_with_its_log(repo, tmp_path):
    (tmp_path / "dies_on_import.py").write_text("import os, sys\nprint('dying on import', flush=True)\nos._exit(9)\n")
    result = _ab(repo, "HEAD", "--preload", "dies_on_import", path=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "the fork server failed while preloading its modules" in result.stdout
    assert "dying on import" in result.stdout + result.stderr  # the server log's tail
    assert _leftovers(repo) == (0, [])


def test_a_bad_revision_is_a_usage_error(repo):
    result = _ab(repo, "no-such-revision")
    assert result.returncode == 2
    assert "BASE: expected a git revision of" in result.stderr and "'no-such-revision'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # pytest handing a whole ab run over
def test_pytest_with_perfsuite_ab_runs_ab_on_its_own_selection(repo):
    _commit(repo, "slower", work=0.002)
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env["PERFSUITE_AB_TEST_TAG"] = str(repo.parent)
    # One pass: this checks what pytest hands to ab (passes are tested on ab itself).
    result = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "--perfsuite-ab=HEAD~1",
                             "--perfsuite-ab-passes=1", "--perfsuite-profile=smoke", "-k", "changed or same",
                             "-p", "no:cacheprovider"],
                            cwd=repo, env=env, capture_output=True, text=True, timeout=AB_TIMEOUT_S, check=False)
    assert result.returncode == 1, result.stdout + result.stderr  # HEAD~1 against the working tree (at "slower")
    assert "SLOWER" in result.stdout and "test_tiny.py::test_changed" in result.stdout
    assert "test_no_rounds" not in result.stdout  # -k reached both sides
    assert "passes" not in result.stdout.split("note:")[0]  # --perfsuite-ab-passes=1 reached ab: no pass column
    assert _leftovers(repo) == (0, [])


def test_pytest_with_perfsuite_ab_refuses_two_paths_and_a_bad_revision(repo):
    two = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "benchmarks/test_tiny.py",
                          "--perfsuite-ab=HEAD"], cwd=repo, capture_output=True, text=True, timeout=60,
                         check=False)
    assert two.returncode == 4 and "--perfsuite-ab: expected one benchmark path, found 2" in two.stderr
    bad = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "--perfsuite-ab=no-such-revision"],
                         cwd=repo, capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "BASE: expected a git revision of" in bad.stderr + bad.stdout


def test_a_worker_runs_the_selection_without_the_plugins_that_would_cost_or_change_it():
    from perfsuite.tools.ab import pytest_args

    args = argparse.Namespace(benchmarks="benchmarks", profile="quick", keyword="wav", markexpr=None, data_dir=None)
    command = pytest_args(args)
    blocked = {command[i + 1] for i, arg in enumerate(command) if arg == "-p"}
    assert blocked == {"no:cacheprovider", "no:randomly", "no:hypothesispytest"}
    assert command[:2] == ["benchmarks", "--perfsuite-profile=quick"] and command[-2:] == ["-k", "wav"]


def test_ab_says_why_a_side_wrote_no_work_fingerprint(tmp_path):
    """A selection that leaves no test of test_work.py is named as such, not as a failure to run."""
    from perfsuite.tools.ab.work import fingerprint_diff

    sides = []
    for name, body in (("A", "def test_write():\n    pass\n"), ("B", "def test_write(:\n")):
        root = tmp_path / name
        (root / "benchmarks").mkdir(parents=True)
        (root / "benchmarks" / "test_work.py").write_text(body)
        sides.append(types.SimpleNamespace(name=name, revision=name, root=root))
    (line,) = fingerprint_diff(sides, ["benchmarks", "-q", "-p", "no:randomly", "-k", "test_selftest_plant"],
                               tmp_path, progress=lambda message: None)
    assert line.startswith("work: side A wrote no fingerprint (no test of its test_work.py matches the selection)")
    assert "side B wrote no fingerprint (its test_work.py exited 2 (log: " in line and line.endswith(": none compared")
