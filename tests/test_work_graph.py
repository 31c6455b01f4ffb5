"""The work fingerprint's graph counting where it used to be blind (perfsuite.measure.float_ops,
perfsuite.measure.work): loops count their trip count, elementwise and data-movement ops their elements as a
figure of their own, the branch a pipeline takes runs its Python bodies and reads, the reference elements are
spread over the input, and what stays uncounted is named. Small graphs keep it fast."""

from __future__ import annotations

import numpy as np
import pytest

from perfsuite._tensorflow import tensorflow
from perfsuite.measure.work import dataset_work, step_work
from perfsuite.verdict.work import compare_work
from perfsuite.workload.op_table import ELEMENTWISE_OPS

tf = tensorflow()


def _ratio(more, base, figure):
    return more.work[figure] / base.work[figure]


# ---------------------------------------------------------------------------------------------- loops


def _looping_step(times):
    @tf.function
    def step(x):
        acc = tf.zeros([8, 8])
        for _ in tf.range(tf.shape(x)[0] * times):  # a count the batch's shape fixes
            acc += tf.matmul(x, x)
        return acc

    return step


def _looping_map(times):
    def load(x):
        acc = tf.ones([4, 4])
        for _ in tf.range(tf.cast(x[0], tf.int32) * times):  # a count the element's value fixes
            acc = tf.matmul(acc, acc) * 0.5
        return acc

    return tf.data.Dataset.from_tensor_slices(tf.fill([12, 3], 3.0)).map(load)


def test_a_step_loop_whose_trip_count_doubles_doubles_its_float_ops():
    base, more = (step_work(_looping_step(times), tf.ones([8, 8])) for times in (1, 2))
    assert _ratio(more, base, "float_ops_per_step") == pytest.approx(2.0, rel=0.01)
    assert base.work["float_ops_per_step"] >= 8 * 2 * 8 ** 3
    assert base.structure["unresolved_float_ops"] == more.structure["unresolved_float_ops"] == {}
    assert compare_work(more.snapshot(), base.snapshot()).failed


def test_a_step_loop_reading_a_variable_ended_by_maximum_iterations_counts_the_passes_it_runs():
    weights = tf.Variable(tf.ones([8, 8]))

    def step(passes):
        @tf.function
        def run(x):
            body = lambda i, acc: (i + 1, acc + tf.matmul(x, weights))  # noqa: E731
            return tf.while_loop(lambda i, acc: i < 5, body, [tf.constant(0), tf.zeros([4, 8])],
                                 maximum_iterations=passes)[1]

        return step_work(run, tf.ones([4, 8]))

    three, five = step(3), step(9)  # the condition ends the second after 5 passes
    assert three.float_ops_by_op["MatMul:float32"] == 3 * 2 * 4 * 8 * 8
    assert five.float_ops_by_op["MatMul:float32"] == 5 * 2 * 4 * 8 * 8
    assert three.structure["unresolved_float_ops"] == five.structure["unresolved_float_ops"] == {}


def test_a_pipeline_loop_counts_the_trip_count_it_ran():
    base, more = (dataset_work(_looping_map(times)) for times in (1, 2))
    assert _ratio(more, base, "float_ops_per_sample") == pytest.approx(2.0, rel=0.02)
    assert base.float_ops_by_op["MatMul:float32"] == 3 * 2 * 4 ** 3
    assert base.structure["unresolved_float_ops"] == {}
    verdict = compare_work(more.snapshot(), base.snapshot())
    assert verdict.failed and any("float ops per sample +" in c for c in verdict.changes), verdict.changes


def test_a_step_loop_whose_count_depends_on_values_is_named_never_silently_one():
    @tf.function
    def step(x):
        i = tf.constant(0.0)
        while i < tf.reduce_sum(x):
            i += 1.0
        return i

    found = step_work(step, tf.ones([3, 2]))
    assert any(key.endswith("While (trip count unknown)") for key in found.structure["unresolved_float_ops"]), \
        found.structure


