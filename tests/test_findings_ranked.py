"""`perfsuite diagnose --pipeline`: its findings open with what to change first (the changes measured on the
pipeline, ranked by gain, 'apply it' only above MATERIAL_GAIN), no two recommendations contradict, and a figure
that rests on something the user did not give says so first (or is left out where the user gave the real thing).

Every diagnosis here is built from records: no TensorFlow run, no timing.
"""

import functools
import re
from dataclasses import replace
from pathlib import Path

import pytest

from perfsuite.measure.batch_spec import BatchLayout
from perfsuite.measure.emulated import DEFAULT_STEP_PRESET, FeedRate, RunFigures
from perfsuite.measure.machine import MachineFingerprint
from perfsuite.measure.speech import PaddingFigures
from perfsuite.measure.stats import Cycle
from perfsuite.measure.utilisation import GpuStats
from perfsuite.tools import cli
from perfsuite.tools.diagnose.fixes import GAIN_BOUNDARIES
from perfsuite.tools.report import markdown_summary
from perfsuite.verdict import diagnosis as words
from perfsuite.verdict.diagnosis import (
    CHANGE_FIRST,
    OPPOSED,
    PUSHES,
    RETRACE_RECOMMENDATION,
    contradictions,
    material,
    measured_change,
    pushes,
    ranked_changes,
)
from perfsuite.verdict.diagnosis_figures import (
    INPUT_BOUND_BOUNDARIES,
    MATERIAL_GAIN,
    TOO_SHORT,
    Bottleneck,
    DiagnoseSettings,
    DiagnosisFinding,
    DynamicShape,
    FeedFigures,
    FixGain,
    GraphFindings,
    InputBoundFigures,
    StageRecord,
    StageShare,
    StepRun,
    Target,
    Throughput,
    estimate,
)
from perfsuite.verdict.diagnosis_record import Diagnosis
from perfsuite.verdict.pipeline_findings import fix_verdicts, verdicts
from perfsuite.workload.pipeline_model import PythonOp
from perfsuite.workload.pipeline_model import Stage as GraphStage

# ------------------------------------------------------------------------------------------ the records


def _gain(values):
    return estimate(values, GAIN_BOUNDARIES)


def _fixes(prefetch=(1.8, 1.7, 1.9, 1.8), parallel=(1.3, 1.25, 1.35), cache=(1.1, 1.08, 1.12),
           padding=(3.4, 3.0, 3.6, 3.5)) -> tuple[FixGain, ...]:
    return (FixGain("prefetch", "adding .prefetch(tf.data.AUTOTUNE) at the end", True, unit="steps/s",
                    gain=_gain(prefetch)),
            FixGain("map-parallelism", "making 1 sequential map(s) parallel", True, unit="steps/s",
                    gain=_gain(parallel)),
            FixGain("cache", "caching in memory after map(load)", True, unit="steps/s", gain=_gain(cache)),
            FixGain("padding", "bucketing by length instead of padding to a fixed length", True,
                    unit="samples/s of the step", gain=_gain(padding)))


def _graph() -> GraphFindings:
    """No prefetch, a sequential map running Python, a fixed padded_batch, prefetch_to_device not last,
    dynamic shapes: every graph finding that can recommend."""
    stages = (GraphStage(op="RangeDataset", node="RangeDataset/_0", method="range", kind="source"),
              GraphStage(op="MapDataset", node="MapDataset/_1", method="map", kind="stage", family="map",
                         parallelism=1),
              GraphStage(op="PaddedBatchDatasetV2", node="PaddedBatchDatasetV2/_2", method="padded_batch",
                         kind="stage", family="batch", batch_size=8, padded_shapes=((96, 80), (-1,))))
    op = PythonOp(op="PyFuncStateless", node="PyFuncStateless", function="f", transformation="map",
                  transformation_op="MapDataset", transformation_node="MapDataset/_1", python="recipe.load")
    return GraphFindings(transformations=tuple(s.op for s in stages), python_ops=(op,), ends_with_prefetch=False,
                         inject_prefetch=False,
                         dynamic_shapes=(DynamicShape(component="1", shape="(None, None)", dims=(0, 1)),),
                         element_spec="x", stages=stages, last_stage="PaddedBatchDatasetV2",
                         after_prefetch_to_device=("map",))


