"""The regression detector's self-test: planted regressions must be flagged, an unchanged configuration
must not be, each by exactly what a user's run uses (perfsuite.tools.selftest.UserPath: this session's
comparison settings and ratios.yaml).

The false-alarm and detection rates are `perfsuite selftest`'s (perfsuite.tools.detection: exact plants,
a detection curve per path, the selftest_* gates decided on their path by the interval); the command
is the way to run them, this file's test runs its gates and saved paths within a pytest session. The
other tests plant one regression each (a mutant) and check the gate meant for it. See docs/selftest.md.
"""

import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

from perfsuite.data.corpus import CorpusSpec, build_cache, build_corpus, read_metadata
from perfsuite.data.loaders import LoaderConfig, build_loader
from perfsuite.errors import DataError
from perfsuite.measure import timing
from perfsuite.measure.input_bound import measure_input_bound
from perfsuite.measure.rounds import interleaved
from perfsuite.measure.step_model import measure_step
from perfsuite.tools import selftest
from perfsuite.workload.model import MODEL_PRESETS, make_synthetic_batch, make_train_step

pytestmark = pytest.mark.selftest

# Short utterances (1-2 s) keep the checks of the other mutants cheap.
SELFTEST_CORPUS = CorpusSpec(num_utterances=32, min_seconds=1.0, max_seconds=2.0, seed=7)

SWAP_ROUND_S = 1.0


@pytest.fixture
def user_path(perfsuite, pytestconfig) -> selftest.UserPath:
    """What this session's run judges with: its comparison settings and its ratios.yaml."""
    return selftest.UserPath.of(perfsuite.context, pytestconfig)


@pytest.fixture(scope="session")
def selftest_corpus(pytestconfig):
    dataset_dir = build_corpus(SELFTEST_CORPUS, root=pytestconfig.getoption("perfsuite_data_dir"))
    return dataset_dir, build_cache(dataset_dir)


def test_detection_curves_decide_the_selftest_gates(pytestconfig, capsys):
    """`perfsuite selftest`'s work and saved paths (perfsuite.tools.detection; docs/selftest.md) with this
    session's profile and comparison settings: exact plants of 0-40 %, each certified in work,
    then every selftest_* gate of ratios.yaml decided on the path it gates by the interval of its share.
    A failed gate fails the test; a gate no measurement here can decide (a failed plant, a path the
    budget could not hold, a path not run) is listed with its reason, and when none is decided the test
    skips with those reasons. Size: PERFSUITE_SELFTEST_TRIALS (default 20) and _BUDGET (seconds)."""
    from perfsuite.tools.detection import command
    from perfsuite.tools.detection.present import curve_table, summary_lines
    from perfsuite.tools.detection.records import LEVELS, Settings

    baselines = pytestconfig.getoption("perfsuite_baselines") or Path(__file__).parent / "baselines"
    settings = Settings(paths=("work", "saved"), levels=LEVELS,
                        trials=int(os.environ.get("PERFSUITE_SELFTEST_TRIALS", "20")),
                        budget_s=float(os.environ.get("PERFSUITE_SELFTEST_BUDGET")
                                       or sum(command.PATH_BUDGET_S[path] for path in ("work", "saved"))),
                        profile=pytestconfig.getoption("perfsuite_profile"),
                        history_runs=max(3, pytestconfig.getoption("perfsuite_compare_runs")),
                        alpha=pytestconfig.getoption("perfsuite_compare_alpha"),
                        min_effect=pytestconfig.getoption("perfsuite_compare_min_effect"))
    with capsys.disabled():
        report = command.measure(settings, ratios=Path(baselines) / "ratios.yaml",
                                 data_dir=pytestconfig.getoption("perfsuite_data_dir"),
                                 progress=lambda line: print(f"selftest: {line}", flush=True))
        print("\n".join(curve_table(report).terminal() + summary_lines(report)))
    failed = [gate for gate in report.gates if gate.decision == "fail"]
    assert not failed, "; ".join(f"{g.metric} {g.bound}: {g.rate:.0%} [{g.ci_low:.0%}, {g.ci_high:.0%}]" for g in failed)
    if all(gate.decision == "skipped" for gate in report.gates):
        pytest.skip("no selftest_* gate could be decided here: " + "; ".join(
            f"{gate.metric}: {gate.reason}" for gate in report.gates))


