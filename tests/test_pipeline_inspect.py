"""`perfsuite diagnose --pipeline MODULE:FUNCTION [--step ...] [--arg K=V]`: the user's own pipeline, written
to tmp_path (outside the repository), imported, inspected and measured as it is; bad targets refused in
one line with exit 2.
"""

import json
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from perfsuite.records import versioned
from perfsuite.tools import cli
from perfsuite.tools.diagnose.plan import Event
from perfsuite.tools.diagnose.run import diagnose
from perfsuite.tools.diagnose.targets import (
    TargetError,
    load_callable,
    load_step,
)
from perfsuite.verdict.diagnosis_figures import (
    INPUT_BOUND_BOUNDARIES,
    TOO_SHORT,
    DiagnoseSettings,
    GraphFindings,
    InputBoundFigures,
    Target,
    estimate,
)
from perfsuite.verdict.diagnosis_record import SCHEMA_VERSION, Diagnosis
from perfsuite.verdict.pipeline_findings import verdicts

PIPELINE = """
import numpy as np
import tensorflow as tf


def slow_features(index):
    rng = np.random.default_rng(int(index))
    return rng.standard_normal((64, 16)).astype(np.float32)


def make(n="96", batch="8"):
    dataset = tf.data.Dataset.range(int(n))
    dataset = dataset.map(lambda i: tf.numpy_function(slow_features, [i], tf.float32, stateful=False),
                          num_parallel_calls=2)
    dataset = dataset.map(lambda x: tf.ensure_shape(x, [64, 16]))
    return dataset.batch(int(batch), drop_remainder=True).repeat()


def ragged(n="64"):
    lengths = tf.data.Dataset.range(int(n)).map(lambda i: tf.zeros([i % 5 + 1, 4]))
    return lengths.padded_batch(4).repeat()


def from_generator():
    def rows():
        for i in range(8):
            yield np.full([3], i, np.float32)

    dataset = tf.data.Dataset.from_generator(rows, output_signature=tf.TensorSpec([3], tf.float32))
    return dataset.map(lambda x: tf.py_function(lambda y: y * 2, [x], tf.float32)).batch(2).prefetch(1)


def fails_when_read():
    return tf.data.Dataset.range(4).map(lambda i: tf.numpy_function(lambda x: 1 // 0, [i], tf.int64))


def empty():
    return tf.data.Dataset.range(0).batch(2)


def speech():
    # A TTS-style batch: mels of 10..40 frames padded to the batch's longest, with their true lengths.
    def utterance(i):
        frames = tf.cast(10 + (i * 7) % 31, tf.int32)
        return {"mel": tf.zeros([frames, 8]), "mel_len": frames}

    return tf.data.Dataset.range(64).map(utterance).padded_batch(4).repeat()


def not_a_dataset():
    return [1, 2, 3]


def raises(path="/data/shard-0"):
    raise OSError(f"cannot open {path}")


NOT_CALLABLE = 3
_weights = tf.Variable(tf.zeros([16, 1]))


@tf.function
def step(batch):
    with tf.GradientTape() as tape:
        x = tf.reshape(batch, [-1, 16])
        loss = tf.reduce_mean(tf.square(tf.matmul(x, _weights) - 1.0))
    _weights.assign_sub(0.01 * tape.gradient(loss, _weights))
    return loss


@tf.function
def ragged_step(batch):
    return tf.reduce_sum(batch)


def returns_nothing(batch):
    return None


def make_step():
    return step


def make_nothing():
    return 3


def two_args(batch, labels):
    return batch
"""


