"""The work fingerprint's file reads (perfsuite.measure.work): TFRecord readers whose file names come from
list_files (sorted or shuffled, read directly or through an interleave) count the same bytes as a constant
list of the same files, and take, skip and shard of fixed names the files they select; names computed at run
time are listed unresolved, never a silent 0; and a pipeline
ending in prefetch_to_device (which TensorFlow cannot serialize) counts the same work as the pipeline
before the copy."""

from __future__ import annotations

import numpy as np
import pytest

from perfsuite._tensorflow import tensorflow
from perfsuite.measure.work import dataset_work

tf = tensorflow()
PAYLOADS = (100, 300, 180)  # bytes of each file's records (one file per size, two records each)
FRAMING = 16  # bytes that frame a TFRecord


def _shards(directory, payloads=PAYLOADS) -> list[str]:
    """One small TFRecord file per payload size, two records each (the second one byte longer)."""
    files = []
    for shard, size in enumerate(payloads):
        path = str(directory / f"shard-{shard}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            writer.write(b"x" * size)
            writer.write(b"y" * (size + 1))
        files.append(path)
    return files


def _bytes_per_record(payloads=PAYLOADS) -> int:
    return round(np.mean([size + extra + FRAMING for size in payloads for extra in (0, 1)]))


def _file_bytes(dataset) -> int:
    return dataset_work(dataset, reference_elements=4).work["file_bytes_per_sample"]


def _unresolved(dataset) -> dict:
    return dataset_work(dataset, reference_elements=4).structure["unresolved_float_ops"]


def _readers(files: list[str], pattern: str) -> dict:
    listed = tf.data.Dataset.list_files
    return {
        "constant list": tf.data.TFRecordDataset(files),
        "list_files": tf.data.TFRecordDataset(listed(pattern, shuffle=False)),
        "list_files shuffled": tf.data.TFRecordDataset(listed(pattern, shuffle=True)),
        "list_files, parallel reads": tf.data.TFRecordDataset(listed(pattern, shuffle=False), num_parallel_reads=2),
        "list_files through an interleave": listed(pattern, shuffle=False).interleave(
            tf.data.TFRecordDataset, cycle_length=2),
        "list_files shuffled through an interleave": listed(pattern, shuffle=True).interleave(
            tf.data.TFRecordDataset, cycle_length=2),
        "list_files inside an interleave function": tf.data.Dataset.from_tensor_slices([pattern]).interleave(
            lambda p: tf.data.TFRecordDataset(listed(p, shuffle=True))),
    }


def test_list_files_readers_count_the_bytes_of_a_constant_list_of_the_same_files(tmp_path):
    files = _shards(tmp_path)
    found = {name: _file_bytes(dataset) for name, dataset in _readers(files, str(tmp_path / "*.tfrecord")).items()}
    assert found == dict.fromkeys(found, _bytes_per_record()) and _bytes_per_record() > 0, found


def test_a_five_percent_larger_record_payload_raises_the_file_bytes_accordingly(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "larger").mkdir()
    larger = tuple(round(size * 1.05) for size in PAYLOADS)
    _shards(tmp_path / "base")
    _shards(tmp_path / "larger", larger)
    base = _file_bytes(tf.data.TFRecordDataset(tf.data.Dataset.list_files(str(tmp_path / "base" / "*"))))
    more = _file_bytes(tf.data.TFRecordDataset(tf.data.Dataset.list_files(str(tmp_path / "larger" / "*"))))
    assert (base, more) == (_bytes_per_record(), _bytes_per_record(larger))
    assert more > 1.04 * base


def test_names_selected_by_take_skip_and_shard_count_the_files_they_select(tmp_path):
    """Files sorted: payloads 100, 300, 180. A selection of shuffled names is not fixed: unresolved."""
    _shards(tmp_path)
    names = tf.data.Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=False)
    found = {"shard(2, 0)": tf.data.TFRecordDataset(names.shard(2, 0)),
             "skip(1)": tf.data.TFRecordDataset(names.skip(1)),
             "take(1) through an interleave": names.take(1).interleave(tf.data.TFRecordDataset, cycle_length=2),
             "shard(2, 1), then shuffled": tf.data.TFRecordDataset(names.shard(2, 1).shuffle(4))}
    assert {name: _file_bytes(dataset) for name, dataset in found.items()} == {
        "shard(2, 0)": _bytes_per_record((100, 180)), "skip(1)": _bytes_per_record((300, 180)),
        "take(1) through an interleave": _bytes_per_record((100,)), "shard(2, 1), then shuffled": _bytes_per_record((300,))}
    shuffled = tf.data.TFRecordDataset(tf.data.Dataset.list_files(str(tmp_path / "*.tfrecord")).shard(2, 0))
    assert _file_bytes(shuffled) == 0 and any("not constant" in key for key in _unresolved(shuffled))


