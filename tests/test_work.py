"""The work fingerprint (perfsuite.measure.work) and its verdict (perfsuite.verdict.work): each kind of
change planted in a copy fails on the fingerprint alone, an unchanged copy passes, and the fingerprint
is the same across processes and thread settings. Small pipelines and the tiny model keep it fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from perfsuite._tensorflow import tensorflow
from perfsuite.data.audio import MelConfig, log_mel_tf
from perfsuite.measure.work import WorkUnavailable, dataset_work, mel_seconds, step_work
from perfsuite.verdict.work import CHANGED, UNCHANGED, WITHIN, compare_work, timed_reading
from perfsuite.workload.model import MODEL_PRESETS, TrainStep, make_synthetic_batch, make_train_step

tf = tensorflow()
MEL = MelConfig()
FRAME_S = MEL.hop_length / MEL.sample_rate
LENGTHS = (5_000, 7_000, 9_000, 11_000)  # samples of the reference clips (0.2-0.5 s at 22.05 kHz)
BATCH = {"batch_size": 4, "text_len": 12, "mel_frames": 24, "seed": 0}
SHAPES = (4, 12, 24)


def _audio():
    rng = np.random.default_rng(0)
    return tf.data.Dataset.from_generator(
        lambda: (rng.uniform(-0.5, 0.5, n).astype(np.float32) for n in LENGTHS),
        output_signature=tf.TensorSpec([None], tf.float32))


def _pipeline(*, extra=None, parallel=2, prefetch=True, pad_to=None, python=False, prints=False):
    """A small TF-native mel pipeline, with one planted change at a time."""
    plain = tf.autograph.experimental.do_not_convert

    def load(audio):
        if pad_to is not None:
            audio = tf.pad(audio, [[0, tf.maximum(pad_to - tf.shape(audio)[0], 0)]])
        if python:
            audio = tf.numpy_function(lambda a: a, [audio], tf.float32, stateful=False)
            audio = tf.ensure_shape(audio, [None])
        mel = log_mel_tf(audio, MEL)
        if extra is not None:
            mel = extra(mel, audio)
        if prints:
            tf.print("loaded", tf.shape(mel))
        return {"mel": mel, "mel_len": tf.shape(mel)[0]}

    dataset = _audio().map(plain(load), num_parallel_calls=parallel).padded_batch(2)
    return dataset.prefetch(tf.data.AUTOTUNE) if prefetch else dataset


def _extra_mel(fraction):
    """A fraction of another mel on every element, added so that it is not folded away."""
    def extra(mel, audio):
        part = log_mel_tf(audio[: tf.cast(tf.cast(tf.shape(audio)[0], tf.float32) * fraction, tf.int32)], MEL)
        return mel + 0.0 * tf.reduce_mean(part)

    return extra


def _parallel_map(structure):
    [found] = [m for m in structure["maps"] if m["stage"] == "ParallelMapDatasetV2"]
    return found


def _work(dataset, name="mel"):
    return dataset_work(dataset, name=name, audio_seconds=mel_seconds(FRAME_S)).snapshot()


@pytest.fixture(scope="module")
def reference():
    return _work(_pipeline())


def test_an_unchanged_copy_of_a_pipeline_passes(reference):
    assert compare_work(_work(_pipeline()), reference).decision == UNCHANGED


def test_five_percent_more_mel_work_fails_naming_the_size_and_the_ops(reference):
    verdict = compare_work(_work(_pipeline(extra=_extra_mel(0.05))), reference)
    assert verdict.failed
    line = next(c for c in verdict.changes if "float ops per audio-s" in c)
    change = float(line.split("float ops per audio-s ")[1].split(" %")[0])
    assert 3.0 <= change <= 8.0, line
    assert "+1 RFFT" in line and "+1 MatMul" in line, line


@pytest.mark.parametrize("plant,fact", [
    ({"python": True}, "python function ops"),
    ({"prints": True}, "prints"),
    ({"prefetch": False}, "prefetch"),
    ({"parallel": 1}, "maps"),
    ({"parallel": tf.data.AUTOTUNE}, "maps"),
])
def test_each_structural_change_fails_and_is_named(reference, plant, fact):
    verdict = compare_work(_work(_pipeline(**plant)), reference)
    assert verdict.failed and any(f": {fact}:" in c for c in verdict.changes), verdict.changes


def test_padding_to_a_longer_length_fails_on_float_ops(reference):
    verdict = compare_work(_work(_pipeline(pad_to=16_000)), reference)
    assert verdict.failed and any("float ops per sample +" in c for c in verdict.changes), verdict.changes


def test_autotune_is_recorded_as_such_not_as_its_resolved_value():
    structure = _work(_pipeline(parallel=tf.data.AUTOTUNE))["structure"]
    assert _parallel_map(structure)["parallelism"] == "autotune"
    assert structure["prefetch"] == [{"buffer": "autotune", "stages_after": 0}]


def test_a_change_within_the_tolerance_passes_and_is_named(reference):
    nudged = json.loads(json.dumps(reference))
    nudged["work"]["float_ops_per_audio_s"] = round(nudged["work"]["float_ops_per_audio_s"] * 1.001)
    verdict = compare_work(reference, nudged)
    assert verdict.decision == WITHIN and not verdict.failed and verdict.notes


def test_per_audio_second_follows_the_clip_lengths(reference):
    seconds = sum(MEL.num_frames(n) for n in LENGTHS) * FRAME_S
    work = reference["work"]
    assert work["float_ops_per_audio_s"] == pytest.approx(work["float_ops_per_sample"] * len(LENGTHS) / seconds,
                                                          rel=1e-6)
    assert work["float_ops_per_batch"] == 2 * work["float_ops_per_sample"]
    given = dataset_work(_pipeline(), audio_seconds=seconds / len(LENGTHS)).work["float_ops_per_audio_s"]
    assert given == pytest.approx(work["float_ops_per_audio_s"], abs=1)


# ---------------------------------------------------------------------------------------------- steps


class _ExtraWorkStep(TrainStep):
    """A step with a fraction of the decoder's feed-forward layer run once more (forward only)."""

    def _train_step(self, batch):
        loss = super()._train_step(batch)
        h = tf.nn.relu(self.model.prenet_1(batch["mel"]))
        extra = self.model.decoder_blocks[-1].ffn(self.model.prenet_2(h))
        return loss + 0.0 * tf.stop_gradient(tf.reduce_mean(extra))