def _layout(*, audio=True, frame_source="default: perfsuite's mel definition, hop 256 at 22050 Hz"):
    return BatchLayout(structure="tuple of 2", mel="0" if audio else None, mel_len="1" if audio else None,
                       mel_rule="the largest float tensor" if audio else "no float tensor with a time axis",
                       length_rule="the only integer tensor", ragged=False, time_axis=96,
                       frame_s=256 / 22050, frame_source=frame_source)


def _padding() -> PaddingFigures:
    return PaddingFigures(batches=8, real_frames=290, padded_frames=1000, efficiency=0.29, to_longest=0.6,
                          beyond_longest=0.5, time_axes=(96,), sources={"the length tensor": 8}, lengths_at_padded=0)


def _cycle(significant: bool) -> Cycle:
    return Cycle(significant=significant, period=4 if significant else None, strength=0.6 if significant else None,
                 threshold=0.3 if significant else None, n=64, lags_tested=16, note="test")


def _throughput() -> Throughput:
    rate = estimate([100.0, 104.0, 98.0])
    return Throughput(first_batch_s=0.5, warmup_s=(0.1, 0.1), unit="samples", rate=rate, variation=estimate([0.2] * 3),
                      batches_per_round=8, batch_s=(0.08,) * 64, cycle=_cycle(True), restarts=0,
                      audio_s_per_s=estimate([300.0, 310.0, 305.0]), padding_efficiency=0.29, padding=_padding())


def _bound() -> InputBoundFigures:
    share = estimate([0.45, 0.5, 0.4], INPUT_BOUND_BOUNDARIES)
    return InputBoundFigures(share=share, classification="highly input-bound", t_real=1.0, t_synthetic=0.5,
                             real_round_s=(1.0,) * 3, synthetic_round_s=(0.5,) * 3, batches=4, warmup=2)


def _bottleneck() -> Bottleneck:
    """Undecided, its shares inconsistent: 'run again on a machine with nothing else running'."""
    return Bottleneck(stages=(StageShare("map(load)", estimate([10.0] * 3), estimate([1.2, 1.1, 1.3])),
                              StageShare("batch", estimate([9.0] * 3), estimate([-0.8, -0.7, -0.9]))),
                      limiting="map(load)", decided=False)


def _feed(step_time: str) -> FeedFigures:
    """A pipeline that would starve a 20 ms step."""
    rate = FeedRate(target=0.9, step_s=0.04, step_low_s=0.035, step_high_s=0.045, answers=(0.04,) * 3,
                    free_running_batch_s=0.03, audio_s_per_batch=4.0, trials=(), note="")
    run = RunFigures(duration_s=2.0, batches=40, busy_fraction=0.4, timeline_covered_share=1.0,
                     timeline_longest_gap_s=0.01, steps_per_s=20.0, audio_s_per_s=80.0, step_s_median=0.02,
                     wait_s_median=0.03, wait_s_max=0.05)
    stats = GpuStats(device_index=0, device_name="emulated", source="emulated", samples=200, sample_spacing_s=0.01,
                     util_median=40.0, util_mean=40.0, idle_fraction=0.6, idle_threshold=5.0, variation_ratio=0.5,
                     oscillation=_cycle(False), oscillation_period_s=None, oscillation_swing=None,
                     starvation_episodes=3, longest_starvation_s=0.1, mem_used_max=None, sm_clock_median=None,
                     complete=True, error=None)
    return FeedFigures(pipeline="m:make", feed=rate, step_time=step_time, step_s=0.02, keeps_busy=False, round=run,
                       stats=stats, timeline=None)