def test_numpy_function_swap_flagged_by_ratio_gate(perfsuite, user_path, perfsuite_corpus):
    """Measured the way the gate's own benchmark measures it (test_loaders.py::test_loader_ratio: the
    profile's corpus, batch 16, 2 workers, fresh iterator each round): the genuine TF-native loader must
    pass the gate and the swapped-in numpy_function loader must fail it, or the gate tells nothing."""
    gate_name = "tf_native_over_numpy_function_wav_ratio"
    profile = perfsuite.profile
    base = LoaderConfig(kind="tf_native", source="wav", batch_size=16, num_parallel_calls=2)

    def rate_round(config):  # rounds of at least a second: the numpy_function loader's batch times are bimodal
        dataset = build_loader(dataset_dir=perfsuite_corpus, config=config).dataset.repeat()
        return lambda: timing.measure_dataset(dataset=dataset, warmup_batches=profile.warmup_batches,
                                              measure_batches=profile.measure_batches,
                                              min_seconds=max(profile.min_round_s, SWAP_ROUND_S))

    reference = rate_round(selftest.mutant_loader_config(base, "numpy_function"))
    # Enough rounds for both intervals to clear the gate on a loaded box (the gate decides by interval).
    good = perfsuite.compare("selftest_genuine_tf_native_over_numpy_function_ratio", a=rate_round(base),
                             b=reference, rounds=profile.max_rounds)
    mutant = rate_round(selftest.mutant_loader_config(base, "numpy_function"))
    bad = timing.ab_result(*interleaved(timing.ab_runs(mutant, reference), rounds=profile.max_rounds,
                                        warmup_rounds=1))
    judgement = selftest.judge_by_gate(user_path.ratios, mutant="numpy_function swap",
                                       metric=gate_name, genuine=good.ratios, planted=bad.ratios,
                                       genuine_value=good.summary.median, planted_value=bad.summary.median)
    perfsuite.record(judgement.as_dict(), prefix="selftest_numpy_function_")
    assert judgement.as_expected, judgement.message


MIN_DEVICE_STEP_S = 0.002  # a device-like step no shorter than this: its sleep's jitter stays small beside it
# The device-like step lasts this many unprefetched fetches: without prefetch the step waits a quarter of
# its time (far above the gate's 5 %), with prefetch the pipeline has twice a batch's work in hand.
DEVICE_STEP_OVER_FETCH = 3


def test_no_prefetch_flagged_by_input_wait_gate(perfsuite, user_path, selftest_corpus, tensorflow):
    """The shipped gate tf_native_cache_input_wait (≤ 5 %) on the TF-native cache loader with and without
    prefetch, feeding a step that waits like an accelerator (the host is free meanwhile): on a CPU-only
    box a real CPU step competes with the pipeline for the same cores and prefetch can overlap nothing,
    and the compiled step of benchmarks/test_pipeline.py is so much longer than a cache batch that the
    shipped benchmark's wait moves by about a batch's fetch over a step (see the report's findings)."""
    tf = tensorflow
    dataset_dir, cache_dir = selftest_corpus
    share_name, gate_name = "tf_native_cache_input_bound", "tf_native_cache_input_wait"
    # The whole corpus in a batch: a cache batch of a few utterances is so quick that a device step twice
    # its fetch would be mostly the sleep's own jitter.
    base = LoaderConfig(kind="tf_native", source="cache", batch_size=SELFTEST_CORPUS.num_utterances,
                        num_parallel_calls=2, drop_remainder=True)
    with_prefetch = build_loader(dataset_dir=dataset_dir, cache_dir=cache_dir, config=base).dataset.repeat()
    without = build_loader(dataset_dir=dataset_dir, cache_dir=cache_dir,
                           config=selftest.mutant_loader_config(base, "no_prefetch")).dataset.repeat()
    # LoaderConfig(prefetch=0) leaves tf.data's own injected prefetch in place, which hides the mutant
    # entirely (docs/selftest.md); switch that off too so "no prefetch" means none.
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    without = without.with_options(options)
    fetch = timing.measure_dataset(dataset=iter(without), warmup_batches=2, measure_batches=12)
    step_s = max(DEVICE_STEP_OVER_FETCH * fetch.summary.median, MIN_DEVICE_STEP_S)

    def device_like_step(batch):
        time.sleep(step_s)
        return batch["mel_len"]

    # The genuine loader through the fixture: its rounds grow while the gate is undecided, and the plugin
    # judges its share by the same gate, as in a user's run.
    good = perfsuite.measure_input_bound(step=device_like_step, dataset=with_prefetch, warmup=2, batches=12,
                                         metric=share_name)
    bad = measure_input_bound(step=device_like_step, dataset=without, warmup=2, batches=12, rounds=good.rounds)
    judgement = selftest.judge_by_gate(user_path.ratios, mutant="prefetch removed", metric=gate_name,
                                       genuine=good.wait_shares, planted=bad.wait_shares,
                                       genuine_value=good.wait_share, planted_value=bad.wait_share)
    perfsuite.record({"step_s": step_s, "fetch_median_s": fetch.summary.median, **judgement.as_dict()},
                     prefix="selftest_prefetch_")
    assert judgement.as_expected, judgement.message


