"""The one log-mel definition, with a numpy and a TensorFlow implementation.

Definition (both implementations follow it; ``tests/test_audio.py`` holds them to 1e-4 absolute):

* Framing: ``num_frames = ceil(num_samples / hop_length)``, so empty audio gives 0 frames and any
  1..hop_length samples give 1. The signal is zero-padded at the END only (no centring) to
  ``(num_frames - 1) * hop_length + win_length`` samples; frame ``i`` starts at ``i * hop_length``.
  This is ``tf.signal.stft(..., pad_end=True)``'s rule (checked against it in the tests).
* Window: periodic Hann of ``win_length``; each windowed frame is zero-padded at its end to
  ``n_fft`` for the FFT (``tf.signal.stft``'s ``fft_length``). With the defaults win == n_fft == 1024.
* Spectrum: magnitude ``|rfft|`` (not power), ``n_fft // 2 + 1`` bins.
* Mel filterbank: Slaney's auditory-toolbox mel scale (linear below 1 kHz, logarithmic above) with
  Slaney area normalisation (each triangle scaled by ``2 / (f_right - f_left)``), i.e. what
  ``librosa.filters.mel(htk=False, norm="slaney")`` computes. The same numpy matrix
  (``mel_filterbank``) is used by both implementations; TF gets it as a graph constant.
* Log: natural log with a floor, ``log(max(mel, log_floor))``; no per-utterance normalisation.

Precision: a float32 FFT is not enough for 1e-4 on log-mel. FFT round-off is absolute, proportional to
the frame's energy, so bins near the floor in a loud frame (a pure tone's high bands, say) are off by
up to 1e-2 in log. Both implementations therefore take the FFT in float64. TF then forms the power
``re^2 + im^2`` in float64 (``tf.abs`` on complex128 costs more than the FFT itself) and does the
square root, the mel matrix product and the log in float32: products and sums of non-negative terms,
with relative error of a few float32 ulps, far below 1e-4 in log. What float64 costs in a ``tf.data``
map is in docs/measurement.md.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass

import numpy as np

from perfsuite._tensorflow import tensorflow

# Bumped whenever the definition above changes, so caches keyed by MelConfig.key() are rebuilt.
MEL_DEFINITION_VERSION = 1


@dataclass(frozen=True)
class MelConfig:
    """Parameters of the log-mel definition (see the module docstring)."""

    sample_rate: int = 22050
    n_fft: int = 1024
    hop_length: int = 256
    win_length: int = 1024
    n_mels: int = 80
    fmin: float = 0.0
    fmax: float = 8000.0
    log_floor: float = 1e-5

    def __post_init__(self):
        checks = [
            ("sample_rate", self.sample_rate > 0, "> 0"),
            ("hop_length", self.hop_length > 0, "> 0"),
            ("win_length", 0 < self.win_length <= self.n_fft, f"in (0, n_fft={self.n_fft}]"),
            ("n_mels", self.n_mels > 0, "> 0"),
            ("fmin", 0.0 <= self.fmin < self.fmax, f"in [0, fmax={self.fmax})"),
            ("fmax", self.fmax <= self.sample_rate / 2, f"<= sample_rate / 2 = {self.sample_rate / 2}"),
            ("log_floor", self.log_floor > 0, "> 0"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"MelConfig.{name}: expected {expected}, found {getattr(self, name)!r}")

    @property
    def n_bins(self) -> int:
        return self.n_fft // 2 + 1

    def num_frames(self, num_samples: int) -> int:
        """Frames for ``num_samples`` samples: ceil(num_samples / hop_length); 0 for empty audio."""
        if num_samples < 0:
            raise ValueError(f"num_samples: expected >= 0, found {num_samples}")
        return -(-num_samples // self.hop_length)

    def padded_length(self, num_samples: int) -> int:
        """Samples after end-padding: (num_frames - 1) * hop_length + win_length; 0 for empty audio."""
        frames = self.num_frames(num_samples)
        return (frames - 1) * self.hop_length + self.win_length if frames else 0

    def key(self) -> str:
        """Short stable hash of the definition and its parameters, for cache directory names."""
        payload = json.dumps(
            {"version": MEL_DEFINITION_VERSION, **dataclasses.asdict(self)}, sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney mel scale: 3 mels per 200 Hz up to 1 kHz, then logarithmic (27 mels per factor 6.4)."""
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz / (200.0 / 3.0)
    log_part = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(hz >= 1000.0, log_part, linear)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    linear = mel * (200.0 / 3.0)
    log_part = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
    return np.where(mel >= 15.0, log_part, linear)


