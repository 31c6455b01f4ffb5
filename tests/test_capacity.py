"""The capacity model (verdict/capacity.py): synthetic stages of known costs give the ceiling, the split and the
cores needed exactly, with properties of the linear program held by hypothesis; the measuring stage
(tools/diagnose/capacity.py) on a tiny pipeline returns positive costs and AUTOTUNE's choices, its split rewrites
the graph, and the JSON record holds the section (an old file loads with none). No assertion on wall-clock time."""

import json
import math
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.verdict.capacity import (
    CHECK_BOUNDARIES,
    CapacityFigures,
    CapacityStage,
    StageCost,
    cap,
    ceiling,
    change_first_lines,
    cores_needed,
    limited_by,
    split,
    with_need,
    without_call_limits,
)
from perfsuite.verdict.diagnosis_figures import estimate

# Costs in powers of two, so every sum and quotient below is exact in binary floating point.
PARSE = StageCost("parallel_map(parse)", cost_s=2 ** -8, calls=None)  # parallel (AUTOTUNE), 1/256 core-s per element
READ = StageCost("interleave(read)", cost_s=2 ** -10, calls=1)  # sequential, 1/1024 per element
BATCH = StageCost("padded_batch", cost_s=2 ** -7, elements_per_sample=1 / 16, calls=1)  # 1/128 per batch of 16
DECODE = StageCost("parallel_map(decode)", cost_s=0.1, calls=None, cached=True)  # before a completed cache
STAGES = (DECODE, READ, PARSE, BATCH)
PER_SAMPLE = Fraction(1, 256) + Fraction(1, 1024) + Fraction(1, 2048)  # = 11/2048 core-s per sample; DECODE: 0


def exactly(value: float, fraction: Fraction) -> bool:
    return value == float(fraction)


def test_the_ceiling_is_the_cores_over_the_summed_costs_until_a_sequential_stage_caps_it():
    assert Fraction(11, 2048) == PER_SAMPLE
    assert exactly(ceiling(STAGES, 1), 1 / PER_SAMPLE)  # 186.18... samples/s
    assert exactly(ceiling(STAGES, 2), 2 / PER_SAMPLE)
    assert exactly(ceiling(STAGES, 5), 5 / PER_SAMPLE)  # 930.9: the cores still bind
    # 6 cores would give 1117: the read, sequential, caps at 1 / (1/1024) = 1024 samples/s whatever the cores
    assert ceiling(STAGES, 6) == ceiling(STAGES, 64) == 1024.0
    assert limited_by(STAGES, 5).cores and limited_by(STAGES, 6).what == "the one thread of interleave(read)"
    assert cap(STAGES).samples_per_s == 1024.0


def test_the_cached_stage_costs_nothing_in_steady_state():
    uncached = (StageCost("parallel_map(decode)", cost_s=0.1, calls=None), READ, PARSE, BATCH)
    assert DECODE.per_sample_s() == 0 and ceiling(uncached, 2) < ceiling(STAGES, 2)


def test_the_split_gives_each_stage_its_share_of_the_cores_and_parallel_calls_to_match():
    parts = split(STAGES, 2)
    top = 2 / PER_SAMPLE  # 4096/11 samples/s
    assert [p.stage for p in parts] == [s.stage for s in STAGES]
    assert [p.cores for p in parts] == [0.0, float(top / 1024), float(top / 256), float(top / 2048)]
    assert math.isclose(sum(p.cores for p in parts), 2.0)  # every core used at the ceiling
    assert [p.calls for p in parts] == [1, 1, 2, 1]  # parse: 16/11 = 1.45 cores -> 2 calls; sequential ones 1
    assert [p.calls for p in split(STAGES, 5)] == [1, 1, 4, 1]  # 80/22 = 3.6 cores -> 4 calls
    assert [p.calls for p in split(STAGES, 64)] == [1, 1, 4, 1]  # capped at 1024 samples/s: 4 cores, 4 calls


def test_cores_needed_is_the_smallest_k_whose_ceiling_feeds_the_step():
    step_s, batch = 1 / 64, 16  # a 15.625 ms step at batch 16 needs 1024 samples/s
    need = batch / step_s
    assert need == 1024.0
    assert cores_needed(STAGES, need) == 6  # K / (11/2048) >= 1024 from K = 5.5: 6; the read's cap 1024 just holds
    assert cores_needed(STAGES, 2048 / 11) == 1 and cores_needed(STAGES, 2048 / 11 + 1) == 2
    assert cores_needed(STAGES, 1025.0) is None  # the sequential read caps at 1024: no number of cores suffices