def _step(mode="xla", *, cls=None, input_shapes=SHAPES):
    if cls is None:
        return make_train_step(model_config=MODEL_PRESETS["tiny"], mode=mode, input_shapes=input_shapes)
    from perfsuite.workload.model import StepConfig

    return cls(model_config=MODEL_PRESETS["tiny"], config=StepConfig(mode=mode, input_shapes=input_shapes))


@pytest.fixture(scope="module")
def batch():
    return make_synthetic_batch(**BATCH)


@pytest.fixture(scope="module")
def by_mode(batch):
    return {mode: step_work(_step(mode), batch, name="xla") for mode in ("eager", "graph", "xla")}


@pytest.fixture(scope="module")
def xla_reference(by_mode):
    return by_mode["xla"].snapshot()


def test_an_unchanged_copy_of_a_step_passes(batch, xla_reference):
    assert compare_work(step_work(_step("xla"), batch, name="xla").snapshot(), xla_reference).decision == UNCHANGED


def test_more_step_work_fails_naming_the_size(batch, xla_reference):
    verdict = compare_work(step_work(_step("xla", cls=_ExtraWorkStep), batch, name="xla").snapshot(), xla_reference)
    line = next(c for c in verdict.changes if "float ops per step" in c)
    change = float(line.split("float ops per step ")[1].split(" %")[0])
    assert verdict.failed and 3.0 <= change <= 8.0 and "+4 MatMul" in line, line


def test_xla_off_fails(by_mode, xla_reference):
    verdict = compare_work(by_mode["graph"].snapshot(), xla_reference)
    assert verdict.failed and any(": xla: true -> false" in c for c in verdict.changes), verdict.changes
    assert any(": mode: \"xla\" -> \"graph\"" in c for c in verdict.changes), verdict.changes


def _toy_step(signature):
    """A step whose tf.function has a static input signature, or none (a trace per new shape)."""
    w = tf.Variable(tf.ones([80, 8]))
    spec = [{"mel": tf.TensorSpec([4, 24, 80], tf.float32)}] if signature else None
    return tf.function(lambda b: tf.reduce_sum(tf.matmul(tf.reshape(b["mel"], [-1, 80]), w)), input_signature=spec)


def test_a_shape_that_retraces_fails():
    batch, same = ({"mel": tf.ones([4, 24, 80]) * k} for k in (1, 2))
    shorter = {"mel": tf.ones([4, 20, 80])}
    static = step_work(_toy_step(True), batch, name="s", batches=[same])
    dynamic = step_work(_toy_step(False), batch, name="s", batches=[shorter])
    assert static.structure["traces"] == 1 and dynamic.structure["traces"] == 2
    verdict = compare_work(dynamic.snapshot(), static.snapshot())
    assert verdict.failed and any(": traces: 1 -> 2" in c for c in verdict.changes), verdict.changes


def test_eager_graph_and_xla_do_the_same_float_work_and_say_their_mode(by_mode):
    found = by_mode
    assert {f.structure["mode"] for f in found.values()} == {"eager", "graph", "xla"}
    assert len({f.work["float_ops_per_step"] for f in found.values()}) == 1
    assert found["xla"].work["float_ops_per_step"] > 0 and not found["xla"].structure["unresolved_float_ops"]