def test_names_computed_at_run_time_are_listed_unresolved_never_a_silent_zero(tmp_path):
    _shards(tmp_path)

    def name(index):
        return tf.strings.join([str(tmp_path), "/shard-", tf.strings.as_string(index), ".tfrecord"])

    computed = tf.data.TFRecordDataset(tf.data.Dataset.range(3).map(name))
    inside = tf.data.Dataset.range(1).interleave(lambda _: tf.data.TFRecordDataset(tf.data.Dataset.range(3).map(name)))
    for dataset in (computed, inside):
        assert "FlatMapDataset (TFRecord file names not constant)" in _unresolved(dataset)


def test_a_reader_read_from_python_objects_only_is_listed_unresolved(tmp_path):
    files = _shards(tmp_path)
    copied = tf.data.Dataset.from_tensor_slices(files).apply(tf.data.experimental.copy_to_device("/cpu:0"))
    unresolved = _unresolved(tf.data.TFRecordDataset(copied))
    assert any(key.startswith("TFRecordDataset") and "Python objects" in key for key in unresolved), unresolved


# ------------------------------------------------------------------------------------ prefetch_to_device


def _figures(dataset) -> dict:
    found = dataset_work(dataset, name="p", reference_elements=4).snapshot()
    return {key: found[key] for key in ("work", "float_ops_by_op", "op_histogram", "python_calls")} | {
        "unresolved": found["structure"]["unresolved_float_ops"]}


def test_prefetch_to_device_counts_the_same_work_as_the_pipeline_before_the_copy(tmp_path):
    files = _shards(tmp_path)

    def pipeline():
        def element(record):
            size = tf.cast(tf.strings.length(record), tf.float32)
            square = tf.matmul(tf.fill([8, 8], size), tf.ones([8, 8]))
            total = tf.numpy_function(lambda m: np.float32(np.sum(m)), [square], tf.float32, stateful=False)
            return square, total

        return tf.data.TFRecordDataset(files).map(element, num_parallel_calls=2).batch(2).prefetch(2)

    plain = _figures(pipeline())
    copied = _figures(pipeline().apply(tf.data.experimental.prefetch_to_device("/cpu:0")))
    assert copied == plain
    assert plain["work"]["file_bytes_per_sample"] == _bytes_per_record() and plain["python_calls"]
    assert plain["float_ops_by_op"].get("MatMul:float32", 0) >= 2 * 8 ** 3 and not plain["unresolved"]


@pytest.mark.parametrize("kind", ["tf_native", "numpy_function"])
def test_a_loader_with_prefetch_to_device_counts_the_work_of_the_same_loader_without_it(tiny_corpus, kind):
    from perfsuite.data.loaders import LoaderConfig, build_loader

    def figures(device):
        config = LoaderConfig(kind=kind, source="wav", batch_size=4, prefetch_to_device=device)
        return _figures(build_loader(dataset_dir=tiny_corpus, config=config).dataset)

    plain = figures(None)
    assert figures("/cpu:0") == plain and plain["work"]["file_bytes_per_sample"] > 0
