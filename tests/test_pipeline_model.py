"""The pipeline model: a tf.data pipeline read once, on the shapes other recipes take (zipped branches,
TFRecord shards through interleave, bucketing, a cache after an endless repeat, mels in nested
tf.functions, Python ops), and the fingerprint that reads it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from perfsuite.measure.work import dataset_work  # noqa: E402
from perfsuite.tools.diagnose import rewrite  # noqa: E402
from perfsuite.tools.diagnose.streams import buffered_elements  # noqa: E402
from perfsuite.verdict.diagnosis_figures import GraphFindings  # noqa: E402
from perfsuite.workload.op_table import OP_TABLE  # noqa: E402
from perfsuite.workload.pipeline_model import AUTOTUNE, PipelineModel, read_pipeline  # noqa: E402


def _nested_mel_pipeline(frame: int = 256):
    """A mel computed inside nested tf.functions (an STFT in one, the filterbank matmul in its caller)."""
    bank = tf.constant(np.random.default_rng(0).random((frame // 2 + 1, 20)), tf.float32)

    @tf.function
    def spectrogram(audio):
        return tf.abs(tf.signal.stft(audio, frame, 64, fft_length=frame))

    @tf.function
    def mel(index):
        audio = tf.random.stateless_normal([2000 + 100 * tf.cast(index, tf.int32)], seed=[1, 2])
        return tf.matmul(spectrogram(audio), bank)

    return tf.data.Dataset.range(6).map(mel, num_parallel_calls=tf.data.AUTOTUNE).padded_batch(2)


def _zipped(text_first: bool = True):
    text = tf.data.Dataset.range(6).map(lambda i: tf.fill([i + 1], i))
    audio = tf.data.Dataset.range(6).map(lambda i: tf.ones([100 + 10 * tf.cast(i, tf.int32), 8]))
    pair = (text, audio) if text_first else (audio, text)
    return tf.data.Dataset.zip(pair).padded_batch(2).prefetch(3)


def _tfrecord_shards(tmp_path: Path, shards: int = 3):
    files = []
    for shard in range(shards):
        path = str(tmp_path / f"mels-{shard}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(4):
                mel = tf.io.serialize_tensor(tf.ones([10 + i, 8])).numpy()
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    "mel": tf.train.Feature(bytes_list=tf.train.BytesList(value=[mel]))})).SerializeToString())
        files.append(path)
    return tf.data.Dataset.from_tensor_slices(files).interleave(tf.data.TFRecordDataset, cycle_length=2)


def test_every_stage_of_a_zipped_pipeline_is_read_with_its_branches():
    model = read_pipeline(_zipped()).model
    [zipped] = model.branched()
    assert zipped.family == "branches" and len(zipped.inputs) == 2
    assert {s.op for s in model.stages} >= {"ZipDataset", "PaddedBatchDatasetV2", "PrefetchDataset", "MapDataset"}
    assert sum(s.family == "map" for s in model.stages) == 2  # both branches' maps, not only the first input's
    assert [s.family for s in model.chain()][-3:] == ["branches", "batch", "prefetch"]
    assert len(model.sample_maps()) == 2


def test_the_model_round_trips_as_a_versioned_record():
    model = read_pipeline(_zipped()).model
    assert PipelineModel.from_dict(model.as_dict()) == model
    assert PipelineModel.SCHEMA_VERSION >= 1


def test_parameters_are_read_with_autotune_named():
    dataset = tf.data.Dataset.range(8).map(lambda x: x, num_parallel_calls=tf.data.AUTOTUNE).repeat()
    dataset = dataset.cache().batch(4, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    stages = {s.family: s for s in read_pipeline(dataset).model.stages}
    assert stages["map"].parallelism == AUTOTUNE and stages["map"].parameters()["parallelism"] == "autotune"
    assert stages["batch"].batch_size == 4 and stages["batch"].drop_remainder is True
    assert stages["repeat"].count == -1 and "endless" in stages["repeat"].words()
    assert stages["cache"].cache == "memory"
    assert stages["prefetch"].buffer == AUTOTUNE


def test_a_cache_after_an_endless_repeat_is_visible_in_the_model_order():
    dataset = tf.data.Dataset.range(8).repeat().cache().batch(2)
    families = [s.family for s in read_pipeline(dataset).model.chain()]
    assert families.index("repeat") < families.index("cache")


def test_interleave_of_tfrecord_shards_names_the_cycle_and_the_reader(tmp_path):
    model = read_pipeline(_tfrecord_shards(tmp_path)).model
    [interleave] = [s for s in model.stages if s.family == "interleave"]
    assert interleave.cycle_length == 2 and interleave.method == "interleave"
    reached = model.op_counts(interleave.functions)
    assert any(op.startswith("TFRecordDataset") for op in reached)  # the reader inside the interleave function


def test_bucketing_reads_as_a_group_stage_with_its_functions():
    dataset = tf.data.Dataset.range(20).map(lambda i: tf.ones([i % 7 + 1]))
    dataset = dataset.bucket_by_sequence_length(lambda x: tf.shape(x)[0], [3, 5], [4, 4, 4]).prefetch(1)
    model = read_pipeline(dataset).model
    [group] = [s for s in model.stages if s.family == "group"]
    assert len(group.functions) == 3  # key, reduce and window size functions
    assert model.samples_per_element()[model.stages[-1].node] == 0  # batches of varying size after it


def test_whether_elements_are_batches_is_one_answer_of_the_model_that_rewrite_and_work_ask():
    dataset = tf.data.Dataset.range(32).map(lambda i: tf.fill([i % 3 + 1], tf.cast(i, tf.float32)))
    dataset = dataset.group_by_window(lambda x: tf.cast(tf.shape(x)[0], tf.int64), lambda _, w: w.padded_batch(4), 4)
    dataset = dataset.unbatch().padded_batch(4).map(lambda x: x * 2.0).batch(2)
    pipeline = read_pipeline(dataset)
    batched = pipeline.model.batched()
    assert [(s.method, batched[s.node]) for s in pipeline.model.chain()] == [
        ("range", False), ("map", False), ("group_by_window", True), ("map", True), ("unbatch", False),
        ("padded_batch", True), ("map", True), ("batch", True)]
    assert [(c.stage, c.batched) for c in rewrite.prefixes(pipeline)] == [
        ("range", False), ("map", False), ("group_by_window", True), ("map(normalize)", True),
        ("restructured", True), ("unbatch", False), ("padded_batch", True), ("map", True), ("batch", True)]
    assert pipeline.model.samples_per_batch() is None  # a group's batches vary in size
    assert "float_ops_per_batch" not in dataset_work(pipeline, reference_elements=2).work
    scaled = tf.data.Dataset.range(16).map(lambda i: tf.fill([4], tf.cast(i, tf.float32)) * 3.0)
    assert "float_ops_per_batch" not in dataset_work(scaled.batch(4).unbatch(), reference_elements=2).work
    work = dataset_work(scaled.batch(4), reference_elements=2).work
    assert work["float_ops_per_batch"] == 4 * work["float_ops_per_sample"]


def test_python_ops_are_named_with_where_they_are_defined_for_every_python_op_kind():
    def stateless(x):
        return x

    dataset = tf.data.Dataset.range(4).map(lambda x: tf.numpy_function(stateless, [x], tf.int64, stateful=False))
    dataset = dataset.map(lambda x: tf.py_function(stateless, [x], tf.int64))
    ops = read_pipeline(dataset).model.python_ops
    assert {op.op for op in ops} == {"PyFuncStateless", "EagerPyFunc"}
    for op in ops:
        assert op.python and "stateless" in op.python and op.defined_at and op.defined_at.endswith(
            f":{stateless.__code__.co_firstlineno}")


def test_one_op_table_classifies_every_op_each_reader_relies_on():
    for op in ("MapDataset", "ParallelMapDatasetV2", "FilterDataset", "ParallelInterleaveDatasetV4", "ZipDataset",
               "ConcatenateDataset", "DirectedInterleaveDataset", "GroupByWindowDataset", "PaddedBatchDatasetV2",
               "PrefetchDataset", "CopyToDeviceDataset", "CacheDatasetV2", "RepeatDataset", "OptionsDataset",
               "TFRecordDatasetV2"):
        assert op in OP_TABLE, op


def test_no_other_module_keeps_an_op_kind_list():
    """One table of op kinds: no module but the table and the model names a dataset op, lists them or names
    Python ops."""
    root = Path(__file__).parents[1] / "perfsuite"
    listing = re.compile(r"_OPS\s*=.*Dataset|ONE_TO_ONE\s*=|WRAPPER_OPS\s*=|\"PyFunc(Stateless)?\"|\"EagerPyFunc\"|"
                         r"\"[A-Z][A-Za-z]*Dataset(V\d)?\"")
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name not in ("op_table.py", "pipeline_model.py") and listing.search(p.read_text())]
    assert offenders == []


def test_buffers_count_every_branch_and_skip_the_options_wrapper():
    options = tf.data.Options()
    dataset = _zipped().with_options(options)  # prefetch(3) behind the options wrapper: nothing injected
    assert buffered_elements(dataset) == 3
    parallel = tf.data.Dataset.range(4).map(lambda x: x, num_parallel_calls=2)
    assert buffered_elements(tf.data.Dataset.zip((parallel, parallel)).prefetch(1)) == 2 + 2 + 1


def test_inspect_graph_and_prefixes_ask_the_same_reading():
    dataset = _zipped().with_options(tf.data.Options())
    graph = GraphFindings.of(dataset)
    assert graph.ends_with_prefetch and graph.last_stage == "PrefetchDataset"
    assert [c.stage for c in rewrite.prefixes(dataset)][-2:] == ["zip", "padded_batch"]


# ------------------------------------------------------------------------------ the fingerprint reads it


def test_a_mel_in_nested_tf_functions_is_counted_and_five_percent_more_of_it_is_seen():
    base = dataset_work(_nested_mel_pipeline(256), reference_elements=3)
    more = dataset_work(_nested_mel_pipeline(272), reference_elements=3)  # a longer frame: more FFT and matmul
    assert any(op.startswith("RFFT:") for op in base.float_ops_by_op) and base.float_ops_by_op.get("MatMul:float32", 0) > 0
    assert base.structure["unresolved_float_ops"] == {}
    assert more.work["float_ops_per_sample"] > 1.04 * base.work["float_ops_per_sample"]


def test_functions_of_every_branch_and_of_a_filter_are_counted():
    text_first = dataset_work(_zipped(True), reference_elements=2)
    audio_first = dataset_work(_zipped(False), reference_elements=2)
    assert text_first.work["element_bytes_per_sample"] == audio_first.work["element_bytes_per_sample"] > 100 * 8 * 4
    filtered = tf.data.Dataset.range(8).map(lambda i: tf.ones([64, 64])).filter(
        lambda m: tf.reduce_sum(tf.matmul(m, m)) > 0)
    counted = dataset_work(filtered, reference_elements=2)
    assert counted.float_ops_by_op.get("MatMul:float32", 0) >= 2 * 64 ** 3


def test_a_conditional_inside_a_map_is_counted_at_its_costlier_branch():
    def heavy_or_not(i):
        m = tf.ones([32, 32])
        return tf.cond(i > 100, lambda: m, lambda: tf.matmul(m, m))

    work = dataset_work(tf.data.Dataset.range(4).map(heavy_or_not), reference_elements=2)
    assert work.float_ops_by_op.get("MatMul:float32", 0) >= 2 * 32 ** 3
    assert work.structure["unresolved_float_ops"] == {}


def test_a_dataset_built_inside_an_interleave_function_is_listed_unresolved_never_a_silent_zero():
    inner = tf.data.Dataset.range(4).interleave(
        lambda i: tf.data.Dataset.range(3).map(lambda j: tf.reduce_sum(tf.matmul(tf.ones([16, 16]), tf.ones([16, 16])))),
        cycle_length=2)
    work = dataset_work(inner, reference_elements=2)
    assert any(op.startswith("MapDataset") for op in work.structure["unresolved_float_ops"]), work.structure
