"""diagnose --pipeline reads the pipeline, not a buffer, names the stage that limits it, measures the fixes it
can apply, spends its budget on what is undecided and keeps the user's output in a log. The end-to-end runs
on tests/pipelines/tts_recipe.py (a TTS recipe's shapes: tuple batches, a trailing with_options, a 50-batch
prefetch, fixed-length padding, a numpy_function with a per-token Python loop, prints, a slow first call)
are marked slow."""

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from perfsuite.tools import cli
from perfsuite.tools.diagnose import rewrite
from perfsuite.tools.diagnose.plan import Budget, StageLog, no_progress
from perfsuite.tools.diagnose.quiet import user_output_to
from perfsuite.tools.diagnose.streams import Stream, buffered_elements, timed_next
from perfsuite.verdict.diagnosis_figures import TOO_SHORT, UNDECIDED
from perfsuite.workload.pipeline_model import read_pipeline

RECIPE = Path(__file__).parent / "pipelines" / "tts_recipe.py"
PRODUCE_S = 0.004


def _slow(index):
    time.sleep(PRODUCE_S)
    return np.float32(index)


def _slow_pipeline(prefetch: int):
    # stateful: tf.data does not parallelize it at run time (map_parallelization), so one element takes PRODUCE_S
    dataset = tf.data.Dataset.range(10_000).map(lambda i: tf.numpy_function(_slow, [i], tf.float32, stateful=True))
    dataset = dataset.batch(1)
    return dataset.prefetch(prefetch) if prefetch else dataset


def test_the_buffers_are_counted_from_the_graph():
    assert buffered_elements(_slow_pipeline(50)) >= 50
    parallel = tf.data.Dataset.range(8).map(lambda x: x, num_parallel_calls=3).prefetch(5)
    assert buffered_elements(parallel) == 3 + 5
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    assert buffered_elements(tf.data.Dataset.range(8).map(lambda x: x).with_options(options)) == 0


def test_an_iterator_that_sat_idle_is_drained_before_it_is_timed():
    """A 50-batch buffer fills while something else runs (the step's first call); drained of what the
    buffers hold, the reads wait for the pipeline again: each about PRODUCE_S, not the buffer's ~0."""
    dataset = _slow_pipeline(50)
    stream = Stream(dataset, "slow")
    stream.next()
    time.sleep(60 * PRODUCE_S)  # the buffer fills meanwhile
    stream.drain(buffered_elements(dataset))
    seconds = [timed_next(stream)[1] for _ in range(10)]
    stream.close()
    assert sum(seconds) / len(seconds) >= 0.5 * PRODUCE_S


def test_the_users_output_goes_to_the_log_and_ours_to_the_terminal(tmp_path, capfd):
    log = tmp_path / "user.log"
    with user_output_to(log) as terminal:
        print("user print")
        os.write(1, b"fd 1 write\n")
        os.write(2, b"fd 2 write (a C++ warning)\n")
        subprocess.run([sys.executable, "-c", "print('from a subprocess')"], check=True)
        tf.print("from tf.print")
        print("ours", file=terminal, flush=True)
    print("after")
    text = log.read_text()
    for line in ("user print", "fd 1 write", "fd 2 write", "from a subprocess", "from tf.print"):
        assert line in text
    out, err = capfd.readouterr()
    assert "ours" in err + out and "after" in out
    assert not any(line in out + err for line in ("user print", "fd 1 write", "from a subprocess", "from tf.print"))


def test_the_stages_skip_wrappers_and_know_where_batches_begin():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tts_recipe_stages", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cuts = rewrite.prefixes(module.make_dataset())
    assert [c.stage for c in cuts] == ["range", "map(utterance)", "padded_batch"]
    assert [c.batched for c in cuts] == [False, False, True]


def test_prefetch_to_device_followed_by_stages_is_read_and_the_fixes_that_need_the_graph_say_why_not():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tts_recipe_device", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dataset = module.make_dataset(to_device="1", prefetch="0", options="0", python="0")
    assert buffered_elements(dataset) >= 16  # the copy to the device holds an autotuned buffer
    assert "copy_to_device" in [c.stage for c in rewrite.prefixes(dataset)]
    fixes, skipped = rewrite.applicable_fixes(dataset, ends_with_prefetch=False)
    assert [f.name for f in fixes] == ["prefetch"]
    assert all("cannot be rewritten" in s.why and "Traceback" not in s.why for s in skipped)