@functools.cache
def _fingerprint() -> MachineFingerprint:
    from perfsuite.measure.machine import machine_fingerprint

    return machine_fingerprint()


def diagnosis(*, step: str | None = "m:step", fixes=None, layout=None, feed_step_time: str = "0.02",
              retraces: int = 3) -> Diagnosis:
    """A --pipeline diagnosis under which every recommendation diagnose's pipeline path words fires at once:
    a stage short of time, retraces, fixed padding waste, a Python op, no prefetch, a sequential map,
    prefetch_to_device not last, periodic stalls, an inconsistent bottleneck, a step that waits, a starved
    feed, and the fixes measured."""
    stages = (StageRecord("feed", 10.0, 1.0, 1, TOO_SHORT, "plan", 30.0),)
    return Diagnosis(
        target=Target(pipeline="m:make", step=step, args={}), settings=DiagnoseSettings(), fingerprint=_fingerprint(),
        complete=True, elapsed_s=100.0, stages=stages, graph=_graph(), throughput=_throughput(),
        step=None if step is None else StepRun(first_s=2.0, first_steady_s=0.1, calls=40, traces=1 + retraces,
                                               retraces=retraces),
        input_bound=None if step is None else _bound(), feed=_feed(feed_step_time), verdicts=(),
        layout=layout or _layout(), bottleneck=_bottleneck(), fixes=_fixes() if fixes is None else fixes)


def _recommending(found) -> dict[str, DiagnosisFinding]:
    return {f.topic: f for f in found if f.recommendation}


# ----------------------------------------------------------------------------- no two contradict


EVERY_RECOMMENDATION = {"stage-feed", "input-bound", "bottleneck", "fix-prefetch", "fix-map-parallelism",
                        "fix-padding", "python-op", "prefetch", "prefetch-to-device", "parallelism", "fixed-padding",
                        "retracing", "cycle", "feed-m:make"}


def test_every_recommendation_the_pipeline_path_words_fires_at_once_and_no_two_contradict():
    found = verdicts(diagnosis())
    assert set(_recommending(found)) >= EVERY_RECOMMENDATION  # the conditions really trigger each of them
    assert contradictions(found) == []


def test_with_no_audio_named_the_batch_finding_recommends_too_and_still_agrees():
    found = verdicts(diagnosis(layout=_layout(audio=False)))
    assert "batch" in _recommending(found) and contradictions(found) == []


def test_changes_measured_not_worth_making_silence_the_graph_findings_that_push_the_same_way():
    flat = _fixes(prefetch=(1.01, 0.98, 1.03), parallel=(0.9, 0.85, 0.95), cache=(1.0, 0.99, 1.02),
                  padding=(1.02, 1.01, 1.03))
    found = verdicts(diagnosis(fixes=flat))
    by_topic = {f.topic: f for f in found}
    for topic in ("prefetch", "parallelism", "fixed-padding", "cycle", "feed-m:make"):
        assert by_topic[topic].recommendation is None, topic
        assert "measured here" in by_topic[topic].finding and "not worth making" in by_topic[topic].finding
    assert contradictions(found) == []


def test_a_change_measured_too_briefly_to_decide_leaves_the_graph_advice_standing_and_says_so():
    short = _fixes(prefetch=(1.01,), parallel=(0.9, 0.95), cache=(1.0,), padding=(1.3,))
    found = verdicts(diagnosis(fixes=short))
    by_topic = {f.topic: f for f in found}
    assert by_topic["fixed-padding"].recommendation.endswith("(measured here, not yet decided: [fix-padding] 1.30x "
                                                             "[1.30, 1.30])")
    assert "not enough time to decide" in by_topic["fix-padding"].finding and not by_topic["fix-padding"].recommendation
    assert contradictions(found) == []


