"""The log-mel definition: TF and numpy implementations agree, framing rule, filterbank, floor."""

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from perfsuite._tensorflow import tensorflow
from perfsuite.data.audio import (
    MelConfig,
    _hz_to_mel,
    _mel_to_hz,
    hann_window,
    log_mel_numpy,
    log_mel_tf,
    mel_filterbank,
    num_frames_tf,
)

tf = tensorflow()

CONFIG = MelConfig()
FLOOR = np.log(CONFIG.log_floor)
TOLERANCE = 1e-4
# Lengths that stress the framing rule: empty, shorter than a hop, than a window, exact hop multiples.
EDGE_LENGTHS = [0, 1, 2, 255, 256, 257, 511, 512, 767, 768, 1023, 1024, 1025, 4096, 22050]

# Traced once for every test (fixed input signature), as a tf.data map function would be.
tf_log_mel = tf.function(
    lambda audio: log_mel_tf(audio, CONFIG), input_signature=[tf.TensorSpec([None], tf.float32)]
)
tf_num_frames = tf.function(
    lambda n: num_frames_tf(n, CONFIG), input_signature=[tf.TensorSpec([], tf.int64)]
)


def at_floor(mel: np.ndarray) -> np.ndarray:
    """Elementwise: equal to log(floor) up to float32 rounding (TF's float32 log differs by an ulp)."""
    return np.abs(mel - FLOOR) <= 1e-5