def test_a_print_or_python_function_in_a_step_is_counted():
    inner = _toy_step(True)
    batch = {"mel": tf.ones([4, 24, 80])}

    def printing(b):
        tf.print("step")
        return inner(b)

    def python(b):
        return inner(b) + tf.numpy_function(lambda: np.float32(0), [], tf.float32)

    assert step_work(printing, batch).structure["prints"] == 1
    assert step_work(python, batch).structure["python_function_ops"] == 1


# ------------------------------------------------------------------------------------ users' shapes


def test_a_step_as_a_plain_callable_or_tf_function_on_tuple_and_nested_batches():
    w = tf.Variable(tf.ones([3, 5]))

    @tf.function(jit_compile=True)
    def compiled(pair):
        x, (y, z) = pair
        return tf.reduce_sum(tf.matmul(x, w)) + tf.reduce_sum(y) + tf.reduce_sum(z["k"])

    batch = (tf.ones([4, 3]), (tf.ones([4]), {"k": tf.ones([4, 2])}))
    direct = step_work(compiled, batch)
    wrapped = step_work(lambda b: compiled(b), batch)
    eager = step_work(lambda b: tf.reduce_sum(tf.matmul(b[0], w)), batch)
    assert direct.structure["xla"] and wrapped.structure["xla"] and wrapped.structure["mode"] == "xla"
    assert eager.structure["mode"] == "eager" and not eager.structure["xla"]
    assert direct.work["float_ops_per_step"] == wrapped.work["float_ops_per_step"] >= 2 * 4 * 3 * 5
    assert direct.work["float_ops_per_sample"] == round(direct.work["float_ops_per_step"] / 4)


def test_a_step_whose_input_signature_leaves_the_batch_dimension_open_is_counted_at_the_batch():
    w = tf.Variable(tf.ones([3, 5]))
    open_batch = tf.function(lambda b: tf.reduce_sum(tf.matmul(b["x"], w)),
                             input_signature=[{"x": tf.TensorSpec([None, 3], tf.float32)}])
    found = step_work(open_batch, {"x": tf.ones([4, 3])}, batches=[{"x": tf.ones([6, 3])}])
    assert found.work["float_ops_per_step"] >= 2 * 4 * 3 * 5 and not found.structure["unresolved_float_ops"]
    assert found.structure["traces"] == 1


def test_users_pipelines_tuple_elements_options_huge_prefetch_zip_and_a_filter():
    audio = _audio()
    plain = tf.autograph.experimental.do_not_convert
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    tokens = tf.data.Dataset.range(4).map(lambda i: tf.fill([i + 1], tf.cast(i, tf.int32)))
    dataset = (tf.data.Dataset.zip((audio, tokens))
               .map(plain(lambda a, t: (log_mel_tf(a, MEL), t)), num_parallel_calls=3)
               .filter(lambda mel, t: tf.shape(mel)[0] > 0)
               .padded_batch(2, padded_shapes=([64, MEL.n_mels], [8]))
               .prefetch(1000).with_options(options))
    found = dataset_work(dataset, name="user", audio_seconds=mel_seconds(FRAME_S))
    structure = found.structure
    assert found.work["float_ops_per_audio_s"] > 0 and structure["padded_shapes_static"]
    assert structure["prefetch"] == [{"buffer": 1000, "stages_after": 1}] and not structure["inject_prefetch"]
    assert _parallel_map(structure)["parallelism"] == 3


def test_a_pipeline_that_cannot_be_read_or_is_no_dataset_raises_naming_it():
    with pytest.raises(WorkUnavailable, match="mine: expected a tf.data.Dataset, found list"):
        dataset_work([1, 2], name="mine")
    broken = tf.data.Dataset.range(3).map(lambda i: tf.debugging.check_numerics(tf.cast(i, tf.float32) / 0.0, "x"))
    with pytest.raises(WorkUnavailable, match="broken: expected a pipeline whose graph can be read"):
        dataset_work(broken, name="broken")


# ------------------------------------------------------------------------------ the same everywhere

_PROCESS = textwrap.dedent("""
    import json, sys
    from perfsuite._tensorflow import tensorflow
    tf = tensorflow()
    if sys.argv[1] == "one-thread":
        tf.config.threading.set_inter_op_parallelism_threads(1)
        tf.config.threading.set_intra_op_parallelism_threads(1)
    sys.path.insert(0, sys.argv[2])
    import test_work as t
    from perfsuite.measure.work import step_work
    print(json.dumps([t._work(t._pipeline()), step_work(t._step("xla"), t.make_synthetic_batch(**t.BATCH),
                                                        name="xla").snapshot(), t._work(t._numpy_mel_pipeline())],
                     sort_keys=True))
""")


