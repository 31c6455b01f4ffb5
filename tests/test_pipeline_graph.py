"""The user's tf.data graph read as it runs (GraphFindings.of in verdict/diagnosis_figures.py; its findings: verdict/pipeline_findings.py):
the last real stage behind with_options, prefetch_to_device not last, each map's parallelism, cache and shuffle
buffers, padding to a fixed length with its measured waste, and Python ops named by the function they wrap. Each
finding has a test that plants its defect and one that removes it."""

import inspect
from pathlib import Path

import numpy as np
import pytest

from perfsuite.measure.batch_spec import find_layout
from perfsuite.measure.speech import CONTENT, FrameCounter
from perfsuite.tools.diagnose.targets import load_callable
from perfsuite.verdict.diagnosis_figures import GraphFindings
from perfsuite.verdict.pipeline_findings import graph_findings
from perfsuite.workload.pipeline_model import AUTOTUNE

tf = pytest.importorskip("tensorflow")

DURATIONS = {index: float(index % 7 + 1) for index in range(64)}  # a pandas-like table, looked up per element
CLIP_FRAMES = 1024


def lookup_duration(index):
    return np.float32(DURATIONS[int(index)])


def per_token_ids(text):
    ids = []
    for character in text.decode():  # one Python step per token
        ids.append(ord(character) % 64)
    return np.asarray(ids, np.int32)


class Cleaner:
    def __call__(self, text):
        return text.lower()


