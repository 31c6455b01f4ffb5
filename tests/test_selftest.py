"""The self-test's decision logic on synthetic numbers (no TensorFlow pipelines).

Marked ``selftest`` too, so ``pytest benchmarks/ tests/ -m selftest`` runs the logic with the measurements.
"""

import math
import os
import threading
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


def _rounds(rng, n, *, slowdown=0.0, cv=0.03, disturbed=0.0):
    """Interleaved rounds: a shared per-round machine drift plus independent noise per arm; a share
    ``disturbed`` of the rounds has one arm (either) slowed by a burst of 20-100 %."""
    drift = np.exp(rng.normal(0, 0.10, n))
    base = 0.03 * drift * np.exp(rng.normal(0, cv, n))
    test = 0.03 * (1 + slowdown) * drift * np.exp(rng.normal(0, cv, n))
    hit = rng.random(n) < disturbed
    burst = 1 + rng.uniform(0.2, 1.0, n)
    on_test = rng.random(n) < 0.5
    base = np.where(hit & ~on_test, base * burst, base)
    test = np.where(hit & on_test, test * burst, test)
    return base, test


def test_gate_scales_with_noise_and_trial_length():
    rng = np.random.default_rng(0)
    quiet = rng.normal(1, 0.02, 200)
    noisy = rng.normal(1, 0.08, 200)
    g_quiet = selftest.calibrate_gate(aa_ratios=quiet, rounds_per_trial=8)
    g_noisy = selftest.calibrate_gate(aa_ratios=noisy, rounds_per_trial=8)
    g_long = selftest.calibrate_gate(aa_ratios=noisy, rounds_per_trial=32)
    assert g_noisy.threshold > g_quiet.threshold
    assert g_long.threshold == pytest.approx(g_noisy.threshold / 2)  # 1 / sqrt(n)
    expected = 3 * math.sqrt(math.pi / 2) * g_noisy.noise_cv / math.sqrt(8)
    assert g_noisy.threshold == pytest.approx(expected)
    assert 0.06 < g_noisy.noise_cv < 0.10
    flat = selftest.calibrate_gate(aa_ratios=np.ones(20), rounds_per_trial=8)
    assert flat.threshold == selftest.THRESHOLD_FLOOR


def test_gate_rejects_too_few_calibration_rounds():
    with pytest.raises(ValueError, match="at least 8"):
        selftest.calibrate_gate(aa_ratios=[1.0] * 5, rounds_per_trial=8)


def test_rates_on_synthetic_rounds_meet_targets():
    rng = np.random.default_rng(1)
    aa_base, aa_test = _rounds(rng, 64)
    gate = selftest.calibrate_gate(aa_ratios=aa_test / aa_base, rounds_per_trial=32)
    base, same = _rounds(rng, 32 * 200)
    base10, slow10 = _rounds(rng, 32 * 200, slowdown=0.10)
    false_alarms = selftest.detection_rate(name="aa", base=base, test=same, gate=gate)
    detected = selftest.detection_rate(name="10pct", base=base10, test=slow10, gate=gate)
    assert false_alarms.trials == 200
    assert false_alarms.rate <= 0.02
    assert detected.rate >= 0.95
    assert detected.median_slowdown == pytest.approx(0.10, abs=0.02)
    # Paired rounds cancel the shared drift: even on 12 rounds the decision flags a 10 % slowdown.
    short = selftest.calibrate_gate(aa_ratios=aa_test / aa_base, rounds_per_trial=12)
    decisions = [selftest.decide_slowdown(base=a, test=b, gate=short)
                 for a, b in zip(selftest.trial_blocks(base10, rounds_per_trial=12),
                                 selftest.trial_blocks(slow10, rounds_per_trial=12))]
    assert np.mean([d.flagged for d in decisions]) >= 0.9


def test_slower_sign_p_keeps_detecting_when_bursts_disturb_rounds():
    # A fifth of the rounds has one arm slowed by a burst of load (what the 2-core box shows): the sign
    # test loses one sign per disturbed round and still flags a 10 % slowdown, where the Wilcoxon test
    # is pulled down by the bursts' large ranks; A/A stays at or below alpha.
    rng = np.random.default_rng(2)
    aa_base, aa_test = _rounds(rng, 64, disturbed=0.2)
    gate = selftest.calibrate_gate(aa_ratios=aa_test / aa_base, rounds_per_trial=32)
    base, same = _rounds(rng, 32 * 200, disturbed=0.2)
    base10, slow10 = _rounds(rng, 32 * 200, slowdown=0.10, disturbed=0.2)
    false_alarms = selftest.detection_rate(name="aa", base=base, test=same, gate=gate)
    detected = selftest.detection_rate(name="10pct", base=base10, test=slow10, gate=gate)
    assert false_alarms.rate <= 0.02
    assert detected.rate >= 0.95
    assert detected.wilcoxon_flagged < detected.flagged