def make_signal(*, length: int, amplitude: float, kind: str, seed: int) -> np.ndarray:
    """Noise, a pure tone (the hardest case for float32 FFTs), or a tone over faint noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(length) / CONFIG.sample_rate
    tone = np.sin(2 * np.pi * rng.uniform(50, 10000) * t + rng.uniform(0, 2 * np.pi))
    noise = rng.uniform(-1, 1, length)
    signal = {"noise": noise, "tone": tone, "tone+noise": tone + 1e-3 * noise}[kind]
    return np.clip(amplitude * signal, -1, 1).astype(np.float32)


@given(
    length=st.one_of(st.sampled_from(EDGE_LENGTHS), st.integers(0, 3 * CONFIG.sample_rate)),
    amplitude=st.floats(-9, 0).map(lambda exponent: 10.0**exponent),
    kind=st.sampled_from(["noise", "tone", "tone+noise"]),
    seed=st.integers(0, 2**32 - 1),
)
@example(length=2 * CONFIG.sample_rate, amplitude=1.0, kind="tone", seed=0)  # float32 FFTs miss by 1e-2 here
@example(length=CONFIG.sample_rate, amplitude=2e-5, kind="tone+noise", seed=1)  # right at the floor
def test_tf_and_numpy_log_mel_agree(length, amplitude, kind, seed):
    audio = make_signal(length=length, amplitude=amplitude, kind=kind, seed=seed)
    expected = log_mel_numpy(audio, CONFIG)
    got = tf_log_mel(audio).numpy()
    assert expected.dtype == got.dtype == np.float32
    assert expected.shape == got.shape == (CONFIG.num_frames(length), CONFIG.n_mels)
    if length:
        assert np.abs(got - expected).max() <= TOLERANCE


@given(length=st.one_of(st.sampled_from(EDGE_LENGTHS), st.integers(0, 10**7)))
def test_frame_count_formula(length):
    frames = math.ceil(length / CONFIG.hop_length)
    assert CONFIG.num_frames(length) == frames
    assert int(tf_num_frames(tf.constant(length, tf.int64))) == frames
    padded = (frames - 1) * CONFIG.hop_length + CONFIG.win_length if frames else 0
    assert CONFIG.padded_length(length) == padded


@pytest.mark.parametrize("length", EDGE_LENGTHS)
def test_output_rows_follow_the_framing_rule(length):
    audio = make_signal(length=length, amplitude=0.5, kind="noise", seed=length)
    frames = CONFIG.num_frames(length)
    assert log_mel_numpy(audio, CONFIG).shape[0] == frames
    assert tf_log_mel(audio).shape[0] == frames
    # The rule is tf.signal.stft(pad_end=True)'s: same frame count, and zero-padding the signal at the
    # end up to padded_length changes no frame.
    stft = tf.signal.stft(audio, CONFIG.win_length, CONFIG.hop_length, CONFIG.n_fft, pad_end=True)
    assert stft.shape[0] == frames
    padded = np.concatenate([audio, np.zeros(CONFIG.padded_length(length) - length, np.float32)])
    assert CONFIG.num_frames(len(padded)) >= frames
    np.testing.assert_array_equal(log_mel_numpy(padded, CONFIG)[:frames], log_mel_numpy(audio, CONFIG))


def test_no_centring_a_click_early_in_frame_0_is_in_no_other_frame():
    audio = np.zeros(4 * CONFIG.hop_length, np.float32)
    audio[CONFIG.hop_length // 2] = 0.5  # frame 1 starts at hop_length; a centred STFT would spread it
    for mel in (log_mel_numpy(audio, CONFIG), tf_log_mel(audio).numpy()):
        assert mel.shape[0] == 4
        assert not at_floor(mel[0]).all()
        assert at_floor(mel[1:]).all()


@pytest.mark.parametrize("length", [0, 1, 300, 5000])
@pytest.mark.parametrize("amplitude", [0.0, 1e-9])
def test_silence_is_all_floor(length, amplitude):
    audio = np.full(length, amplitude, np.float32)
    for mel in (log_mel_numpy(audio, CONFIG), tf_log_mel(audio).numpy()):
        assert mel.shape == (CONFIG.num_frames(length), CONFIG.n_mels)
        assert at_floor(mel).all()


def test_filterbank_shape_sign_and_coverage():
    bank = mel_filterbank(CONFIG)
    bin_hz = np.linspace(0, CONFIG.sample_rate / 2, CONFIG.n_fft // 2 + 1)
    assert bank.shape == (CONFIG.n_fft // 2 + 1, CONFIG.n_mels)
    assert bank.dtype == np.float64
    assert (bank >= 0).all()
    assert (bank.max(axis=0) > 0).all(), "every mel band sees at least one FFT bin"
    inside = (bin_hz > CONFIG.fmin) & (bin_hz < CONFIG.fmax)
    assert (bank[inside].sum(axis=1) > 0).all(), "every bin between fmin and fmax is in some band"
    assert (bank[bin_hz >= CONFIG.fmax] == 0).all()
    assert (np.diff(bank.argmax(axis=0)) >= 0).all(), "band centres rise with the band index"
    # Slaney area normalisation: each triangle integrates to ~1 over frequency in Hz.
    area = bank.sum(axis=0) * (bin_hz[1] - bin_hz[0])
    np.testing.assert_allclose(area, 1.0, atol=0.1)
    assert not bank.flags.writeable


def test_slaney_mel_scale_anchor_points():
    np.testing.assert_allclose(_hz_to_mel([0.0, 200 / 3, 1000.0, 6400.0]), [0.0, 1.0, 15.0, 42.0])
    hz = np.array([0.0, 440.0, 999.0, 1000.0, 4000.0, 8000.0])
    np.testing.assert_allclose(_mel_to_hz(_hz_to_mel(hz)), hz, atol=1e-9)


def test_window_is_the_periodic_hann_tf_uses():
    np.testing.assert_allclose(
        hann_window(CONFIG), tf.signal.hann_window(CONFIG.win_length, periodic=True, dtype=tf.float64)
    )


def test_short_window_config_also_agrees():
    config = MelConfig(sample_rate=16000, n_fft=1024, hop_length=200, win_length=800, n_mels=40, fmax=7600.0)
    audio = make_signal(length=7001, amplitude=0.8, kind="tone+noise", seed=3)
    expected = log_mel_numpy(audio, config)
    got = log_mel_tf(tf.constant(audio), config).numpy()
    assert expected.shape == got.shape == (config.num_frames(7001), 40)
    assert np.abs(got - expected).max() <= TOLERANCE


def test_log_mel_tf_is_graph_ops_only_inside_tf_data():
    utterances = [make_signal(length=n, amplitude=0.3, kind="noise", seed=n) for n in (300, 2000, 0)]
    ragged = tf.RaggedTensor.from_row_lengths(np.concatenate(utterances), [len(u) for u in utterances])
    dataset = tf.data.Dataset.from_tensor_slices(ragged).map(
        lambda audio: log_mel_tf(audio, CONFIG), num_parallel_calls=2, deterministic=True
    )
    for mel, audio in zip(dataset, utterances):
        np.testing.assert_allclose(mel.numpy(), log_mel_numpy(audio, CONFIG), atol=TOLERANCE)
    op_types = {op.type for op in tf_log_mel.get_concrete_function().graph.get_operations()}
    assert not op_types & {"PyFunc", "EagerPyFunc", "PyFuncStateless"}
    assert "RFFT" in op_types


def test_config_key_is_stable_and_parameter_sensitive():
    assert MelConfig().key() == MelConfig().key() == "0263e2e14b00"
    assert MelConfig(n_mels=64).key() != MelConfig().key()
    assert MelConfig(log_floor=1e-4).key() != MelConfig().key()


@pytest.mark.parametrize(
    "kwargs, field",
    [({"hop_length": 0}, "hop_length"), ({"win_length": 2048}, "win_length"), ({"fmax": 12000.0}, "fmax"),
     ({"log_floor": 0.0}, "log_floor"), ({"fmin": 9000.0}, "fmin")],
)
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"MelConfig.{field}: expected"):
        MelConfig(**kwargs)


def test_bad_audio_shapes_are_rejected():
    with pytest.raises(ValueError, match="expected a 1-D array"):
        log_mel_numpy(np.zeros((2, 300), np.float32), CONFIG)
    with pytest.raises(ValueError, match="num_samples: expected >= 0"):
        CONFIG.num_frames(-1)