def test_map_parallelism_is_applied_only_to_sequential_maps_and_keeps_the_elements():
    sequential = tf.data.Dataset.range(12).map(lambda x: x * 3).batch(4)
    fixes, _ = rewrite.applicable_fixes(sequential, ends_with_prefetch=False)
    fix = next(f for f in fixes if f.name == "map-parallelism")
    fixed, ready = fix.build(read_pipeline(sequential))
    ready()
    assert [n.op for n in read_pipeline(fixed).graph_def.node].count("ParallelMapDatasetV2") == 1
    assert [b.tolist() for b in fixed.as_numpy_iterator()] == [b.tolist() for b in sequential.as_numpy_iterator()]
    parallel = tf.data.Dataset.range(12).map(lambda x: x * 3, num_parallel_calls=2).batch(4)
    _, skipped = rewrite.applicable_fixes(parallel, ends_with_prefetch=False)
    assert "map-parallelism" in [s.name for s in skipped]


def test_a_cache_goes_after_the_deterministic_prefix_and_serves_the_same_elements():
    dataset = tf.data.Dataset.range(12).map(lambda x: x * 2).batch(3).repeat(2)
    fixes, _ = rewrite.applicable_fixes(dataset, ends_with_prefetch=False)
    fix = next(f for f in fixes if f.name == "cache")
    fixed, ready = fix.build(read_pipeline(dataset))
    ready()
    assert "CacheDatasetV2" in [n.op for n in read_pipeline(fixed).graph_def.node]
    assert [b.tolist() for b in fixed.as_numpy_iterator()] == [b.tolist() for b in dataset.as_numpy_iterator()]
    shuffled = tf.data.Dataset.range(12).shuffle(12).map(lambda x: x * 2).batch(3).repeat(2)
    _, skipped = rewrite.applicable_fixes(shuffled, ends_with_prefetch=False)
    assert "cache" in [s.name for s in skipped]


def test_time_left_goes_to_a_stage_still_undecided():
    now = [0.0]
    budget = Budget(100, {"a": 1.0, "b": 1.0}, lambda: now[0])
    log = StageLog(make=lambda **parts: parts, parts={}, budget=budget, progress=no_progress, checkpoint=None)
    with log.stage("a") as stage:
        now[0] += 50
        stage.rounds, stage.status = 1, TOO_SHORT
    with log.stage("b") as stage:
        now[0] += 10  # decided early: 40 s of its share left
    assert log.undecided() == ["a"]
    with log.again("a") as stage:
        assert stage.share_s == pytest.approx(40)
        now[0] += 30
        stage.rounds, stage.status = 3, UNDECIDED
    [a, _] = log.stages
    assert (a.name, a.rounds, a.spent_s, a.share_s, a.status) == ("a", 4, 80, 90, UNDECIDED)


def _log_with(now, needs, statuses, rounds=None):
    """A StageLog over a fake clock whose stages each ran 10 s in 5 rounds (or `rounds[name]`) and ended with the
    given status."""
    budget = Budget(100, needs, lambda: now[0])
    log = StageLog(make=lambda **parts: parts, parts={}, budget=budget, progress=no_progress, checkpoint=None)
    for name, status in statuses.items():
        with log.stage(name) as stage:
            now[0] += 10
            stage.rounds, stage.status = (rounds or {}).get(name, 5), status
    return log