@pytest.mark.slow  # tens of seconds (processes, an XLA compile): the unit run stays within 5 minutes
def test_the_fingerprint_is_the_same_in_other_processes_and_thread_settings(reference, xla_reference):
    env = dict(os.environ, PYTHONHASHSEED="random")
    runs = [subprocess.Popen([sys.executable, "-c", _PROCESS, setting, str(Path(__file__).parent)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for setting in ("default", "one-thread")]
    outputs = [run.communicate(timeout=240) for run in runs]
    for run, (out, err) in zip(runs, outputs):
        assert run.returncode == 0, err[-2000:]
        assert json.loads(out.strip().splitlines()[-1]) == [reference, xla_reference, _work(_numpy_mel_pipeline())]


# ---------------------------------------------------------------------------------------- verdicts


def test_a_verdict_names_the_figure_the_size_and_the_op_kinds():
    old = {"name": "w", "tensorflow": "2.21", "work": {"float_ops_per_audio_s": 1000}, "op_histogram": {"Mul": 2},
           "structure": {"prints": 0}}
    new = {**old, "work": {"float_ops_per_audio_s": 1124}, "op_histogram": {"Mul": 3, "RFFT": 1}}
    verdict = compare_work(new, old)
    assert verdict.decision == CHANGED
    assert verdict.changes == ("w: float ops per audio-s +12.4 % (+1 Mul, +1 RFFT)",)
    assert compare_work(new, None).decision == "no snapshot"


def test_an_op_histogram_change_alone_fails():
    old = {"name": "w", "work": {"float_ops_per_sample": 10}, "op_histogram": {"Cast": 1}, "structure": {}}
    verdict = compare_work({**old, "op_histogram": {"Cast": 2}}, old)
    assert verdict.failed and verdict.changes == ("w: op histogram: +1 Cast",)


@pytest.mark.parametrize("changed,timed,expected", [
    (True, "pass", "work changed; the timing does not see it (pass)"),
    (True, "fail", "work changed; the timing sees it too"),
    (False, "fail", "same work, slower: the machine, a kernel, I/O or contention"),
    (False, None, "same work; not timed in this run"),
    (True, "not judged", "work changed; timed, but no gate judged it"),
])
def test_the_two_layers_read_together(changed, timed, expected):
    old = {"name": "w", "work": {"float_ops_per_sample": 10}, "op_histogram": {}, "structure": {}}
    new = {**old, "work": {"float_ops_per_sample": 20 if changed else 10}}
    assert timed_reading(compare_work(new, old), timed) == expected


def test_ab_diffs_the_fingerprints_each_revision_writes(tmp_path):
    from perfsuite.tools.ab.work import fingerprint_diff

    class Side:
        def __init__(self, name, flops):
            self.name, self.revision, self.root = name, name, tmp_path / name
            (self.root / "benchmarks").mkdir(parents=True)
            (self.root / "benchmarks" / "test_work.py").write_text(textwrap.dedent(f"""
                import json, os, pathlib
                def test_write():
                    record = {{"name": "tf_native-wav", "work": {{"float_ops_per_audio_s": {flops}}},
                              "op_histogram": {{}}, "structure": {{}}}}
                    pathlib.Path(os.environ["PERFSUITE_WORK_OUT"], "tf_native-wav.json").write_text(json.dumps(record))
            """))

    lines = fingerprint_diff([Side("A", 1000), Side("B", 1050)], ["benchmarks", "-q", "-p", "no:randomly"],
                             tmp_path, progress=lambda message: None)
    assert lines == ["tf_native-wav: float ops per audio-s +5.0 %", "work: 1 of 1 fingerprint(s) changed, 0 the same"]


# ------------------------------------------------------------------------------------ the fixture


class _Benchmark:
    disabled = True

    def __init__(self):
        self.extra_info = {}

    def pedantic(self, target, **_):
        return target()


def _recorder():
    import types

    from perfsuite.pytest_plugin.profiles import PROFILES
    from perfsuite.pytest_plugin.recorder import Recorder, SessionContext

    no_gates = types.SimpleNamespace(check=lambda **_: types.SimpleNamespace(undecided=()))
    context = SessionContext(profile=PROFILES["smoke"], baselines_dir=Path("."), baselines=no_gates, gates="report",
                             save_baselines=False, margin=0.3, baseline_profile="x", history={}, compare_alpha=0.01,
                             compare_min_effect=0.1, compare_mode="report")
    return Recorder(benchmark=_Benchmark(), context=context, nodeid="benchmarks/test_x.py::t")


def test_the_fixture_records_the_work_of_a_users_pipeline_and_step(reference):
    recorder = _recorder()
    recorder.measure_dataset(_pipeline(), name="mel", frame_s=FRAME_S)
    info = recorder.benchmark.extra_info
    assert info["work_fingerprint"] == reference and recorder.work.snapshot() == reference
    assert info["work_float_ops_per_audio_s"] == reference["work"]["float_ops_per_audio_s"]

    w = tf.Variable(tf.ones([3, 5]))
    step = tf.function(lambda b: tf.reduce_sum(tf.matmul(b["x"], w)))
    recorder = _recorder()
    recorder.measure_step(step, batches=iter([{"x": tf.ones([4, 3])}] * 50), name="toy")
    assert recorder.benchmark.extra_info["work_float_ops_per_step"] >= 2 * 4 * 3 * 5
    assert recorder.work.structure["mode"] == "graph"


def test_the_fixture_notes_a_pipeline_whose_work_cannot_be_read(monkeypatch):
    from perfsuite.measure import work

    def unreadable(dataset, *, name, **_):
        raise WorkUnavailable(name, "a readable graph", "none")

    monkeypatch.setattr(work, "dataset_work", unreadable)
    recorder = _recorder()
    recorder.measure_dataset(tf.data.Dataset.range(100).batch(2), name="b")
    assert recorder.work is None and recorder.benchmark.extra_info["work_unavailable"] == (
        "b: expected a readable graph, found none")
    assert "b: no work fingerprint: b: expected a readable graph, found none" in recorder.notes


def test_the_summary_puts_each_work_verdict_beside_the_timed_benchmark_of_the_same_loader():
    import types

    from perfsuite.pytest_plugin.summary import work_section

    old = {"name": "tf_native-wav-bs16-w2", "work": {"float_ops_per_sample": 10}, "op_histogram": {},
           "structure": {}}
    changed = compare_work({**old, "work": {"float_ops_per_sample": 11}}, old)
    timed = types.SimpleNamespace(benchmark_id="quick::test_loaders.py::test_loader[tf_native-wav-bs16-w2]",
                                  check=types.SimpleNamespace(verdicts=[types.SimpleNamespace(decision="pass")]))
    other = types.SimpleNamespace(benchmark_id="quick::test_loaders.py::test_loader[tf_native-cache-bs16-w2]",
                                  check=types.SimpleNamespace(verdicts=[types.SimpleNamespace(decision="fail")]))
    [(_, table)] = work_section([changed], [other, timed])
    text = "\n".join(table.terminal())
    assert "float ops per sample +10.0 %" in text and "work changed; the timing does not see it (pass)" in text
    assert work_section([], [timed]) == []
    step = types.SimpleNamespace(benchmark_id="quick::test_step.py::test_step[xla-bs8-cpu-fp32]",
                                 check=types.SimpleNamespace(verdicts=[types.SimpleNamespace(decision="fail")]))
    same = compare_work({**old, "name": "xla-bs8-fp32"}, {**old, "name": "xla-bs8-fp32"})
    assert "same work, slower" in "\n".join(work_section([same], [timed, step])[0][1].terminal())


# ------------------------------------------------------------------------------------ Python bodies


def _numpy_mel_pipeline():
    """A numpy mel inside tf.numpy_function, looked up at call time (so a plant reaches it)."""
    from perfsuite.data import audio

    def load(a):
        return audio.log_mel_numpy(a, MEL)

    mel = _audio().map(lambda a: tf.ensure_shape(tf.numpy_function(load, [a], tf.float32, stateful=False),
                                                 [None, MEL.n_mels]))
    return mel.map(lambda m: {"mel": m, "mel_len": tf.shape(m)[0]}).padded_batch(2)


def _plant_extra_numpy_mel(monkeypatch, module, fraction=0.05):
    """One more numpy mel over ``fraction`` of every clip, beside the loader's own."""
    from perfsuite.data import audio

    original = audio.log_mel_numpy

    def more(samples, config=MEL):
        original(samples[: int(len(samples) * fraction)], config)
        return original(samples, config)

    monkeypatch.setattr(module, "log_mel_numpy", more)


def _python_line(verdict):
    return next(c for c in verdict.changes if "Python work per sample" in c)


def test_a_python_body_is_counted_the_same_in_every_run():
    first, again = _work(_numpy_mel_pipeline()), _work(_numpy_mel_pipeline())
    assert first == again and first["work"]["python_work_per_sample"] > 0
    assert first["python_calls"]["func:numpy.fft.rfft:complex128"] == len(LENGTHS)


def test_five_percent_more_mel_work_in_the_numpy_function_loader_fails_on_the_python_figure(
        monkeypatch, tiny_corpus, tiny_cache):
    from perfsuite.data import loaders

    config = loaders.LoaderConfig(kind="numpy_function", source="wav", batch_size=4)

    def fingerprint():
        dataset = loaders.build_loader(dataset_dir=tiny_corpus, cache_dir=tiny_cache, config=config).dataset
        return dataset_work(dataset, name="numpy_function-wav", audio_seconds=mel_seconds(FRAME_S)).snapshot()

    base = fingerprint()
    assert base["work"]["file_bytes_per_sample"] > 0 and base["work"]["python_work_per_sample"] > 0
    _plant_extra_numpy_mel(monkeypatch, loaders)
    verdict = compare_work(fingerprint(), base)
    line = _python_line(verdict)
    change = float(line.split("Python work per sample ")[1].split(" %")[0])
    # elements, not float ops: the planted mel call also makes its fixed-size passes (window, filterbank)
    assert verdict.failed and 3.0 <= change <= 20.0 and "rfft" in line, verdict.changes


def test_a_longer_numpy_fft_fails_on_the_python_figure_alone(monkeypatch):
    base = _work(_numpy_mel_pipeline())
    from perfsuite.data import audio

    rfft = np.fft.rfft
    monkeypatch.setattr(audio.np.fft, "rfft", lambda a, n=None, axis=-1: rfft(a, n=round(n * 1.05), axis=axis)
                        [..., : n // 2 + 1])
    verdict = compare_work(_work(_numpy_mel_pipeline()), base)
    assert verdict.failed and [c.split(": ")[1].split(" +")[0] for c in verdict.changes] == ["Python work per sample"]


def test_tfrecord_reads_are_counted_where_they_sit(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for size in (10, 30):
            writer.write(b"x" * size)
    expected = (10 + 16 + 30 + 16) / 2
    source = tf.data.TFRecordDataset([path]).map(lambda r: tf.strings.length(r))
    nested = tf.data.Dataset.from_tensor_slices([path]).interleave(tf.data.TFRecordDataset).map(tf.strings.length)
    for dataset in (source, nested):
        assert dataset_work(dataset).work["file_bytes_per_sample"] == round(expected)


# ------------------------------------------------------------------------------------ dtypes, bucketing


def test_an_fp16_cast_in_a_step_fails_naming_the_dtype():
    w = tf.Variable(tf.ones([80, 8]))
    batch = {"mel": tf.ones([4, 24, 80])}
    plain = step_work(tf.function(lambda b: tf.reduce_sum(tf.matmul(tf.reshape(b["mel"], [-1, 80]), w))), batch)
    half = step_work(tf.function(lambda b: tf.reduce_sum(tf.cast(tf.matmul(
        tf.cast(tf.reshape(b["mel"], [-1, 80]), tf.float16), tf.cast(w, tf.float16)), tf.float32))), batch)
    verdict = compare_work(half.snapshot(), plain.snapshot())
    assert verdict.failed and "MatMul:float16" in half.op_histogram and "MatMul:float32" in plain.op_histogram
    # fingerprint 3: the casts move the elementwise figure, which fails first (the verdict names the histogram's
    # dtypes only where no figure moved)
    assert any("MatMul:float16" in c or "elementwise elements per step" in c for c in verdict.changes), verdict.changes


def test_the_mixed_precision_step_is_fingerprinted_in_float16(batch):
    step = make_train_step(model_config=MODEL_PRESETS["tiny"], mode="graph", precision="mixed_float16",
                           input_shapes=SHAPES)
    found = step_work(step, batch, name="mixed")
    assert any(key.startswith("MatMul:float16") for key in found.op_histogram), found.op_histogram
    assert found.work["float_ops_per_step"] > 0


def _bucketed(boundaries, sizes):
    ds = tf.data.Dataset.range(20).map(lambda i: tf.zeros([i % 7 + 1]))
    return ds.bucket_by_sequence_length(lambda x: tf.shape(x)[0], boundaries, sizes)


def test_bucketing_boundaries_and_batch_sizes_are_read_and_a_change_fails():
    base = dataset_work(_bucketed([3, 5], [4, 2, 3])).snapshot()
    [group] = [s for s in base["structure"]["stages"] if s["op"] == "GroupByWindowDataset"]
    assert group["bucket_boundaries"] == [3, 5] and group["bucket_batch_sizes"] == [4, 2, 3]
    for changed in (_bucketed([3, 6], [4, 2, 3]), _bucketed([3, 5], [4, 4, 3])):
        verdict = compare_work(dataset_work(changed).snapshot(), base)
        assert verdict.failed and any(": stages:" in c and "bucket_" in c for c in verdict.changes), verdict.changes


def test_a_longer_fft_moves_float_ops_not_the_histogram_and_fails_on_the_figure_alone(reference):
    import dataclasses

    longer = dataclasses.replace(MEL, n_fft=round(MEL.n_fft * 1.05))
    dataset = _audio().map(lambda a: {"mel": log_mel_tf(a, longer), "mel_len": tf.shape(log_mel_tf(a, longer))[0]},
                           num_parallel_calls=2)
    found = _work(dataset.padded_batch(2).prefetch(tf.data.AUTOTUNE))
    verdict = compare_work(found, reference)
    assert found["op_histogram"] != {} and verdict.failed
    # figures alone (fingerprint 3: the longer frames move the elementwise figure too), no histogram line
    assert all(" float ops per " in c or " elementwise elements per " in c for c in verdict.changes), verdict.changes


# ------------------------------------------------------------------------------------ retraces


def test_a_step_retracing_on_the_loaders_real_shapes_fails(tiny_corpus, tiny_cache):
    from perfsuite.data.loaders import LoaderConfig, build_loader

    def batches(static):
        config = LoaderConfig(kind="tf_native", source="cache", batch_size=4, num_parallel_calls=1, drop_remainder=True,
                              static_shapes=static, max_text_len=SHAPES[1] if static else None,
                              max_mel_frames=SHAPES[2] if static else None)
        return list(build_loader(dataset_dir=tiny_corpus, cache_dir=tiny_cache, config=config).dataset.take(3))

    static, dynamic = batches(True), batches(False)
    assert len({tuple(b["mel"].shape) for b in dynamic}) > 1
    good = step_work(_step("graph"), static[0], name="s", batches=static[1:])
    planted = step_work(_step("graph", input_shapes=None), dynamic[0], name="s", batches=dynamic[1:])
    assert good.structure["traces"] == 1 and planted.structure["traces"] > 1
    verdict = compare_work(planted.snapshot(), good.snapshot())
    assert verdict.failed and any(": traces: 1 -> " in c for c in verdict.changes), verdict.changes


# ------------------------------------------------------------------------------------ the snapshot path


def _work_module():
    import importlib.util

    path = Path(__file__).parents[1] / "benchmarks" / "test_work.py"
    spec = importlib.util.spec_from_file_location("_benchmark_test_work", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Config:
    def __init__(self, **options):
        self.options = {"force_regen": False, "regen_all": False, "perfsuite_profile": "smoke", **options}

    def getoption(self, name):
        return self.options[name]


def test_the_snapshot_path_writes_reloads_checks_the_schema_and_names_the_command(
        tmp_path, data_regression, reference, monkeypatch):
    import types

    from perfsuite.measure.work import WorkFingerprint
    from perfsuite.verdict.work import SnapshotUnreadable, read_snapshot

    bench = _work_module()
    monkeypatch.setattr(bench, "record_work_verdict", lambda config, verdict: None)
    request = types.SimpleNamespace(config=_Config())
    fingerprint = WorkFingerprint.from_dict({k: v for k, v in reference.items() if k != "schema_version"})
    path = tmp_path / "loader-mel.yml"
    with pytest.raises(pytest.fail.Exception, match="File not found"):  # the first run writes the file
        bench.check_snapshot(request, data_regression, fingerprint, path)
    assert read_snapshot(path, fingerprint.SCHEMA_VERSION, "x") == reference
    bench.check_snapshot(request, data_regression, fingerprint, path)  # reloaded: unchanged, passes
    changed = json.loads(json.dumps(reference))
    changed["work"]["float_ops_per_sample"] *= 2
    changed_print = WorkFingerprint.from_dict({k: v for k, v in changed.items() if k != "schema_version"})
    command = "python -m pytest benchmarks/test_work.py --perfsuite-profile=smoke --force-regen"
    with pytest.raises(pytest.fail.Exception, match=f"accepted with: {command}"):
        bench.check_snapshot(request, data_regression, changed_print, path)
    version = fingerprint.SCHEMA_VERSION
    path.write_text(path.read_text().replace(f"schema_version: {version}", "schema_version: 1"))
    with pytest.raises(SnapshotUnreadable,
                       match=f"schema_version {version}, found schema_version 1; rewrite it with: {command}"):
        read_snapshot(path, fingerprint.SCHEMA_VERSION, command)


def _other_minor(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"{major}.{int(minor) + 1}"


def test_another_tensorflow_version_still_fails_more_work_naming_the_version_and_the_command(reference):
    command = "python -m pytest benchmarks/test_work.py --perfsuite-profile=smoke --force-regen"
    old = json.loads(json.dumps(reference))
    old["tensorflow"] = _other_minor(reference["tensorflow"])
    old["work"]["float_ops_per_sample"] = round(old["work"]["float_ops_per_sample"] / 1.05)  # now 5 % more
    verdict = compare_work(reference, old, rerecord=command)
    assert verdict.failed and verdict.versions == f"TensorFlow {old['tensorflow']}, this is {reference['tensorflow']}"
    assert any("float ops per sample +5.0 %" in c for c in verdict.changes), verdict.changes
    assert sum(command in c and "may be the library's" in c for c in verdict.changes) == 1, verdict.changes


def test_five_percent_more_mel_work_fails_against_a_snapshot_of_another_tensorflow_minor(reference):
    snapshot = {**json.loads(json.dumps(reference)), "tensorflow": _other_minor(reference["tensorflow"])}
    verdict = compare_work(_work(_pipeline(extra=_extra_mel(0.05))), snapshot, rerecord="the command")
    assert verdict.failed and verdict.versions, verdict
    assert any("float ops per audio-s +" in c for c in verdict.changes), verdict.changes
    assert not compare_work(_work(_pipeline()), snapshot).failed, "no plant: the same work passes"


def test_another_version_with_the_same_figures_reports_a_histogram_change_and_passes(reference):
    from perfsuite.verdict.work import versions_note

    command = "python -m pytest benchmarks/test_work.py --perfsuite-profile=smoke --force-regen"
    old = json.loads(json.dumps(reference))
    old["numpy"] = _other_minor(reference["numpy"])
    old["op_histogram"]["Old:float32"] = 1
    verdict = compare_work(reference, old, rerecord=command)
    assert not verdict.failed and verdict.decision == WITHIN
    assert any("op histogram" in n and "-1 Old:float32" in n for n in verdict.notes), verdict.notes
    assert sum(command in n for n in verdict.notes) == 1
    assert "numpy" in versions_note([verdict]) and versions_note([compare_work(reference, reference)]) is None
    unchanged = compare_work(reference, {**json.loads(json.dumps(reference)), "numpy": old["numpy"]})
    assert not unchanged.failed and unchanged.notes, "a version change is never silent"
    old["structure"]["prints"] = 3
    assert compare_work(reference, old, rerecord=command).failed
    same_version = json.loads(json.dumps(reference))
    same_version["op_histogram"]["Old:float32"] = 1
    assert compare_work(reference, same_version).failed, "without a version change a histogram change fails"


def test_the_run_header_says_when_the_snapshots_came_from_other_versions(tmp_path, reference):
    from perfsuite.verdict.work import installed_versions, snapshots_versions

    snapshot = json.loads(json.dumps(reference))
    snapshot.update(installed_versions())
    (tmp_path / "a.yml").write_text(yaml.safe_dump(snapshot))
    assert snapshots_versions(tmp_path) == ""
    snapshot["tensorflow"] = _other_minor(snapshot["tensorflow"])
    (tmp_path / "b.yml").write_text(yaml.safe_dump(snapshot))
    assert snapshots_versions(tmp_path).startswith(f"TensorFlow {snapshot['tensorflow']}, this is ")


class _RetracingStep:
    """A step that retraces on every call at the same shapes (a Python value changing per call), the way a
    counter passed to a tf.function, or a function made anew per call, does."""

    def __init__(self, step):
        import itertools

        import tensorflow as tf

        self._step, self._calls = step, itertools.count()
        self._function = tf.function(lambda batch, call: self._step(batch))

    def __call__(self, batch):
        return self._function(batch, next(self._calls))

    def tracing_count(self):
        return self._function.experimental_get_tracing_count()


def test_a_step_whose_input_signature_is_dropped_fails_on_a_batch_of_another_shape(batch):
    import tensorflow as tf

    other = make_synthetic_batch(batch_size=4, text_len=10, mel_frames=16, seed=1)
    for mode in ("graph", "xla"):
        kept = _step(mode)
        dropped = _step(mode)
        dropped._fn = tf.function(dropped._train_step, jit_compile=mode == "xla", autograph=False)  # the plant
        good = step_work(kept, batch, name="s", shapes=[other])
        planted = step_work(dropped, batch, name="s", shapes=[other])
        assert good.structure["shape_traces"] == 1 and planted.structure["shape_traces"] == 2
        verdict = compare_work(planted.snapshot(), good.snapshot())
        assert verdict.failed and any("shape traces: 1 -> 2" in c for c in verdict.changes), verdict.changes
    assert step_work(_step("eager"), batch, name="s", shapes=[other]).structure["shape_traces"] is None


def test_a_retrace_the_trace_cache_hides_fails_when_the_step_runs_on_the_reference_batches(batch):
    good = step_work(_step("graph"), batch, name="s", batches=[batch, batch])
    planted = step_work(_RetracingStep(_step("graph")), batch, name="s", batches=[batch, batch])
    assert good.structure["traces"] == 1 and planted.structure["traces"] >= 3
    verdict = compare_work(planted.snapshot(), good.snapshot())
    assert verdict.failed and any(": traces: 1 -> " in c for c in verdict.changes), verdict.changes