# ------------------------------------------------------------------------------ elementwise and data movement


def test_no_elementwise_op_has_a_registered_float_op_statistic():
    from tensorflow.python.framework import op_def_registry, ops

    registered = {key.split(",")[0] for key in ops._stats_registry.list() if key.endswith(",flops")}
    assert not ELEMENTWISE_OPS & registered
    assert all(op_def_registry.get(op) is not None for op in ELEMENTWISE_OPS)


def test_a_cast_or_transpose_moves_the_elementwise_figure_not_float_ops():
    source = tf.data.Dataset.from_tensor_slices(tf.ones([6, 16, 8]))
    plain = dataset_work(source.map(lambda x: tf.matmul(x, x, transpose_b=True)))
    moved = dataset_work(source.map(lambda x: tf.transpose(tf.cast(tf.matmul(x, x, transpose_b=True), tf.float64))))
    assert moved.work["float_ops_per_sample"] == plain.work["float_ops_per_sample"] == 2 * 16 * 16 * 8
    assert moved.work["elementwise_elements_per_sample"] - plain.work["elementwise_elements_per_sample"] == 2 * 256
    verdict = compare_work(moved.snapshot(), plain.snapshot())
    assert verdict.failed and any("elementwise" in c for c in verdict.changes), verdict.changes

    x = tf.ones([4, 32])
    step = step_work(tf.function(lambda b: tf.reduce_sum(tf.matmul(b, b, transpose_a=True))), x)
    more = step_work(tf.function(lambda b: tf.reduce_sum(tf.matmul(tf.sqrt(b), b, transpose_a=True))), x)
    assert more.work["float_ops_per_step"] == step.work["float_ops_per_step"]
    assert more.work["elementwise_elements_per_step"] == step.work["elementwise_elements_per_step"] + 4 * 32


# ------------------------------------------------------------------------------ branches


def _branching(body, *, taken=True):
    """A map whose cond branch (taken or not, by the element's value) runs ``body`` on the element."""
    def load(x):
        return tf.cond(tf.reduce_sum(x) > (0.0 if taken else 1e9), lambda: body(x), lambda: x)

    return tf.data.Dataset.from_tensor_slices(tf.ones([10, 256])).map(PLAIN(load))


PLAIN = tf.autograph.experimental.do_not_convert  # the Python bodies run as written


def _spectrum(values, n):
    return np.fft.irfft(np.fft.rfft(values, n=n), n=n)[:256].astype(np.float32)


def _numpy_body(n):
    def body(x):
        y = tf.numpy_function(PLAIN(lambda v: _spectrum(v, n)), [x], tf.float32, stateful=False)
        return tf.ensure_shape(y, [256])

    return body


def test_a_numpy_function_added_in_a_cond_branch_fails_on_its_python_work():
    plain = dataset_work(_branching(lambda x: x * 2.0))
    python = dataset_work(_branching(_numpy_body(256)))
    assert python.work["python_work_per_sample"] > 0 and python.python_calls
    verdict = compare_work(python.snapshot(), plain.snapshot())
    assert verdict.failed and any("Python work per sample" in c for c in verdict.changes), verdict.changes


def test_more_work_in_a_branch_python_body_fails_on_the_figure_alone():
    base, more = dataset_work(_branching(_numpy_body(256))), dataset_work(_branching(_numpy_body(512)))
    assert base.structure == more.structure
    verdict = compare_work(more.snapshot(), base.snapshot())
    assert verdict.failed and any("Python work per sample +" in c for c in verdict.changes), verdict.changes


def test_only_the_branch_taken_runs():
    skipped = dataset_work(_branching(_numpy_body(256), taken=False))
    assert skipped.work["python_work_per_sample"] == 0 and not skipped.python_calls
    assert skipped.structure["unresolved_float_ops"] == {}