def test_the_time_left_goes_first_to_the_stage_nearest_to_deciding_and_the_rest_waits_for_the_others():
    from perfsuite.tools.diagnose.plan import Resumable

    now = [0.0]
    log = _log_with(now, {"far": 1.0, "near": 1.0, "hopeless": 1.0, "done": 1.0},
                    {"far": UNDECIDED, "near": UNDECIDED, "hopeless": UNDECIDED, "done": "decided"})
    shares = []

    def runs(name, seconds):
        def run(stage):
            shares.append((name, round(stage.share_s, 3)))
            now[0] += seconds
            stage.status = "decided"
            return {name: True}
        return run

    passes = {"far": Resumable(runs("far", 15), lambda: 10.0),  # 10 rounds of 2 s: 20 s
              "near": Resumable(runs("near", 4), lambda: 2.0),  # 4 s
              "hopeless": Resumable(runs("hopeless", 5), lambda: float("inf"))}
    log.resume(passes)  # 60 s left
    assert [name for name, _ in shares] == ["near", "far", "hopeless"]
    assert shares[0] == ("near", 60 - 20)  # what is left less what 'far' needs ('hopeless' has no estimate)
    assert shares[1] == ("far", 56)  # all that is left but the 0 s the hopeless stage is estimated to need
    assert shares[2] == ("hopeless", 41)
    assert log.parts == {"near": True, "far": True, "hopeless": True}


def test_a_stage_with_no_round_yet_goes_first_with_at_least_a_fair_part_of_what_is_left():
    """Its need is unknown, not 0: what the other stages are estimated to need must not leave it nothing."""
    from perfsuite.tools.diagnose.plan import Resumable

    now = [0.0]
    log = _log_with(now, {"unmeasured": 1.0, "far": 1.0}, {"unmeasured": TOO_SHORT, "far": UNDECIDED},
                    rounds={"unmeasured": 0})
    now[0] = 80.0  # 20 s left; 'far' is estimated to need 10 rounds more at 2 s: 20 s
    shares = []

    def run(name):
        def measured(stage):
            shares.append((name, round(stage.share_s, 3)))
            now[0] += min(stage.share_s, 10)
            return {}
        return measured

    log.resume({"unmeasured": Resumable(run("unmeasured"), lambda: 3.0), "far": Resumable(run("far"), lambda: 10.0)})
    assert shares == [("unmeasured", 10.0), ("far", 10.0)]


def test_a_stage_still_undecided_when_the_budget_is_spent_says_what_budget_would_decide_it():
    from perfsuite.tools.diagnose.plan import Resumable
    from perfsuite.verdict.diagnosis import stage_verdicts

    now = [0.0]
    log = _log_with(now, {"a": 1.0, "b": 9.0}, {"a": UNDECIDED, "b": "decided"})  # a: 10 s share, 5 rounds in 10 s
    now[0] = 100.0  # the budget spent
    log.resume({"a": Resumable(lambda stage: pytest.fail("no time left to run it"), lambda: 10.0)})
    [a, _] = log.stages
    assert a.needs_s == pytest.approx(10 + 10 * 2)  # its 10 s, then 10 rounds more at 2 s each
    [verdict] = stage_verdicts(log.stages, budget_s=100)
    assert verdict.recommendation.startswith("raise --budget to about 300 s")
    [far] = stage_verdicts((replace(a, needs_s=1e4),), budget_s=100)  # 1,000x the run's budget: not recommended
    assert far.recommendation.startswith("no --budget up to 10x this one") and "class boundary" in far.recommendation


def test_more_rounds_grow_with_the_interval_and_are_endless_on_the_boundary():
    from perfsuite.tools.diagnose.plan import more_rounds, more_rounds_for
    from perfsuite.verdict.diagnosis_figures import estimate

    assert more_rounds(10, 0.2, 0.2) == 1  # as narrow as needed: one more round
    assert more_rounds(10, 0.4, 0.2) == 30  # twice too wide: 4x the rounds in all
    assert more_rounds(10, 0.1, 0.0) == float("inf")
    assert more_rounds(1, 0.1, 1.0) == 2  # up to MIN_ROUNDS in all
    straddling = estimate([0.9, 1.1, 0.95, 1.2, 1.05, 0.99], (1.0,))
    assert straddling.straddles and more_rounds_for(straddling) > 1
    assert more_rounds_for(None) == 3


class _Planted:
    """A Comparison whose 'after' side is `gain` times the 'before' side, with a per-side wobble."""

    warmup_rounds, unit = 0, "planted/s"

    def __init__(self, name, gain, wobble):
        self.name, self.words, self.gain, self.wobble, self.reads = name, f"planting {name}", gain, wobble, 0

    def prepare(self):
        pass

    def rate(self, side, read_s):
        self.reads += 1
        time.sleep(0.002)
        return (self.gain if side == "after" else 1.0) * (1 + self.wobble * (-1) ** self.reads)

    def close(self):
        pass