def test_slower_sign_p_exact_values():
    assert selftest.slower_sign_p([0.1] * 8) == pytest.approx(0.5 ** 8)
    assert selftest.slower_sign_p([0.1] * 7 + [-0.1]) == pytest.approx(9 / 256)
    assert selftest.slower_sign_p([0.0, 0.0]) == 1.0
    assert selftest.slower_sign_p([0.0, 0.1, 0.1]) == pytest.approx(0.25)  # zeros are dropped


def test_decision_flags_only_slower():
    gate = selftest.calibrate_gate(aa_ratios=np.linspace(0.97, 1.03, 16), rounds_per_trial=8)
    base = [1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99]
    slower = [1.3 * v for v in base]
    faster = [0.7 * v for v in base]
    assert selftest.decide_slowdown(base=base, test=slower, gate=gate).flagged
    assert selftest.decide_slowdown(base=base, test=slower, gate=gate).throughput_flagged
    assert not selftest.decide_slowdown(base=base, test=faster, gate=gate).flagged
    assert not selftest.decide_slowdown(base=base, test=list(base), gate=gate).flagged


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


def test_run_interleaved_collects_per_arm_and_rejects_bad_times():
    calls = []
    arms = {"a": lambda: calls.append("a") or 0.5, "b": lambda: calls.append("b") or 0.25}
    values = selftest.run_interleaved(arms, rounds=4)
    assert values == {"a": (0.5,) * 4, "b": (0.25,) * 4}
    assert calls == ["a", "b", "b", "a", "b", "a", "a", "b"]
    with pytest.raises(ValueError, match="arm 'z'"):
        selftest.run_interleaved({"z": lambda: 0.0}, rounds=1)


def test_trial_blocks_are_disjoint():
    blocks = selftest.trial_blocks(list(range(10)), rounds_per_trial=3)
    assert blocks == [(0, 1, 2), (3, 4, 5), (6, 7, 8)]


def test_calibrate_fraction_fits_fixed_cost_and_slope():
    # slowdown = 0.05 + 1.0 * fraction: a one-point fit through the origin from the 0.24 probe would
    # give 0.083 for 10 % (a 13 % slowdown); the two-point line gives the fraction that costs 10 %.
    probes = {0.02: 0.07, 0.24: 0.29}
    assert selftest.calibrate_fraction(probes=probes, target=0.10) == pytest.approx(0.05)
    assert selftest.calibrate_fraction(probes=probes, target=0.25) == pytest.approx(0.20)
    with pytest.raises(ValueError, match="grow with the fraction"):
        selftest.calibrate_fraction(probes={0.02: 0.07, 0.24: 0.06}, target=0.10)
    with pytest.raises(ValueError, match="fixed cost"):
        selftest.calibrate_fraction(probes=probes, target=0.04)
    with pytest.raises(ValueError, match="≥ 2"):
        selftest.calibrate_fraction(probes={0.2: 0.3}, target=0.10)


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
                                                     genuine=0, planted=3)
    assert judgement.as_expected and "max_retraces ≤ 0" in judgement.check
    assert not selftest.judge_by_recorded_threshold(mutant="dynamic shapes", metric="retraces", recorded=0,
                                                    genuine=0, planted=0).as_expected


def test_a_slowdown_is_judged_by_the_stored_run_comparison():
    history = [100.0, 102.0, 99.0, 101.0, 100.5]
    slower = selftest.judge_by_history(mutant="13% more step work", history=history, genuine=100.2, planted=87.0)
    assert slower.as_expected and "5 earlier runs" in slower.check
    hidden = selftest.judge_by_history(mutant="3% more step work", history=history, genuine=100.2, planted=97.0)
    assert hidden.planted == "pass" and not hidden.as_expected  # below the comparison's minimum effect
    with pytest.raises(ValueError, match="enough earlier runs"):
        selftest.judge_by_history(mutant="x", history=[100.0, 101.0], genuine=100.0, planted=80.0)


