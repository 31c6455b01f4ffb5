"""diagnose --pipeline on pipelines in the shapes other TTS recipes take (tests/pipelines/recipes.py): each
read right (padding against the truth the recipe's clips give, audio per sample, the time axis), the
finding its shape calls for present and none it does not, and the readings and the fix those shapes
need, unit by unit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from perfsuite.measure.batch_spec import find_layout  # noqa: E402
from perfsuite.tools import cli  # noqa: E402
from perfsuite.tools.diagnose import rewrite  # noqa: E402
from perfsuite.verdict.diagnosis import contradictions, retrace_recommendation  # noqa: E402
from perfsuite.verdict.diagnosis_figures import DiagnosisFinding, GraphFindings  # noqa: E402
from perfsuite.verdict.pipeline_findings import graph_findings  # noqa: E402
from perfsuite.workload.pipeline_model import read_pipeline  # noqa: E402

RECIPES = Path(__file__).parent / "pipelines" / "recipes.py"


def _recipes():
    import importlib.util

    spec = importlib.util.spec_from_file_location("perfsuite_test_recipes", RECIPES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


recipes = _recipes()
# per shape: topics that must be present, topics that must not be
EXPECTED = {
    "per_bin_norm": ({"fixed-padding"}, {"cache-order", "read-parallelism"}),
    "bins_first": (set(), {"fixed-padding", "cache-order", "read-parallelism"}),
    "bucketed": (set(), {"fixed-padding", "cache-order", "read-parallelism"}),
    "cache_after_repeat": ({"cache-order"}, {"fixed-padding", "read-parallelism"}),
    "zipped": (set(), {"fixed-padding", "cache-order", "read-parallelism"}),
    "tfrecord": ({"read-parallelism", "fix-read-parallelism"}, {"fixed-padding", "cache-order"}),
}


# ------------------------------------------------------------------------------ the readings, unit by unit


def test_a_sequential_interleave_of_tfrecord_files_is_named_and_its_parallel_rewrite_keeps_the_elements():
    dataset = recipes.tfrecord(n="16", shards="4").take(4)
    graph = GraphFindings.of(dataset)
    assert len(graph.sequential_reads) == 1 and "TFRecordDataset" in graph.sequential_reads[0]
    fixed, _ = rewrite.parallel_reads(read_pipeline(dataset))
    assert "ParallelInterleaveDatasetV4" in [n.op for n in read_pipeline(fixed).graph_def.node]
    assert not read_pipeline(fixed).model.sequential_reads()

    def frames(data):
        return sorted(int(x) for batch in data for x in batch[1].numpy())

    assert frames(fixed) == frames(dataset)


def test_a_cache_after_an_endless_repeat_is_a_finding_and_a_cache_before_it_is_not():
    after = graph_findings(GraphFindings.of(recipes.cache_after_repeat()), padding=None)
    assert "cache-order" in {f.topic for f in after}
    before = tf.data.Dataset.range(8).cache().repeat().batch(2)
    assert "cache-order" not in {f.topic for f in graph_findings(GraphFindings.of(before), padding=None)}


def test_a_bucketed_pipeline_is_never_told_to_bucket():
    graph = GraphFindings.of(recipes.bucketed())
    assert graph.buckets
    from perfsuite.measure.speech import PaddingFigures

    waste = PaddingFigures(batches=4, real_frames=100, padded_frames=400, efficiency=0.25, to_longest=0.9,
                           beyond_longest=0.7, time_axes=(128,), sources={"length tensor": 4}, lengths_at_padded=0)
    recommendations = [f.recommendation or "" for f in graph_findings(graph, padding=waste)]
    recommendations.append(retrace_recommendation(graph.buckets))
    assert any("already buckets" in r for r in recommendations)
    assert not any("bucket by length" in r for r in recommendations)


def test_bins_first_batches_read_their_frames_on_the_last_axis():
    batch = next(iter(recipes.bins_first()))
    layout = find_layout(batch)
    assert layout.axis == 2 and layout.time_axis == max(recipes.LENGTHS)


def test_the_sample_rate_is_said_to_be_assumed_unless_given():
    batch = next(iter(recipes.bins_first()))
    assert find_layout(batch).frame_source.startswith("assumed")


# ------------------------------------------------------------------------------ diagnose, end to end


def _diagnose(tmp_path, factory: str, budget: str = "40") -> tuple[int, str, dict]:
    out = tmp_path / f"{factory}.json"
    code = cli.main(["diagnose", "--pipeline", f"{RECIPES}:{factory}", "--step", f"{RECIPES}:make_step",
                     "--frame-hop-s", str(recipes.FRAME_S), "--budget", budget, "--json", str(out)])
    return code, out.with_suffix(".log").read_text() if out.with_suffix(".log").exists() else "", \
        json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("factory", sorted(EXPECTED))
def test_diagnose_reads_each_recipe_shape_right(tmp_path, capfd, factory):
    code, _, result = _diagnose(tmp_path, factory)
    out, err = capfd.readouterr()
    assert code == 0 and "Traceback" not in out + err
    truth = recipes.truth(factory)
    throughput = result["throughput"]
    assert throughput["padding"]["efficiency"] == pytest.approx(truth["efficiency"], abs=0.05)
    per_sample = throughput["audio_s_per_s"]["median"] / throughput["rate"]["median"]
    assert per_sample == pytest.approx(truth["audio_s_per_sample"], rel=0.10)
    topics = {v["topic"] for v in result["verdicts"]}
    present, absent = EXPECTED[factory]
    assert present <= topics and not absent & topics, topics
    recommendations = [v["recommendation"] or "" for v in result["verdicts"]]
    assert contradictions([DiagnosisFinding.from_dict(v) for v in result["verdicts"]]) == []
    if factory == "bins_first":
        assert result["layout"]["axis"] == 2
    if factory == "bucketed":
        assert not any("bucket by length" in r for r in recommendations)
    if factory == "zipped":  # the mel computed in nested tf.functions, in the second branch, is counted
        work = result["work"]["pipeline"]
        counted = {op.split(":")[0] for op, value in work["float_ops_by_op"].items() if value > 0}
        assert {"RFFT", "MatMul"} <= counted
        assert work["structure"]["unresolved_float_ops"] == {}
    if factory == "tfrecord":
        fix = next(v for v in result["verdicts"] if v["topic"] == "fix-read-parallelism")
        assert fix["evidence"]["applied"] is True


def test_recipe_lengths_are_what_the_truth_assumes():
    """The truth's premise: every recipe batch holds the clips' true lengths (read from a bins-first batch)."""
    batch = next(iter(recipes.bins_first()))
    np.testing.assert_array_equal(np.sort(batch["mel_len"].numpy()), sorted(recipes.LENGTHS))