def test_sequential_stages_on_one_thread_share_its_time():
    shared = (StageCost("range", cost_s=2 ** -10, calls=1, thread=0),
              StageCost("map", cost_s=2 ** -9, calls=1, thread=0),
              StageCost("parallel_map", cost_s=2 ** -8, calls=None))
    # one thread: 1 / (1/1024 + 1/512) = 1024/3 samples/s, whatever the cores; on separate threads 512
    assert exactly(ceiling(shared, 64), Fraction(1024, 3))
    assert limited_by(shared, 64).what == "the one thread range + map share"
    apart = tuple(StageCost(s.stage, s.cost_s, calls=s.calls) for s in shared)
    assert ceiling(apart, 64) == 512.0


def test_fixed_parallel_calls_cap_a_stage_and_the_split_lifts_them():
    fixed = (StageCost("parallel_map", cost_s=2 ** -8, calls=2), StageCost("batch", cost_s=2 ** -10, calls=1))
    assert ceiling(fixed, 16) == 512.0  # 2 calls x 256 elements/s each
    assert ceiling(without_call_limits(fixed), 16) == 1024.0  # the batch's thread caps next
    assert [p.calls for p in split(without_call_limits(fixed), 16)] == [4, 1]


def test_a_stage_that_waits_holds_threads_not_cores():
    # a thread's 1/256 s per element, of which 1/1024 s on a core (a sleep, a read): the rest is waiting
    waits = (StageCost("parallel_map(load)", cost_s=2 ** -8, cpu_s=2 ** -10, calls=None),
             StageCost("range", cost_s=2 ** -12, calls=1))
    assert exactly(ceiling(waits, 1), Fraction(4096, 5))  # the cores: 1 / (1/1024 + 1/4096)
    [load, _] = split(waits, 1)
    assert exactly(load.cores, Fraction(4, 5)) and load.calls == 4  # 819.2/s x 1/256 s: 3.2 threads busy -> 4 calls
    assert cores_needed(waits, 2048.0) == 3  # 2048 x 5/4096 = 2.5 cores
    assert ceiling(waits, 64) == 4096.0  # the range's thread caps it


def test_nothing_costing_has_no_ceiling_and_bad_stages_are_refused():
    assert ceiling((StageCost("range", cost_s=0.0),), 2) == math.inf
    with pytest.raises(ValueError, match="cost_s: expected core-seconds >= 0"):
        StageCost("map", cost_s=-1.0)
    with pytest.raises(ValueError, match="calls: expected an integer >= 1"):
        StageCost("map", cost_s=1.0, calls=0)
    with pytest.raises(ValueError, match="cores: expected a number > 0"):
        ceiling(STAGES, 0)


stage_costs = st.builds(
    StageCost, stage=st.sampled_from(["a", "b", "c", "d"]),
    cost_s=st.floats(min_value=0, max_value=1, allow_nan=False),
    elements_per_sample=st.sampled_from([1.0, 1 / 4, 1 / 16]),
    calls=st.one_of(st.none(), st.integers(min_value=1, max_value=8)),
    thread=st.one_of(st.none(), st.integers(min_value=0, max_value=1)), cached=st.booleans(),
    cpu_s=st.one_of(st.none(), st.floats(min_value=0, max_value=1, allow_nan=False)))


@given(stages=st.lists(stage_costs, min_size=1, max_size=6), cores=st.integers(min_value=1, max_value=63))
def test_the_ceiling_grows_with_the_cores_and_never_passes_a_sequential_cap(stages, cores):
    assert ceiling(stages, cores) <= ceiling(stages, cores + 1)
    for stage in stages:
        if stage.sequential and stage.per_sample_s() > 0:
            assert ceiling(stages, cores) <= 1 / stage.per_sample_s() * (1 + 1e-12)
        if stage.calls is not None and stage.per_sample_s() > 0:
            assert ceiling(stages, cores) <= stage.calls / stage.per_sample_s() * (1 + 1e-12)
    parts = split(stages, cores)
    assert sum(part.cores for part in parts) <= cores * (1 + 1e-9)
    assert all(part.calls >= 1 for part in parts)


@given(stages=st.lists(stage_costs, min_size=1, max_size=6), need=st.floats(min_value=0.5, max_value=1e5))
def test_cores_needed_is_minimal_and_none_only_under_a_cap(stages, need):
    needed = cores_needed(stages, need)
    if needed is None:
        assert cap(stages) is not None and cap(stages).samples_per_s < need
    else:
        assert ceiling(stages, needed) >= need * (1 - 1e-9)
        assert needed == 1 or ceiling(stages, needed - 1) < need


# ------------------------------------------------------------------------------------------ the record