def test_a_graph_recommendation_a_material_change_backs_names_the_measurement():
    by_topic = {f.topic: f for f in verdicts(diagnosis())}
    assert "measured here: [fix-prefetch] 1.80x [1.70, 1.90]" in by_topic["prefetch"].recommendation
    assert "[fix-padding] 3.45x" in by_topic["fixed-padding"].recommendation


def test_opposed_directions_are_caught():
    padding = DiagnosisFinding("fixed-padding", "pads to 96", {}, "pad each batch to its longest")
    old_retracing = DiagnosisFinding("retracing", "retraced", {}, "pad batches to fixed shapes")
    assert contradictions([padding, old_retracing]) == []  # retracing is declared as 'fewer-traces' ...
    pushed = {**PUSHES, "retracing": ("fixed-shapes",)}  # ... as the old words pushed, it would contradict
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(words, "PUSHES", pushed)
        assert contradictions([padding, old_retracing]) == [
            "[fixed-padding] pushes less-padding, [retracing] pushes fixed-shapes"]


def test_a_recommendation_whose_direction_is_not_declared_is_refused_by_name():
    new = DiagnosisFinding("brand-new-topic", "something", {}, "do something")
    with pytest.raises(ValueError, match="brand-new-topic"):
        contradictions([new])
    assert pushes(DiagnosisFinding("brand-new-topic", "something", {}, None)) == ()  # no recommendation, nothing


def test_the_directions_table_is_well_formed():
    assert all(directions and all(isinstance(d, str) for d in directions) for directions in PUSHES.values())
    assert all(a != b for a, b in OPPOSED)
    assert pushes(DiagnosisFinding("stage-fixes", "short", {}, "raise --budget")) == ("longer-budget",)


def test_the_retracing_advice_keeps_one_trace_for_every_length_rather_than_padding_to_a_fixed_shape():
    assert "input_signature" in RETRACE_RECOMMENDATION and "reduce_retracing=True" in RETRACE_RECOMMENDATION
    assert "pad_to_bucket_boundary=True" in RETRACE_RECOMMENDATION
    assert "fixed shape" not in RETRACE_RECOMMENDATION and "padded_shapes" not in RETRACE_RECOMMENDATION
    [retracing] = [f for f in verdicts(diagnosis()) if f.topic == "retracing"]
    assert retracing.recommendation == RETRACE_RECOMMENDATION


# ----------------------------------------------------------------------------- what to change first


def test_the_measured_changes_come_first_ranked_by_gain_with_their_intervals():
    found = verdicts(diagnosis())
    changes, rest = ranked_changes(found)
    assert found[:len(changes)] == changes and not any(measured_change(f) for f in rest)
    assert [c.topic for c in changes] == ["fix-padding", "fix-prefetch", "fix-map-parallelism", "fix-cache"]
    assert all(re.search(r": measured \d+\.\d\dx \[\d+\.\d\d, \d+\.\d\d\] .+ over \d+ rounds$", c.finding)
               for c in changes)
    assert all(c.recommendation.startswith("apply it: ") for c in changes)