def test_a_second_fixes_pass_keeps_the_decided_gains_and_adds_rounds_to_the_undecided_ones():
    from perfsuite.tools.diagnose.fixes import FixRounds
    from perfsuite.tools.diagnose.plan import Stage

    clear, unsure = _Planted("clear", 2.0, 0.01), _Planted("unsure", 1.0, 0.3)
    fixes = FixRounds(lambda stage: ([clear, unsure], []))
    budget = Budget(60, {"fixes": 1.0}, time.monotonic)
    first = {fix.name: fix for fix in fixes.run(Stage("fixes", 4.0, budget, no_progress))}
    assert first["clear"].gain.decided and not first["unsure"].gain.decided
    reads, rounds = clear.reads, first["unsure"].gain.rounds
    assert fixes.more_rounds() >= 1
    again = {fix.name: fix for fix in fixes.run(Stage("fixes", 2.0, budget, no_progress))}
    assert clear.reads == reads and again["clear"] == first["clear"]  # kept, not measured again
    assert again["unsure"].gain.rounds > rounds  # rounds added to the first pass's


def test_a_batch_cut_to_its_longest_true_clip_keeps_its_structure_and_says_the_true_lengths():
    from perfsuite.measure.batch_spec import find_layout
    from perfsuite.tools.diagnose.padding import bucketed

    mel = np.zeros([2, 96, 4], np.float32)
    mel[0, :30], mel[1, :50] = 1.0, 2.0  # 30 and 50 real frames, zero-padded to a fixed 96
    batch = (tf.ones([2, 7], tf.int32), tf.constant(mel), tf.constant([7, 5]), tf.constant([96, 96]))
    [cut] = bucketed([batch], find_layout(batch), batch_size=2, buckets=1)
    assert isinstance(cut, tuple) and len(cut) == 4
    assert cut[1].shape == (2, 50, 4) and cut[3].numpy().tolist() == [30, 50] and cut[3].dtype == tf.int32
    assert cut[0].numpy().tolist() == batch[0].numpy().tolist() and cut[2].numpy().tolist() == [7, 5]


def test_a_fix_is_recommended_only_when_its_gain_is_decided_above_one():
    from perfsuite.tools.diagnose.fixes import GAIN_BOUNDARIES
    from perfsuite.verdict.diagnosis_figures import FixGain, estimate
    from perfsuite.verdict.pipeline_findings import fix_verdicts

    helps = FixGain("prefetch", "adding a prefetch", True, unit="steps/s", gain=estimate([1.8, 1.7, 1.9, 1.8],
                                                                                          GAIN_BOUNDARIES))
    unsure = FixGain("cache", "caching", True, unit="steps/s", gain=estimate([0.9, 1.2, 1.1], GAIN_BOUNDARIES))
    short = FixGain("padding", "padding to the longest", True, unit="steps/s", gain=estimate([2.0], GAIN_BOUNDARIES))
    refused = FixGain("map-parallelism", "map-parallelism", False, why="no sequential map in the graph")
    by_name = {v.topic: v for v in fix_verdicts((helps, unsure, short, refused))}
    assert by_name["fix-prefetch"].recommendation and "1.80x [1.70, 1.90]" in by_name["fix-prefetch"].finding
    assert by_name["fix-cache"].recommendation is None and "undecided" in by_name["fix-cache"].finding
    assert by_name["fix-padding"].recommendation is None and "not enough time" in by_name["fix-padding"].finding
    assert "not applied (no sequential map" in by_name["fix-map-parallelism"].finding


