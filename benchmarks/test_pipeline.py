"""Loader + compiled step end to end: input-bound share per loader, prefetch, static vs dynamic shapes.

Input-bound share = 1 - t_synthetic / t_real, where the synthetic twin feeds the same step one cached
batch of the same structure (TensorFlow profiler's classification: < 5 % not input-bound, 5-20 %
moderately, ≥ 20 % highly); wait share = the part of the fed step's time spent fetching its batch.
"""

import pytest

from perfsuite.data.audio import MelConfig
from perfsuite.data.corpus import read_metadata, wav_path
from perfsuite.data.loaders import AUTOTUNE, LoaderConfig, build_loader
from perfsuite.data.text import encode
from perfsuite.data.wav import inspect_wav
from perfsuite.workload.model import MODEL_PRESETS, make_train_step

BATCH, WORKERS = 16, 2
# The input-bound cases' batch: the smallest the step cases sweep. A pipeline's batch and the step both
# scale with it, so the shares stay comparable, and each round costs half what it did at 16.
FED_BATCH = 8
PIPELINES = [("tf_native", "cache"), ("numpy_function", "cache"), ("tf_native", "wav"), ("numpy_function", "wav")]


@pytest.fixture(scope="session")
def static_limits(perfsuite_corpus):
    """The corpus' longest text and mel: static shapes that truncate nothing."""
    utterances = read_metadata(perfsuite_corpus)
    text = max(len(encode(u.normalized_text)) for u in utterances)
    frames = max(MelConfig().num_frames(inspect_wav(wav_path(perfsuite_corpus, u.id)).num_frames) for u in utterances)
    return text, frames


def _loader(corpus, cache, limits, batch_size=FED_BATCH, **options):
    config = LoaderConfig(batch_size=batch_size, num_parallel_calls=WORKERS, static_shapes=True, drop_remainder=True,
                          max_text_len=limits[0], max_mel_frames=limits[1], **options)
    return build_loader(dataset_dir=corpus, cache_dir=cache, config=config).dataset


@pytest.fixture(scope="session")
def compiled_step(perfsuite_profile, static_limits):
    """One XLA-compiled step shared by the end-to-end cases: its compile (tens of seconds) is paid once."""
    return make_train_step(model_config=MODEL_PRESETS[perfsuite_profile.model], mode="xla",
                           input_shapes=(None, *static_limits))


GATED = {("tf_native", "cache"), ("numpy_function", "wav")}  # their wait or input-bound shares have gates
FIGURE_ROUNDS = 3  # cases without a gate: a figure, not a verdict, so fewer rounds


def _input_bound(perfsuite, step, dataset, metric="input_bound", rounds=FIGURE_ROUNDS):
    """Each side times steps for the profile's round (one on a CPU), sized by the synthetic side's 2
    untimed steps that trace and compile the step; the real side's first round starts with 2 that start
    the pipeline. Later, one untimed step a side settles each switch: a CPU step outlasts these
    pipelines' refill of their prefetch buffers (docs/results/, "Machine F: the main job")."""
    return perfsuite.measure_input_bound(step=step, dataset=dataset.repeat(), metric=metric, rounds=rounds,
                                         settle=1)


@pytest.mark.not_in_ab(reason="an input-bound share is a same-run figure near 0, not a speed")
@pytest.mark.parametrize("kind,source", PIPELINES, ids=[f"{k}-{s}" for k, s in PIPELINES])
def test_input_bound(perfsuite, perfsuite_corpus, perfsuite_cache, static_limits, compiled_step, kind, source):
    dataset = _loader(perfsuite_corpus, perfsuite_cache, static_limits, kind=kind, source=source)
    # Same-run shares with their per-round values, gated everywhere (ratios.yaml) under the pipeline's name:
    # the gated ones take the profile's min_rounds, then more while a gate is inconclusive.
    rounds = None if (kind, source) in GATED else FIGURE_ROUNDS
    result = _input_bound(perfsuite, compiled_step, dataset, metric=f"{kind}_{source}_input_bound", rounds=rounds)
    assert result.t_real > 0 and result.t_synthetic > 0