def test_only_a_gain_whose_interval_lies_above_the_material_gain_is_apply_it():
    cases = {"big": (1.5, 1.4, 1.6), "edge": (1.06, MATERIAL_GAIN, 1.07), "small": (1.03, 1.02, 1.04),
             "unproven": (1.2, 1.01, 1.4), "noise": (0.95, 1.05, 1.0), "slower": (0.8, 0.85, 0.9),
             "short": (2.0,)}
    found = {f.topic.removeprefix("fix-"): f for f in fix_verdicts(tuple(
        FixGain(name, f"{name} change", True, unit="steps/s", gain=_gain(values)) for name, values in cases.items()))}
    assert {name for name, f in found.items() if f.recommendation} == {"big", "edge"}
    assert all(f.recommendation == f"apply it: {name} change" for name, f in found.items() if f.recommendation)
    assert "too small to call for a change" in found["small"].finding
    assert "not shown to be worth a change" in found["unproven"].finding
    assert "within noise" in found["noise"].finding and "undecided" in found["noise"].finding
    assert "slower with it" in found["slower"].finding
    assert "not enough time" in found["short"].finding
    assert all(f.finding.startswith(f"{name} change: measured ") for name, f in found.items())
    ranked, _ = ranked_changes(list(found.values()))
    assert [f.topic for f in ranked][:2] == ["fix-big", "fix-edge"]  # those to apply first, then by median
    assert [f.interval.median for f in ranked[2:]] == sorted((f.interval.median for f in ranked[2:]), reverse=True)
    assert material(_gain((1.06, 1.05, 1.07))) and not material(_gain((1.06, 1.049, 1.07)))


def test_a_fix_not_applied_or_not_measured_stays_among_the_rest():
    found = fix_verdicts((FixGain("cache", "caching", False, why="the pipeline does not repeat"),
                          FixGain("prefetch", "adding a prefetch", True, unit="steps/s", gain=None)))
    changes, rest = ranked_changes(found)
    assert changes == [] and [f.topic for f in rest] == ["fix-cache", "fix-prefetch"]
    assert rest[0].finding == "cache: not applied (the pipeline does not repeat)"