def test_a_feed_share_spent_draining_the_buffers_searches_nothing():
    """Draining a slow pipeline's buffers (here 1.2 s) can take the feed stage's whole share (1 s): no search
    is started with a negative budget, and the stage says why."""
    from perfsuite.tools.diagnose import run as pipeline
    from perfsuite.tools.diagnose.plan import Stage
    from perfsuite.verdict.diagnosis_figures import DiagnoseSettings

    slow = tf.data.Dataset.range(10**6).map(
        lambda x: tf.numpy_function(_sleeps(0.01), [x], tf.int64, stateful=True)).batch(1)
    stage = Stage("feed", 1.0, Budget(30, {"feed": 1.0}, time.monotonic), no_progress)
    start = pipeline.Startup(name="planted", pipeline=read_pipeline(slow), graph=None, layout=None, model=None,
                             first_batch=None, first_s=0.0, warmup_s=(), drain=120)
    assert pipeline._feed_stage(stage, start, DiagnoseSettings(), None) is None
    assert stage.status == TOO_SHORT and "no time left for a feed-rate search once its iterator started" in stage.plan


# ------------------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_stage_left_undecided_gets_the_time_the_others_left(monkeypatch):
    """The throughput stage planted with almost no share: it ends with no round, and the time the other
    stages leave (the feed stage keeps none of it) brings it back for a second pass with a fair part of it at
    least. On a quiet box that pass decides it; beside other work (CI's parallel tests) it may not, and then it
    says what it would need."""
    from perfsuite.tools.diagnose import run as pipeline
    from perfsuite.verdict.diagnosis_figures import DiagnoseSettings, Target

    monkeypatch.setattr(pipeline, "STAGE_NEEDS",
                        {**pipeline.STAGE_NEEDS, "throughput": 0.001, "fixes": 0.2})
    module = Path(__file__).parent / "pipelines" / "tts_recipe.py"
    target = Target(pipeline=f"{module}:make_dataset", step=None, args={"python": "0", "text_ms": "0"})
    events = []
    found = pipeline.diagnose(target=target, settings=DiagnoseSettings(budget_s=40),
                                       progress=events.append)
    [throughput] = [s for s in found.stages if s.name == "throughput"]
    [first, again] = [e for e in events if e.stage == "throughput" and e.kind == "start"]
    assert "then again" in throughput.plan and throughput.rounds >= 1
    assert first.share_s < 0.1 and again.left_s > 0
    # the time the others left went to it: at least a fair part of it, shared with at most the three other
    # stages that can run again (bottleneck, capacity and fixes; with no step there is no input-bound stage)
    assert again.share_s >= again.left_s / 4 - 1e-6
    assert throughput.status == "decided" or throughput.needs_s is not None
    assert found.throughput.rate.rounds == throughput.rounds


def _sleeps(seconds: float):
    def work(x):
        time.sleep(seconds)
        return x

    return work


def _limiting(slow_first: bool):
    """The bottleneck stage on range -> map(first) -> map(second) -> batch, the slow map planted first or second."""
    from perfsuite.tools.diagnose.attribution import BottleneckRounds
    from perfsuite.tools.diagnose.plan import Stage

    def first(x):
        return tf.numpy_function(_sleeps(0.004 if slow_first else 0.0), [x], tf.int64, stateful=True)

    def second(x):
        return tf.numpy_function(_sleeps(0.0 if slow_first else 0.004), [x], tf.int64, stateful=True)

    dataset = tf.data.Dataset.range(10_000).map(first).map(second).batch(4)
    budget = Budget(30, {"bottleneck": 1.0}, time.monotonic)
    return BottleneckRounds(dataset, "planted", warmup=1).run(Stage("bottleneck", 8.0, budget, no_progress))


@pytest.mark.slow
@pytest.mark.parametrize("slow_first", [True, False])
def test_the_bottleneck_is_the_stage_where_the_slow_work_was_planted(slow_first):
    found = _limiting(slow_first)
    assert [s.stage for s in found.stages] == ["range", "map(first)", "map(second)", "batch"]
    assert found.limiting == ("map(first)" if slow_first else "map(second)")
    assert found.decided


def _diagnose(tmp_path, monkeypatch, capfd, *args: str, budget: str = "45", first_call_s: str = "3"):
    monkeypatch.setenv("TTS_FIRST_CALL_S", first_call_s)
    monkeypatch.setenv("TTS_STEP_PRINTS", "1")
    out = tmp_path / "d.json"
    code = cli.main(["diagnose", "--pipeline", f"{RECIPE}:make_dataset", "--step", f"{RECIPE}:make_step",
                     *(a for arg in args for a in ("--arg", arg)), "--budget", budget, "--json", str(out)])
    stdout, stderr = capfd.readouterr()
    return code, stdout, stderr, json.loads(out.read_text()), out.with_suffix(".log").read_text()