@pytest.fixture(scope="module")
def module_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("user") / "user_pipeline.py"
    path.write_text(textwrap.dedent(PIPELINE), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def measured(module_file, tmp_path_factory):
    """One --pipeline run with --step through the CLI: (exit code, stdout, stderr, JSON, report dir)."""
    import io

    out = tmp_path_factory.mktemp("pipeline-out")
    stdout, stderr = io.StringIO(), io.StringIO()
    patch = pytest.MonkeyPatch()
    patch.setattr(sys, "stdout", stdout)
    patch.setattr(sys, "stderr", stderr)
    try:
        code = cli.main(["diagnose", "--pipeline", f"{module_file}:make", "--step", f"{module_file}:step",
                         "--arg", "n=96", "--arg", "batch=8", "--budget", "20", "--json", str(out / "p.json"),
                         "--report", str(out / "report")])
    finally:
        patch.undo()
    return code, stdout.getvalue(), stderr.getvalue(), json.loads((out / "p.json").read_text()), out / "report"


def test_the_numpy_function_op_is_named_with_the_map_it_sits_in(measured, module_file):
    code, out, _, result, _ = measured
    assert code == 0 and "Traceback" not in out
    graph = result["graph"]
    assert graph["transformations"] == ["RangeDataset", "ParallelMapDatasetV2", "MapDataset", "BatchDatasetV2",
                                        "RepeatDataset"]
    [op] = graph["python_ops"]
    assert op["op"] == "PyFuncStateless" and op["transformation"] == "map (parallel)"
    assert op["transformation_node"].startswith("ParallelMapDatasetV2") and op["python"].endswith(".slow_features")
    assert f"PyFuncStateless op 'PyFuncStateless' calling {op['python']}" in out
    assert "in map (parallel) (ParallelMapDatasetV2" in out


def test_throughput_and_the_input_bound_share_are_measured_with_intervals(measured):
    _, _, err, result, _ = measured
    assert result["schema_version"] == SCHEMA_VERSION and "kind" not in result
    assert result["complete"] is True
    assert [s["name"] for s in result["stages"]] == ["throughput", "input_bound", "bottleneck", "capacity", "fixes",
                                                     "feed"]
    throughput = result["throughput"]
    assert throughput["unit"] == "samples" and throughput["rate"]["median"] > 0 and throughput["first_batch_s"] > 0
    assert len(throughput["warmup_s"]) == 2  # the warm-up apart from the steady rounds
    # every round's batches, a second pass sizing its rounds anew
    assert len(throughput["round_batches"]) == throughput["rate"]["rounds"]
    assert len(throughput["batch_s"]) == sum(throughput["round_batches"])
    assert throughput["round_batches"][-1] == throughput["batches_per_round"]
    bound = result["input_bound"]
    assert bound["share"]["rounds"] == len(bound["real_round_s"]) == len(bound["synthetic_round_s"]) >= 1
    assert bound["share"]["low"] <= bound["share"]["median"] <= bound["share"]["high"]
    assert bound["wait"]["rounds"] == bound["share"]["rounds"] and 0 <= bound["wait"]["median"] <= 1
    assert result["step"]["retraces"] == 0 and result["step"]["calls"] > 2  # static shapes: one trace
    topics = {v["topic"]: v for v in result["verdicts"]}
    assert topics["throughput"]["interval"]["rounds"] == throughput["rate"]["rounds"]
    assert topics["input-bound"]["interval"] == bound["share"]
    assert topics["python-op"]["evidence"]["input_bound_share"] == bound["share"]["median"]
    assert "perfsuite diagnose [throughput] share " in err and "s of the budget left" in err


def test_the_work_of_the_pipeline_and_step_is_set_against_the_measured_rates(measured):
    _, out, _, result, _ = measured
    work = result["work"]
    assert work["unavailable"] == []
    # its maps' work is a numpy_function: no graph float ops, so no rate to set against the peak
    assert work["pipeline"]["work"]["float_ops_per_sample"] == 0 and work["pipeline_float_ops_per_s"] is None
    assert work["pipeline"]["structure"]["python_function_ops"] == 1
    per_step = work["step"]["work"]["float_ops_per_step"]
    assert work["step_float_ops_per_s"] == pytest.approx(per_step / result["input_bound"]["t_synthetic"])
    assert work["peak"]["float_ops_per_s"] > 0
    assert [v["topic"] for v in result["verdicts"]].count("work") == 2
    assert out.count("of this machine's measured peak") == 1  # the step's


def test_a_schema_2_file_with_flat_feed_figures_loads_through_its_migration(measured):
    from perfsuite.measure.emulated import FeedRate

    result = measured[3]
    assert result["schema_version"] == SCHEMA_VERSION == 9
    flat = FeedRate.from_dict(result["feed"]["feed"]).extra_info()  # what schema 2 wrote: FeedRate's flat figures
    old = {**_schema_3(result), "schema_version": 2, "feed": {**_schema_3(result)["feed"], "feed": flat}}
    assert Diagnosis.from_dict(old) == replace(Diagnosis.from_dict(result), gpu=None)  # no GPU figures then


def test_a_schema_5_file_loads_with_nothing_for_the_start_up_bottleneck_and_fixes(measured):
    result = measured[3]  # whether its short budget reached the bottleneck and fixes, schema 5 has neither
    assert result["startup_s"] > 0 and {"startup_s", "bottleneck", "fixes"} <= set(result)
    old = {key: value for key, value in _pipeline_file(result).items() if key not in ("startup_s", "bottleneck", "fixes")}
    loaded = Diagnosis.from_dict({**old, "schema_version": 5})
    assert loaded.startup_s is None and loaded.bottleneck is None and loaded.fixes == ()


def _pipeline_file(result: dict) -> dict:
    """This run as a --pipeline run's file (before the one record): its kind named, without the preset's parts."""
    preset = ("data", "cache", "static_shapes", "sweep", "gpu", "trace")
    return {**{key: value for key, value in result.items() if key not in preset}, "kind": "pipeline"}


def _schema_3(result: dict) -> dict:
    """What schema 3 wrote for this run: the feed round's utilisation statistics as emulated_figures."""
    from perfsuite.measure.emulated import emulated_figures
    from perfsuite.measure.utilisation import GpuStats

    stats = result["feed"]["stats"]
    flat = None if stats is None else emulated_figures(GpuStats.from_dict(stats))
    return {**_pipeline_file(result), "schema_version": 3, "feed": {**result["feed"], "stats": flat}}


def test_a_schema_3_file_with_flat_utilisation_statistics_loads_through_its_migration(measured):
    result = measured[3]
    old = json.loads(json.dumps(_schema_3(result), allow_nan=False))
    assert Diagnosis.from_dict(old) == replace(Diagnosis.from_dict(result), gpu=None)  # no GPU figures then


def test_the_feed_rate_is_measured_on_the_batches_as_their_layout_reads_them(measured):
    _, out, _, result, report = measured
    feed, layout = result["feed"], result["layout"]
    # a single float tensor [8, 64, 16] is the audio by the rule; no length tensor: lengths from the content
    assert layout["mel"] == "" and layout["mel_len"] is None and "from the content" in layout["length_rule"]
    assert "[batch] audio (the whole batch) (the only floating-point tensor" in out
    assert feed["pipeline"].endswith(":make") and feed["feed"]["step_s"] > 0
    assert feed["feed"]["audio_s_per_batch"] == pytest.approx(8 * 64 * layout["frame_s"])  # random: no padding
    assert feed["step_time"] == "fastpitch-a100-tf32" and feed["step_s"] > 0  # the per-frame preset: true lengths
    assert result["throughput"]["padding"]["efficiency"] == 1.0
    assert "## Emulated accelerator" in (report / "summary.md").read_text()


def test_the_pipeline_json_loads_back_and_makes_a_report(measured):

    _, _, _, result, report = measured
    loaded = Diagnosis.from_dict(result)
    assert loaded.as_dict() == {key: value for key, value in result.items() if key != "schema_version"}
    assert verdicts(loaded) == list(loaded.verdicts)
    summary = (report / "summary.md").read_text()
    assert "## Dataset graph" in summary and "slow_features" in summary and "![batch_timeline.png]" in summary


def test_dynamic_shapes_are_named_and_the_steps_retraces_measured(module_file):
    diagnosis = diagnose(target=Target(pipeline=f"{module_file}:ragged", step=f"{module_file}:ragged_step",
                                                args={}), settings=DiagnoseSettings(budget_s=8))
    [shape] = diagnosis.graph.dynamic_shapes
    assert shape.dims == (0, 1) and shape.shape == "(None, None, 4)"
    assert diagnosis.step.retraces > 0  # one trace per new padded length
    [retracing] = [v for v in diagnosis.verdicts if v.topic == "retracing"]
    assert f"retraced {diagnosis.step.retraces} time(s)" in retracing.finding
    assert "input_signature" in retracing.recommendation and "padded_shapes" not in retracing.recommendation


def test_from_generator_and_py_function_are_named_with_their_transformations(module_file):
    dataset = load_callable(f"{module_file}:from_generator", "--pipeline")()
    found = GraphFindings.of(dataset)
    by_op = {op.op: op for op in found.python_ops}
    assert by_op["EagerPyFunc"].transformation == "map" and by_op["EagerPyFunc"].transformation_op == "MapDataset"
    generator = [op for op in found.python_ops if op.transformation.startswith("from_generator")]
    assert generator and all(op.transformation_op == "FlatMapDataset" for op in generator)
    assert found.ends_with_prefetch
    assert [(s.shape, s.dims) for s in found.dynamic_shapes] == [("<unknown rank>", None)]  # py_function's output


def test_speech_batches_get_audio_seconds_per_second_and_padding_efficiency(module_file, tmp_path, capfd):
    code = cli.main(["diagnose", "--pipeline", f"{module_file}:speech", "--budget", "12",
                     "--json", str(tmp_path / "s.json")])
    out, _err = capfd.readouterr()
    throughput = json.loads((tmp_path / "s.json").read_text())["throughput"]
    assert code == 0 and "seconds of audio per second" in out
    audio, rate = throughput["audio_s_per_s"], throughput["rate"]
    assert audio["rounds"] == rate["rounds"] and audio["low"] <= audio["median"] <= audio["high"]
    # 4 utterances a batch of 10..40 frames of 256 / 22050 s: audio-s/s lies between those bounds x rate
    frame_s = 256 / 22050
    assert 10 * frame_s * rate["low"] * 0.5 <= audio["median"] <= 40 * frame_s * rate["high"] * 2
    assert 0 < throughput["padding_efficiency"] < 1


def test_without_a_step_only_throughput_and_no_recommendation_from_the_graph(module_file, capfd):
    code = cli.main(["diagnose", "--pipeline", f"{module_file}:make", "--budget", "6"])
    out, err = capfd.readouterr()
    assert code == 0 and "Traceback" not in out + err
    assert "[input-bound] not measured: the input-bound share needs a training step to feed (--step" in out
    assert "whether it costs training time needs --step" in out
    python_op = out.split("[python-op]")[1].split("\n[")[0]
    assert "recommendation" not in python_op


def test_an_interrupted_pipeline_run_keeps_a_partial_json(module_file, tmp_path):
    path = tmp_path / "partial.json"

    def progress(event: Event) -> None:
        if event.stage == "throughput" and event.kind == "end":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        diagnose(target=Target(pipeline=f"{module_file}:make", step=f"{module_file}:step", args={}),
                          settings=DiagnoseSettings(budget_s=10), progress=progress,
                          checkpoint=lambda d: cli._write_json(path, versioned(d)))
    partial = Diagnosis.from_dict(json.loads(path.read_text()))
    assert partial.complete is False and [s.name for s in partial.stages] == ["throughput"]
    assert partial.throughput is not None and partial.input_bound is None
    assert partial.step is not None and partial.step.first_s > 0  # the first calls happen at start-up


def _graph(**changes):
    base = {"transformations": ("RangeDataset", "MapDataset", "BatchDatasetV2"), "python_ops": (),
            "ends_with_prefetch": False, "inject_prefetch": False, "dynamic_shapes": (), "element_spec": "x"}
    return GraphFindings(**{**base, **changes})


def _bound(shares):
    from perfsuite.measure.stats import classify_input_bound

    figure = estimate(shares, INPUT_BOUND_BOUNDARIES)
    return InputBoundFigures(share=figure, classification=classify_input_bound(figure.median), t_real=1.0, t_synthetic=0.5,
                      real_round_s=(1.0,) * len(shares), synthetic_round_s=(0.5,) * len(shares), batches=4, warmup=2)


def _diagnosis(graph, bound, *, step="m:step"):
    from perfsuite.measure.machine import machine_fingerprint

    return Diagnosis(target=Target(pipeline="m:make", step=step, args={}), settings=DiagnoseSettings(),
                             fingerprint=machine_fingerprint(), complete=True, elapsed_s=1.0, stages=(), graph=graph,
                             throughput=None, step=None, input_bound=bound, feed=None, verdicts=())


def test_a_missing_prefetch_is_recommended_only_when_the_step_is_measured_to_wait():
    waits = {v.topic: v for v in verdicts(_diagnosis(_graph(), _bound([0.4, 0.5, 0.45])))}
    assert "no prefetch at the end" in waits["prefetch"].finding and ".prefetch(tf.data.AUTOTUNE)" in \
        waits["prefetch"].recommendation
    fed = {v.topic: v for v in verdicts(_diagnosis(_graph(), _bound([0.0, 0.01, -0.01])))}
    assert fed["prefetch"].recommendation is None and "no change needed" in fed["prefetch"].finding
    undecided = {v.topic: v for v in verdicts(_diagnosis(_graph(), _bound([0.01, 0.1, 0.3])))}
    assert undecided["prefetch"].recommendation is None and "undecided" in undecided["prefetch"].finding
    short = {v.topic: v for v in verdicts(_diagnosis(_graph(), _bound([0.4, 0.5])))}
    assert TOO_SHORT in short["input-bound"].finding and short["prefetch"].recommendation is None
    injected = {v.topic: v for v in verdicts(_diagnosis(_graph(inject_prefetch=True),
                                                                 _bound([0.4, 0.5, 0.45])))}
    assert injected["prefetch"].recommendation is None and "include it" in injected["prefetch"].finding


# --------------------------------------------------------------------------------- bad targets


@pytest.mark.parametrize("spec, message", [
    ("no_such_module_xyz:make", ("--pipeline no_such_module_xyz:make: expected an importable module "
                                "'no_such_module_xyz' (searched the current directory and sys.path), found no such "
                                "module")),
    ("{file}:missing", "--pipeline {file}:missing: expected an attribute 'missing' in module"),
    ("{file}:NOT_CALLABLE", "--pipeline {file}:NOT_CALLABLE: expected 'NOT_CALLABLE' to be callable, found int"),
    ("{file}:not_a_dataset", "--pipeline {file}:not_a_dataset: expected a tf.data.Dataset, found list"),
    ("{file}:raises", ("--pipeline {file}:raises: expected raises() to return a dataset, found it raised OSError: "
                      "cannot open /data/shard-0")),
    ("{file}:fails_when_read", ("--pipeline {file}:fails_when_read: expected a dataset whose batches can be read, "
                               "found ")),
    ("{file}:empty", ("--pipeline {file}:empty: expected a dataset that yields at least one batch, found an empty "
                     "dataset")),
    ("{file}", ("--pipeline {file}: expected MODULE:FUNCTION (a module name or a .py file, a colon, a function "
               "name), found no colon")),
    ("/nonexistent/pipe.py:make", ("--pipeline /nonexistent/pipe.py:make: expected a Python file at "
                                  "/nonexistent/pipe.py, found nothing there")),
], ids=["no-module", "no-attribute", "not-callable", "not-a-dataset", "raises", "fails-when-read", "empty",
        "no-colon", "no-file"])
def test_a_bad_pipeline_target_is_one_line_exit_2(module_file, capfd, spec, message):
    spec, message = spec.format(file=module_file), message.format(file=module_file)
    assert cli.main(["diagnose", "--pipeline", spec, "--budget", "5"]) == 2
    out, err = capfd.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {message}")
    assert "Traceback" not in out + err


def test_a_bad_step_is_one_line_exit_2(module_file, capfd):
    assert cli.main(["diagnose", "--pipeline", f"{module_file}:make", "--step", f"{module_file}:returns_nothing",
                     "--budget", "5"]) == 2
    _, err = capfd.readouterr()
    assert (f"error: --step {module_file}:returns_nothing: expected step(batch) to return a tensor (e.g. the loss) "
            "to wait for, found NoneType") in err and "Traceback" not in err


def test_a_module_name_is_found_from_the_current_directory_and_args_reach_the_factory(module_file, monkeypatch):
    monkeypatch.chdir(module_file.parent)
    monkeypatch.delitem(sys.modules, "user_pipeline", raising=False)
    factory = load_callable("user_pipeline:raises", "--pipeline")
    with pytest.raises(OSError, match="cannot open /somewhere"):
        factory(path="/somewhere")
    assert str(module_file.parent) not in sys.path  # the search path is left as it was
    with pytest.raises(TargetError) as raised:
        load_callable("user_pipeline:step.nothing", "--step")
    assert "no attribute 'nothing'" in str(raised.value)


@pytest.mark.parametrize("args, message", [
    ([".", "--pipeline", "m:f"], "PATH: expected either a dataset directory or --pipeline, found both"),
    (["--pipeline", "m:f", "--batch-size", "4"], "--batch-size: applies to a dataset PATH, not to --pipeline"),
    (["--step", "m:f"], "--step: expected with --pipeline MODULE:FUNCTION, found no --pipeline"),
    (["--pipeline", "m:f", "--arg", "a=1", "--arg", "a=2"], "--arg: expected each KEY once, found a more than once"),
    (["--pipeline", "m:f", "--arg", "1x=2"], "expected KEY=VALUE with KEY a Python identifier, found '1x=2'"),
    ([], "PATH: expected a dataset directory (or --pipeline MODULE:FUNCTION), found neither"),
], ids=["path-and-pipeline", "dataset-option", "step-alone", "repeated-arg", "bad-arg", "nothing"])
def test_option_mistakes_are_usage_errors(capfd, args, message):
    assert cli.main(["diagnose", *args]) == 2
    _, err = capfd.readouterr()
    assert message in err and "Traceback" not in err


def test_the_step_itself_is_taken_as_it_is_and_said(module_file):
    said = []
    taken = load_step(f"{module_file}:returns_nothing", said.append)
    assert taken.__name__ == "returns_nothing"
    assert said == [f"--step {module_file}:returns_nothing: the step itself (it takes one argument, the batch)"]


def test_a_zero_argument_factory_is_called_for_the_step_and_said(module_file):
    said = []
    taken = load_step(f"{module_file}:make_step", said.append)
    assert taken.__name__ == "step"  # the module is imported afresh per load: compared by name
    assert said == [f"--step {module_file}:make_step: a factory; called it for the step"]


@pytest.mark.parametrize("name, found", [
    ("two_args", "a callable with 2 required arguments"),
    ("make_nothing", "int"),
])
def test_a_step_of_neither_shape_is_a_target_error(module_file, name, found):
    with pytest.raises(TargetError, match=f"--step {module_file}:{name}: expected .*found {found}"):
        load_step(f"{module_file}:{name}", lambda message: None)


def test_a_wrong_signature_step_is_one_line_exit_2(module_file, capfd):
    assert cli.main(["diagnose", "--pipeline", f"{module_file}:make", "--step", f"{module_file}:two_args",
                     "--budget", "5"]) == 2
    _, err = capfd.readouterr()
    assert (f"error: --step {module_file}:two_args: expected step(batch) or a factory with no required arguments "
            "returning it, found a callable with 2 required arguments") in err and "Traceback" not in err


def test_diagnose_runs_with_a_step_factory_and_says_it_took_one(module_file, capfd):
    assert cli.main(["diagnose", "--pipeline", f"{module_file}:make", "--step", f"{module_file}:make_step",
                     "--budget", "5"]) == 0
    out, err = capfd.readouterr()
    assert f"--step {module_file}:make_step: a factory; called it for the step" in out + err
    assert "Traceback" not in out + err