def test_eager_step_flagged_by_compiled_over_eager_gate(perfsuite, user_path):
    """The shipped gate graph_over_eager_ratio (≥ 1.2) on the graph step over the eager one, and on the
    planted step (mode eager in place of graph) over the eager one, in interleaved rounds."""
    batch = make_synthetic_batch(batch_size=8, text_len=40, mel_frames=120, seed=0)
    options = {"model_config": MODEL_PRESETS["tiny"], "mode": "graph", "input_shapes": (8, 40, 120)}
    steps = {"eager": make_train_step(**{**options, "mode": "eager"}), "genuine": make_train_step(**options),
             "mutant": make_train_step(**selftest.mutant_step_options(options, "eager"))}

    def calls(step, n=3):
        def run_round():
            start = time.perf_counter_ns()
            for _ in range(n):
                step(batch).numpy()
            return (time.perf_counter_ns() - start) / 1e9
        return run_round

    rounds = perfsuite.profile.max_rounds
    good = perfsuite.compare("selftest_genuine_compiled_over_eager_ratio", a=calls(steps["genuine"]),
                             b=calls(steps["eager"]), rounds=rounds)
    bad = timing.ab_result(*interleaved(timing.ab_runs(calls(steps["mutant"]), calls(steps["eager"])),
                                        rounds=rounds, warmup_rounds=1))
    judgement = selftest.judge_by_gate(user_path.ratios, mutant="eager step",
                                       metric="graph_over_eager_ratio", genuine=good.ratios, planted=bad.ratios,
                                       genuine_value=good.summary.median, planted_value=bad.summary.median)
    perfsuite.record(judgement.as_dict(), prefix="selftest_eager_")
    assert steps["mutant"].tracing_count() is None  # it really runs eagerly
    assert judgement.as_expected, judgement.message


STEP_SLOWDOWN = 0.13  # the planted share of more work per step
STEP_RUN_CALLS = 60  # steady calls of one "run" of the step (a few tenths of a second of the tiny model)
STEP_HISTORY_RUNS = 5  # earlier runs of the genuine step (the comparison uses the newest --perfsuite-compare-runs)