@pytest.mark.parametrize("prefetch", ["off", pytest.param("to_device", marks=pytest.mark.gpu)])
def test_prefetch(request, perfsuite, perfsuite_corpus, perfsuite_cache, static_limits, compiled_step, tensorflow,
                  prefetch):
    """The TF-native cache pipeline's input-bound share with prefetch off or to the GPU; prefetch on (the
    loaders' default) is test_input_bound[tf_native-cache], the same pipeline and step."""
    options = {"kind": "tf_native", "source": "cache", "prefetch": 0 if prefetch == "off" else AUTOTUNE}
    device = "/CPU:0"
    if prefetch == "to_device":
        device = options["prefetch_to_device"] = request.getfixturevalue("gpu_device")
    dataset = _loader(perfsuite_corpus, perfsuite_cache, static_limits, **options)
    with tensorflow.device(device):
        step = compiled_step if device == "/CPU:0" else make_train_step(
            model_config=MODEL_PRESETS[perfsuite.profile.model], mode="xla", input_shapes=(None, *static_limits))
        result = _input_bound(perfsuite, step, dataset)
    assert result.t_real > 0


@pytest.mark.gpu
def test_gpu_utilisation(perfsuite, perfsuite_corpus, perfsuite_cache, static_limits, tensorflow, gpu_device):
    """The compiled step fed by the TF-native cache pipeline, GPU utilisation sampled while it runs."""
    from perfsuite.measure.gpu import GpuSampler
    from perfsuite.measure.utilisation import gpu_gate_metrics, gpu_stats

    device = gpu_device
    dataset = _loader(perfsuite_corpus, perfsuite_cache, static_limits, batch_size=BATCH, kind="tf_native",
                      source="cache", prefetch_to_device=device)
    with tensorflow.device(device):
        step = make_train_step(model_config=MODEL_PRESETS[perfsuite.profile.model], mode="xla",
                               input_shapes=(None, *static_limits))
        step(next(iter(dataset)))  # compile outside the sampled window
        with GpuSampler() as sampler:
            perfsuite.measure_step(step, batches=dataset.repeat(), name="gpu-tf_native-cache-xla")
    stats = gpu_stats(sampler.timeline)
    perfsuite.record(stats)
    for name, value in gpu_gate_metrics(stats).items():
        perfsuite.add(name, float(value))
    assert sampler.timeline.complete, f"NVML failed during the measurement: {sampler.timeline.error}"


DYNAMIC_BATCHES = 3


@pytest.mark.parametrize("shapes", ["static", "dynamic"])
def test_shapes(perfsuite, perfsuite_corpus, perfsuite_cache, static_limits, shapes):
    """One epoch through a graph-mode step: a static signature traces once, padded-to-batch shapes retrace.

    The tiny model: the number of traces does not depend on the model's width, only the time each costs.
    The dynamic case runs the epoch's first DYNAMIC_BATCHES batches: each costs a trace (seconds on a
    CPU), and a handful shows the retracing as well as the whole epoch would.
    """
    static = shapes == "static"
    config = LoaderConfig(kind="tf_native", source="cache", batch_size=BATCH, num_parallel_calls=WORKERS,
                          static_shapes=static, max_text_len=static_limits[0] if static else None,
                          max_mel_frames=static_limits[1] if static else None)
    dataset = build_loader(dataset_dir=perfsuite_corpus, cache_dir=perfsuite_cache, config=config).dataset
    if not static:
        dataset = dataset.take(DYNAMIC_BATCHES)
    train = make_train_step(model_config=MODEL_PRESETS["tiny"], mode="graph",
                            input_shapes=(None, *static_limits) if static else None)
    epoch = perfsuite.measure_epoch(step=train, dataset=dataset, name=f"epoch-{shapes}")
    perfsuite.add("traces", epoch.traces)
    if static:  # the partial last batch is accepted by the signature's open batch dimension
        assert epoch.traces == 1, f"static shapes: expected exactly 1 trace over an epoch, found {epoch.traces}"
    else:
        assert epoch.traces > 1