@pytest.mark.slow
def test_a_recipe_with_every_defect_is_read_as_it_runs(tmp_path, monkeypatch, capfd):
    code, out, err, result, log = _diagnose(tmp_path, monkeypatch, capfd, "prints=1", "fixed_pad=1", "prefetch=200",
                                           "options=1", "sequential=1")
    assert code == 0 and "Traceback" not in out + err
    for printed in ("TTS recipe: building", "tokenised utterance", "first step compiles", "step loss"):
        assert printed in log and printed not in out + err
    topics = {v["topic"]: v for v in result["verdicts"]}
    assert "no prefetch at the end" not in out  # the prefetch sits behind with_options
    throughput = result["throughput"]
    rate, times, rounds, start = throughput["rate"], throughput["batch_s"], [], 0
    assert rate["high"] <= 2 * rate["median"] and rate["low"] >= rate["median"] / 2
    for count in throughput["round_batches"]:
        rounds.append(4 * count / sum(times[start:start + count]))
        start += count
    assert max(rounds) <= 3 * sorted(rounds)[len(rounds) // 2]  # no round read the 200 batches buffered meanwhile
    assert "fixed-padding" in topics and topics["fix-prefetch"]["evidence"]["applied"] is False
    assert topics["fix-map-parallelism"]["evidence"]["applied"] is True and "x [" in topics["fix-map-parallelism"]["finding"]
    assert topics["bottleneck"]["evidence"]["stages"] == ["range", "map(utterance)", "padded_batch"]
    assert topics["fix-padding"]["evidence"]["applied"] is True  # the step timed at the true lengths
    assert "at the median" not in out  # no class from an undecided figure
    assert result["startup_s"] > 0 and result["step"]["first_s"] >= 3


@pytest.mark.slow
def test_a_recipe_without_the_defects_has_no_finding_for_them(tmp_path, monkeypatch, capfd):
    code, _, _, result, log = _diagnose(tmp_path, monkeypatch, capfd, "prints=0", "fixed_pad=0", "prefetch=0",
                                           "options=0", "sequential=0", "python=0", first_call_s="1")
    assert code == 0
    topics = {v["topic"]: v for v in result["verdicts"]}
    assert "fixed-padding" not in topics and "python-op" not in topics and "fix-padding" not in topics
    assert topics["fix-prefetch"]["evidence"]["applied"] is True  # no prefetch: the fix is measured
    assert topics["fix-map-parallelism"]["evidence"]["applied"] is False
    assert "tokenised utterance" not in log


def test_prefixes_whose_rates_disagree_decide_no_bottleneck():
    from types import SimpleNamespace

    from perfsuite.tools.diagnose.attribution import _bottleneck
    from perfsuite.verdict.pipeline_findings import bottleneck_verdicts

    cuts = [SimpleNamespace(stage=name, batched=False) for name in ("range", "map(load)", "batch")]
    agree = {0: [1e4] * 4, 1: [100.0, 101.0, 99.0, 100.0], 2: [98.0, 99.0, 97.0, 98.0]}
    assert _bottleneck(cuts, agree).decided and _bottleneck(cuts, agree).limiting == "map(load)"
    disagree = {**agree, 1: [3.0, 3.1, 2.9, 3.0]}  # the map prefix read 30x slower than the batch after it
    found = _bottleneck(cuts, disagree)
    assert not found.decided
    [verdict] = bottleneck_verdicts(found)
    assert "do not add up" in verdict.finding and verdict.recommendation


def test_the_readings_own_cost_is_taken_off_every_prefix_of_its_kind():
    from types import SimpleNamespace

    from perfsuite.tools.diagnose.attribution import _bottleneck

    cuts = [SimpleNamespace(stage="range", batched=False), SimpleNamespace(stage="map(load)", batched=False),
            SimpleNamespace(stage="batch", batched=True)]
    # planted: reading costs 50 us a sample unbatched and 10 us batched; range costs nothing more, map 200 us
    reading = {"unbatched": [1 / 50e-6] * 3, "batched": [1 / 10e-6] * 3}
    rates = {0: [1 / 50e-6] * 3, 1: [1 / 250e-6] * 3, 2: [1 / 210e-6] * 3, **reading}
    shares = {s.stage: s.share.median for s in _bottleneck(cuts, rates).stages}
    assert shares == pytest.approx({"range": 0.0, "map(load)": 1.0, "batch": 0.0})
    without = {s.stage: s.share.median for s in _bottleneck(cuts, {i: rates[i] for i in range(3)}).stages}
    assert without["range"] > 0.2 and without["batch"] < 0  # the reading's cost read as work


def test_a_pipeline_no_slower_than_the_reading_has_no_shares_and_says_so():
    from types import SimpleNamespace

    from perfsuite.tools.diagnose.attribution import _bottleneck
    from perfsuite.verdict.pipeline_findings import bottleneck_verdicts

    cuts = [SimpleNamespace(stage="range", batched=False), SimpleNamespace(stage="map(load)", batched=False)]
    # planted: every prefix reads as fast as (or faster than) the reading alone: nothing to share out
    rates = {0: [2e4] * 4, 1: [2e4, 2.1e4, 2e4, 2.2e4], "unbatched": [2e4] * 4}
    found = _bottleneck(cuts, rates)
    assert not found.decided and found.stages == () and found.no_work_rounds == 4
    [verdict] = bottleneck_verdicts(found)
    assert "nothing to attribute" in verdict.finding and verdict.evidence["no_work_rounds"] == 4
    # one round with work among three without: shares from that round only, and nothing decided
    mixed = {**rates, 1: [1e4, 2e4, 2.1e4, 2e4]}
    found = _bottleneck(cuts, mixed)
    assert found.no_work_rounds == 3 and found.stages[1].share.rounds == 1 and not found.decided
    [verdict] = bottleneck_verdicts(found)
    assert "3 of 4 rounds" in verdict.finding


def test_a_pass_is_known_through_stages_that_keep_one_element_per_element():
    from types import SimpleNamespace

    from perfsuite.tools.diagnose.attribution import UNBATCHED_READ, pass_reads

    def cut(dataset, batched=False):
        return SimpleNamespace(dataset=dataset, batched=batched)

    assert pass_reads(cut(tf.data.Dataset.range(8 * UNBATCHED_READ))) == 8
    assert pass_reads(cut(tf.data.Dataset.range(8 * UNBATCHED_READ + 1))) is None  # not whole reads
    assert pass_reads(cut(tf.data.Dataset.range(10).repeat())) is None  # endless
    assert pass_reads(cut(tf.data.Dataset.range(10).filter(lambda x: x > 3))) is None  # unknown
    device = tf.data.Dataset.range(40).batch(4).apply(tf.data.experimental.prefetch_to_device("/cpu:0"))
    assert int(device.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    assert pass_reads(cut(device.map(lambda x: x), batched=True)) == 10  # through the map and the copy


def test_a_round_reads_whole_passes_so_every_round_holds_as_many_restarts():
    from perfsuite.tools.diagnose.attribution import LONGEST_PASS, read_rate

    class Restarting:
        """One sample per read; every 5th read pays a 100 ms restart, the others 5 ms."""

        def __init__(self):
            self.reads, self.one = 0, tf.ones([1], tf.int64)

        def next(self):
            self.reads += 1
            time.sleep(0.1 if self.reads % 5 == 0 else 0.005)
            return self.one

        def drain(self, count):
            for _ in range(count):
                self.next()

    rates = []
    for drain in (0, 1, 2, 3):  # each round starts elsewhere in the pass
        stream = Restarting()
        rates.append(read_rate(stream, drain=drain, read_s=0.1, batched=True, whole=5))
        assert (stream.reads - drain) % 5 == 0
    assert max(rates) < 1.5 * min(rates)  # one restart in each (time-based rounds read 2 to 5: 2x apart)
    stream = Restarting()
    read_rate(stream, drain=0, read_s=0.1, batched=True, whole=10_000)  # a pass far too long: by time alone
    assert 2 <= stream.reads <= 5  # read_s reached at the 5th read (on to LONGEST_PASS x read_s: 10 or more)
    assert LONGEST_PASS * 0.1 < 10_000 * 0.005
