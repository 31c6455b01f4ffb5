"""The compiled TTS training step: eager / graph / XLA × batch size × device × precision, and same-run ratios.

Every case uses a static input signature (padded shapes), reports its first call (trace + compile)
apart as ``first_s`` and its steady per-step times; the ratios interleave the two modes' rounds. A ratio
reuses the steps test_step compiled on its device at its batch size (a compile is tens of seconds on a
CPU and no part of what a ratio measures); run alone, it compiles its own.
"""

import itertools

import pytest

from perfsuite.measure.step_model import measure_step
from perfsuite.workload.model import MODEL_PRESETS, make_synthetic_batch, make_train_step

TEXT_LEN, MEL_FRAMES = 80, 400  # a 4-5 s LJSpeech utterance
RATIO_BATCH = 8  # the ratios' claims hold at any batch; the smallest swept one costs least per round


def _train_step(profile, *, mode, batch_size, precision="fp32"):
    return make_train_step(model_config=MODEL_PRESETS[profile.model], mode=mode, precision=precision,
                           input_shapes=(batch_size, TEXT_LEN, MEL_FRAMES))


def _batch(batch_size):
    return make_synthetic_batch(batch_size=batch_size, text_len=TEXT_LEN, mel_frames=MEL_FRAMES, seed=0)


@pytest.fixture(scope="session")
def compiled_steps() -> dict:
    """Steps test_step has built and measured, by (device, mode, batch size, precision): the step and
    its steady seconds per call."""
    return {}


@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
def test_step(perfsuite, tensorflow, device_name, compiled_steps, mode, step_batch_size, precision):
    with tensorflow.device(device_name):
        train = _train_step(perfsuite.profile, mode=mode, batch_size=step_batch_size, precision=precision)
        measurement = perfsuite.measure_step(train, batches=itertools.repeat(_batch(step_batch_size)),
                                             name=f"{mode}-bs{step_batch_size}-{precision}")
    compiled_steps[device_name, mode, step_batch_size, precision] = train, 1 / measurement.batches_per_s
    assert measurement.samples_per_s > 0
    if mode != "eager":  # a static signature: one trace, at the first call
        assert measurement.traces == 1, f"expected 1 trace with a static input signature, found {measurement.traces}"


RATIOS = {"xla_over_graph_ratio": ("xla", "graph"), "graph_over_eager_ratio": ("graph", "eager")}


def _round_warmup_calls(mode: str, device: str) -> int:
    """Untimed calls a ratio's round starts with: one, since a compiled step's first call after the other
    mode ran can be slower than the rest; none for an eager step on a CPU, whose calls take seconds and
    whose first call after a switch is barely slower (scripts/measure_switch_warmup.py; figures in
    docs/results/, "The main job under 10 minutes on machine F")."""
    return 0 if (mode, device) == ("eager", "/CPU:0") else 1


def _compiled_or_new(compiled_steps, profile, device, mode):
    """The step test_step measured and its steady call, or a new step and None (its call not timed yet)."""
    return compiled_steps.get((device, mode, RATIO_BATCH, "fp32")) or (
        _train_step(profile, mode=mode, batch_size=RATIO_BATCH), None)


@pytest.mark.parametrize("ratio", list(RATIOS), ids=[name.removesuffix("_ratio") for name in RATIOS])
def test_step_ratio(perfsuite, tensorflow, compiled_steps, ratio):
    """On the first GPU TensorFlow sees, else the CPU: where a step runs by default."""
    profile = perfsuite.profile
    device = "/GPU:0" if tensorflow.config.list_physical_devices("GPU") else "/CPU:0"
    with tensorflow.device(device):
        batch = _batch(RATIO_BATCH)
        a, b = ((mode, *_compiled_or_new(compiled_steps, profile, device, mode)) for mode in RATIOS[ratio])

        def round_of(mode, train, call_s):
            # Rounds as long as the profile's round, one call at least, sized by test_step's steady call
            # or, for a step of its own, by one timed call after its first (trace and compile).
            if call_s is None:
                call_s = measure_step(step=train, batch=batch, warmup_calls=1, measure_calls=1).steady_s
            calls = profile.calls_per_round(call_s)
            return lambda: measure_step(step=train, batch=batch, warmup_calls=_round_warmup_calls(mode, device),
                                        measure_calls=calls)

        result = perfsuite.compare(ratio, a=round_of(*a), b=round_of(*b), warm=True,
                                   sides=tuple(f"{mode}_step" for mode in RATIOS[ratio]))
    assert len(result.ratios) >= profile.min_rounds