@functools.lru_cache(maxsize=16)
def _filterbank_cached(config: MelConfig) -> np.ndarray:
    bin_hz = np.linspace(0.0, config.sample_rate / 2.0, config.n_bins)
    # n_mels triangles need n_mels + 2 edge frequencies, equally spaced on the mel scale.
    edges_hz = _mel_to_hz(
        np.linspace(_hz_to_mel(config.fmin), _hz_to_mel(config.fmax), config.n_mels + 2)
    )
    left, centre, right = edges_hz[:-2, None], edges_hz[1:-1, None], edges_hz[2:, None]
    rising = (bin_hz[None, :] - left) / (centre - left)
    falling = (right - bin_hz[None, :]) / (right - centre)
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= 2.0 / (right - left)  # Slaney area normalisation
    matrix = np.ascontiguousarray(weights.T)
    matrix.setflags(write=False)  # shared through the cache; nobody may change it
    return matrix


def mel_filterbank(config: MelConfig) -> np.ndarray:
    """The Slaney mel filterbank, float64 ``[n_fft // 2 + 1, n_mels]`` (read-only, shared)."""
    return _filterbank_cached(config)


def hann_window(config: MelConfig) -> np.ndarray:
    """Periodic Hann window of ``win_length`` samples, float64 (same as tf.signal.hann_window)."""
    n = np.arange(config.win_length)
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * n / config.win_length)


def log_mel_numpy(audio: np.ndarray, config: MelConfig = MelConfig()) -> np.ndarray:
    """Log-mel of 1-D audio in [-1, 1]; float32 ``[config.num_frames(len(audio)), n_mels]``."""
    audio = np.asarray(audio)
    if audio.ndim != 1:
        raise ValueError(f"audio: expected a 1-D array, found shape {audio.shape}")
    if audio.shape[0] == 0:
        return np.zeros((0, config.n_mels), dtype=np.float32)
    padded = np.zeros(config.padded_length(audio.shape[0]), dtype=np.float64)
    padded[: audio.shape[0]] = audio  # float64 from here on (see the module docstring)
    windows = np.lib.stride_tricks.sliding_window_view(padded, config.win_length)[:: config.hop_length]
    spectrum = np.fft.rfft(windows * hann_window(config), n=config.n_fft, axis=1)
    mel = np.abs(spectrum) @ mel_filterbank(config)
    return np.log(np.maximum(mel, config.log_floor)).astype(np.float32)




def num_frames_tf(num_samples, config: MelConfig = MelConfig()):
    """In-graph ``config.num_frames``: ceil(num_samples / hop_length) as int32."""
    tf = tensorflow()
    num_samples = tf.cast(num_samples, tf.int32)
    return (num_samples + (config.hop_length - 1)) // config.hop_length


def log_mel_tf(audio, config: MelConfig = MelConfig()):
    """Log-mel of 1-D float32 audio with TF graph ops only (fit for ``tf.data`` map); float32."""
    tf = tensorflow()
    audio = tf.ensure_shape(tf.convert_to_tensor(audio, dtype=tf.float32), [None])
    window = tf.constant(hann_window(config), dtype=tf.float64)
    spectrum = tf.signal.stft(
        tf.cast(audio, tf.float64),
        frame_length=config.win_length,
        frame_step=config.hop_length,
        fft_length=config.n_fft,
        window_fn=lambda length, dtype: window,
        pad_end=True,
    )
    real, imag = tf.math.real(spectrum), tf.math.imag(spectrum)
    magnitude = tf.sqrt(tf.cast(real * real + imag * imag, tf.float32))  # tf.abs(complex128) is slow
    mel = tf.matmul(magnitude, tf.constant(mel_filterbank(config), dtype=tf.float32))
    return tf.math.log(tf.maximum(mel, config.log_floor))