def clip(index):
    """(tokens, mel) of a clip whose true length follows its index: tokens first, as TTS recipes do."""
    frames = tf.cast(64 + (index * 37) % 600, tf.int32)
    mel = tf.random.stateless_normal(tf.stack([frames, 8]), seed=tf.stack([index, index]))
    return tf.zeros([frames // 8], tf.int32), mel


def lengths(tokens, mel):
    return tokens, mel, tf.shape(tokens)[0], tf.shape(mel)[0]


def tts_pipeline(*, fixed=False, prefetch=True, options=True, parallel=True):
    """(tokens, mel, text_len, mel_len) batches in the style of public TF TTS recipes; fixed: every clip
    padded to CLIP_FRAMES before batching and mel_len set to CLIP_FRAMES (the real length lost)."""
    calls = tf.data.AUTOTUNE if parallel else None
    dataset = tf.data.Dataset.range(64).shuffle(32, seed=1).map(clip, num_parallel_calls=calls)
    if fixed:
        dataset = dataset.map(lambda t, m: (t, tf.pad(m, [[0, CLIP_FRAMES - tf.shape(m)[0]], [0, 0]])))
        dataset = dataset.map(lambda t, m: (t, tf.ensure_shape(m, [CLIP_FRAMES, 8])))
    dataset = dataset.map(lengths, num_parallel_calls=calls)
    shapes = ([None], [CLIP_FRAMES if fixed else None, 8], [], [])
    dataset = dataset.padded_batch(8, padded_shapes=shapes, drop_remainder=True).repeat()
    if prefetch:
        dataset = dataset.prefetch(50)
    if options:
        opts = tf.data.Options()
        opts.threading.private_threadpool_size = 2
        dataset = dataset.with_options(opts)
    return dataset


def padding_of(dataset, batches=4):
    iterator = iter(dataset)
    first = next(iterator)
    counter = FrameCounter(layout=find_layout(first))
    counter(first)
    for _ in range(batches - 1):
        counter(next(iterator))
    return counter.figures()


def topics(findings):
    return {finding.topic for finding in findings}


# ------------------------------------------------------------------------------ the last real stage


def test_a_trailing_with_options_hides_no_prefetch():
    graph = GraphFindings.of(tts_pipeline())
    assert graph.transformations[-1] == "OptionsDataset"
    assert graph.last_stage == "PrefetchDataset" and graph.ends_with_prefetch
    assert "prefetch (buffer 50) (wrappers skipped: with_options)" in graph.chain_words()
    assert [s.buffer for s in graph.stages if s.op == "PrefetchDataset"] == [50]


def test_without_a_prefetch_the_last_real_stage_is_named():
    graph = GraphFindings.of(tts_pipeline(prefetch=False))
    assert not graph.ends_with_prefetch and graph.last_stage == "PaddedBatchDatasetV2"  # repeat passes through


def test_wrappers_and_pass_through_stages_are_not_stages():
    dataset = tf.data.Dataset.range(8).batch(2).prefetch(1).repeat().take(3)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(3)).with_options(tf.data.Options())
    graph = GraphFindings.of(dataset)
    assert graph.ends_with_prefetch and graph.last_stage == "PrefetchDataset"
    kinds = {s.op: s.kind for s in graph.stages}
    assert kinds["AssertCardinalityDataset"] == kinds["OptionsDataset"] == "wrapper"
    assert kinds["RepeatDataset"] == kinds["TakeDataset"] == "pass-through"


# ------------------------------------------------------------------------------ prefetch_to_device


def test_prefetch_to_device_followed_by_a_map_is_flagged():
    dataset = tf.data.Dataset.range(8).batch(2).apply(tf.data.experimental.prefetch_to_device("/cpu:0"))
    graph = GraphFindings.of(dataset.map(lambda x: x + 1))
    assert graph.after_prefetch_to_device == ("map",)
    assert "Python dataset objects" in graph.read_from  # TensorFlow will not serialize copy_to_device
    [finding] = [f for f in graph_findings(graph, padding=None) if f.topic == "prefetch-to-device"]
    assert "map" in finding.finding and finding.recommendation


def test_prefetch_to_device_last_is_not_flagged():
    dataset = tf.data.Dataset.range(8).batch(2).apply(tf.data.experimental.prefetch_to_device("/cpu:0"))
    graph = GraphFindings.of(dataset.with_options(tf.data.Options()))
    assert graph.after_prefetch_to_device == () and graph.ends_with_prefetch
    assert "prefetch-to-device" not in topics(graph_findings(graph, padding=None))


# ------------------------------------------------------------------------------ the stages' settings


def test_map_parallelism_cache_and_shuffle_buffer_are_read():
    dataset = tf.data.Dataset.range(16).shuffle(9).map(lambda x: x, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.map(lambda x: x, num_parallel_calls=3).cache().map(lambda x: x * 2).cache("/tmp/perfsuite-x")
    stages = {s.node: s for s in GraphFindings.of(dataset).stages}
    by_op = [(s.op, s.parallelism, s.buffer, s.cache) for s in stages.values() if s.kind == "stage"]
    assert by_op == [("ShuffleDatasetV3", None, 9, None), ("ParallelMapDatasetV2", AUTOTUNE, None, None),
                     ("ParallelMapDatasetV2", 3, None, None), ("CacheDatasetV2", None, None, "memory"),
                     ("MapDataset", 1, None, None), ("CacheDatasetV2", None, None, "file /tmp/perfsuite-x")]
    words = GraphFindings.of(dataset).chain_words()
    assert "map (AUTOTUNE parallel calls)" in words and "cache (in memory)" in words and "map (sequential)" in words


def test_a_sequential_map_is_named_and_recommended_against_only_when_the_step_waits():
    graph = GraphFindings.of(tts_pipeline(parallel=False))
    assert len(graph.sequential_maps()) == 2
    [idle] = [f for f in graph_findings(graph, padding=None, waits=False, why_not="no wait") if f.topic == "parallelism"]
    assert idle.recommendation is None and idle.finding.endswith("no wait")
    [waiting] = [f for f in graph_findings(graph, padding=None, waits=True) if f.topic == "parallelism"]
    assert "AUTOTUNE" in waiting.recommendation


def test_parallel_maps_give_no_parallelism_finding():
    graph = GraphFindings.of(tts_pipeline(parallel=True))
    assert graph.sequential_maps() == () and "parallelism" not in topics(graph_findings(graph, padding=None))


# ------------------------------------------------------------------------------ fixed padding


def test_padding_every_clip_to_a_fixed_length_is_named_with_its_measured_waste():
    dataset = tts_pipeline(fixed=True)
    graph = GraphFindings.of(dataset)
    assert [s.padded_shapes for s in graph.fixed_padding()] == [((-1,), (CLIP_FRAMES, 8), (), ())]
    padding = padding_of(dataset)
    assert padding.sources == {CONTENT: 4} and padding.lengths_at_padded == 4  # mel_len said 1024 for all
    assert padding.time_axes == (CLIP_FRAMES,) and padding.beyond_longest > 0.3
    [finding] = [f for f in graph_findings(graph, padding=padding) if f.topic == "fixed-padding"]
    assert f"fixed {CLIP_FRAMES} frames" in finding.finding and "PaddedBatchDatasetV2" in finding.finding
    assert finding.evidence["beyond_longest"] == padding.beyond_longest


def test_padding_to_each_batchs_longest_gives_no_fixed_padding_finding():
    dataset = tts_pipeline(fixed=False)
    graph = GraphFindings.of(dataset)
    padding = padding_of(dataset)
    assert graph.fixed_padding() == () and padding.beyond_longest == 0 and padding.efficiency < 1
    assert "fixed-padding" not in topics(graph_findings(graph, padding=padding))


def test_a_map_padding_to_a_constant_is_found_by_the_batches_alone():
    dataset = tts_pipeline(fixed=True).unbatch().padded_batch(8, drop_remainder=True)  # padded_shapes: longest
    graph = GraphFindings.of(dataset)
    padding = padding_of(dataset)
    [finding] = [f for f in graph_findings(graph, padding=padding) if f.topic == "fixed-padding"]
    assert f"fixed {CLIP_FRAMES} frames" in finding.finding


# ------------------------------------------------------------------------------ Python ops


def test_python_ops_are_named_by_the_function_they_wrap_and_where_it_is():
    dataset = tf.data.Dataset.range(8).map(lambda i: tf.numpy_function(lookup_duration, [i], tf.float32))
    texts = tf.data.Dataset.from_tensor_slices(["Ab", "cde"])
    texts = texts.map(lambda t: tf.py_function(Cleaner(), [t], tf.string))
    texts = texts.map(lambda t: tf.numpy_function(per_token_ids, [t], tf.int32), num_parallel_calls=2)
    found = {op.python.rsplit(".", 1)[-1]: op for op in
             GraphFindings.of(dataset).python_ops + GraphFindings.of(texts).python_ops}
    assert set(found) == {"lookup_duration", "per_token_ids", "Cleaner"}
    line = inspect.getsourcelines(per_token_ids)[1]
    assert found["per_token_ids"].defined_at == f"{__file__}:{line}"
    assert found["per_token_ids"].transformation == "map (parallel)"
    assert found["Cleaner"].defined_at.startswith(f"{__file__}:")  # a callable object: its __call__



def test_a_lambda_around_the_users_function_is_named_by_the_function_it_calls():
    def tokens(index):  # autograph converts this map function, and the lambda inside it, as the recipes' are
        return tf.numpy_function(lambda i: per_token_ids(tf.strings.as_string(i).numpy()), [index], tf.int32)

    [op] = GraphFindings.of(tf.data.Dataset.range(4).map(tokens)).python_ops
    assert op.python.endswith(".per_token_ids (called by a lambda)")
    assert op.defined_at == f"{__file__}:{inspect.getsourcelines(per_token_ids)[1]}"
    # the recipe's map assigns the op in a branch: autograph wraps the lambda in one of its own
    recipe = Path(__file__).parent / "pipelines" / "tts_recipe.py"
    [op] = GraphFindings.of(load_callable(f"{recipe}:make_dataset", "--pipeline")(python="1")).python_ops
    assert op.python.endswith("._tokens (called by a lambda)") and op.defined_at.startswith(f"{recipe}:")
    calls_two = tf.data.Dataset.range(4).map(
        lambda i: tf.numpy_function(lambda x: per_token_ids(lookup_duration(x)), [i], tf.int32))
    [op] = GraphFindings.of(calls_two).python_ops
    assert "<lambda>" in op.python  # two functions called: the lambda itself is named


def test_a_pipeline_without_python_ops_names_none():
    assert GraphFindings.of(tts_pipeline()).python_ops == ()


def test_the_graph_finding_says_how_it_was_read():
    [finding] = [f for f in graph_findings(GraphFindings.of(tts_pipeline()), padding=None) if f.topic == "graph"]
    assert finding.evidence == {"last_stage": "PrefetchDataset", "read_from": "serialized graph"}
    assert finding.finding.startswith("as it runs: range -> shuffle (buffer 32)")


def test_old_graph_records_read_back():
    old = {"transformations": ["RangeDataset"], "python_ops": [], "ends_with_prefetch": False,
           "inject_prefetch": True, "dynamic_shapes": [], "element_spec": "x"}
    assert GraphFindings.from_dict(old).stages == ()


def test_the_prefetch_finding_reads_the_last_real_stage():
    from perfsuite.verdict.pipeline_findings import prefetch_finding

    def finding(graph):
        return prefetch_finding(graph.last_stage, graph.ends_with_prefetch, graph.inject_prefetch, None, "no step")

    assert finding(GraphFindings.of(tts_pipeline())) is None  # prefetch(50).with_options
    unprefetched = finding(GraphFindings.of(tts_pipeline(prefetch=False)))
    assert "the last real stage is PaddedBatchDatasetV2" in unprefetched.finding


def test_one_pass_of_a_prefix_is_measured_in_bytes_of_every_component():
    from perfsuite.tools.diagnose.rewrite import pass_bytes

    dense = tf.data.Dataset.range(10).map(lambda i: (tf.zeros([4, 60, 32]), tf.fill([3], "ab")))
    assert pass_bytes(dense, next(iter(dense))) == 10 * (4 * 60 * 32 * 4 + 3 * 2)  # float32s, then 2-byte strings
    ragged = tf.data.Dataset.range(5).map(lambda i: tf.RaggedTensor.from_row_lengths(tf.ones([6]), [2, 4]))
    assert pass_bytes(ragged, next(iter(ragged))) == 5 * (6 * 4 + 3 * 8)  # the values and the row splits
    assert pass_bytes(dense.repeat(), next(iter(dense))) is None


def test_a_cache_is_not_tried_when_one_pass_exceeds_its_share_of_free_memory(monkeypatch):
    from perfsuite.tools.diagnose import rewrite

    dataset = tf.data.Dataset.range(10).map(lambda i: tf.zeros([100_000]) + tf.cast(i, tf.float32),
                                            num_parallel_calls=tf.data.AUTOTUNE).repeat()
    monkeypatch.setattr(rewrite, "free_memory_bytes", lambda: 10 ** 9)
    fixes, _ = rewrite.applicable_fixes(dataset, ends_with_prefetch=True)
    assert [fix.name for fix in fixes] == ["cache"] and "(3.8 MiB a pass" in fixes[0].words  # 4,000,000 bytes
    monkeypatch.setattr(rewrite, "free_memory_bytes", lambda: 10 ** 7)  # a quarter: 2.5 MB, less than one pass
    fixes, skipped = rewrite.applicable_fixes(dataset, ends_with_prefetch=True)
    assert fixes == [] and "exceeds 25% of the free memory" in {s.name: s.why for s in skipped}["cache"]