def test_rates_through_the_stored_run_comparison_are_judged_against_the_targets():
    rng = np.random.default_rng(3)
    draw = lambda seconds: list(np.exp(rng.normal(np.log(seconds), 0.01, 20 * 32)))  # noqa: E731
    base, same = draw(0.02), draw(0.02)
    options = {"rounds_per_trial": 32, "history_runs": 5, "alpha": 0.01, "min_effect": 0.05}
    judgement = selftest.judge_rates_by_history(mutant="10%", base=base, genuine=same, planted=draw(0.022), **options)
    assert judgement.as_expected and "0/15" in judgement.evidence and "15/15" in judgement.evidence
    too_small = selftest.judge_rates_by_history(mutant="2%", base=base, genuine=same, planted=draw(0.0204), **options)
    assert too_small.planted == "pass" and not too_small.as_expected


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


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="thread pinning is Linux-only")
def test_pinned_to_one_cpu_pins_every_thread_and_restores():
    before = os.sched_getaffinity(0)
    cpu = max(before)
    release, started, seen = threading.Event(), threading.Event(), {}

    def waiting():  # a thread that exists before pinning
        seen["id"] = threading.get_native_id()
        started.set()
        release.wait()

    old_thread = threading.Thread(target=waiting)
    old_thread.start()
    started.wait()
    try:
        with selftest.pinned_to_one_cpu(cpu) as pinned:
            assert pinned == cpu and os.sched_getaffinity(0) == {cpu}
            assert os.sched_getaffinity(seen["id"]) == {cpu}
            new_thread = threading.Thread(target=lambda: seen.update(new=os.sched_getaffinity(0)))
            new_thread.start()
            new_thread.join()
        assert seen["new"] == {cpu}  # started inside: inherits the pin
        assert os.sched_getaffinity(0) == before and os.sched_getaffinity(seen["id"]) == before
    finally:
        release.set()
        old_thread.join()
    with pytest.raises(ValueError, match="cpu"), selftest.pinned_to_one_cpu(max(before) + 1000):
        pass
    assert os.sched_getaffinity(0) == before
    assert selftest.idlest_cpu(before, window_s=0.01) in before


def test_a_noisy_machine_makes_the_planted_slowdowns_unmeasurable_with_the_figure():
    quiet = selftest.calibrate_gate(aa_ratios=[1.0, 1.01, 0.99, 1.005, 0.995] * 8, rounds_per_trial=32)
    assert selftest.unmeasurable_reason(quiet, smallest_target=0.10) is None
    rng = np.random.default_rng(0)
    noisy = selftest.calibrate_gate(aa_ratios=np.exp(rng.normal(0, 0.11, 64)), rounds_per_trial=32)
    reason = selftest.unmeasurable_reason(noisy, smallest_target=0.10)
    assert reason is not None and f"{noisy.noise_cv:.1%}" in reason and "unmeasurable" in reason


def test_history_rates_flag_a_planted_slowdown_and_not_an_identical_arm():
    rng = np.random.default_rng(1)
    base = list(np.exp(rng.normal(np.log(0.02), 0.01, 20 * 32)))
    same = list(np.exp(rng.normal(np.log(0.02), 0.01, 20 * 32)))
    slow = list(np.exp(rng.normal(np.log(0.025), 0.01, 20 * 32)))
    assert selftest.history_rates(base=base, test=same, rounds_per_trial=32, history_runs=5, alpha=0.01,
                                  min_effect=0.05) == (0, 15)
    flagged, judged = selftest.history_rates(base=base, test=slow, rounds_per_trial=32, history_runs=5,
                                             alpha=0.01, min_effect=0.05)
    assert judged == 15 and flagged == 15


def test_a_noisy_history_makes_a_planted_step_slowdown_unmeasurable_with_the_figure():
    quiet = [100.0, 100.5, 99.5, 100.2, 99.8]
    assert selftest.history_unmeasurable_reason(quiet, slowdown=0.13, alpha=0.01) is None
    noisy = [100.0, 125.0, 80.0, 110.0, 90.0]
    reason = selftest.history_unmeasurable_reason(noisy, slowdown=0.13, alpha=0.01)
    assert reason is not None and "unmeasurable" in reason and "not the planted 13%" in reason
