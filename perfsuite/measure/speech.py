"""Speech units: audio-seconds per second and the padding efficiency of batches.

Speech people think in seconds of audio, not samples: a batch of 16 one-second clips and one of 16
ten-second clips are not the same work. A padded batch also computes on its padding. Both figures come
from a batch's true lengths (``mel_len``, frames) and its padded shape (``mel``: [batch, frames, bins]).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfsuite.measure.timing import leading_dim


@dataclass
class FrameCounter:
    """A ``samples_in`` for the timing loops that also notes each batch's real and padded mel frames.

    Batches without ``mel_len`` and ``mel`` count samples only (their frames are not noted)."""

    real: list[int] = field(default_factory=list)
    padded: list[int] = field(default_factory=list)

    def __call__(self, batch: Any) -> int:
        lengths = np.asarray(batch["mel_len"]) if isinstance(batch, dict) and "mel_len" in batch else None
        if lengths is not None and "mel" in batch:
            self.real.append(int(lengths.sum()))
            self.padded.append(int(lengths.size * batch["mel"].shape[1]))
        return int(lengths.size) if lengths is not None else leading_dim(batch)


@dataclass(frozen=True)
class SpeechFigures:
    """audio_s_per_s: seconds of audio (real frames x frame duration) per second of steady wall time.
    padding_efficiency: real frames / padded frames of the steady batches (1.0: no padding)."""

    audio_s_per_s: float
    padding_efficiency: float
    audio_s: float

    def as_dict(self) -> dict:
        return {"audio_s_per_s": self.audio_s_per_s, "padding_efficiency": self.padding_efficiency,
                "audio_s": self.audio_s}


def speech_figures(*, real_frames: int, padded_frames: int, frame_s: float, seconds: float) -> SpeechFigures:
    """The figures of batches holding ``real_frames`` of ``padded_frames`` mel frames read in ``seconds``."""
    if seconds <= 0 or padded_frames <= 0:
        raise ValueError(f"seconds, padded_frames: expected positive values, found {seconds} and {padded_frames}")
    audio_s = real_frames * frame_s
    return SpeechFigures(audio_s_per_s=audio_s / seconds, padding_efficiency=real_frames / padded_frames,
                         audio_s=audio_s)