def _spin(seconds):
    """Work on the host's CPU for `seconds` (a busy loop, not a sleep: more work, not a wait)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def test_step_slowdown_flagged_by_the_stored_run_comparison(perfsuite, user_path):
    """~13 % more work per step, judged by the comparison with earlier runs a user's run makes (this
    session's settings, the plugin's defaults unless given): STEP_HISTORY_RUNS runs of the genuine graph
    step are the earlier runs, then one genuine run and one planted run are each judged against them. No gate of
    ratios.yaml sees it: graph_over_eager_ratio and xla_over_graph_ratio compare modes of one step, which
    the same extra work slows alike (or, planted in one mode, moves far less than their margins)."""
    batch = make_synthetic_batch(batch_size=8, text_len=40, mel_frames=120, seed=0)
    step = make_train_step(model_config=MODEL_PRESETS["tiny"], mode="graph", input_shapes=(8, 40, 120))

    def run(train):
        return measure_step(step=train, batch=batch, warmup_calls=2, measure_calls=STEP_RUN_CALLS).samples_per_s

    history = [run(step) for _ in range(STEP_HISTORY_RUNS)]
    reason = selftest.history_unmeasurable_reason(history, slowdown=STEP_SLOWDOWN, alpha=user_path.alpha)
    if reason is not None:  # as the rates test: a machine this noisy cannot show the planted amount
        perfsuite.record({"history_samples_per_s": history, "unmeasurable": reason}, prefix="selftest_step_work_")
        pytest.skip(reason)
    step_s = 8 / float(np.median(history))  # seconds per call: the batch's 8 samples over samples/s

    def planted(one_batch):
        output = step(one_batch)
        _spin(STEP_SLOWDOWN * step_s)
        return output

    judgement = selftest.judge_by_history(mutant=f"{STEP_SLOWDOWN:.0%} more step work", history=history,
                                          genuine=run(step), planted=run(planted), path=user_path)
    perfsuite.record({"step_s": step_s, "history_samples_per_s": history, **judgement.as_dict()},
                     prefix="selftest_step_work_")
    assert judgement.as_expected, judgement.message


def test_dynamic_shapes_flagged_by_retrace_gate(perfsuite, user_path, selftest_corpus):
    dataset_dir, _ = selftest_corpus
    limits = (max(len(u.normalized_text) for u in read_metadata(dataset_dir)) + 8, 2 * 22050 // 256 + 2)
    base = LoaderConfig(kind="tf_native", source="wav", batch_size=8, num_parallel_calls=2, static_shapes=True,
                        max_text_len=limits[0], max_mel_frames=limits[1])
    options = {"model_config": MODEL_PRESETS["tiny"], "mode": "graph", "input_shapes": (None, *limits)}
    good_step = make_train_step(**options)
    static_dataset = build_loader(dataset_dir=dataset_dir, config=base).dataset
    good = perfsuite.measure_epoch(step=good_step, dataset=static_dataset, name="static")
    mutant_dataset = build_loader(dataset_dir=dataset_dir,
                                  config=selftest.mutant_loader_config(base, "dynamic_shapes")).dataset
    bad_step = make_train_step(**selftest.mutant_step_options(options, "dynamic_shapes"))
    bad = measure_step(step=bad_step, batches=iter(mutant_dataset), warmup_calls=1,
                       measure_calls=int(mutant_dataset.cardinality()) - 1, name="dynamic")
    again = measure_step(step=make_train_step(**options), batches=iter(static_dataset), warmup_calls=1,
                         measure_calls=int(static_dataset.cardinality()) - 1, name="static again")
    # No gate of ratios.yaml sees retracing: the shipped checks are test_shapes' assertion and the max_retraces
    # threshold --perfsuite-save-baselines records into a machine profile, which this judges through.
    judgement = selftest.judge_by_recorded_threshold(mutant="dynamic shapes", metric="retraces",
                                                     recorded=good.retraces, genuine=again.retraces,
                                                     planted=bad.retraces, margin=user_path.margin)
    perfsuite.record({"static_traces": good.traces, "dynamic_traces": bad.traces, **judgement.as_dict()},
                     prefix="selftest_retrace_")
    assert judgement.as_expected, judgement.message


def test_fortran_cache_file_raises_data_error(selftest_corpus, tmp_path):
    from perfsuite._tensorflow import tensorflow

    tf = tensorflow()

    from perfsuite.data.npy import decode_npy

    dataset_dir, cache_dir = selftest_corpus
    utt_id = read_metadata(dataset_dir)[0].id
    bad_path = selftest.write_fortran_cache_copy(cache_dir=cache_dir, dest=tmp_path / "cache", utt_id=utt_id)
    config = LoaderConfig(kind="tf_native", source="cache", batch_size=8)
    with pytest.raises(DataError, match="fortran_order") as error:  # the loader's header check
        build_loader(dataset_dir=dataset_dir, cache_dir=tmp_path / "cache", config=config)
    assert str(bad_path) in str(error.value)
    # The graph parser on its own (no preflight) refuses the file too, naming it.
    with pytest.raises(tf.errors.InvalidArgumentError, match="(?i)fortran") as graph_error:
        decode_npy(tf.io.read_file(str(bad_path)), dtype=tf.float32, path=str(bad_path))
    assert str(bad_path) in str(graph_error.value)
    assert not math.isnan(float(np.load(bad_path).sum()))