def _figures(predicted: float, measured: float, rounds: int = 5) -> CapacityFigures:
    stage = CapacityStage(stage="parallel_map(f)", node="ParallelMapDatasetV2/_1", op="ParallelMapDatasetV2",
                          cost=estimate([2 ** -8] * rounds), elements_per_sample=1.0, calls=None,
                          parallel_by="num_parallel_calls=AUTOTUNE")
    read = CapacityStage(stage="range", node="RangeDataset/_0", op="RangeDataset", cost=estimate([2 ** -10] * rounds),
                         elements_per_sample=1.0, calls=1, parallel_by="one element at a time", thread=0)
    return CapacityFigures(method="test", stages=(read, stage), cores=2,
                           predicted_2core=estimate([predicted] * rounds),
                           measured_2core=estimate([measured] * rounds),
                           check=estimate([predicted / measured] * rounds, CHECK_BOUNDARIES), check_how="test")


def test_the_need_says_the_cores_or_which_stage_caps_below_it():
    figures = with_need(_figures(400, 390), step_s=1 / 64, step_source="--step-time", batch=16)
    assert figures.need_samples_per_s == 1024 and figures.cores_needed == 5  # 1024 x 5/1024: 5 cores
    lines = change_first_lines(figures)
    assert lines[0].startswith("cores: to feed a step of 15.6 ms (--step-time) at batch 16 (1024 samples/s) you need "
                               "about 5 core(s)")
    assert "within the model's ±20%" in lines[-1]
    capped = with_need(_figures(400, 390), step_s=1 / 2048, step_source="--step-time", batch=2)
    assert capped.cores_needed is None
    assert ("no number of cores suffices: the one thread of range caps the pipeline at 1024 samples/s, below the "
            "4096") in capped.cores_needed_why
    none = with_need(_figures(400, 390), step_s=None, step_source=None, batch=16)
    assert none.cores_needed is None and "--step-time SECONDS or --step" in change_first_lines(none)[0]


def test_a_sequential_map_that_caps_below_the_need_says_what_making_it_parallel_would_need():
    read = CapacityStage(stage="range", node="RangeDataset/_0", op="RangeDataset", cost=estimate([2 ** -12] * 3),
                         elements_per_sample=1.0, calls=1, parallel_by="", thread=0)
    plain = CapacityStage(stage="map(load)", node="MapDataset/_1", op="MapDataset", cost=estimate([2 ** -9] * 3),
                          elements_per_sample=1.0, calls=1, parallel_by="", thread=0)
    figures = CapacityFigures(method="test", stages=(read, plain), cores=2, predicted_2core=None, measured_2core=None,
                              check=None, check_how="not measured")
    found = with_need(figures, step_s=1 / 64, step_source="--step-time", batch=16)  # 1024 samples/s
    # one thread for both: 1 / (1/4096 + 1/512) = 455 samples/s whatever the cores
    assert found.cores_needed is None and "the one thread range + map(load) share caps the pipeline at 455" in \
        found.cores_needed_why
    # the map parallel: the range alone on its thread (4096/s), the cores 1024 x 9/4096 = 2.25: 3
    assert found.cores_needed_parallel_maps == 3
    assert "with its plain map(s) parallel (num_parallel_calls=AUTOTUNE) about 3 core(s)" in found.cores_needed_why


def test_a_model_that_misses_its_check_says_so_first():
    missed = with_need(_figures(400, 250), step_s=1 / 64, step_source="--step-time", batch=16)
    assert missed.check_state() == "misses"
    assert change_first_lines(missed)[0].startswith("capacity model MISSED its check: 2-core throughput predicted "
                                                    "from 1-core measurements 400 samples/s, measured as written 250")
    from perfsuite.verdict.capacity import capacity_verdicts

    assert capacity_verdicts(missed)[0].topic == "capacity-check"
    assert capacity_verdicts(_figures(400, 390))[-1].topic == "capacity-check"


def test_the_section_round_trips_and_an_old_file_loads_with_none():
    from perfsuite.records import versioned
    from perfsuite.verdict.diagnosis_record import SCHEMA_VERSION, Diagnosis

    stored = json.loads((Path(__file__).parent / "data" / "pipeline_schema6.json").read_text())
    assert stored["schema_version"] == 6 and "capacity" not in stored  # written by diagnose --pipeline of schema 6
    loaded = Diagnosis.from_dict(stored)
    assert loaded.capacity is None and loaded.settings.cores is None
    figures = with_need(_figures(400, 390), step_s=1 / 64, step_source="--step-time", batch=16)
    written = json.loads(json.dumps(versioned(replace(loaded, capacity=figures)), allow_nan=False))
    assert written["schema_version"] == SCHEMA_VERSION == 9
    assert {"predicted_2core", "measured_2core", "cores_needed"} <= set(written["capacity"])
    assert Diagnosis.from_dict(written).capacity == figures