def test_a_read_in_a_cond_branch_counts_its_bytes(tmp_path):
    small, big = tmp_path / "small.bin", tmp_path / "big.bin"
    small.write_bytes(b"x" * 100)
    big.write_bytes(b"x" * 400)

    def reading(path):
        return tf.data.Dataset.range(10).map(lambda i: tf.cond(
            i >= 0, lambda: tf.strings.length(tf.io.read_file(str(path))), lambda: tf.constant(0)))

    base, more = dataset_work(reading(small)), dataset_work(reading(big))
    assert base.work["file_bytes_per_sample"] == 100 and more.work["file_bytes_per_sample"] == 400
    verdict = compare_work(more.snapshot(), base.snapshot())
    assert verdict.failed and any("file bytes per sample" in c for c in verdict.changes), verdict.changes


def test_a_switch_case_runs_the_branch_its_index_picks():
    def load(i):
        return tf.switch_case(tf.cast(i % 2, tf.int32), [lambda: tf.zeros([256]), lambda: _numpy_body(256)(
            tf.ones([256]))])

    odd = dataset_work(tf.data.Dataset.range(8).map(PLAIN(load)))  # the odd ones of 0 .. 7 run the body
    every = dataset_work(tf.data.Dataset.range(8).map(PLAIN(lambda i: load(2 * i + 1))))
    assert 0 < odd.work["python_work_per_sample"] * 2 == pytest.approx(every.work["python_work_per_sample"], abs=2)


def test_a_python_function_in_a_loop_body_is_named_not_run():
    def load(x):
        for _ in tf.range(3):
            x = tf.ensure_shape(tf.numpy_function(lambda v: v + 1, [x], tf.float32, stateful=False), [4])
        return x

    found = dataset_work(tf.data.Dataset.from_tensor_slices(tf.ones([4, 4])).map(load))
    named = [key for key in found.structure["unresolved_float_ops"] if "Python function or file read" in key]
    assert named, found.structure


# ------------------------------------------------------------------------------ reference elements


def _lengths(lengths):
    return tf.data.Dataset.from_tensor_slices(tf.constant(lengths, tf.int32)).map(
        lambda n: tf.signal.rfft(tf.ones([n])))


def test_elements_beyond_the_eighth_count():
    short = dataset_work(_lengths([256] * 16))
    later_longer = dataset_work(_lengths([256] * 8 + [1024] * 8))
    assert later_longer.work["float_ops_per_sample"] > 1.5 * short.work["float_ops_per_sample"]
    assert compare_work(later_longer.snapshot(), short.snapshot()).failed
    assert "8 evenly spaced over the first 16 of 16" in later_longer.reference


def test_an_input_of_unknown_cardinality_reads_its_first_elements_and_says_so():
    lengths = [256] * 8 + [1024] * 8
    generated = tf.data.Dataset.from_generator(lambda: iter(lengths), output_signature=tf.TensorSpec([], tf.int32))
    found = dataset_work(generated.map(lambda n: tf.signal.rfft(tf.ones([n]))))
    assert found.work["float_ops_per_sample"] == dataset_work(_lengths([256] * 16)).work["float_ops_per_sample"]
    assert "the first 8 (cardinality unknown)" in found.reference


def _squares(batch: int, kept: int | None):
    """Vectors of 1000 squared, batched by ``batch``; with ``kept``, each batch cut to its first ``kept``."""
    tf = tensorflow()
    dataset = tf.data.Dataset.range(64).map(lambda i: tf.fill([1000], tf.cast(i, tf.float32)) ** 2).batch(batch)
    return dataset if kept is None else dataset.map(lambda b: b[:kept])


def test_work_done_for_samples_a_map_after_the_batch_drops_counts_per_sample_delivered():
    whole, cut = dataset_work(_squares(10, None)), dataset_work(_squares(12, 10))  # 12 computed, 10 delivered
    assert cut.work["float_ops_per_sample"] == pytest.approx(1.2 * whole.work["float_ops_per_sample"], rel=1e-3)
    assert compare_work(cut.snapshot(), whole.snapshot()).failed
    assert dataset_work(_squares(10, 10)).work["float_ops_per_sample"] == whole.work["float_ops_per_sample"]