def test_the_terminal_opens_with_what_to_change_first_then_the_rest(capsys):
    measured = diagnosis()
    measured = measured.__class__(**{**measured.__dict__, "verdicts": tuple(verdicts(measured))})
    cli._print_outcome(measured, Path("/tmp/x.log"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"{CHANGE_FIRST}: 4 change(s) measured on this pipeline, ranked by gain; 4 to apply (a gain "
                        f"whose interval lies above {MATERIAL_GAIN:.2f}x)")
    assert lines[1].startswith("1. [fix-padding] bucketing by length") and "3.45x [3.00, 3.60]" in lines[1]
    numbered = [line for line in lines if line[:1].isdigit() and ". [" in line]
    assert [line.split(" ")[1] for line in numbered] == ["[fix-padding]", "[fix-prefetch]", "[fix-map-parallelism]",
                                                         "[fix-cache]"]
    rest = lines.index("the other findings:")
    assert lines.index(f"pipeline m:make: {' -> '.join(measured.graph.transformations)}") < rest
    assert not any(line.startswith("[fix-") for line in lines[rest:])  # shown once, ranked
    assert lines[-1].startswith("stages: ")


def test_the_terminal_says_so_when_no_change_was_measured(capsys):
    measured = diagnosis(fixes=())
    measured = measured.__class__(**{**measured.__dict__, "verdicts": tuple(verdicts(measured))})
    cli._print_outcome(measured, Path("/tmp/x.log"))
    out = capsys.readouterr().out
    assert out.startswith(f"{CHANGE_FIRST}: no change was measured on this pipeline")


def test_the_report_opens_with_what_to_change_first():
    measured = diagnosis()
    measured = measured.__class__(**{**measured.__dict__, "verdicts": tuple(verdicts(measured))})
    summary = markdown_summary(measured, [])
    first, rest = summary.index("## What to change first"), summary.index("## The other findings")
    assert first < summary.index("| stage ") < rest
    assert "1. **fix-padding**: bucketing by length" in summary and "   - recommendation: apply it" in summary
    assert "**fix-padding**" not in summary[rest:]


# ------------------------------------------------------------------------------ assumed figures say so


def test_with_a_step_the_feed_verdict_at_a_stand_in_step_is_left_out():
    found = {f.topic for f in verdicts(diagnosis(feed_step_time=DEFAULT_STEP_PRESET))}
    assert "feed-m:make" not in found


def test_without_a_step_the_feed_verdict_at_a_stand_in_step_says_so_first():
    [feed] = [f for f in verdicts(diagnosis(step=None, feed_step_time=DEFAULT_STEP_PRESET))
              if f.topic.startswith("feed-")]
    assert feed.finding.startswith(f"assuming 0.01161 s of audio per frame (default: perfsuite's mel definition, "
                                   f"hop 256 at 22050 Hz; --frame-hop-s gives yours), and a stand-in step, the "
                                   f"published {DEFAULT_STEP_PRESET} GPU step (20 ms on this data; not your model's)")
    assert "would starve it" in feed.finding


def test_a_step_time_the_user_gave_in_seconds_is_kept_and_not_called_a_stand_in():
    layout = _layout(frame_source="given")
    [feed] = [f for f in verdicts(diagnosis(feed_step_time="0.02", layout=layout))
              if f.topic.startswith("feed-")]
    assert feed.finding.startswith("m:make would starve a 20 ms step (0.02)") and "stand-in" not in feed.finding


def test_audio_seconds_resting_on_the_default_frame_say_so_first_and_not_when_given():
    def speech(layout):
        [found] = [f for f in verdicts(diagnosis(layout=layout)) if f.topic == "speech"]
        return found.finding

    assert speech(_layout()).startswith("assuming 0.01161 s of audio per frame (default: perfsuite's mel definition")
    assert "seconds of audio per second" in speech(_layout())
    assert speech(_layout(frame_source="given")).startswith("305 seconds of audio per second")
    hinted = _layout(frame_source="assumed, not given: perfsuite's mel definition (--frame-hop-s gives yours)")
    assert speech(hinted).startswith("assuming 0.01161 s of audio per frame (assumed, not given: perfsuite's mel "
                                     "definition (--frame-hop-s gives yours)): ")  # the hint said once


def test_findings_that_rest_on_no_frame_figure_are_left_as_they_are():
    found = verdicts(diagnosis())
    assumed = {f.topic for f in found if f.finding.startswith("assuming ")}
    assert assumed == {"speech", "feed-m:make"}  # the feed round's audio-s/s rests on the frame too


def _bucketed_stages(boundaries=(10, 20, 30)):
    import tensorflow as tf

    from perfsuite.workload.pipeline_model import read_pipeline

    lengths = tf.data.Dataset.range(64).map(lambda i: tf.ones([i % 40 + 1]))
    bucketed = lengths.bucket_by_sequence_length(lambda x: tf.shape(x)[0], list(boundaries),
                                                 [4] * (len(boundaries) + 1))
    return read_pipeline(tf.data.Dataset.zip((bucketed, tf.data.Dataset.range(8).repeat()))).model.stages


def test_a_cycle_at_the_buckets_period_is_named_as_the_buckets_and_no_stall_fix_is_advised():
    from perfsuite.workload.pipeline_model import structural_periods

    stages = _bucketed_stages()
    assert 4 in structural_periods(stages), structural_periods(stages)
    for period in (4, 8):  # the buckets' period, and twice it
        cycle = replace(_cycle(True), period=period)
        found = words.variation_finding(cycle, None, 64, structure=structural_periods(stages))
        assert found.recommendation is None and "4 length buckets" in found.finding, found
        assert f"repeat every {period} batches" in found.finding and "not a stall" in found.finding
    unexplained = words.variation_finding(replace(_cycle(True), period=5), None, 64,
                                          structure=structural_periods(stages))
    assert "periodic stalls" in unexplained.recommendation, "a period the structure does not make is a stall"
    throughput = replace(_throughput(), cycle=_cycle(True))
    from perfsuite.verdict.pipeline_findings import throughput_verdicts

    [cycle_finding] = [f for f in throughput_verdicts(throughput, stages) if f.topic == "cycle"]
    assert cycle_finding.recommendation is None
    [plain] = [f for f in throughput_verdicts(throughput) if f.topic == "cycle"]
    assert plain.recommendation is not None, "without the structure the same cycle keeps its advice"