# ------------------------------------------------------------------------------------- the measuring


@pytest.fixture(scope="module")
def tiny():
    import tensorflow as tf

    def work(index):
        wave = tf.sin(tf.cast(tf.range(2048), tf.float32) * tf.cast(index + 1, tf.float32))
        return tf.reduce_sum(tf.abs(tf.signal.stft(wave, 256, 64)), axis=0)

    return tf.data.Dataset.range(256).map(work, num_parallel_calls=tf.data.AUTOTUNE).batch(8).repeat()


def _stage(seconds: float):
    import time

    from perfsuite.tools.diagnose.plan import Budget, Stage

    budget = Budget(seconds, {"capacity": 1.0}, time.monotonic)
    return Stage("capacity", seconds, budget, lambda event: None)


def test_the_stage_measures_positive_costs_and_reads_what_autotune_chose(tiny):
    from perfsuite.tools.diagnose.capacity import CapacityRounds
    from perfsuite.workload.pipeline_model import read_pipeline

    pipeline = read_pipeline(tiny)
    rounds = CapacityRounds(pipeline, "test:tiny", warmup=1, target_cores=8)
    figures = rounds.run(_stage(6.0))
    assert figures is not None and [s.stage for s in figures.stages] == ["range", "parallel_map(work)", "batch"]
    work = figures.stages[1]
    assert work.cost.median > 0 and work.calls is None and work.parallel_by == "num_parallel_calls=AUTOTUNE"
    assert figures.stages[2].elements_per_sample == 1 / 8  # a batch of 8: one element per 8 samples
    assert figures.predicted_2core.median > 0 and figures.cores >= 1
    if figures.cores >= 2:  # a 1-core machine has no 2-core side
        assert figures.measured_2core.median > 0 and figures.check.rounds >= 1
        # what AUTOTUNE used, read from tf.data's own model of the as-written iterator
        assert "IteratorGetModelProto" in figures.autotune_source
        assert work.autotune is not None and work.autotune.name in ("ParallelMapV2", "MapAndBatch")  # or fused
        assert work.autotune.parameters["parallelism"] >= 1 and "parallelism" in work.autotune.tunable
    assert work.split_calls >= 1 and figures.target_cores == 8
    fix = rounds.split_fix(figures)
    assert fix.name == "capacity-split" and "parallel_map(work)" in fix.words
    fixed, ready = fix.build(pipeline)
    ready()
    rebuilt = read_pipeline(fixed).model.chain()
    assert [s.parallelism for s in rebuilt if s.op == "ParallelMapDatasetV2"] == [work.split_calls]
    assert next(iter(fixed)).shape == next(iter(tiny)).shape


@pytest.mark.slow  # a whole diagnose --pipeline through the CLI
def test_the_diagnosis_json_holds_the_capacity_section(tmp_path, capfd):
    from perfsuite.tools import cli

    module = tmp_path / "tiny_pipeline.py"
    module.write_text("import tensorflow as tf\n\n\ndef make():\n"
                      "    def work(i):\n"
                      "        wave = tf.sin(tf.cast(tf.range(2048), tf.float32) * tf.cast(i + 1, tf.float32))\n"
                      "        return tf.reduce_sum(tf.abs(tf.signal.stft(wave, 256, 64)), axis=0)\n\n"
                      "    return tf.data.Dataset.range(256).map(work, num_parallel_calls=tf.data.AUTOTUNE)"
                      ".batch(8).repeat()\n", encoding="utf-8")
    out = tmp_path / "p.json"
    code = cli.main(["diagnose", "--pipeline", f"{module}:make", "--budget", "25", "--cores", "16",
                     "--step-time", "0.01", "--json", str(out)])
    printed = capfd.readouterr().out
    assert code == 0
    result = json.loads(out.read_text())
    capacity = result["capacity"]
    assert [s["name"] for s in result["stages"]][:4] == ["throughput", "bottleneck", "capacity", "fixes"]
    assert capacity is not None and {"predicted_2core", "measured_2core", "cores_needed"} <= set(capacity)
    assert all("autotune" in stage for stage in capacity["stages"]) and capacity["target_cores"] == 16
    assert capacity["step_source"] == "--step-time" and capacity["need_samples_per_s"] == pytest.approx(800)
    assert "cores: to feed a step of 10 ms (--step-time) at batch 8 (800 samples/s)" in printed
    assert "[autotune] what AUTOTUNE chose on this run" in printed
    assert any(f["name"] == "capacity-split" for f in result["fixes"])
